#!/usr/bin/env python3
"""What an empty marker costs on this disk: a file of its own, or a link.

Makes `--markers` empty markers in folders of `--per-folder`, each folder
synced once its markers are made, then removes them all; `--rounds` times
in a row, so that each round meets the inodes the rounds before it freed
(ext4 without a journal walks past every inode freed in the last minutes
for each new one; bench/README.md). Two ways, as compactd's fs store can
make a marker:

- `create`: `openat(O_CREAT | O_EXCL)` at its name, the file synced (a new
  inode per marker; what compactd did before, and still does where the
  other way cannot work);
- `link`: `linkat` of one empty `O_TMPFILE` inode through
  `/proc/self/fd/<n>` at its name, that inode synced once per folder (what
  `store/src/fs/shared_inode.rs` does).

Prints the CPU time (user + system of this process) per marker made, and
per marker removed, for each round:

    python3 bench/markers.py --way create --rounds 6
    python3 bench/markers.py --way link --rounds 6
"""

import argparse
import os
import shutil
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--way", choices=["create", "link"], required=True)
    ap.add_argument("--markers", type=int, default=2000)
    ap.add_argument("--per-folder", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--base", default="/tmp")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="markers.", dir=a.base)
    try:
        inode = None
        if a.way == "link":
            inode = os.open(base, os.O_TMPFILE | os.O_RDWR, 0o644)
        folders = a.markers // a.per_folder
        for r in range(a.rounds):
            t0 = time.process_time()
            for f in range(folders):
                d = os.path.join(base, f"r{r}.f{f}")
                os.mkdir(d)
                dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                if a.way == "create":
                    fds = [os.open(f"m{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644, dir_fd=dfd)
                           for i in range(a.per_folder)]
                    for fd in fds:
                        os.fsync(fd)
                        os.close(fd)
                else:
                    for i in range(a.per_folder):
                        os.link(f"/proc/self/fd/{inode}", f"m{i}", dst_dir_fd=dfd, follow_symlinks=True)
                    os.fsync(inode)
                os.fsync(dfd)
                os.close(dfd)
            made = time.process_time() - t0
            t1 = time.process_time()
            for f in range(folders):
                shutil.rmtree(os.path.join(base, f"r{r}.f{f}"))
            removed = time.process_time() - t1
            n = folders * a.per_folder
            print(f"{a.way} round {r + 1}: {made / n * 1e3:.3f} ms of CPU per marker made, "
                  f"{removed / n * 1e3:.3f} ms per marker removed", flush=True)
            # Every name gone: an O_TMPFILE inode that had names cannot take
            # one again (as in compactd, a fresh one takes over).
            if inode is not None:
                os.close(inode)
                inode = os.open(base, os.O_TMPFILE | os.O_RDWR, 0o644)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

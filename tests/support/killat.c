/*
 * An LD_PRELOAD shim that SIGKILLs the process at an exact point of a file
 * create, for the deterministic crash tests (tests/all/cluster/create_kill.rs). It
 * interposes libc's write(2) family, linkat(2)/link(2), renameat(2)/rename(2),
 * unlinkat(2)/unlink(2) and the exclusive creates of openat(2); nothing else.
 *
 *   COMPACTD_KILL_AT    write        first write to a file whose path contains
 *                                    COMPACTD_KILL_PATH (the file is open and
 *                                    empty: "between create and content")
 *                       link-before  a link whose target contains the pattern,
 *                                    before it is made
 *                       link-after   the same, right after it was made
 *                       rename-before / rename-after   a rename whose source
 *                                    or target contains the pattern
 *                       unlink-before / unlink-after   an unlink of a name
 *                                    containing the pattern
 *                       create-before / create-after   an exclusive create
 *                                    (openat with O_CREAT|O_EXCL, or a link
 *                                    of /proc/self/fd/N: an empty marker
 *                                    made at its name) of a file
 *                                    whose path contains the pattern, before
 *                                    it is made / right after (not synced)
 *   COMPACTD_KILL_PATH  substring of the path (writes: of /proc/self/fd/N;
 *                       links and renames: of the source or the target;
 *                       unlinks: of the name as passed, relative to its folder;
 *                       exclusive creates: of the folder's real path + name)
 *   COMPACTD_KILL_BASENAME  for unlinks, instead of COMPACTD_KILL_PATH:
 *                       the last segment of the name equals it exactly
 *   COMPACTD_KILL_NTH   kill at the Nth matching call (default 1)
 *   COMPACTD_KILL_SIGNAL  STOP: SIGSTOP at the Nth call only, instead of
 *                       SIGKILL (the test sends SIGCONT)
 *
 * Unset, the shim only forwards. Built by the tests with `cc -shared -fPIC`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *mode(void) { return getenv("COMPACTD_KILL_AT"); }

static int path_matches_as_given(const char *path) {
    const char *pat = getenv("COMPACTD_KILL_PATH");
    return pat && *pat && path && strstr(path, pat) != NULL;
}

/* The store reaches names through folders it opened without following
 * links, as /proc/self/fd/N/<name>: the pattern is matched against the
 * folder's real path too. */
static int path_matches(const char *path) {
    if (path_matches_as_given(path)) return 1;
    const char *prefix = "/proc/self/fd/";
    if (!path || strncmp(path, prefix, strlen(prefix)) != 0) return 0;
    const char *rest = path + strlen(prefix);
    const char *slash = strchr(rest, '/');
    if (!slash) return 0;
    char link[64], real[4096 + 256];
    snprintf(link, sizeof link, "%.*s%.*s", (int)strlen(prefix), prefix, (int)(slash - rest), rest);
    ssize_t n = readlink(link, real, 4096);
    if (n <= 0) return 0;
    real[n] = 0;
    strncat(real, slash, sizeof real - strlen(real) - 1);
    return path_matches_as_given(real);
}

/* COMPACTD_KILL_SIGNAL=STOP: stopped instead of killed, once, so that a
 * test acts while the process waits right there (another writer's commit)
 * and then lets it go on with SIGCONT. */
static int stopping(void) {
    const char *s = getenv("COMPACTD_KILL_SIGNAL");
    return s && strcmp(s, "STOP") == 0;
}

static void die_now(void) { kill(getpid(), stopping() ? SIGSTOP : SIGKILL); }

/* Counts matching calls; kills at the Nth (COMPACTD_KILL_NTH, default 1). */
static void die(void) {
    static long seen = 0;
    const char *n = getenv("COMPACTD_KILL_NTH");
    long want = (n && *n) ? atol(n) : 1;
    ++seen;
    if (seen == want || (seen > want && !stopping())) die_now();
}

static int fd_matches(int fd) {
    const char *m = mode();
    if (!m || strcmp(m, "write") != 0 || fd < 3) return 0;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    return path_matches(target);
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = dlsym(RTLD_NEXT, "write");
    if (fd_matches(fd)) die();
    return real(fd, buf, count);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = dlsym(RTLD_NEXT, "pwrite64");
    if (fd_matches(fd)) die();
    return real(fd, buf, count, off);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    static ssize_t (*real)(int, const struct iovec *, int);
    if (!real) real = dlsym(RTLD_NEXT, "writev");
    if (fd_matches(fd)) die();
    return real(fd, iov, iovcnt);
}

/* A link matches by its source (compactd's temp name carries a hint of the
 * target: its last two path segments) or by its target. */
static int link_hit(const char *oldpath, const char *newpath, const char *when) {
    const char *m = mode();
    return m && strcmp(m, when) == 0 && (path_matches(oldpath) || path_matches(newpath));
}

static int at_matches(int dirfd, const char *path);
static int mode_is(const char *when);

/* Whether a link makes an empty marker: on fs a marker is a new name of
 * the process's one empty inode, linked through /proc/self/fd/N. */
static int marker_link(const char *oldpath, int flags) {
    return (flags & AT_SYMLINK_FOLLOW) && oldpath && strncmp(oldpath, "/proc/self/fd/", 14) == 0;
}

int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags) {
    static int (*real)(int, const char *, int, const char *, int);
    if (!real) real = dlsym(RTLD_NEXT, "linkat");
    if (marker_link(oldpath, flags)) {
        /* An exclusive create, as the modes create-before/-after name it. */
        int hit = at_matches(newdirfd, newpath);
        if (hit && mode_is("create-before")) die();
        int r = real(olddirfd, oldpath, newdirfd, newpath, flags);
        if (r == 0 && hit && mode_is("create-after")) die();
        return r;
    }
    if (link_hit(oldpath, newpath, "link-before")) die();
    int r = real(olddirfd, oldpath, newdirfd, newpath, flags);
    if (r == 0 && link_hit(oldpath, newpath, "link-after")) die();
    return r;
}

int link(const char *oldpath, const char *newpath) {
    return linkat(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

static int mode_is(const char *when) {
    const char *m = mode();
    return m && strcmp(m, when) == 0;
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    static int (*real)(int, const char *, int, const char *);
    if (!real) real = dlsym(RTLD_NEXT, "renameat");
    int hit = path_matches(oldpath) || path_matches(newpath);
    if (hit && mode_is("rename-before")) die();
    int r = real(olddirfd, oldpath, newdirfd, newpath);
    if (r == 0 && hit && mode_is("rename-after")) die();
    return r;
}

int rename(const char *oldpath, const char *newpath) {
    return renameat(AT_FDCWD, oldpath, AT_FDCWD, newpath);
}

/* An unlink whose last path segment is exactly COMPACTD_KILL_BASENAME:
 * the same file whether it is removed by its full path or by its name in
 * an opened folder, and never a temp name that merely contains it. */
static int basename_is(const char *path) {
    const char *want = getenv("COMPACTD_KILL_BASENAME");
    if (!path) return 0;
    const char *slash = strrchr(path, '/');
    return strcmp(slash ? slash + 1 : path, want) == 0;
}

int unlinkat(int dirfd, const char *path, int flags) {
    static int (*real)(int, const char *, int);
    if (!real) real = dlsym(RTLD_NEXT, "unlinkat");
    int hit = getenv("COMPACTD_KILL_BASENAME") ? basename_is(path) : path_matches(path);
    if (hit && mode_is("unlink-before")) die();
    int r = real(dirfd, path, flags);
    if (r == 0 && hit && mode_is("unlink-after")) die();
    return r;
}

int unlink(const char *path) {
    return unlinkat(AT_FDCWD, path, 0);
}

/* An exclusive create at a name relative to a folder's descriptor: the
 * folder's real path plus the name is matched. */
static int at_matches(int dirfd, const char *path) {
    if (path_matches(path)) return 1;
    if (dirfd == AT_FDCWD || !path || path[0] == '/') return 0;
    char link[64], real[4096 + 256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, real, 4096);
    if (n <= 0) return 0;
    real[n] = 0;
    strncat(real, "/", sizeof real - strlen(real) - 1);
    strncat(real, path, sizeof real - strlen(real) - 1);
    return path_matches_as_given(real);
}

static int openat_with(const char *sym, int dirfd, const char *path, int flags, mode_t m) {
    int (*real)(int, const char *, int, ...) = dlsym(RTLD_NEXT, sym);
    int excl = (flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL);
    int hit = excl && at_matches(dirfd, path);
    if (hit && mode_is("create-before")) die();
    int r = real(dirfd, path, flags, m);
    if (r >= 0 && hit && mode_is("create-after")) die();
    return r;
}

/* Whether openat takes a mode (glibc's __OPEN_NEEDS_MODE): O_TMPFILE does
 * too, and does not include O_CREAT; a shim that passed 0 would make the
 * process's marker inode mode 0000. */
static int needs_mode(int flags) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

int openat(int dirfd, const char *path, int flags, ...) {
    mode_t m = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        m = va_arg(ap, int);
        va_end(ap);
    }
    return openat_with("openat", dirfd, path, flags, m);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    mode_t m = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        m = va_arg(ap, int);
        va_end(ap);
    }
    return openat_with("openat64", dirfd, path, flags, m);
}

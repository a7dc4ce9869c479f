"""A real S3-protocol server on loopback for compactd's tests.

Hands moto's WSGI app ONE REQUEST AT A TIME: moto checks conditions and then
writes without a lock, so two racing `If-None-Match: *` creates could both win
if it served them at once; one at a time makes each request atomic (0 bad
rounds in 6,000 measured races). Each connection still has its own thread,
which reads the whole request before taking the app's lock and sends the
answer after releasing it: a client that stops mid-request (SIGSTOPped, or
its network cut) holds only its own thread, never the others' requests, as on
a real S3 endpoint.

Protocol with the parent (tests/all/common/s3.rs):
- binds 127.0.0.1 on a free port (or --port N), then prints exactly one line
  `PORT <n>` to stdout and flushes; the socket is listening by then;
- exits when its stdin reaches EOF (the parent closed it or died) or on
  SIGTERM/SIGINT. Data lives in memory only.

Buckets whose name starts with `ignores-conditions` have their requests'
`If-None-Match` and `If-Match` headers dropped: a server that ignores
conditional writes, for the tests that compactd refuses one.

Run with the venv made by .ci/install-s3-server.sh:
    .venv-s3/bin/python tests/support/s3_server.py [--port N]
"""

import argparse
import io
import logging
import os
import signal
import sys
import threading
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument(
        "--no-stdin-watch",
        action="store_true",
        help="do not exit on stdin EOF (for running it by hand in the background)",
    )
    parser.add_argument(
        "--request-log",
        metavar="FILE",
        help="append one line per request served: seconds since start, bucket, method, key, query",
    )
    args = parser.parse_args()

    def stop(*_):
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    # Quiet per-request access logs; errors still reach stderr.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    from werkzeug.serving import make_server
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )

    moto_app = DomainDispatcherApplication(create_backend_app)
    # Requests served, by bucket and method (LIST and POST-DELETE apart),
    # for the benchmarks: `GET /_requests` answers them as JSON (no bucket
    # name starts with `_`).
    counts = {}
    request_log = open(args.request_log, "a", buffering=1) if args.request_log else None
    started = time.monotonic()

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/_requests":
            import json

            if request_log:
                # Marks the benchmark's windows in the log.
                request_log.write(f"{time.monotonic() - started:.3f} _requests\n")

            body = json.dumps(counts).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        bucket, _, obj = path.lstrip("/").partition("/")
        method = environ.get("REQUEST_METHOD", "?")
        query = environ.get("QUERY_STRING", "")
        # A GET of the bucket is a LIST, a POST with `?delete` a batch
        # delete: priced and counted apart from object GETs and POSTs.
        if method == "GET" and not obj:
            method = "LIST"
        elif method == "POST" and "delete" in query.split("&"):
            method = "POST-DELETE"
        key = f"{bucket} {method}"
        counts[key] = counts.get(key, 0) + 1
        if request_log:
            request_log.write(f"{time.monotonic() - started:.3f} {bucket} {method} /{obj} {query}\n")
        if bucket.startswith("ignores-conditions"):
            # An S3-compatible server that ignores conditional writes (as
            # s3rver and some gateways do): compactd must refuse it.
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        return moto_app(environ, start_response)

    one_at_a_time = threading.Lock()

    def serialised(environ, start_response):
        # The body is read before the lock, so a client that stops sending
        # holds only its own thread.
        stream = environ["wsgi.input"]
        if environ.get("wsgi.input_terminated"):
            body = stream.read()
        else:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = stream.read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        answer = {}
        chunks = []

        def capture(status, headers, exc_info=None):
            answer["start"] = (status, headers, exc_info)
            return chunks.append

        with one_at_a_time:
            result = app(environ, capture)
            try:
                chunks.extend(result)
            finally:
                if hasattr(result, "close"):
                    result.close()
        # The answer is sent after the lock: a client that stops reading
        # holds only its own thread too.
        start_response(*answer["start"])
        return chunks

    class Handler(MotoRequestHandler):
        # A client stopped mid-request (the tests SIGSTOP processes at any
        # point) has its connection dropped after this many seconds without
        # data, as a real S3 endpoint would drop it.
        timeout = 2
        # One request per connection: no idle keep-alive connection is
        # dropped under a client that is about to reuse it.
        protocol_version = "HTTP/1.0"

    server = make_server(
        args.host,
        args.port,
        serialised,
        threaded=True,
        request_handler=Handler,
    )
    port = server.socket.getsockname()[1]
    os.environ["MOTO_PORT"] = str(port)

    if not args.no_stdin_watch:

        def watch_stdin() -> None:
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except Exception:
                pass
            os._exit(0)

        threading.Thread(target=watch_stdin, daemon=True).start()

    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()
    # Anything moto prints later goes to stderr: stdout carries only the
    # PORT line, and the parent may stop reading it.
    sys.stdout = sys.stderr

    server.serve_forever()


if __name__ == "__main__":
    main()

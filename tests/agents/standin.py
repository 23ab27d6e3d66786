"""The plumbing the agent test bed's pieces share: bed.py, the stand-ins for the
vendors' model APIs (anthropic_api.py, openai_api.py, gemini_api.py) and the
client drivers under clients/. Each vendor's protocol stays in its own module;
what is here knows none of them.

Processes:
- `stop(proc)`: end a process started in a session of its own and whatever is
  left of its process group (SIGTERM, a grace period, SIGKILL);
- `run_to_deadline(argv, seconds, stdout, stderr)`: run a client in a session of
  its own, its output into files, until it exits or the time is up, then stop()
  it;
- `json_lines(path)`: the JSON documents of a JSON-lines log.

HTTP on 127.0.0.1:
- `Handler`, a request handler base: HTTP/1.1, quiet, `read_json()` (a gzip or
  deflate body undone; zstd, which the standard library cannot decode, is
  logged and read as `{}`), `send_json()`, `send()` for any whole body, and an
  open-ended Server-Sent Events response (`start_events()`, `send_event()`);
  `sse_frame()` makes one `event:`/`data:` frame;
- `serve(handler_class)`: a `Server` (a ThreadingHTTPServer that does not print
  a traceback when a client hangs up first) on a port the system picks, run in a
  daemon thread; its `port`, `url` and `stop()`;
- `StandIn`, the base of the vendor stand-ins: the recorder, log, lock, request
  counters (`note()`) and server they all keep.
"""

import contextlib
import gzip
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# -- processes ----------------------------------------------------------------


def stop(proc, grace=5):
    """End a process started with start_new_session=True and whatever is left of
    its process group (children it left behind too): SIGTERM to the group, up to
    `grace` seconds for the process to exit, then SIGKILL to what is left of the
    group; with grace=0, SIGKILL at once. A process that has exited already has
    the rest of its group ended the same way."""
    signals = ((signal.SIGTERM, grace), (signal.SIGKILL, 5)) if grace else ((signal.SIGKILL, 5),)
    for sig, wait in signals:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; give the rest of the group a moment.
        time.sleep(0.2)
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            break
    if proc.poll() is None:
        proc.wait()


def run_to_deadline(argv, seconds, stdout, stderr=None, grace=5, **popen):
    """Run `argv` in a session of its own, stdin /dev/null, stdout into the file
    `stdout` and stderr into the file `stderr` (or with stdout when None), for up
    to `seconds`; then stop() it (`grace` as there) and what is left of its
    group. `popen`: more subprocess.Popen arguments (cwd, env). Returns (its exit
    code, whether the time ran out)."""
    timed_out = False
    with open(stdout, "w") as out, (open(stderr, "w") if stderr else contextlib.nullcontext(subprocess.STDOUT)) as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, **popen)
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            stop(proc, grace)
    return proc.returncode, timed_out


def json_lines(path):
    """The JSON documents of a JSON-lines file (a log), in order; lines that are
    not JSON are passed over."""
    for line in pathlib.Path(path).read_text(errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        yield doc


# -- HTTP ---------------------------------------------------------------------


def sse_frame(data, event=None, eol="\n"):
    """One Server-Sent Events frame: an `event:` line (when `event` is given), a
    `data:` line holding `data` as JSON, and the empty line that ends the frame,
    each line ended by `eol`."""
    lines = ([f"event: {event}"] if event else []) + [f"data: {json.dumps(data)}", ""]
    return "".join(line + eol for line in lines).encode()


class Handler(BaseHTTPRequestHandler):
    """A request handler base for the stand-ins: HTTP/1.1, quiet (no request lines
    on stderr), reading JSON bodies and sending JSON, whole bodies and
    Server-Sent Events. A subclass may set `json_type` (the content-type of
    send_json) and `common_headers` ((name, value) pairs sent with every response
    of send, send_json and start_events). What it cannot read goes to the log
    given to serve()."""

    protocol_version = "HTTP/1.1"
    json_type = "application/json"
    common_headers = ()

    def log_message(self, fmt, *args):  # quiet
        pass

    def read_body(self):
        """The request's body (content-length bytes), a gzip or deflate
        content-encoding undone; b"" (logged) when it cannot be decoded: another
        encoding (zstd has no decoder in the standard library) or a broken one."""
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        enc = (self.headers.get("content-encoding") or "").lower()
        try:
            if enc == "gzip":
                return gzip.decompress(raw)
            if enc == "deflate":
                return zlib.decompress(raw)
        except (OSError, zlib.error) as e:
            self.server.log(f"unreadable body on {self.path}: {e}")
            return b""
        if enc:
            self.server.log(f"cannot decode content-encoding {enc!r}")
            return b""
        return raw

    def read_json(self):
        """The request's body as JSON: {} when it is empty or cannot be decoded
        (see read_body), `{"_raw": its text}` (logged) when it is not JSON."""
        raw = self.read_body()
        try:
            return json.loads(raw) if raw else {}
        except ValueError as e:
            self.server.log(f"unreadable body on {self.path}: {e}")
            return {"_raw": raw.decode("utf-8", "replace")}

    def send(self, status, body=b"", ctype="application/json", headers=()):
        """One whole response: `status`, the content-type (when there is a body),
        the common headers, `headers`, the content-length, `body`."""
        self.send_response(status)
        if body:
            self.send_header("content-type", ctype)
        for k, v in (*self.common_headers, *headers):
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, obj, status=200):
        self.send(status, json.dumps(obj).encode(), self.json_type)

    def start_events(self):
        """Start a 200 Server-Sent Events response of open length (the connection
        closes after it); write its frames with send_event."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        for k, v in self.common_headers:
            self.send_header(k, v)
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def send_event(self, event, data):
        self.wfile.write(sse_frame(data, event))


class Server(ThreadingHTTPServer):
    """A threading HTTP server (see serve()) that does not print a traceback when
    a client hangs up first (Codex drops connections it no longer needs)."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    @property
    def port(self):
        return self.server_address[1]

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.shutdown()
        self.server_close()


def serve(handler_class, log=None):
    """Serve `handler_class` on 127.0.0.1, on a port the system picks, in a daemon
    thread. `log` (a function of one string) is told of request bodies the
    handler cannot read. Returns the Server: its `port`, `url` and `stop()`."""
    server = Server(("127.0.0.1", 0), handler_class)
    server.log = log or (lambda msg: None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class StandIn:
    """The base of the vendor stand-ins: the model.Recorder they report to, the
    log (its lines prefixed with `label`), a lock, the requests by kind (note()),
    and the HTTP server (serve(), url, stop())."""

    label = "stand-in"

    def __init__(self, recorder, log=print):
        self.recorder = recorder
        self.log = log
        self.lock = threading.Lock()
        self.main_requests = 0
        self.side_requests = 0
        self.requests_log = []  # (method, path, kind)
        self.server = None

    def note(self, method, path, kind):
        """Count one request: "main" (the conversation), "side", or another kind,
        which is logged as well."""
        with self.lock:
            self.requests_log.append((method, path, kind))
            if kind == "main":
                self.main_requests += 1
            elif kind == "side":
                self.side_requests += 1
        if kind != "main":
            self.log(f"{self.label}: {method} {path} -> {kind}")

    def serve(self, handler_class):
        """Start the HTTP server with `handler_class`; returns its base URL."""
        self.server = serve(handler_class, lambda msg: self.log(f"{self.label}: {msg}"))
        return self.server.url

    @property
    def url(self):
        return self.server.url

    def stop(self):
        if self.server:
            self.server.stop()

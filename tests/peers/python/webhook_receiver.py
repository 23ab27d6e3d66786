"""A webhook receiver for tasklift's tests (tests/it/webhooks/).

It verifies every POST with the Standard Webhooks project's own library
(`standardwebhooks`, PyPI), the way a receiver of tasklift's events would, and
prints one JSON line per request on stdout:

    {"id": webhook-id, "timestamp": webhook-timestamp, "contentType": ...,
     "status": the status answered, "verified": bool, "payload": the body,
     "error": why it did not verify}

    python webhook_receiver.py --secret whsec_... [--port P] [--refuse-first N]
        [--hang] [--delay SECONDS]

The first line printed is `LISTENING <port>` (127.0.0.1; a free port unless
--port). `--refuse-first N` answers 503 to the first N requests (a receiver
having a bad moment); `--hang` never answers (the line says "hung"); `--delay`
answers each request that many seconds after it arrived (a slow receiver; the
line is printed when the answer is sent). A body that does not verify is
answered 400.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

LOCK = threading.Lock()


def emit(line):
    with LOCK:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def make_handler(args, hook, state):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            line = {
                "id": headers.get("webhook-id"),
                "timestamp": headers.get("webhook-timestamp"),
                "contentType": headers.get("content-type"),
            }
            if args.hang:
                line["hung"] = True
                emit(line)
                time.sleep(3600)
                return
            with LOCK:
                state["seen"] += 1
                nth = state["seen"]
            status = 503 if nth <= args.refuse_first else 204
            try:
                line["payload"] = hook.verify(body, headers)
                line["verified"] = True
            except Exception as e:  # what the library refuses, said in the line
                line["verified"] = False
                line["error"] = repr(e)
                status = 400
            line["status"] = status
            time.sleep(args.delay)
            emit(line)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--secret", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--refuse-first", type=int, default=0)
    p.add_argument("--hang", action="store_true")
    p.add_argument("--delay", type=float, default=0.0)
    args = p.parse_args()
    state = {"seen": 0}
    server = ThreadingHTTPServer(
        ("127.0.0.1", args.port), make_handler(args, Webhook(args.secret), state)
    )
    server.daemon_threads = True
    print(f"LISTENING {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

"""A small OTLP/HTTP traces receiver for tasklift's tests (tests/it/ops/otlp.rs).

It decodes each POST to /v1/traces with the OpenTelemetry project's own protobuf
classes (opentelemetry-proto), so what tasklift's hand-written encoder sends is
read the way a collector reads it, and prints every span as one JSON line on
stdout:

    {"service": ..., "scope": ..., "traceId": hex, "spanId": hex,
     "parentSpanId": hex or "", "traceState": ..., "flags": int, "name": ...,
     "kind": int, "start": ns, "end": ns, "attributes": {...},
     "status": {"code": int, "message": ...}, "headers": {...}}

    python otlp_receiver.py [--fail-first N] [--header NAME]...

The first line printed is `LISTENING <port>` (127.0.0.1, a free port).
`--fail-first N` answers 503 to the first N exports (a collector that is
restarting); `--header NAME` copies that request header into each span's
"headers". A body that does not decode is answered 400 and printed as
{"error": ...}: the test then fails on it.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

LOCK = threading.Lock()


def any_value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def emit(line):
    with LOCK:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def make_handler(args, state):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def answer(self, code, body=b"", ctype="application/x-protobuf"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.path != "/v1/traces":
                return self.answer(404, b"not found", "text/plain")
            ctype = self.headers.get("Content-Type", "")
            if ctype != "application/x-protobuf":
                emit({"error": f"Content-Type {ctype!r}, not application/x-protobuf"})
                return self.answer(415, b"protobuf only", "text/plain")
            with LOCK:
                state["posts"] += 1
                refuse = state["posts"] <= args.fail_first
            if refuse:
                emit({"refused": state["posts"]})
                return self.answer(503, b"restarting", "text/plain")
            req = ExportTraceServiceRequest()
            try:
                req.ParseFromString(body)
            except DecodeError as e:
                emit({"error": f"cannot decode the export: {e}"})
                return self.answer(400, b"bad protobuf", "text/plain")
            headers = {h: self.headers.get(h) for h in args.header}
            for rs in req.resource_spans:
                res = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        emit({
                            "service": res.get("service.name"),
                            "resource": res,
                            "scope": ss.scope.name,
                            "scopeVersion": ss.scope.version,
                            "traceId": s.trace_id.hex(),
                            "spanId": s.span_id.hex(),
                            "parentSpanId": s.parent_span_id.hex(),
                            "traceState": s.trace_state,
                            "flags": s.flags,
                            "name": s.name,
                            "kind": s.kind,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "attributes": attributes(s.attributes),
                            "status": {"code": s.status.code, "message": s.status.message},
                            "headers": headers,
                        })
            self.answer(200, ExportTraceServiceResponse().SerializeToString())

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--header", action="append", default=[])
    args = p.parse_args()
    state = {"posts": 0}
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(args, state))
    print(f"LISTENING {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

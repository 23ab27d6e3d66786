"""Gemini CLI (`@google/gemini-cli`, pinned in tests/agents/package.json), run
non-interactively (`gemini -p PROMPT`) against the Gemini API stand-in in
tests/agents/gemini_api.py, with tasklift as its MCP server `slow`.

How it is set up (all under ctx.workdir, which is HOME and GEMINI_CLI_HOME; the
CLI runs in ctx.workdir/project):
- `.gemini/settings.json`: API-key auth (`security.auth.selectedType =
  "gemini-api-key"`), folder trust off, usage statistics and telemetry off, no
  auto-update, no IDE, and `mcpServers.slow = {httpUrl, timeout: 5000 ms, trust}`
  (`httpUrl` is Streamable HTTP);
- environment: `GEMINI_API_KEY` (fake), `GOOGLE_GEMINI_BASE_URL` (the stand-in),
  `GEMINI_CLI_NO_RELAUNCH` (no child node process for a bigger heap),
  `GEMINI_CLI_TRUST_WORKSPACE`; everything Gemini/Google-ish of the caller's
  environment is dropped;
- `--approval-mode yolo` (with `trust: true` as well) so tool calls need no
  confirmation, `--model gemini-2.5-pro` so no routing classifier call is made,
  `--output-format stream-json` so its stdout says what happened, event by event.

Left in ctx.workdir: gemini.stdout / gemini.stderr, gemini-last-request.json (the
last main-conversation request the stand-in got), mcp-trace.txt (the MCP traffic
both ways, timed).

Knobs (environment of the bed, read here, not passed on): GEMINI_NODE=22 or a path
(default: `node` on PATH, Node 20), GEMINI_TEST_MODEL (default gemini-2.5-pro;
"auto" exercises the CLI's router, one side request), GEMINI_LOOP_DETECTION=0
(turn off the CLI's loop detection, on by default as for any user).

Between the CLI and tasklift sits a byte-for-byte TCP relay of this process (a
connection the CLI closes is closed towards tasklift at once), only to read which
MCP protocol version the CLI uses, whether it declares the tasks extension, and
which MCP messages it sent.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gemini_api  # noqa: E402
import model  # noqa: E402
import standin  # noqa: E402

PROMPT = model.PROMPT
MODEL = os.environ.get("GEMINI_TEST_MODEL", "gemini-2.5-pro")  # "auto" exercises the router
FAKE_KEY = "AIzaSy-fake-key-for-the-stand-in-000000"


class Relay:
    """A TCP relay 127.0.0.1:port -> target that keeps what the client sent, to
    read afterwards which MCP protocol version it used, its capabilities, and
    which JSON-RPC messages it sent (a timeout's notifications/cancelled)."""

    PROTO = re.compile(rb'"method"\s*:\s*"initialize".*?"protocolVersion"\s*:\s*"([^"]+)"', re.S)
    HEADER = re.compile(rb"(?im)^mcp-protocol-version:\s*([^\r\n]+)")
    TASKS_EXT = b"io.modelcontextprotocol/tasks"
    CAPS = re.compile(rb'"capabilities"\s*:\s*(\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\})')
    CLIENT_INFO = re.compile(rb'"clientInfo"\s*:\s*(\{[^{}]*\})')
    METHOD = re.compile(rb'"method"\s*:\s*"([^"]+)"')
    REQUEST_LINE = re.compile(rb"(GET|POST|DELETE|PUT|OPTIONS) /\S* HTTP/1\.[01]\r\n")
    KEEP = 4 << 20  # bytes kept per connection

    def __init__(self, host, port):
        self.target = (host, port)
        self.lock = threading.Lock()
        self.sent = []  # per connection: bytearray of what the client sent
        self.trace = []  # (seconds since start, connection, direction, bytes), both ways
        self.trace_bytes = 0
        self.t0 = time.monotonic()
        self.closed_by_client = 0
        self.threads = []
        self.socks = set()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=10)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray()
            with self.lock:
                conn = len(self.sent)
                self.sent.append(buf)
                self.socks.update((c, u))
            for args in ((c, u, buf, conn), (u, c, None, conn)):
                t = threading.Thread(target=self.pump, args=args, daemon=True)
                t.start()
                with self.lock:
                    self.threads.append(t)

    def pump(self, src, dst, buf, conn):
        """Copy src to dst; when either side ends, close both (a connection the
        client drops is dropped towards the server at once)."""
        way = "C>S" if buf is not None else "S>C"
        try:
            while True:
                data = src.recv(65536)
                with self.lock:
                    if self.trace_bytes < self.KEEP:
                        self.trace.append((time.monotonic() - self.t0, conn, way, data or b"<EOF>"))
                        self.trace_bytes += len(data)
                if not data:
                    if buf is not None:
                        with self.lock:
                            self.closed_by_client += 1
                    break
                if buf is not None and len(buf) < self.KEEP:
                    buf.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            with self.lock:
                self.socks.discard(src)
                self.socks.discard(dst)

    def close(self):
        try:
            self.srv.close()
        except OSError:
            pass
        with self.lock:
            socks, threads = list(self.socks), list(self.threads)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            t.join(timeout=2)

    def dump(self, path):
        """Both directions, in order, with times (for reading a failure)."""
        with self.lock:
            trace = list(self.trace)
        with open(path, "wb") as f:
            for t, conn, way, data in trace:
                f.write(f"\n----- {t:8.3f}s conn {conn} {way} {len(data)} bytes -----\n".encode() + data)

    def summary(self):
        with self.lock:
            bufs = [bytes(b) for b in self.sent]
        everything = b"\n".join(bufs)
        first = lambda rx: (lambda m: m.group(1).decode(errors="replace") if m else None)(rx.search(everything))
        methods, verbs = {}, {}
        for m in self.METHOD.finditer(everything):
            k = m.group(1).decode(errors="replace")
            methods[k] = methods.get(k, 0) + 1
        for m in self.REQUEST_LINE.finditer(everything):
            k = m.group(1).decode()
            verbs[k] = verbs.get(k, 0) + 1
        return {
            "connections": len(bufs),
            "closedByClient": self.closed_by_client,
            "initVersion": first(self.PROTO),
            "headerVersions": sorted({m.group(1).decode(errors="replace").strip()
                                      for m in self.HEADER.finditer(everything)}),
            "capabilities": first(self.CAPS),
            "clientInfo": first(self.CLIENT_INFO),
            "declaresTasks": self.TASKS_EXT in everything,
            "methods": methods,
            "httpRequests": verbs,
        }


def node_for(ctx, notes):
    """Node 20 (on PATH) unless GEMINI_NODE says otherwise; Node 22 as fallback."""
    want = os.environ.get("GEMINI_NODE")
    if want == "22":
        return str(ctx.node22)
    if want:
        return want
    node = shutil.which("node")
    if node:
        return node
    notes.append("no node on PATH: using Node 22")
    return str(ctx.node22)


def client_env(ctx, base_url):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GEMINI_", "GOOGLE_", "CLOUD_SHELL", "VERTEX", "OTEL_", "CI_"))
        and k not in ("DEBUG", "DEBUG_MODE", "SANDBOX", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                      "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "TERM_PROGRAM")
    }
    env.update(
        HOME=str(ctx.workdir),
        GEMINI_CLI_HOME=str(ctx.workdir),
        GEMINI_API_KEY=FAKE_KEY,
        GOOGLE_GEMINI_BASE_URL=base_url,
        GEMINI_CLI_NO_RELAUNCH="1",
        GEMINI_CLI_TRUST_WORKSPACE="true",
        GEMINI_TELEMETRY_ENABLED="false",
        NO_COLOR="1",
        NO_PROXY="127.0.0.1,localhost",
        TERM="dumb",
    )
    return env


def settings(mcp_url, timeout_ms, loop_detection=True):
    return {
        "security": {
            "auth": {"selectedType": "gemini-api-key"},
            "folderTrust": {"enabled": False},
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False, "logPrompts": False},
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "checkpointing": {"enabled": False},
            "sessionRetention": {"enabled": False},
        },
        "ide": {"enabled": False, "hasSeenNudge": True},
        "model": {"name": MODEL, "skipNextSpeakerCheck": True, "disableLoopDetection": not loop_detection},
        "experimental": {"autoMemory": False},
        "mcpServers": {
            "slow": {"httpUrl": mcp_url, "timeout": timeout_ms, "trust": True},
        },
    }


def run(ctx):
    started = time.monotonic()
    end = started + max(20.0, ctx.deadline_s - 10)
    notes = []
    workdir = Path(ctx.workdir)
    node = node_for(ctx, notes)
    entry = Path(ctx.agents) / "@google/gemini-cli/bundle/gemini.js"
    project = workdir / "project"
    project.mkdir(parents=True, exist_ok=True)
    (workdir / ".gemini").mkdir(parents=True, exist_ok=True)

    # Gemini CLI stops a turn after 5 identical tool calls in a row (its default
    # loop detection); GEMINI_LOOP_DETECTION=0 turns that off, to see past it.
    loop_detection = os.environ.get("GEMINI_LOOP_DETECTION", "1") not in ("0", "off", "false")
    if not loop_detection:
        notes.append("loop detection off (GEMINI_LOOP_DETECTION=0)")
    api = gemini_api.GeminiStandIn(
        ctx.recorder, log=ctx.log, dump_path=str(workdir / "gemini-last-request.json")
    ).start()
    target = urlsplit(ctx.mcp_url)
    relay = Relay(target.hostname, target.port)
    relay_url = urlunsplit((target.scheme, f"127.0.0.1:{relay.port}", target.path, target.query, ""))
    (workdir / ".gemini/settings.json").write_text(
        json.dumps(settings(relay_url, int(ctx.tool_timeout_s * 1000), loop_detection), indent=1)
    )
    env = client_env(ctx, api.url)
    version = None
    rc = None
    try:
        try:
            v = subprocess.run(
                [node, str(entry), "--version"], env=env, cwd=project, capture_output=True, text=True,
                timeout=60, start_new_session=True,
            )
            version = v.stdout.strip().splitlines()[-1] if v.stdout.strip() else None
        except subprocess.TimeoutExpired:
            notes.append("gemini --version timed out")
        cmd = [node, str(entry), "--model", MODEL, "--approval-mode", "yolo", "--output-format", "stream-json",
               "-p", PROMPT]
        ctx.log(f"gemini: {' '.join(cmd)} (stand-in {api.url}, MCP via relay {relay_url} -> {ctx.mcp_url})")
        rc, late = standin.run_to_deadline(cmd, max(1.0, end - time.monotonic()), workdir / "gemini.stdout",
                                           workdir / "gemini.stderr", env=env, cwd=project)
        if late:
            notes.append(f"killed at the deadline ({ctx.deadline_s}s budget)")
        ctx.log(f"gemini: exited {rc} after {time.monotonic() - started:.1f}s")
    finally:
        relay.close()
        api.stop()

    mcp = relay.summary()
    relay.dump(workdir / "mcp-trace.txt")
    if rc not in (0, None):
        notes.append(f"gemini exited with {rc}")
    notes.append(f"node {node}")
    notes.append(
        f"stand-in: {api.main_requests} main requests, {api.side_requests} side requests, "
        f"{api.calls} function calls answered"
    )
    others = sorted({f"{m} {p}" for m, p, k in api.requests_log if k not in ("main", "side")})
    if others:
        notes.append("other API requests: " + ", ".join(others))
    for key in ("capabilities", "clientInfo"):
        if mcp[key] is not None:
            notes.append(f"MCP {key}: {mcp[key]}")
    notes.append("MCP messages sent: " + json.dumps(mcp["methods"], sort_keys=True))
    notes.append(
        f"MCP HTTP: {json.dumps(mcp['httpRequests'], sort_keys=True)} over {mcp['connections']} connections "
        f"({mcp['closedByClient']} closed by the client)"
    )
    protocol = mcp["headerVersions"][-1] if mcp["headerVersions"] else mcp["initVersion"]
    if mcp["initVersion"] and protocol != mcp["initVersion"]:
        notes.append(f"initialize asked for {mcp['initVersion']}, then used {mcp['headerVersions']}")
    return {
        "client": "gemini",
        "version": version,
        "protocol": protocol,
        "declaresTasks": mcp["declaresTasks"] if mcp["initVersion"] else None,
        "notes": notes,
    }

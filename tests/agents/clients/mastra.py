"""Mastra's MCP client (`@mastra/mcp` MCPClient, on the TypeScript SDK v2 client
`@modelcontextprotocol/client`, MCP 2026-07-28) through tasklift.

Mastra has no model API of its own to stand in for: the agent loop is
`tests/agents/mastra-agent.mjs` (Node 22, which @mastra/mcp requires), and the
"model" is a tiny local endpoint served here:

    POST /next  {"results": [{"tool", "text", "isError"}, ...], "tools": [...]}
             -> {"action": "call", "tool": EXPOSED_NAME, "args": {...}}
              | {"action": "final", "text": ...}

`results` are the tool results exactly as a Mastra agent's model would be shown them
(see the script); `tool` names are Mastra's (`slow_slow`, `slow_tasklift_wait`),
mapped to the policy's logical names with `model.logical_name`.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import model  # noqa: E402

SCRIPT = HERE / "mastra-agent.mjs"
PROMPT = "Call the slow tool as instructed."


def serve_model(ctx):
    """Start the scripted model on 127.0.0.1 (a thread); returns the server."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            ctx.log("mastra model: " + fmt % args)

        def answer(self, doc, status=200):
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            ctx.log(f"mastra model: unexpected GET {self.path}")
            self.answer({"error": "unknown path"}, 404)

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            if self.path != "/next":
                ctx.log(f"mastra model: unexpected POST {self.path}: {raw[:200]!r}")
                self.answer({"error": "unknown path"}, 404)
                return
            req = json.loads(raw or b"{}")
            exposed = req.get("tools") or []
            results = [
                model.Result(model.logical_name(r["tool"]), r.get("text", ""), bool(r.get("isError")))
                for r in req.get("results", [])
            ]
            ctx.recorder.saw(results, {"tools": exposed})
            action = model.next_action(results)
            if action[0] == "final":
                doc = {"action": "final", "text": action[1]}
            else:
                _, tool, args = action
                name = next((t for t in exposed if model.logical_name(t) == tool), tool)
                doc = {"action": "call", "tool": name, "args": args}
            ctx.log(f"mastra model: after {len(results)} results -> {json.dumps(doc)}")
            self.answer(doc)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run(ctx):
    workdir = pathlib.Path(ctx.workdir)
    notes = []
    server = serve_model(ctx)
    model_url = f"http://127.0.0.1:{server.server_address[1]}"
    facts_file = workdir / "facts.json"
    env = dict(
        os.environ,
        HOME=str(workdir),
        AGENTS=str(ctx.agents),
        MCP_URL=ctx.mcp_url,
        MODEL_URL=model_url,
        TOOL_TIMEOUT_MS=str(int(ctx.tool_timeout_s * 1000)),
        WIRE_LOG=str(workdir / "wire.jsonl"),
        RESULT_FILE=str(facts_file),
        PROMPT=PROMPT,
        NO_COLOR="1",
        MASTRA_TELEMETRY_DISABLED="1",
    )
    started = time.monotonic()
    with open(workdir / "mastra-agent.log", "w") as out:
        proc = subprocess.Popen(
            [str(ctx.node22), str(SCRIPT)],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=max(10, ctx.deadline_s - 5))
        except subprocess.TimeoutExpired:
            notes.append(f"killed at the deadline ({ctx.deadline_s}s)")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            server.shutdown()
            server.server_close()
    ctx.log(f"mastra: agent exited {proc.returncode} after {time.monotonic() - started:.1f}s")
    if proc.returncode:
        notes.append(f"mastra-agent.mjs exited with {proc.returncode} (see {workdir}/mastra-agent.log)")
    facts = json.loads(facts_file.read_text()) if facts_file.exists() else {}
    for e in facts.get("errors", []):
        notes.append(f"error: {json.dumps(e)}")
    if facts.get("coreVersion"):
        notes.append(f"@mastra/core {facts['coreVersion']}, @modelcontextprotocol/client {facts.get('sdkVersion')}")
    if facts.get("clientCapabilities") is not None:
        notes.append(f"clientCapabilities: {json.dumps(facts['clientCapabilities'])}")
    return {
        "client": "mastra",
        "version": facts.get("version"),
        "protocol": facts.get("protocol"),
        "declaresTasks": facts.get("declaresTasks"),
        "notes": notes,
    }

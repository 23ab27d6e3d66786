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
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import model  # noqa: E402
import standin  # noqa: E402

SCRIPT = HERE / "mastra-agent.mjs"
PROMPT = model.PROMPT


def serve_model(ctx):
    """Start the scripted model on 127.0.0.1 (a thread); returns the server."""

    class Handler(standin.Handler):
        def log_message(self, fmt, *args):
            ctx.log("mastra model: " + fmt % args)

        def do_GET(self):
            ctx.log(f"mastra model: unexpected GET {self.path}")
            self.send_json({"error": "unknown path"}, 404)

        def do_POST(self):
            req = self.read_json()
            if self.path != "/next":
                ctx.log(f"mastra model: unexpected POST {self.path}: {json.dumps(req)[:200]}")
                self.send_json({"error": "unknown path"}, 404)
                return
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
            self.send_json(doc)

    return standin.serve(Handler, lambda msg: ctx.log(f"mastra model: {msg}"))


def run(ctx):
    workdir = pathlib.Path(ctx.workdir)
    notes = []
    server = serve_model(ctx)
    model_url = server.url
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
    try:
        # At the deadline, SIGKILL at once (grace=0).
        rc, late = standin.run_to_deadline([str(ctx.node22), str(SCRIPT)], max(10, ctx.deadline_s - 5),
                                           workdir / "mastra-agent.log", grace=0, cwd=workdir, env=env)
    finally:
        server.stop()
    if late:
        notes.append(f"killed at the deadline ({ctx.deadline_s}s)")
    ctx.log(f"mastra: agent exited {rc} after {time.monotonic() - started:.1f}s")
    if rc:
        notes.append(f"mastra-agent.mjs exited with {rc} (see {workdir}/mastra-agent.log)")
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

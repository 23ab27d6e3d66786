"""Codex CLI (`codex exec`, the native binary behind @openai/codex's Node shim)
through tasklift, its model a stand-in for the OpenAI Responses API
(tests/agents/openai_api.py).

Configuration: CODEX_HOME = ctx.workdir/codex-home with a config.toml (written
here, checked with --strict-config), HOME = ctx.workdir, cwd = an empty
ctx.workdir/project. A custom model provider `standin` (base_url = the stand-in's
/v1, wire_api = "responses", env_key = a variable holding a fake key, no
retries); approval policy never and no sandbox (--dangerously-bypass-approvals-
and-sandbox: as root in a network namespace Codex's sandbox is of no use); update
checks, analytics, feedback, OpenTelemetry, history, web search, request
compression, plugins/apps/skills installs, sub-agents and the background daemon
off. MCP servers: `slow` = tasklift (Streamable HTTP, tool_timeout_sec =
ctx.tool_timeout_s, startup_timeout_sec 30), and `probe`, a tool-less MCP server
in this process that keeps Codex's `initialize` (protocolVersion, capabilities),
which Codex's own logs do not show.

The model is "stand-in" by default: unknown to Codex's model catalog, so Codex
uses fallback metadata and offers MCP tools directly as functions (namespace
`mcp__slow`, function `slow`: the model sees `mcp__slow__slow`). Setting
CODEX_TEST_MODEL to a catalog model changes what the model is offered:
`gpt-6.2-sol` (the catalog's first, `tool_mode: code_mode_only`) offers MCP tools
only inside the JavaScript `exec` tool (the stand-in handles that: code mode);
`gpt-5.5` hides them behind `tool_search` (not handled: the run ends at once).

Logs in ctx.workdir: codex.stdout.jsonl (`codex exec --json` events),
codex.stderr.log (RUST_LOG=warn,rmcp=trace, or CODEX_TEST_RUST_LOG: the MCP
requests, results and notifications after the handshake), requests/NNN.json (every model request),
initialize.json, last-message.txt, codex-home/sessions/... (the rollout).
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model  # noqa: E402
import openai_api  # noqa: E402
import standin  # noqa: E402

PROMPT = model.PROMPT
MODEL = os.environ.get("CODEX_TEST_MODEL", "stand-in")
KEY_ENV = "STANDIN_OPENAI_API_KEY"


def toml_str(s):
    return json.dumps(str(s))  # a JSON string is a valid TOML basic string


def config_toml(ctx, base_url, probe_url):
    return f"""# Written by tests/agents/clients/codex.py
model = {toml_str(MODEL)}
model_provider = "standin"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"
model_reasoning_summary = "none"
hide_agent_reasoning = true

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"
log_user_prompt = false

[history]
persistence = "none"

[features]
enable_request_compression = false
plugins = false
remote_plugin = false
apps = false
tool_suggest = false
skill_mcp_dependency_install = false
image_generation = false
browser_use = false
computer_use = false
goals = false
in_app_updates = false
daemon_auto_start = false

[agents]
enabled = false

[model_providers.standin]
name = "stand-in"
base_url = {toml_str(base_url)}
wire_api = "responses"
env_key = {toml_str(KEY_ENV)}
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 60000

[mcp_servers.slow]
url = {toml_str(ctx.mcp_url)}
startup_timeout_sec = 30
tool_timeout_sec = {float(ctx.tool_timeout_s)}

[mcp_servers.probe]
url = {toml_str(probe_url)}
startup_timeout_sec = 30
"""


class McpProbe:
    """A second, tool-less MCP server (`probe`) in the same session: it keeps the
    `initialize` request Codex sends (rmcp's logs show only the server's answer),
    to report the protocolVersion Codex asks for and whether its capabilities
    declare the tasks extension. It offers no tools, so the model's tool list is
    unchanged."""

    def __init__(self, log):
        self.log = log
        self.initialize = None  # the params of the first initialize request
        self.methods = []
        probe = self

        class Handler(standin.Handler):
            def do_GET(self):
                self.send(405, b'{"error":"no standalone stream"}', headers=[("allow", "POST, DELETE")])

            def do_DELETE(self):
                self.send(200)

            def do_POST(self):
                try:
                    msg = json.loads(self.read_body() or b"{}")
                except ValueError:
                    return self.send(400, b'{"error":"bad json"}')
                if isinstance(msg, list):  # a batch (old protocol versions)
                    msg = msg[0] if msg else {}
                method = msg.get("method")
                probe.methods.append(method)
                if "id" not in msg or method is None:  # a notification or response
                    return self.send(202)
                if method == "initialize":
                    params = msg.get("params") or {}
                    if probe.initialize is None:
                        probe.initialize = params
                    result = {
                        "protocolVersion": params.get("protocolVersion") or "2025-06-18",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "probe", "version": "0"},
                    }
                    extra = [("mcp-session-id", "probe-session")]
                elif method == "tools/list":
                    result, extra = {"tools": []}, []
                elif method in ("resources/list",):
                    result, extra = {"resources": []}, []
                elif method in ("resources/templates/list",):
                    result, extra = {"resourceTemplates": []}, []
                elif method in ("prompts/list",):
                    result, extra = {"prompts": []}, []
                else:
                    result, extra = {}, []
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
                self.send(200, body, headers=extra)

        self.server = standin.serve(Handler, lambda msg: log(f"codex probe: {msg}"))

    @property
    def url(self):
        return self.server.url + "/mcp"

    def stop(self):
        self.server.stop()


def declares_tasks(params):
    """Whether initialize params declare the tasks extension (SEP-2133
    `capabilities.extensions`, or the 2025-11-25 `capabilities.tasks`)."""
    caps = (params or {}).get("capabilities") or {}
    ext = caps.get("extensions") or {}
    return "io.modelcontextprotocol/tasks" in ext or "tasks" in caps


def server_version(stderr, skip="probe"):
    """The protocolVersion the session with an MCP server settled on, from rmcp's
    "Service initialized as client peer_info=..." log line (the server's answer;
    through tasklift the serverInfo is the upstream's)."""
    for m in re.finditer(
        r'Service initialized as client peer_info=Some\(ServerPeerInfo \{ protocol_version: '
        r'ProtocolVersion\("([^"]+)"\).*?server_info: Some\(Implementation \{ name: "([^"]*)"', stderr
    ):
        if m.group(2) != skip:
            return m.group(1)
    return None


def tool_calls(jsonl_path):
    """The MCP tool calls `codex exec --json` reported (item.completed events)."""
    calls = []
    for ev in standin.json_lines(jsonl_path):
        item = ev.get("item") or {}
        if ev.get("type") == "item.completed" and item.get("type") == "mcp_tool_call":
            calls.append(item)
    return calls


def run(ctx):
    started = time.monotonic()
    work = Path(ctx.workdir)
    home = work / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    project = work / "project"  # the session's cwd: an empty directory, not a git repository
    project.mkdir(exist_ok=True)
    codex = Path(ctx.agents) / ".bin" / "codex"
    notes = []

    stand_in = openai_api.OpenAIStandIn(
        ctx.recorder, log=ctx.log, model_name=MODEL, dump_dir=str(work / "requests"),
        code_mode_prefix="mcp__slow__",
    ).start()
    probe = McpProbe(ctx.log)
    (home / "config.toml").write_text(config_toml(ctx, stand_in.url, probe.url))
    # A clean environment: no real keys or proxies, and no RUST_BACKTRACE (with it
    # set, Codex appends a "Stack backtrace:" to the error text its model is shown).
    drop = ("OPENAI_", "CODEX_", "RUST_LOG", "RUST_BACKTRACE", "RUST_LIB_BACKTRACE",
            "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({
        "HOME": str(work),
        "CODEX_HOME": str(home),
        KEY_ENV: "sk-fake-standin-key",
        "NO_COLOR": "1",
        # rmcp's trace shows the MCP messages (tools/call, notifications/cancelled).
        "RUST_LOG": os.environ.get("CODEX_TEST_RUST_LOG", "warn,rmcp=trace"),
    })
    try:
        version = subprocess.run(
            [str(codex), "--version"], env=env, capture_output=True, text=True, timeout=30,
            stdin=subprocess.DEVNULL,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        version = f"unknown ({e})"
    ctx.log(f"codex: {version}, stand-in at {stand_in.url}, MCP at {ctx.mcp_url}, model {MODEL}")

    cmd = [
        str(codex), "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--strict-config",
        "--color", "never",
        "--json",
        "-C", str(project),
        "-o", str(work / "last-message.txt"),
        PROMPT,
    ]
    (work / "command.txt").write_text(" ".join(cmd) + "\n")
    budget = max(10.0, ctx.deadline_s - (time.monotonic() - started) - 5)
    stdout_path, stderr_path = work / "codex.stdout.jsonl", work / "codex.stderr.log"
    try:
        rc, late = standin.run_to_deadline(cmd, budget, stdout_path, stderr_path, cwd=project, env=env)
    finally:
        stand_in.stop()
        probe.stop()
    if late:
        notes.append(f"codex did not finish within {budget:.0f}s; killed")
        ctx.log(f"codex: killed at the deadline ({budget:.0f}s)")
    ctx.log(f"codex: exit {rc} after {time.monotonic() - started:.1f}s; "
            f"model requests {stand_in.requests_log}")
    notes.append(f"codex exit code {rc}")
    notes.append(f"model requests: {stand_in.main_requests} main, {stand_in.side_requests} side")

    stderr = stderr_path.read_text(errors="replace")
    protocol = server_version(stderr)
    asked = probe.initialize
    if asked is not None:
        (work / "initialize.json").write_text(json.dumps(asked, indent=1))
        notes.append("initialize params (kept by a tool-less probe MCP server in the same session): "
                     + json.dumps(asked))
    else:
        notes.append("the probe MCP server saw no initialize")
    if protocol is None and asked is not None:
        protocol = asked.get("protocolVersion")
    cancels = len(re.findall(r"notification: CancelledNotification", stderr))
    if cancels:
        notes.append(f"codex sent notifications/cancelled {cancels} time(s) (its tool timeout)")
    for item in tool_calls(stdout_path):
        notes.append("codex reported mcp_tool_call {}.{}({}) {}: {}".format(
            item.get("server"), item.get("tool"), json.dumps(item.get("arguments")), item.get("status"),
            json.dumps(item.get("error") or item.get("result"))))
    if stand_in.raw_outputs:
        notes.append("function_call_output `output`s as sent: " + json.dumps(stand_in.raw_outputs))
    return {
        "client": "codex",
        "version": version,
        "protocol": protocol,
        "declaresTasks": declares_tasks(asked) if asked is not None else None,
        "notes": notes,
    }

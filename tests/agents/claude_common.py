"""What the two Claude Code clients (clients/claude.py, interactive in tmux, and
clients/claude_p.py, headless `claude -p`) share: the stand-in API, the home
directory and configuration that keep Claude Code from asking anything, the
environment, the MCP configuration, and reading the facts back.

Claude Code 2.1.332 needs, to run unattended as root with no network but loopback
(each item below was checked: without it the interactive UI stops on a dialog, or
the MCP tools never reach the model):
- HOME = a directory of ours. `.claude.json`: `hasCompletedOnboarding` and a
  `theme` (else the welcome/theme picker), the fake key's last 20 characters in
  `customApiKeyResponses.approved` (else "Detected a custom API key ... Do you
  want to use this API key?", default No), `projects[<cwd>].hasTrustDialogAccepted`
  (else the folder trust dialog), `hasSeenAutoDefaultNudge`. `.claude/settings.json`:
  a permission allow-list for the MCP tools (`--dangerously-skip-permissions` is
  refused as root) and NO user-level `permissions.defaultMode` (one that is not
  "auto" makes the UI offer "Make auto mode your default permission mode?");
- `--permission-mode dontAsk`: with no mode configured this version starts in
  auto mode (a classifier judges tool calls); dontAsk runs allowed tools and
  refuses others without asking;
- ANTHROPIC_BASE_URL = the stand-in, ANTHROPIC_API_KEY = a fake key, a pinned
  `--model` (one this version does not call retired, or the UI warns);
- ENABLE_TOOL_SEARCH=false, or the MCP tools are deferred behind a `ToolSearch`
  tool and are not in the request's tool list;
- MCP_CONNECTION_NONBLOCKING=0, so the MCP tools are listed before the first
  model request; MCP_TOOL_TIMEOUT (ms) and the server's `timeout` key in the
  `--mcp-config` JSON for the 5 s tool timeout;
- the updater, telemetry, error reporting, surveys and other traffic off;
- an environment of our own only (no ambient IS_SANDBOX and the like, which
  change what the UI shows).
Claude Code speaks MCP 2026-07-28 (`server/discover`, `_meta` on every request) to
tasklift. Interactive `claude` declares `io.modelcontextprotocol/tasks` in
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`; `claude -p` does
not (read through a recording proxy while writing this; the run itself reads it
back from tasklift's log, see `facts`).
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import anthropic_api  # noqa: E402
import model  # noqa: E402
import standin  # noqa: E402

PROMPT = model.PROMPT
FAKE_KEY = "sk-ant-api03-standin-0000000000000000000000000000000000000000000000000000-standinAA"
MODEL = "claude-sonnet-4-6"  # pinned, and not one this version calls retired
ALLOWED = ["mcp__slow__slow", "mcp__slow__tasklift_wait", "mcp__slow__tasklift_cancel"]


def claude_bin(ctx):
    return str(ctx.agents / ".bin" / "claude")


def version(ctx, env):
    """What `claude --version` prints, e.g. "2.1.332 (Claude Code)", reduced to the number."""
    try:
        out = subprocess.run([claude_bin(ctx), "--version"], env=env, capture_output=True, text=True, timeout=30)
        m = re.search(r"\d+\.\d+\.\d+\S*", out.stdout)
        return m.group(0) if m else out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


class Setup:
    """The stand-in, HOME, project directory, environment and MCP config of one run."""

    def __init__(self, ctx, label):
        self.ctx = ctx
        self.label = label
        wd = pathlib.Path(ctx.workdir)
        self.home = wd / "home"
        self.project = wd / "project"
        self.home.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)
        self.standin = anthropic_api.AnthropicStandIn(ctx.recorder, ctx.log, str(wd))
        self.base_url = self.standin.start()
        ctx.log(f"{label}: anthropic stand-in at {self.base_url}")
        self._write_config()
        self.env = self._env()
        self.mcp_config = wd / "mcp.json"
        self.mcp_config.write_text(json.dumps({"mcpServers": {"slow": {
            "type": "http",
            "url": ctx.mcp_url,
            "timeout": int(ctx.tool_timeout_s * 1000),
        }}}, indent=1))

    def _write_config(self):
        key_tail = FAKE_KEY[-20:]
        project = str(self.project)
        proj = {
            "allowedTools": [],
            "mcpServers": {},
            "enabledMcpjsonServers": [],
            "disabledMcpjsonServers": [],
            "hasTrustDialogAccepted": True,
            "hasCompletedProjectOnboarding": True,
            "projectOnboardingSeenCount": 1,
            "hasClaudeMdExternalIncludesApproved": False,
            "hasClaudeMdExternalIncludesWarningShown": True,
        }
        doc = {
            "numStartups": 5,
            "installMethod": "npm-global",
            "autoUpdates": False,
            "theme": "dark",
            "hasCompletedOnboarding": True,
            "lastOnboardingVersion": "2.1.332",
            "lastReleaseNotesSeen": "2.1.332",
            "hasSeenTasksHint": True,
            "hasSeenAutoDefaultNudge": True,
            "bypassPermissionsModeAccepted": True,
            "hasAcknowledgedCostThreshold": True,
            "shiftEnterKeyBindingInstalled": True,
            "customApiKeyResponses": {"approved": [key_tail], "rejected": []},
            "projects": {project: proj},
        }
        (self.home / ".claude.json").write_text(json.dumps(doc, indent=1))
        settings = {
            # No permissions.defaultMode here: a user-level one that is not "auto"
            # makes the interactive UI offer "Make auto mode your default
            # permission mode?" at start.
            "permissions": {"allow": list(ALLOWED)},
            "theme": "dark",
            "autoUpdates": False,
            "includeCoAuthoredBy": False,
            "spinnerTipsEnabled": False,
            "env": {},
        }
        (self.home / ".claude").mkdir(exist_ok=True)
        (self.home / ".claude" / "settings.json").write_text(json.dumps(settings, indent=1))

    def _env(self):
        keep = ("PATH", "LANG", "LC_ALL", "TZ")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update({
            "HOME": str(self.home),
            "USER": "root",
            "SHELL": "/bin/bash",
            "TERM": "xterm-256color",
            "LANG": env.get("LANG", "C.UTF-8"),
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": FAKE_KEY,
            "ANTHROPIC_MODEL": MODEL,
            "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
            "DISABLE_COST_WARNINGS": "1",
            "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
            "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
            "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
            "ENABLE_TOOL_SEARCH": "false",
            "MCP_CONNECTION_NONBLOCKING": "0",
            "MCP_TIMEOUT": "30000",
            "MCP_TOOL_TIMEOUT": str(int(self.ctx.tool_timeout_s * 1000)),
            "NO_UPDATE_NOTIFIER": "1",
        })
        return env

    def argv(self):
        """The flags both variants pass."""
        return [
            "--mcp-config", str(self.mcp_config), "--strict-mcp-config",
            "--allowedTools", *ALLOWED,
            # Not auto mode (this version's default when none is configured,
            # which runs a classifier on tool calls): allowed tools run, any
            # other would be refused rather than asked about.
            "--permission-mode", "dontAsk",
            "--model", MODEL,
            "--debug-file", str(pathlib.Path(self.ctx.workdir) / "claude-debug.log"),
        ]

    def report(self, client, version, notes):
        """What the client's run(ctx) returns: `notes`, then the facts of
        facts() and the stand-in's request counts."""
        protocol, declares, more = facts(self.ctx, self)
        notes = notes + more
        notes.append(f"model requests: {self.standin.main_requests} main, {self.standin.side_requests} side")
        return {"client": client, "version": version, "protocol": protocol,
                "declaresTasks": declares, "notes": notes}

    def stop(self):
        self.standin.stop()


MODERN = "2026-07-28"  # the one modern protocol version tasklift serves


def facts(ctx, setup):
    """(protocol, declaresTasks, notes) as tasklift saw this client, from its log
    (JSON, RUST_LOG=tasklift=debug) beside the workdir:
    - protocol: a legacy session's negotiated version ("legacy client session
      opened"), or 2026-07-28 when the client sent `server/discover` (tasklift
      serves that version only); checked against the version Claude Code's own MCP
      log says it negotiated;
    - declaresTasks: true when a call became a task answered as the extension's
      CreateTaskResult (`handle: Extension`), false when it became a task answered
      otherwise (a tool-level handle, or joined), null when no call became a task
      (tasklift logs nothing else that shows the declaration)."""
    notes = []
    log = pathlib.Path(ctx.workdir).parent / "tasklift.log"
    protocol, handles = None, []
    if log.exists():
        for rec in standin.json_lines(log):
            f = rec.get("fields") or {}
            span = rec.get("span") or {}
            msg = f.get("message", "")
            if msg == "legacy client session opened" and protocol is None:
                protocol = f.get("version")
            if span.get("method") == "server/discover" and "client.addr" in span and protocol is None:
                protocol = MODERN
            if msg == "call became a task":
                handles.append(f.get("handle"))
    else:
        notes.append(f"no tasklift log at {log}")
    declares = True if "Extension" in handles else (False if handles else None)
    if handles:
        notes.append(f"tasklift made tasks of its calls answered as: {', '.join(map(str, handles))}")
    else:
        notes.append("no call became a task, so tasklift's log does not show whether the tasks extension was declared")
    own = client_protocol(setup)
    if own and own != protocol:
        notes.append(f"Claude Code's MCP log says it negotiated {own}")
        protocol = protocol or own
    return protocol, declares, notes


def client_protocol(setup):
    """The protocol version Claude Code's own MCP log (under HOME/.cache) says it
    negotiated with the server `slow`, or None."""
    for p in sorted((setup.home / ".cache").glob("claude-cli-nodejs/*/mcp-logs-slow/*.jsonl")):
        for line in p.read_text(errors="replace").splitlines():
            m = re.search(r'negotiatedProtocolVersion\\?":\\?"([^"\\]+)', line)
            if m:
                return m.group(1)
    return None


def pid_gone(pid):
    """Whether the process `pid` has ended (gone, or a zombie nobody reaped yet:
    tmux is sometimes slow to reap its pane's process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def kill_pid(pid, grace=3):
    """End the process `pid` (claude in the tmux pane) if it outlived its pane:
    SIGTERM, then SIGKILL after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pid_gone(pid):
            return
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        wait_until(lambda: pid_gone(pid), time.monotonic() + grace, step=0.1)


def wait_until(pred, deadline, step=0.25):
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()

"""Claude Code, headless: `claude -p PROMPT` (print mode), one session, through
tasklift as the MCP server `slow`, its model the Anthropic stand-in
(tests/agents/anthropic_api.py). Shared setup: tests/agents/claude_common.py.
"""

import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import claude_common as cc  # noqa: E402


def run(ctx):
    started = time.monotonic()
    deadline = started + ctx.deadline_s - 10
    s = cc.Setup(ctx, "claude_p")
    notes = []
    try:
        ver = cc.version(ctx, s.env)
        argv = [cc.claude_bin(ctx), "-p", cc.PROMPT, *s.argv(), "--output-format", "stream-json", "--verbose"]
        ctx.log(f"claude_p: {' '.join(argv)}")
        wd = pathlib.Path(ctx.workdir)
        with open(wd / "claude.stdout", "w") as out, open(wd / "claude.stderr", "w") as err:
            proc = subprocess.Popen(argv, cwd=s.project, env=s.env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
            try:
                proc.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                notes.append("claude -p did not finish before the deadline; killed")
            finally:
                cc.kill_group(proc)
        notes.append(f"claude -p exit code {proc.returncode}")
        protocol, declares, more = cc.facts(ctx, s)
        notes += more
        notes.append(f"model requests: {s.standin.main_requests} main, {s.standin.side_requests} side")
        return {"client": "claude_p", "version": ver, "protocol": protocol,
                "declaresTasks": declares, "notes": notes}
    finally:
        s.stop()

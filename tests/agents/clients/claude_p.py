"""Claude Code, headless: `claude -p PROMPT` (print mode), one session, through
tasklift as the MCP server `slow`, its model the Anthropic stand-in
(tests/agents/anthropic_api.py). Shared setup: tests/agents/claude_common.py.
"""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import claude_common as cc  # noqa: E402
import standin  # noqa: E402


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
        rc, late = standin.run_to_deadline(argv, max(1, deadline - time.monotonic()),
                                           wd / "claude.stdout", wd / "claude.stderr", cwd=s.project, env=s.env)
        if late:
            notes.append("claude -p did not finish before the deadline; killed")
        notes.append(f"claude -p exit code {rc}")
        return s.report("claude_p", ver, notes)
    finally:
        s.stop()

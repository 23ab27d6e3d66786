"""Claude Code, interactive: `claude` in a tmux session of a fixed size (its own
tmux server, on a socket in the workdir), the prompt typed with send-keys, through
tasklift as the MCP server `slow`, its model the Anthropic stand-in
(tests/agents/anthropic_api.py). Shared setup: tests/agents/claude_common.py.

Run until the stand-in has answered the final text and every MCP task Claude Code
moved to the background has been reported back to the model (a task
notification), or the deadline; then `/exit`, and the tmux server is killed.

Interactive Claude Code declares the MCP tasks extension: a slow call that
tasklift turns into a task is answered to the model at once ("... moved to the
background as task ID ..."), Claude Code polls `tasks/get` every second, and when
the task ends it hands the model a `<task-notification>` in a new user turn (see
anthropic_api.py). So the model's first final answer comes before the slow
call's outcome; the run waits for the notification's turn too.

Quirks: the pane's screen is saved at each step in panes.txt (a dialog that
blocks the run shows there); after `/exit` tmux sometimes leaves the exited
claude a zombie for many seconds without marking the pane dead, so the exit is
also read from /proc.
"""

import pathlib
import shlex
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import claude_common as cc  # noqa: E402

COLS, ROWS = 160, 50


class Tmux:
    def __init__(self, socket, log):
        self.socket = str(socket)
        self.log = log

    def __call__(self, *args, check=False, timeout=10):
        try:
            r = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.log(f"claude: tmux {args[0]} timed out")
            return ""
        if check and r.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def pane(self):
        return self("capture-pane", "-p", "-t", "claude")

    def alive(self):
        return subprocess.run(["tmux", "-S", self.socket, "has-session", "-t", "claude"],
                              capture_output=True).returncode == 0


def run(ctx):
    started = time.monotonic()
    deadline = started + ctx.deadline_s - 15
    s = cc.Setup(ctx, "claude")
    wd = pathlib.Path(ctx.workdir)
    tmux = Tmux(wd / "tmux.sock", ctx.log)
    notes = []
    pane_pid = None
    snapshots = open(wd / "panes.txt", "w")

    def snap(label):
        snapshots.write(f"==== {time.monotonic() - started:6.1f}s {label}\n{tmux.pane()}\n")
        snapshots.flush()

    try:
        ver = cc.version(ctx, s.env)
        argv = [cc.claude_bin(ctx), *s.argv()]
        script = wd / "run-claude.sh"
        # Only our environment (not the tmux server's), stderr to a file.
        script.write_text(
            "#!/bin/sh\n"
            + f"cd {shlex.quote(str(s.project))} || exit 1\n"
            + "exec env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in s.env.items())
            + " " + " ".join(shlex.quote(a) for a in argv)
            + f" 2>{shlex.quote(str(wd / 'claude.stderr'))}\n"
        )
        script.chmod(0o755)
        ctx.log(f"claude: {' '.join(argv)}")
        tmux("-f", "/dev/null", "new-session", "-d", "-s", "claude", "-x", str(COLS), "-y", str(ROWS),
             str(script), check=True)
        tmux("set-option", "-t", "claude", "remain-on-exit", "on")
        pid = tmux("display-message", "-p", "-t", "claude", "#{pane_pid}").strip()
        pane_pid = int(pid) if pid.isdigit() else None
        # Ready when the input box's status line is drawn ("? for shortcuts", or
        # the permission mode's "shift+tab to cycle"; a dialog has neither), or
        # the pane died.
        marks = ("for shortcuts", "shift+tab to cycle", "Pane is dead")
        ready = cc.wait_until(lambda: any(w in tmux.pane() for w in marks), min(deadline, time.monotonic() + 60))
        ready = ready and "Pane is dead" not in tmux.pane()
        snap("ready" if ready else "not ready")
        if not ready:
            notes.append("the input box did not appear within 60 s (a dialog, or claude exited: see panes.txt)")
        time.sleep(1)
        tmux("send-keys", "-t", "claude", "-l", cc.PROMPT)
        time.sleep(0.5)
        tmux("send-keys", "-t", "claude", "Enter")
        snap("typed")

        def finished():
            st = s.standin
            return st.final_sent.is_set() and st.pending_background() == 0

        done = cc.wait_until(finished, deadline, step=0.5)
        snap("finished" if done else "deadline")
        if not done:
            notes.append("no final answer (with every background task reported) before the deadline")
        # Give the client a moment to render, then quit.
        time.sleep(1)
        tmux("send-keys", "-t", "claude", "-l", "/exit")
        time.sleep(0.3)
        tmux("send-keys", "-t", "claude", "Enter")
        exited = cc.wait_until(
            lambda: (pane_pid and cc.pid_gone(pane_pid)) or not tmux.alive() or "Pane is dead" in tmux.pane(),
            time.monotonic() + 8)
        snap("exit" if exited else "still running after /exit")
        if not exited:
            notes.append("claude had not exited 8 s after /exit; killed")
        return s.report("claude", ver, notes)
    finally:
        tmux("kill-server")
        if pane_pid:
            cc.kill_pid(pane_pid)
        snapshots.close()
        s.stop()

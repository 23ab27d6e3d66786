"""The plain-Python parts the Python peers share (no SDK calls), so each is written once.

Servers (v1_server.py, v2_server.py): the bodies of the `slow`, `stats` and `big`
tools and the counters behind `stats`; each server declares the tools with its own
SDK and passes in what the SDK provides (the context's `report_progress`).

Clients (v1_client.py, fastmcp_client.py): `expect`, and the runner that runs each
check with a time limit, prints one JSON line per check ({"check", "ok", "detail"})
and ends with `LABEL: all checks passed` or `LABEL: failed checks: ...`.

The scripts import this as a sibling module: a script's own directory is on sys.path
whatever the working directory, so `python path/to/v1_server.py` finds it.
"""

import json
import os

import anyio

# Counters of `slow` calls in this process.
STATS = {"started": 0, "cancelled": 0, "completed": 0}
# The same counters per `seconds` argument (its repr: "0.5", "12.0"), for
# tests/agents/bed.py, which tells the calls of one conversation apart by it
# (written to the file TASKLIFT_PEER_RUNS_FILE names, when set).
RUNS = {}


async def slow(report_progress, seconds: float) -> str:
    """Sleep `seconds`, calling `report_progress(progress, total, message)` every 200 ms;
    counts the call in STATS as started, then cancelled or completed."""
    STATS["started"] += 1
    runs = RUNS.setdefault(repr(float(seconds)), {"started": 0, "cancelled": 0, "completed": 0})
    runs["started"] += 1
    _save_runs()
    steps = max(1, int(seconds / 0.2))
    try:
        for i in range(steps):
            await report_progress(i, steps, f"step {i + 1} of {steps}")
            await anyio.sleep(seconds / steps)
    except anyio.get_cancelled_exc_class():
        STATS["cancelled"] += 1
        runs["cancelled"] += 1
        _save_runs()
        raise
    STATS["completed"] += 1
    runs["completed"] += 1
    _save_runs()
    return f"slept {seconds}s"


def stats() -> str:
    """STATS as JSON text."""
    return json.dumps(STATS)


def _save_runs() -> None:
    """Write RUNS to the file named by TASKLIFT_PEER_RUNS_FILE, if set."""
    path = os.environ.get("TASKLIFT_PEER_RUNS_FILE")
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(RUNS, f)
        os.replace(path + ".tmp", path)


def big() -> str:
    """About 2 MB of text: 250,000 numbered lines of 8 bytes."""
    return "".join(f"{i:07d}\n" for i in range(250_000))


class Failed(Exception):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise Failed(what)


async def run_checks(checks, limit: float) -> list[dict]:
    """Run each `(name, async fn)` in turn, `limit` seconds each (a hang guard, not a
    timing expectation); prints and returns one result per check, whose detail is what
    the check returned or why it failed."""
    results = []
    for name, check in checks:
        try:
            with anyio.fail_after(limit):
                detail = await check()
            results.append({"check": name, "ok": True, "detail": detail})
        except TimeoutError:
            results.append({"check": name, "ok": False, "detail": f"no answer in {limit} s"})
        except Exception as e:  # noqa: BLE001 - every failure is reported
            results.append({"check": name, "ok": False, "detail": f"{type(e).__name__}: {e}"})
        print(json.dumps(results[-1]), flush=True)
    return results


def verdict(label: str, results: list[dict]) -> int:
    """Print the last line for `results` and return the exit code (0 when all passed)."""
    failed = [r["check"] for r in results if not r["ok"]]
    if failed:
        print(f"{label}: failed checks: {', '.join(failed)}", flush=True)
        return 1
    print(f"{label}: all checks passed", flush=True)
    return 0

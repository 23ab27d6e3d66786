"""A slow call from a legacy (2025-era) client whose request timeout is shorter than
the tool: mcp==1.30 ClientSession over Streamable HTTP, `read_timeout_seconds` of
3 s on every `call_tool`, against v1_server.py's `slow {seconds: 10}`.

    python v1_slow_client.py URL MODE

MODE says what is behind URL and what the client must see:

- `direct`: the server itself, no tasklift: the call fails with the SDK's timeout
  error (the problem tasklift solves).
- `handles`: tasklift with `non_task_clients = "tool_handles"`: `tasklift_wait` and
  `tasklift_cancel` are listed (and `slow` has no outputSchema); the call answers
  before the timeout with a "still running" result; a scripted model reads only
  the text, finds the tool to call and the taskId in it (then cross-checks them
  with structuredContent), and calls `tasklift_wait {taskId, waitSeconds: 2}`,
  each answer before the timeout, until the real result arrives. The server ran
  `slow` once.
- `detach`: tasklift with `on_disconnect = "detach"`: the call times out; the
  identical call, retried with the same timeout, returns the result; the server
  started `slow` once and cancelled nothing.
- `cancel`: tasklift's defaults (the contrast): the call times out, and so does
  each retry with the same timeout; the last retry, with a long timeout, returns
  the result; the server started `slow` more than once.

Prints one JSON line per check ({"check", "ok", "detail"}) and a last line
`py-slow-client MODE: all checks passed`, or exits 1 after naming the failed checks.
"""

import json
import re
import sys
import time
from datetime import timedelta

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from peer_common import Failed, expect, run_checks, verdict  # noqa: E402 - a sibling module

TIMEOUT = timedelta(seconds=3)  # the client's request timeout
SECONDS = 10  # how long `slow` runs: longer than TIMEOUT
RESULT = f"slept {float(SECONDS)}s"  # what `slow` returns (its seconds are a float)
LIMIT = 60  # seconds per check: a hang guard, not a timing expectation
MAX_ATTEMPTS = 10  # retries (detach) or polls (handles) before giving up

# What a model would look for in the text: the name of the tool to call next, and
# the job's id after the word taskId (`taskId: X`, `taskId "X"`, `"taskId": "X"`).
TOOL_RE = re.compile(r"\btasklift_wait\b")
TASK_ID_RE = re.compile(r"taskId\W{0,4}([A-Za-z0-9][A-Za-z0-9._:\-]*[A-Za-z0-9])")


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def shape(result: types.CallToolResult) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def is_timeout(e: McpError) -> bool:
    """The SDK's own request timeout (it raises McpError with HTTP's 408)."""
    return e.error.code == 408 and "Timed out" in e.error.message


async def main(url: str, mode: str) -> int:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()

            async def stats() -> dict:
                return json.loads(text_of(await session.call_tool("stats", {})))

            async def timed_call(name: str, args: dict, timeout: timedelta = TIMEOUT):
                """(result or the McpError, seconds it took)."""
                t0 = time.monotonic()
                try:
                    r = await session.call_tool(name, args, read_timeout_seconds=timeout)
                except McpError as e:
                    return e, time.monotonic() - t0
                return r, time.monotonic() - t0

            def still_running(r: types.CallToolResult) -> dict | None:
                """What a model reads in a "still running" answer (None if it is not
                one): the tool to call and the taskId, from the text only."""
                t = text_of(r)
                tool, task = TOOL_RE.search(t), TASK_ID_RE.search(t)
                if not tool or not task:
                    return None
                return {"tool": tool.group(0), "taskId": task.group(1), "text": t}

            def cross_check(r: types.CallToolResult, seen: dict) -> None:
                sc = r.structuredContent or {}
                expect(not r.isError, f"a still-running answer is not an error: {shape(r)}")
                expect(
                    sc.get("taskId") == seen["taskId"]
                    and sc.get("status") == "working"
                    and sc.get("pollWith") == "tasklift_wait",
                    f"structuredContent {sc} agrees with the text (taskId {seen['taskId']!r}): {shape(r)}",
                )

            async def check_init():
                return {"protocolVersion": init.protocolVersion, "server": init.serverInfo.name}

            async def check_direct_times_out():
                before = await stats()
                r, took = await timed_call("slow", {"seconds": SECONDS})
                expect(isinstance(r, McpError), f"expected the SDK's timeout, got a result after {took:.1f}s: {r}")
                expect(is_timeout(r), f"expected the SDK's timeout, got {r.error}")
                return {"error": r.error.model_dump(exclude_none=True), "after": round(took, 1), "stats before": before}

            async def check_tools_listed():
                tools = {t.name: t for t in (await session.list_tools()).tools}
                for want in ("tasklift_wait", "tasklift_cancel", "slow", "stats"):
                    expect(want in tools, f"{want} is listed: {sorted(tools)}")
                wait = tools["tasklift_wait"].inputSchema
                expect("taskId" in wait.get("properties", {}), f"tasklift_wait takes taskId: {wait}")
                expect("taskId" in wait.get("required", []), f"taskId is required: {wait}")
                expect("waitSeconds" in wait.get("properties", {}), f"tasklift_wait takes waitSeconds: {wait}")
                cancel = tools["tasklift_cancel"].inputSchema
                expect("taskId" in cancel.get("properties", {}), f"tasklift_cancel takes taskId: {cancel}")
                expect(tools["slow"].outputSchema is None, f"slow's outputSchema is dropped: {tools['slow']}")
                return sorted(tools)

            async def check_handles_model_loop():
                before = await stats()
                r, took = await timed_call("slow", {"seconds": SECONDS})
                expect(not isinstance(r, McpError), f"slow failed after {took:.1f}s: {r}")
                seen = still_running(r)
                expect(seen is not None, f"the text names tasklift_wait and a taskId: {shape(r)}")
                cross_check(r, seen)
                first = {"after": round(took, 1), "text": seen["text"], "structuredContent": r.structuredContent}
                polls = []
                # The model: call the tool the text named, with the taskId it gave,
                # until the answer is no longer "still running".
                for _ in range(MAX_ATTEMPTS):
                    r, took = await timed_call(seen["tool"], {"taskId": seen["taskId"], "waitSeconds": 2})
                    expect(not isinstance(r, McpError), f"tasklift_wait failed after {took:.1f}s: {r}")
                    polls.append(round(took, 1))
                    again = still_running(r)
                    if again is None:
                        break
                    expect(again["taskId"] == seen["taskId"], f"the same taskId again: {again} vs {seen}")
                    cross_check(r, again)
                else:
                    raise Failed(f"still running after {MAX_ATTEMPTS} tasklift_wait calls: {shape(r)}")
                expect(not r.isError and text_of(r) == RESULT, f"the final answer is slow's result: {shape(r)}")
                after = await stats()
                expect(after["started"] - before["started"] == 1, f"slow started once: {before} -> {after}")
                expect(after["completed"] - before["completed"] == 1, f"slow completed once: {before} -> {after}")
                return {"first": first, "waits took": polls, "final": text_of(r), "stats": [before, after]}

            async def retry_until_done():
                """Call slow, then the identical call again (the same timeout), until
                one returns: ([[outcome, seconds], ...], the result)."""
                attempts = []
                for i in range(MAX_ATTEMPTS):
                    r, took = await timed_call("slow", {"seconds": SECONDS})
                    if isinstance(r, McpError):
                        expect(is_timeout(r), f"attempt {i + 1}: only the SDK's timeout, got {r.error}")
                        attempts.append(["timeout", round(took, 1)])
                        continue
                    attempts.append(["result", round(took, 1)])
                    return attempts, r
                raise Failed(f"no result in {MAX_ATTEMPTS} attempts: {attempts}")

            async def check_detach_retry_joins():
                before = await stats()
                attempts, r = await retry_until_done()
                expect(attempts[0][0] == "timeout", f"the first call times out: {attempts}")
                expect(not r.isError and text_of(r) == RESULT, f"the retry returns slow's result: {shape(r)}")
                after = await stats()
                expect(after["started"] - before["started"] == 1, f"slow started once: {before} -> {after}")
                expect(after["cancelled"] == before["cancelled"], f"nothing cancelled: {before} -> {after}")
                return {"attempts": attempts, "final": text_of(r), "stats": [before, after]}

            async def check_cancel_retry_runs_again():
                before = await stats()
                attempts = []
                # Three attempts with the short timeout (each runs the tool afresh),
                # then one with a timeout long enough for the tool.
                for i in range(4):
                    timeout = timedelta(seconds=15) if i == 3 else TIMEOUT
                    r, took = await timed_call("slow", {"seconds": SECONDS}, timeout)
                    if isinstance(r, McpError):
                        expect(is_timeout(r), f"attempt {i + 1}: only the SDK's timeout, got {r.error}")
                        attempts.append(["timeout", round(took, 1)])
                    else:
                        attempts.append(["result", round(took, 1)])
                        break
                expect(attempts[0][0] == "timeout", f"the first call times out: {attempts}")
                expect(attempts[-1][0] == "result", f"the long last attempt returns: {attempts}")
                expect(not r.isError and text_of(r) == RESULT, f"the last attempt returns slow's result: {shape(r)}")
                after = await stats()
                expect(after["started"] - before["started"] >= 2, f"slow ran again: {before} -> {after}")
                return {"attempts": attempts, "final": text_of(r), "stats": [before, after]}

            checks = [("init", check_init)]
            if mode == "direct":
                checks.append(("direct: slow times out", check_direct_times_out))
            elif mode == "handles":
                checks.append(("handles: tools listed", check_tools_listed))
                checks.append(("handles: model loop", check_handles_model_loop))
            elif mode == "detach":
                checks.append(("detach: retry joins", check_detach_retry_joins))
            elif mode == "cancel":
                checks.append(("cancel: retry runs again", check_cancel_retry_runs_again))
            else:
                print(f"unknown mode {mode!r}", file=sys.stderr)
                return 2
            results = await run_checks(checks, LIMIT)
    return verdict(f"py-slow-client {mode}", results)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python v1_slow_client.py URL direct|handles|detach|cancel", file=sys.stderr)
        sys.exit(2)
    sys.exit(anyio.run(main, sys.argv[1], sys.argv[2]))

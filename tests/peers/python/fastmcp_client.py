"""A 2026-07-28 tasks client: fastmcp 4.1.4 `Client` with fastmcp-tasks 4.1.4 (the
io.modelcontextprotocol/tasks extension), as a user of FastMCP would write it.

    python fastmcp_client.py URL

Expects the tools of v1_server.py behind URL (tasklift in front of it, whose
threshold is well under a second). Runs each check with a time limit, prints one JSON
line per check ({"check", "ok", "detail"}) and a last line
`fastmcp-client: all checks passed`, or exits 1 after naming the failed checks.
Checks: call echo (answered directly); call slow as a task with `call_tool_task` and
poll it to completion (`tasks/get`); call slow with plain `call_tool`, which
fastmcp-tasks turns into polling under the hood.
"""

import sys

import anyio
import fastmcp_tasks  # noqa: F401 - importing it turns on client task support
from fastmcp import Client
from fastmcp_tasks import call_tool_task


from peer_common import expect, run_checks, verdict  # noqa: E402 - a sibling module

LIMIT = 20  # seconds per check: a hang guard, not a timing expectation


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def main(url: str) -> int:
    async with Client(url) as client:

        async def check_echo():
            r = await client.call_tool("echo", {"text": "hello from fastmcp"})
            expect(text_of(r) == "hello from fastmcp", f"echo: {r}")
            return text_of(r)

        async def check_task():
            task = await call_tool_task(client, "slow", {"seconds": 1.5})
            first = await task.status()
            r = await task.result()
            expect(text_of(r) == "slept 1.5s", f"slow as a task: {r}")
            return {
                "taskId": task.task_id,
                "handle status": task.create_result.status,
                "first polled status": first.status,
                "text": text_of(r),
            }

        async def check_transparent():
            r = await client.call_tool("slow", {"seconds": 1.0})
            expect(text_of(r) == "slept 1.0s", f"slow: {r}")
            return text_of(r)

        checks = [("echo", check_echo), ("task", check_task), ("transparent", check_transparent)]
        results = await run_checks(checks, LIMIT)
    return verdict("fastmcp-client", results)


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1]))

"""A legacy (2025-era) MCP client written with the Python SDK, mcp==1.30 ClientSession
over Streamable HTTP, as a user of the SDK would write it.

    python v1_client.py URL

Expects the tools of v1_server.py behind URL (tasklift in front of it). Runs each
check with a time limit, prints one JSON line per check ({"check", "ok", "detail"})
and a last line `py-client: all checks passed`, or exits 1 after naming the failed
checks. Checks: list the tools; call echo; call slow (a legacy client just waits;
progress arrives through the progress callback); ask (elicitation answered by the
elicitation callback); sample (sampling answered by the sampling callback); fail (a
tool error); reject (a JSON-RPC error); big (a 2 MB result).
"""

import sys

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


from peer_common import Failed, expect, run_checks, verdict  # noqa: E402 - a sibling module

LIMIT = 15  # seconds per check: a hang guard, not a timing expectation
EXPECTED_TOOLS = {"echo", "slow", "stats", "ask", "sample", "fail", "reject", "big"}

asked: list[str] = []
sampled: list[str] = []


async def on_elicit(context, params: types.ElicitRequestParams):
    asked.append(params.message)
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def on_sample(context, params: types.CreateMessageRequestParams):
    first = params.messages[0].content
    sampled.append(first.text if isinstance(first, types.TextContent) else str(first))
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="hi from the model"),
        model="py-client-model",
    )


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def main(url: str) -> int:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(
            read, write, sampling_callback=on_sample, elicitation_callback=on_elicit
        ) as session:
            init = await session.initialize()

            async def check_list():
                tools = await session.list_tools()
                names = {t.name for t in tools.tools}
                expect(EXPECTED_TOOLS <= names, f"tools listed: {sorted(names)}")
                return {"protocolVersion": init.protocolVersion, "tools": sorted(names)}

            async def check_echo():
                r = await session.call_tool("echo", {"text": "hello from py"})
                expect(not r.isError and text_of(r) == "hello from py", f"echo: {r}")
                return text_of(r)

            async def check_slow():
                progress = []

                async def on_progress(p, total, message):
                    progress.append(message)

                r = await session.call_tool("slow", {"seconds": 1.5}, progress_callback=on_progress)
                expect(not r.isError and text_of(r) == "slept 1.5s", f"slow: {r}")
                expect(len(progress) > 0, "no progress notification arrived")
                return {"text": text_of(r), "progress": progress}

            async def check_ask():
                r = await session.call_tool("ask", {})
                expect(text_of(r) == "hello Ada", f"ask: {r}")
                expect(asked == ["What is your name?"], f"questions asked: {asked}")
                return text_of(r)

            async def check_sample():
                r = await session.call_tool("sample", {"prompt": "Say hi"})
                expect(text_of(r) == "sampled: hi from the model", f"sample: {r}")
                expect(sampled == ["Say hi"], f"sampling prompts: {sampled}")
                return text_of(r)

            async def check_fail():
                r = await session.call_tool("fail", {})
                expect(r.isError and "always fails" in text_of(r), f"fail: {r}")
                return text_of(r)

            async def check_reject():
                try:
                    r = await session.call_tool("reject", {})
                except McpError as e:
                    expect(e.error.code == types.INVALID_PARAMS, f"reject: error {e.error}")
                    return {"code": e.error.code, "message": e.error.message}
                raise Failed(f"reject: expected a JSON-RPC error, got {r}")

            async def check_big():
                r = await session.call_tool("big", {})
                t = text_of(r)
                expect(len(t) == 2_000_000 and t.endswith("0249999\n"), f"big: {len(t)} characters")
                return {"chars": len(t)}

            checks = [
                ("list", check_list),
                ("echo", check_echo),
                ("slow", check_slow),
                ("ask", check_ask),
                ("sample", check_sample),
                ("fail", check_fail),
                ("reject", check_reject),
                ("big", check_big),
            ]
            results = await run_checks(checks, LIMIT)
    return verdict("py-client", results)


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1]))

"""A legacy (2025-era) MCP client that offers roots, written with the Python SDK
(mcp==1.30 ClientSession), as a user of the SDK would write it.

    python roots_client.py --root DIR [--root DIR ...] (--url URL | --stdio CMD ...)

Connects to the filesystem server (`@modelcontextprotocol/server-filesystem`),
directly over stdio or through tasklift's Streamable HTTP, offering DIRs as its
roots (a `list_roots_callback`). Calls `list_allowed_directories` twice: at once,
and again once the server has asked for the roots and had a moment to apply them.
Prints one JSON line: {"first": TEXT, "settled": TEXT, "asked": N}, where N is how
many times the server asked for the roots.
"""

import argparse
import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

LIMIT = 30  # seconds: a hang guard, not a timing expectation


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def run(read, write, roots: list[str]) -> dict:
    asked = anyio.Event()
    count = 0

    async def on_roots(context):
        nonlocal count
        count += 1
        asked.set()
        return types.ListRootsResult(
            roots=[types.Root(uri=f"file://{r}", name=r) for r in roots]
        )

    async with ClientSession(read, write, list_roots_callback=on_roots) as session:
        await session.initialize()
        first = text_of(await session.call_tool("list_allowed_directories", {}))
        with anyio.fail_after(LIMIT):
            await asked.wait()
        await anyio.sleep(0.3)
        settled = text_of(await session.call_tool("list_allowed_directories", {}))
        return {"first": first, "settled": settled, "asked": count}


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", action="append", default=[])
    p.add_argument("--url")
    p.add_argument("--stdio", nargs=argparse.REMAINDER)
    a = p.parse_args()
    with anyio.fail_after(LIMIT * 2):
        if a.url:
            async with streamable_http_client(a.url) as (read, write, _):
                out = await run(read, write, a.root)
        else:
            params = StdioServerParameters(command=a.stdio[0], args=a.stdio[1:])
            async with stdio_client(params) as (read, write):
                out = await run(read, write, a.root)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))

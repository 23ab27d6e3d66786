"""A modern (2026-07-28) MCP server written with the Python SDK, mcp==2.3 MCPServer.

The SDK does the protocol; this file only declares tools, the way a user of the SDK
would. tasklift's integration tests (tests/it/peers/python.rs) put it behind tasklift.

    python v2_server.py [--mode http|stdio] [--port N]

`http` serves Streamable HTTP at /mcp on 127.0.0.1; `stdio` serves on stdin/stdout.

Tools (the same names and answers as v1_server.py where both have them):
- `echo(text)`: the text back, at once.
- `slow(seconds)`: sleeps, reporting progress every 200 ms; counts calls started,
  cancelled and completed (see `stats`).
- `stats()`: those counters (for this process), as JSON text.
- `ask(question, delay)`: asks for a name the 2026-07-28 way: a resolver returns
  `Elicit(...)`, which the SDK sends as an `InputRequiredResult` and resumes when
  the client retries with `inputResponses`; returns `hello NAME`. `delay` seconds
  pass (on every round) before the question is asked.
- `ask_again`: the same tool under another name (for per-tool rules).
- `fail()`: raises `ToolError`: a tool error (`isError: true`).
- `reject(seconds)`: after `seconds`, raises `MCPError(-32602)`: a protocol error.
- `big()`: about 2 MB of text: 250,000 numbered lines of 8 bytes.
"""

import argparse
import sys
from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field


import peer_common  # a sibling module (this script's directory is on sys.path)

INVALID_PARAMS = -32602


class Name(BaseModel):
    name: str = Field(description="Your name")


async def ask_name(question: str = "What is your name?", delay: float = 0) -> Elicit[Name]:
    if delay:
        await anyio.sleep(delay)
    return Elicit(question, Name)


def build() -> MCPServer:
    mcp = MCPServer("py-v2-peer", log_level="WARNING")

    @mcp.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @mcp.tool()
    async def slow(ctx: Context, seconds: float = 2.0) -> str:
        """Sleep, reporting progress every 200 ms."""
        return await peer_common.slow(ctx.report_progress, seconds)

    @mcp.tool()
    async def stats() -> str:
        """Counters of `slow` calls in this process."""
        return peer_common.stats()

    async def ask(
        who: Annotated[Name, Resolve(ask_name)],
        question: str = "What is your name?",
        delay: float = 0,
    ) -> str:
        """Ask the client for a name (elicitation, as an InputRequiredResult)."""
        return f"hello {who.name}"

    # Also under a second name, so that a proxy can give each name its own rule.
    mcp.tool()(ask)
    mcp.tool(name="ask_again", description="The same as ask.")(ask)

    @mcp.tool()
    async def fail() -> str:
        """Always raises: a tool error."""
        raise ToolError("fail: this tool always fails")

    @mcp.tool()
    async def reject(seconds: float = 0) -> str:
        """Answers with a JSON-RPC error."""
        await anyio.sleep(seconds)
        raise MCPError(INVALID_PARAMS, "reject: invalid params, as asked")

    @mcp.tool()
    async def big() -> str:
        """About 2 MB of text."""
        return peer_common.big()

    return mcp


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["http", "stdio"], default="http")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args()
    mcp = build()
    if args.mode == "stdio":
        mcp.run("stdio")
    else:
        print(f"py-v2-peer: serving http on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        mcp.run("streamable-http", port=args.port)


if __name__ == "__main__":
    main()

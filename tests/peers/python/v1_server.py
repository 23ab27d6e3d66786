"""A legacy (2025-era) MCP server written with the Python SDK, mcp==1.30 FastMCP.

The SDK does the protocol; this file only declares tools, the way a user of the SDK
would. tasklift's integration tests (tests/it/peers/python.rs) put it behind tasklift.

    python v1_server.py [--mode http|stateless|json|stdio|h2] [--port N]

Modes: `http` is stateful Streamable HTTP (the SDK's default), `stateless` sets
`stateless_http=True`, `json` sets `json_response=True` (stateful, plain JSON
answers), `stdio` serves on stdin/stdout, `h2` is `http` served by Hypercorn,
which also speaks HTTP/2 over cleartext (prior knowledge). HTTP modes serve at
/mcp on 127.0.0.1.

Tools:
- `echo(text)`: the text back, at once.
- `slow(seconds)`: sleeps, reporting progress every 200 ms; counts how many calls
  started, were cancelled and completed (see `stats`), so a test can check that a
  cancelled call really stopped here.
- `stats()`: those counters (for this process), as JSON text.
- `ask(question, delay)`: after `delay` seconds, asks the client for a name with
  `ctx.elicit` and returns `hello NAME` (or the action, when not accepted).
- `sample(prompt)`: asks the client's model with `ctx.session.create_message` and
  returns `sampled: TEXT`.
- `ask_again`, `sample_again`: the same tools under other names (for per-tool rules).
- `fail()`: raises, which the SDK turns into a tool error (`isError: true`).
- `reject(seconds)`: after `seconds`, answers with a JSON-RPC error (-32602): a
  protocol error rather than a tool error.
- `big()`: about 2 MB of text: 250,000 numbered lines of 8 bytes.
"""

import argparse
import sys

import anyio
from mcp import types
from mcp.server.fastmcp import Context, FastMCP
from mcp.shared.exceptions import McpError
from pydantic import BaseModel, Field


import peer_common  # a sibling module (this script's directory is on sys.path)


class Name(BaseModel):
    name: str = Field(description="Your name")


def build(mode: str, port: int) -> FastMCP:
    mcp = FastMCP(
        "py-v1-peer",
        port=port,
        stateless_http=mode == "stateless",
        json_response=mode == "json",
        log_level="WARNING",
    )

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

    async def ask(ctx: Context, question: str = "What is your name?", delay: float = 0) -> str:
        """Ask the client for a name (elicitation)."""
        if delay:
            await anyio.sleep(delay)
        answer = await ctx.elicit(question, Name)
        if answer.action == "accept":
            return f"hello {answer.data.name}"
        return f"elicitation {answer.action}"

    async def sample(ctx: Context, prompt: str = "Say hi") -> str:
        """Ask the client's model (sampling)."""
        result = await ctx.session.create_message(
            messages=[
                types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
            ],
            max_tokens=50,
        )
        text = result.content.text if isinstance(result.content, types.TextContent) else str(result.content)
        return f"sampled: {text}"

    # Each also under a second name, so that a proxy can give each name its own rule.
    for fn in (ask, sample):
        mcp.tool()(fn)
        mcp.tool(name=f"{fn.__name__}_again", description=f"The same as {fn.__name__}.")(fn)

    @mcp.tool()
    async def fail() -> str:
        """Always raises: a tool error."""
        raise ValueError("fail: this tool always fails")

    @mcp.tool()
    async def reject(seconds: float = 0) -> str:
        """Answers with a JSON-RPC error (see the handler below)."""
        return "unreachable"

    @mcp.tool()
    async def big() -> str:
        """About 2 MB of text."""
        return peer_common.big()

    # The SDK turns every exception a tool raises into a tool result with isError,
    # so a protocol error comes from the request handler, as a lowlevel server's would.
    lowlevel = mcp._mcp_server
    call_tool = lowlevel.request_handlers[types.CallToolRequest]

    async def handler(req: types.CallToolRequest):
        if req.params.name == "reject":
            await anyio.sleep(float((req.params.arguments or {}).get("seconds", 0)))
            raise McpError(types.ErrorData(code=types.INVALID_PARAMS, message="reject: invalid params, as asked"))
        return await call_tool(req)

    lowlevel.request_handlers[types.CallToolRequest] = handler
    return mcp


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["http", "stateless", "json", "stdio", "h2"], default="http")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args()
    mcp = build(args.mode, args.port)
    if args.mode == "stdio":
        mcp.run("stdio")
    elif args.mode == "h2":
        import hypercorn.asyncio
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{args.port}"]
        config.loglevel = "WARNING"
        print(f"py-v1-peer: serving h2 on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        anyio.run(hypercorn.asyncio.serve, mcp.streamable_http_app(), config)
    else:
        print(f"py-v1-peer: serving {args.mode} on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        mcp.run("streamable-http")


if __name__ == "__main__":
    main()

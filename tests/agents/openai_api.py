"""A stand-in for the OpenAI Responses API, the one Codex CLI talks to through a
custom model provider (`wire_api = "responses"`, `base_url` pointing here), driven
by the scripted policy in model.py.

Endpoints:
- `POST /v1/responses` (`stream: true`): Server-Sent Events, `event: TYPE` +
  `data: {...}` per event: response.created, response.in_progress, then for each
  output item response.output_item.added, its deltas (response.output_text.delta
  with content_part events, response.function_call_arguments.delta/.done, or
  response.custom_tool_call_input.delta/.done), response.output_item.done, and
  finally response.completed with an id and usage. Codex 0.171 reads only
  output_item.added/.done, output_text.delta, response.created and
  response.completed (without which the turn fails with "stream closed before
  response.completed"); the rest is sent for fidelity. `stream: false` gets the
  response object as plain JSON.
- `GET /v1/models`: one model, in both the OpenAI list shape (`data`) and Codex's
  catalog shape (`models`) (Codex 0.171 with a custom provider does not ask);
- anything else: `{}` (logged).

Tools. A request's tools are in `tools` or, in newer requests, in an input item
of type `additional_tools`. Codex groups an MCP server's tools in a `namespace`
tool named `mcp__SERVER` whose functions have the MCP names (`slow`,
`tasklift_wait`); a call of one is a function_call item with `namespace` and
`name`. The request is the main conversation when it offers the `slow` tool (by
`model.logical_name` of `mcp__slow__slow`), or, in code mode (below), the `exec`
tool and the deferred namespace `mcp__slow`.

Code mode (Codex with a model whose catalog entry says `tool_mode:
code_mode_only`, i.e. its newest real models): MCP tools are no functions; the
model writes JavaScript for one custom tool, `exec`, calling
`await tools.mcp__slow__slow({...})`. With `code_mode_prefix` set the stand-in
answers with such a script that calls the tool and `text(result)`s it, and
records the exec output as that tool's result.

Tool results are the `function_call_output` / `custom_tool_call_output` items
of `input`, in order, matched by `call_id` to the calls that named the tool. The
text the model received is the item's `output`: a string as is, or, when it is a
list of content items (Codex sends one for errors and for exec), the text of its
items joined with "\n". The Responses API has no error flag on a tool output, so
`is_error` is False (the policy reads the words).

Requests offering no `slow` tool (titles, summaries, compaction) get a short
plain answer and are not recorded. Bodies may be gzip-compressed (undone by
standin.Handler, as deflate is); zstd cannot be decoded with the standard
library, so Codex's `enable_request_compression` feature must be off (it only
applies to OpenAI's own endpoints anyway).

HTTP plumbing (handler base, server, counters): standin.py.
"""

import json
import os
import time
from urllib.parse import urlsplit

import model
import standin


def offered_tools(body):
    """The functions a request offers its model, as (namespace or None, name):
    plain functions, and those inside `namespace` tools (Codex groups an MCP
    server's tools in a namespace `mcp__SERVER`; a call of one names both)."""
    out = []
    tools = list(body.get("tools") or [])
    for item in input_items(body):  # newer requests carry tools in an input item
        if item.get("type") == "additional_tools":
            tools.extend(item.get("tools") or [])
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for sub in tool.get("tools") or []:
                if isinstance(sub, dict) and sub.get("name"):
                    out.append((tool.get("name"), sub["name"]))
        elif tool.get("name"):
            out.append((None, tool["name"]))
    return out


def display_name(namespace, name):
    """One name for a (namespace, function): Codex's own spelling, `mcp__slow__slow`."""
    if not namespace:
        return name
    return namespace + name if namespace.endswith("__") else f"{namespace}__{name}"


def output_text(output):
    """The text the model received for one function_call_output's `output`."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = []
        for item in output:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif isinstance(item, str):
                texts.append(item)
            else:
                texts.append(json.dumps(item, ensure_ascii=False))
        return "\n".join(texts)
    if isinstance(output, dict):
        if isinstance(output.get("content"), (str, list)):
            return output_text(output["content"])
        return json.dumps(output, ensure_ascii=False)
    return json.dumps(output, ensure_ascii=False)


def input_items(body):
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    return [i for i in items or [] if isinstance(i, dict)]


def tool_results(body, call_tools=None):
    """(Results in conversation order, the raw outputs as sent). `call_tools` maps
    call ids this stand-in issued to the logical tool they call (for code-mode
    `exec` calls, whose name says nothing)."""
    call_tools = call_tools or {}
    names = {}
    results, raw = [], []
    for item in input_items(body):
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            names[item.get("call_id")] = display_name(item.get("namespace"), item.get("name", ""))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            name = names.get(item.get("call_id"), "")
            out = item.get("output")
            raw.append(out)
            tool = call_tools.get(item.get("call_id")) or model.logical_name(name)
            results.append(model.Result(tool, output_text(out), False))
    return results, raw


def usage(inp=10, out=5):
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


class OpenAIStandIn(standin.StandIn):
    """The HTTP server; `start()` runs it in a thread, `url` is its base URL
    (ending in /v1)."""

    label = "openai_api"

    def __init__(self, recorder, log=print, model_name="stand-in", dump_dir=None, code_mode_prefix=None):
        super().__init__(recorder, log)
        # Code mode (Codex with a model whose metadata says `tool_mode:
        # code_mode_only`): MCP tools are not functions but `tools.PREFIX<tool>`
        # inside the JavaScript of one custom tool, `exec`. With a prefix (Codex:
        # "mcp__slow__") the stand-in calls them that way when `slow` is not offered
        # as a function.
        self.code_mode_prefix = code_mode_prefix
        self.call_tools = {}  # call id -> logical tool, for the calls this stand-in made
        self.dump_dir = dump_dir  # if set, every request body is written there
        self.model_name = model_name
        self.seq = 0
        self.calls = 0  # function calls answered
        self.raw_outputs = []  # the function_call_output `output`s of the longest main request

    # -- the policy --
    def answer(self, body):
        """(kind, output items) for one /v1/responses request."""
        offered = offered_tools(body)
        names = [display_name(ns, n) for ns, n in offered]
        exposed = {}
        for ns, n in offered:
            exposed.setdefault(model.logical_name(display_name(ns, n)), (ns, n))
        code_mode = (
            "slow" not in exposed and self.code_mode_prefix is not None
            and any(n == "exec" for _, n in offered)
            and self.code_mode_prefix.rstrip("_") in json.dumps(body.get("input"))
        )
        if "slow" not in exposed and not code_mode:
            return "side", [self.message_item("OK.")]
        with self.lock:
            call_tools = dict(self.call_tools)
        results, raw = tool_results(body, call_tools)
        with self.lock:
            if len(raw) >= len(self.raw_outputs):
                self.raw_outputs = raw
        extra = {"tools": [n for n in names if model.logical_name(n) != n]}
        if code_mode:
            extra = {"codeMode": True, "tools": [n for n in names]}
        self.recorder.saw(results, extra)
        action = model.next_action(results)
        if action[0] == "final":
            return "main", [self.message_item(action[1])]
        _, tool, args = action
        with self.lock:
            self.calls += 1
            n = self.calls
            self.call_tools[f"call_standin_{n}"] = tool
        if code_mode:
            # What a model writes to call one MCP tool in code mode and show its result.
            source = f"const r = await tools.{self.code_mode_prefix}{tool}({json.dumps(args)});\ntext(r);\n"
            return "main", [{
                "type": "custom_tool_call",
                "id": f"ctc_standin_{n}",
                "call_id": f"call_standin_{n}",
                "name": "exec",
                "input": source,
                "status": "completed",
            }]
        found = exposed.get(tool)
        if found is None:
            self.log(f"openai_api: the policy wants {tool!r} but the request offers {names}")
            return "main", [self.message_item(f"(the tool {tool} is not offered) {model.FINAL_TEXT}")]
        # A deterministic call id: the n-th call of this run.
        item = {
            "type": "function_call",
            "id": f"fc_standin_{n}",
            "call_id": f"call_standin_{n}",
            "name": found[1],
            "arguments": json.dumps(args),
            "status": "completed",
        }
        if found[0]:
            item["namespace"] = found[0]
        return "main", [item]

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def message_item(self, text):
        return {
            "type": "message",
            "id": f"msg_standin_{self.next_seq()}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def response_obj(self, body, status, output):
        return {
            "id": f"resp_standin_{self.next_seq()}",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": body.get("model") or self.model_name,
            "output": output,
            "usage": usage() if status == "completed" else None,
        }

    def events(self, body, output):
        """The SSE events of one streamed response, as (type, data) pairs."""
        resp = self.response_obj(body, "in_progress", [])
        seq = iter(range(10**6))
        ev = [("response.created", {"type": "response.created", "sequence_number": next(seq), "response": resp}),
              ("response.in_progress", {"type": "response.in_progress", "sequence_number": next(seq), "response": resp})]
        for idx, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                ev.append(("response.output_item.added", {
                    "type": "response.output_item.added", "sequence_number": next(seq), "output_index": idx,
                    "item": dict(item, status="in_progress", content=[])}))
                part = {"type": "output_text", "text": "", "annotations": []}
                common = {"item_id": item["id"], "output_index": idx, "content_index": 0}
                ev.append(("response.content_part.added", {
                    "type": "response.content_part.added", "sequence_number": next(seq), **common, "part": part}))
                ev.append(("response.output_text.delta", {
                    "type": "response.output_text.delta", "sequence_number": next(seq), **common, "delta": text}))
                ev.append(("response.output_text.done", {
                    "type": "response.output_text.done", "sequence_number": next(seq), **common, "text": text}))
                ev.append(("response.content_part.done", {
                    "type": "response.content_part.done", "sequence_number": next(seq), **common,
                    "part": dict(part, text=text)}))
            elif item["type"] == "custom_tool_call":
                ev.append(("response.output_item.added", {
                    "type": "response.output_item.added", "sequence_number": next(seq), "output_index": idx,
                    "item": dict(item, status="in_progress", input="")}))
                common = {"item_id": item["id"], "output_index": idx}
                ev.append(("response.custom_tool_call_input.delta", {
                    "type": "response.custom_tool_call_input.delta", "sequence_number": next(seq), **common,
                    "delta": item["input"]}))
                ev.append(("response.custom_tool_call_input.done", {
                    "type": "response.custom_tool_call_input.done", "sequence_number": next(seq), **common,
                    "input": item["input"]}))
            else:  # function_call
                ev.append(("response.output_item.added", {
                    "type": "response.output_item.added", "sequence_number": next(seq), "output_index": idx,
                    "item": dict(item, status="in_progress", arguments="")}))
                common = {"item_id": item["id"], "output_index": idx}
                ev.append(("response.function_call_arguments.delta", {
                    "type": "response.function_call_arguments.delta", "sequence_number": next(seq), **common,
                    "delta": item["arguments"]}))
                ev.append(("response.function_call_arguments.done", {
                    "type": "response.function_call_arguments.done", "sequence_number": next(seq), **common,
                    "arguments": item["arguments"]}))
            ev.append(("response.output_item.done", {
                "type": "response.output_item.done", "sequence_number": next(seq), "output_index": idx, "item": item}))
        done = dict(resp, status="completed", output=output, usage=usage())
        ev.append(("response.completed", {"type": "response.completed", "sequence_number": next(seq), "response": done}))
        return ev

    # -- HTTP --
    def start(self):
        stand_in = self

        class Handler(standin.Handler):
            def do_GET(self):
                path = urlsplit(self.path).path.rstrip("/")
                if path.endswith("/models"):
                    stand_in.note("GET", self.path, "models")
                    return self.send_json(stand_in.models())
                stand_in.note("GET", self.path, "unknown")
                return self.send_json({})

            def do_POST(self):
                path = urlsplit(self.path).path.rstrip("/")
                body = self.read_json()
                stand_in.dump(self.command, self.path, self.headers, body)
                if not path.endswith("/responses"):
                    stand_in.note("POST", self.path, "unknown")
                    return self.send_json({})
                kind, output = stand_in.answer(body)
                stand_in.note("POST", self.path, kind)
                if body.get("stream") is False:
                    return self.send_json(stand_in.response_obj(body, "completed", output))
                data = b"".join(standin.sse_frame(payload, name) for name, payload in stand_in.events(body, output))
                self.send(200, data, "text/event-stream", [("cache-control", "no-cache")])

            def do_DELETE(self):
                stand_in.note("DELETE", self.path, "unknown")
                return self.send_json({})

        self.serve(Handler)
        return self

    @property
    def url(self):
        return self.server.url + "/v1"

    def dump(self, method, path, headers, body):
        if not self.dump_dir:
            return
        with self.lock:
            self.dumped = getattr(self, "dumped", 0) + 1
            n = self.dumped
        os.makedirs(self.dump_dir, exist_ok=True)
        with open(os.path.join(self.dump_dir, f"{n:03d}.json"), "w") as f:
            json.dump({"method": method, "path": path, "headers": dict(headers), "body": body}, f, indent=1)

    def models(self):
        return {
            "object": "list",
            "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "stand-in"}],
            "models": [],
        }

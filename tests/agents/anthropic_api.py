"""A stand-in for the Anthropic Messages API (`POST /v1/messages`), driven by
model.py's policy, for Claude Code.

Each request that carries the main conversation (its `tools` list holds the
`slow` MCP tool) is read back into the list of tool results the client has handed
its model, in conversation order:

- `tool_result` blocks in user turns: the text blocks of their `content` (or the
  string), joined with "\\n", with their `is_error` flag, under the logical name
  of the `tool_use` they answer;
- task notifications: Claude Code's interactive mode, when an MCP call became a
  task, answers the tool_use at once ("... moved to the background as task ID
  ...") and later hands its model the task's outcome as a text block in a user
  turn (`<task-notification>` with `<task-id>`, `<status>`, `<result>`, inside a
  `<system-reminder>`); that whole text block is recorded as a result of `slow`.
  `pending_background()` counts the tasks moved to the background whose
  notification has not arrived yet.

The policy's answer goes back as a `tool_use` block of the exposed name (looked up
in the request's tool list) or as the final text, streamed as Server-Sent Events
when the request says `stream: true` (message_start, content_block_start/delta/
stop, message_delta, message_stop), as one JSON message otherwise.

Side requests (no `slow` tool: titles, quota checks, summaries) get a short plain
answer and are not recorded. `/v1/messages/count_tokens` gets a small count; any
other path gets `{}` and is logged.

Every request body is appended to `requests.jsonl` in the directory given, so a
run can be read afterwards.

HTTP plumbing (handler base, server, counters): standin.py.
"""

import json
import re
import threading
import time

import model
import standin

SIDE_ANSWER = "OK."

# How Claude Code (interactive) tells its model an MCP call became a task it moved
# to the background, and how it later hands over the outcome: a user-turn text
# block holding `<task-notification><task-id>ID</task-id><status>...</status>
# <summary>...</summary><result>...</result></task-notification>` (wrapped in a
# `<system-reminder>`).
BACKGROUNDED = re.compile(r"moved to the background as task (\w+)")
NOTIFICATION = re.compile(r"<task-notification>")
NOTIFIED = re.compile(r"<task-id>\s*([^<\s]+)\s*</task-id>")


def block_text(content):
    """The text a tool_result's content shows the model: the string, or its text
    blocks joined with "\\n" (other blocks are named in brackets)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for b in content:
        if isinstance(b, dict):
            if b.get("type") == "text":
                parts.append(b.get("text", ""))
            else:
                parts.append(f"[{b.get('type')}]")
        else:
            parts.append(str(b))
    return "\n".join(parts)


def extract(messages):
    """The tool results in `messages` (Anthropic format), as model.Result, in
    order: `tool_result` blocks, and task notifications (as results of `slow`)."""
    names = {}
    results = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            continue
        for b in content:
            if not isinstance(b, dict):
                continue
            t = b.get("type")
            if m.get("role") == "assistant" and t == "tool_use":
                names[b.get("id")] = b.get("name", "")
            elif m.get("role") == "user" and t == "tool_result":
                name = names.get(b.get("tool_use_id"), "")
                results.append(
                    model.Result(model.logical_name(name), block_text(b.get("content")), bool(b.get("is_error")))
                )
            elif m.get("role") == "user" and t == "text" and NOTIFICATION.search(b.get("text", "")):
                results.append(model.Result("slow", b["text"], False))
    return results


def tool_names(body):
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def is_main(body):
    return any(model.logical_name(n) == "slow" for n in tool_names(body))


class AnthropicStandIn(standin.StandIn):
    """The stand-in server: `start()` returns its base URL; `stop()` ends it."""

    label = "anthropic stand-in"

    def __init__(self, recorder, log, record_dir):
        super().__init__(recorder, log)
        self.record = open(f"{record_dir}/requests.jsonl", "a")
        self.answers = 0
        self.backgrounded = set()  # ids of tasks Claude Code moved to the background
        self.notified = set()  # ids of those whose outcome the model was handed
        self.final_sent = threading.Event()

    # -- the policy -------------------------------------------------------

    def answer(self, body):
        """The reply blocks and stop reason for one /v1/messages body."""
        if not is_main(body):
            with self.lock:
                self.side_requests += 1
            return [{"type": "text", "text": SIDE_ANSWER}], "end_turn"
        results = extract(body.get("messages") or [])
        with self.lock:
            self.main_requests += 1
            for r in results:
                if NOTIFICATION.search(r.text):
                    self.notified.update(NOTIFIED.findall(r.text))
                else:
                    self.backgrounded.update(BACKGROUNDED.findall(r.text))
        self.recorder.saw(results)
        action = model.next_action(results)
        if action[0] == "final":
            self.final_sent.set()
            return [{"type": "text", "text": action[1]}], "end_turn"
        _, tool, args = action
        exposed = next((n for n in tool_names(body) if model.logical_name(n) == tool), None)
        if exposed is None:
            exposed = f"mcp__slow__{tool}"
            self.log(f"anthropic stand-in: no tool for {tool} in {tool_names(body)}; calling {exposed}")
        tid = f"toolu_standin_{len(results) + 1:04d}"
        return [{"type": "tool_use", "id": tid, "name": exposed, "input": args}], "tool_use"

    # -- HTTP -------------------------------------------------------------

    def start(self):
        """Start the server; returns its base URL."""
        stand_in = self

        class Handler(standin.Handler):
            common_headers = (("request-id", "req_standin"),)

            def do_GET(self):
                stand_in.log(f"anthropic stand-in: GET {self.path}")
                self.send_json({})

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self):
                body = self.read_json()
                path = self.path.split("?")[0]
                stand_in._keep(path, body)
                if path.endswith("/v1/messages"):
                    stand_in._messages(self, body)
                elif path.endswith("/v1/messages/count_tokens"):
                    self.send_json({"input_tokens": 100})
                else:
                    stand_in.log(f"anthropic stand-in: POST {self.path}")
                    self.send_json({})

        return self.serve(Handler)

    def pending_background(self):
        """How many MCP tasks Claude Code moved to the background have not had
        their outcome handed to the model yet (in any request so far)."""
        with self.lock:
            return len(self.backgrounded - self.notified)

    def stop(self):
        super().stop()
        self.record.close()

    def _keep(self, path, body):
        with self.lock:
            self.record.write(json.dumps({"t": round(time.time(), 3), "path": path, "body": body}) + "\n")
            self.record.flush()

    def _messages(self, h, body):
        try:
            blocks, stop = self.answer(body)
        except Exception as e:  # a bug here must not hang the client
            self.log(f"anthropic stand-in: error {e!r}")
            blocks, stop = [{"type": "text", "text": SIDE_ANSWER}], "end_turn"
        mdl = body.get("model") or "claude-standin"
        # Each answer its own id: Claude Code merges the blocks of answers that
        # share one into a single assistant message.
        with self.lock:
            self.answers += 1
            mid = f"msg_standin_{self.answers:04d}"
        usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not body.get("stream"):
            h.send_json({
                "id": mid, "type": "message", "role": "assistant", "model": mdl, "content": blocks,
                "stop_reason": stop, "stop_sequence": None, "usage": usage,
            })
            return
        h.start_events()
        ev = h.send_event

        ev("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": mdl, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": dict(usage, output_tokens=1)}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                ev("content_block_start", {"type": "content_block_start", "index": i,
                                           "content_block": {"type": "text", "text": ""}})
                ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                           "delta": {"type": "text_delta", "text": b["text"]}})
            else:
                ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
            ev("content_block_stop", {"type": "content_block_stop", "index": i})
        ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                             "usage": {"output_tokens": 10}})
        ev("message_stop", {"type": "message_stop"})
        h.wfile.flush()

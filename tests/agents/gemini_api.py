"""A stand-in for the Gemini API (generativelanguage v1beta), the one Gemini CLI
talks to when GOOGLE_GEMINI_BASE_URL points here, driven by the scripted policy in
model.py.

Endpoints (the @google/genai SDK's paths):
- `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`: Server-Sent Events,
  one `data: {GenerateContentResponse}` event per chunk;
- `POST /v1beta/models/{model}:generateContent`: one GenerateContentResponse;
- `POST /v1beta/models/{model}:countTokens`: a rough count;
- `GET /v1beta/models[/{model}]`: a harmless model description;
- anything else: `{}` (logged).

A request is the main conversation when it declares tools (`tools[].
functionDeclarations`) that include the `slow` tool. Its tool results are the
`functionResponse` parts of its `contents`, in order; the text the model received
for each is its `response` object. Gemini CLI sends `{"output": TEXT}` for a
result (TEXT: the MCP text blocks, each wrapped in `<untrusted_context>` lines,
joined with "\n") and `{"error": TEXT}` for a failure: the text recorded is TEXT
exactly, `is_error` true for `error`; any other shape is recorded as the object
dumped as JSON. The exact parts are kept too, in the recorder's
`functionResponses`, and any text the CLI itself put into the conversation (its
loop-detection warning) in `notices`.

Requests without the `slow` tool (the CLI's own side checks: routing classifier,
next-speaker or loop checks, summaries) get a short plain answer (JSON when the
request asks for JSON) and are not recorded.

HTTP plumbing (handler base, server, counters): standin.py.
"""

import json
import re
from urllib.parse import urlsplit

import model
import standin

PATH = re.compile(r"^/(?P<ver>v1(?:alpha|beta)?\d*)/models/(?P<model>[^:/]+):(?P<verb>[A-Za-z]+)$")


def function_declarations(body):
    out = []
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or tool.get("function_declarations") or []:
            if decl.get("name"):
                out.append(decl["name"])
    return out


def response_text(response):
    """The text the model was given for one functionResponse's `response`."""
    if isinstance(response, str):
        return response, False
    if isinstance(response, dict):
        if set(response) == {"output"} and isinstance(response["output"], str):
            return response["output"], False
        if set(response) == {"error"} and isinstance(response["error"], str):
            return response["error"], True
        return json.dumps(response, ensure_ascii=False), "error" in response
    return json.dumps(response, ensure_ascii=False), False


def function_responses(body):
    """The functionResponse parts of the conversation, in order, as sent."""
    out = []
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            fr = part.get("functionResponse") or part.get("function_response")
            if fr:
                out.append(fr)
    return out


def notices(body):
    """Text the client put into the conversation after the user's prompt (its own
    messages to the model, such as a loop-detection warning)."""
    out = []
    for content in (body.get("contents") or [])[1:]:
        for part in content.get("parts") or []:
            if isinstance(part.get("text"), str) and not part.get("thought"):
                out.append({"role": content.get("role"), "text": part["text"]})
    return out


def tool_results(body):
    """The Results in the conversation, in order (functionResponse parts)."""
    results = []
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            fr = part.get("functionResponse") or part.get("function_response")
            if not fr:
                continue
            text, is_error = response_text(fr.get("response"))
            # Gemini 3 style multimodal function responses carry extra parts.
            extra = [p.get("text") for p in fr.get("parts") or [] if isinstance(p, dict) and p.get("text")]
            if extra:
                text = "\n".join([text] + extra) if text else "\n".join(extra)
            results.append(model.Result(model.logical_name(fr.get("name", "")), text, is_error))
    return results


def usage(prompt=10, out=5):
    return {"promptTokenCount": prompt, "candidatesTokenCount": out, "totalTokenCount": prompt + out}


class GeminiStandIn(standin.StandIn):
    """The HTTP server; `start()` runs it in a thread, `url` is its base URL."""

    label = "gemini_api"

    def __init__(self, recorder, log=print, dump_path=None):
        super().__init__(recorder, log)
        self.dump_path = dump_path  # where the latest main request is kept, as JSON
        self.calls = 0  # function calls answered

    # -- the policy --
    def answer(self, body, model_name="?"):
        """(kind, candidate content parts) for one generate request."""
        names = function_declarations(body)
        exposed = {model.logical_name(n): n for n in names}
        if "slow" not in exposed:
            return "side", [{"text": self.side_text(body)}]
        results = tool_results(body)
        self.recorder.saw(results, {
            "functionDeclarations": names,
            "functionResponses": function_responses(body),
            "notices": notices(body),
        })
        if self.dump_path:
            with self.lock:
                with open(self.dump_path, "w") as f:
                    json.dump(body, f, indent=1)
        action = model.next_action(results)
        self.log(f"gemini_api: {model_name}: {len(results)} tool results -> {json.dumps(action)}")
        if action[0] == "final":
            return "main", [{"text": action[1]}]
        _, tool, args = action
        name = exposed.get(tool)
        if name is None:
            self.log(f"gemini_api: the policy wants {tool!r} but the request declares {names}")
            return "main", [{"text": f"(the tool {tool} is not offered) {model.FINAL_TEXT}"}]
        with self.lock:
            self.calls += 1
        return "main", [{"functionCall": {"name": name, "args": args}}]

    def side_text(self, body):
        gc = body.get("generationConfig") or body.get("config") or {}
        if gc.get("responseMimeType") == "application/json" or gc.get("responseJsonSchema") or gc.get("responseSchema"):
            schema = gc.get("responseJsonSchema") or gc.get("responseSchema") or {}
            return json.dumps(sample_for(schema))
        return "OK."

    # -- HTTP --
    def start(self):
        stand_in = self

        class Handler(standin.Handler):
            json_type = "application/json; charset=UTF-8"

            def do_GET(self):
                path = urlsplit(self.path).path
                stand_in.note("GET", self.path, "other")
                if path.rstrip("/").endswith("/models"):
                    return self.send_json({"models": [stand_in.model_info("gemini-2.5-pro")]})
                m = re.match(r"^/v1\w*/models/([^:/]+)$", path)
                if m:
                    return self.send_json(stand_in.model_info(m.group(1)))
                return self.send_json({})

            def do_POST(self):
                url = urlsplit(self.path)
                body = self.read_json()
                m = PATH.match(url.path)
                if not m:
                    stand_in.note("POST", self.path, "unknown")
                    return self.send_json({})
                verb = m.group("verb")
                if verb == "countTokens":
                    stand_in.note("POST", self.path, "count")
                    n = len(json.dumps(body)) // 4
                    return self.send_json({"totalTokens": n})
                if verb not in ("generateContent", "streamGenerateContent"):
                    stand_in.note("POST", self.path, "unknown")
                    return self.send_json({})
                kind, parts = stand_in.answer(body, m.group("model"))
                stand_in.note("POST", self.path, kind)
                resp = {
                    "candidates": [
                        {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
                    ],
                    "usageMetadata": usage(),
                    "modelVersion": m.group("model"),
                    "responseId": "standin",
                }
                if verb == "generateContent":
                    return self.send_json(resp)
                # SSE: the parts in one `data:` frame (lines ended by CRLF); no
                # empty closing chunk is needed: finishReason and usage travel with it.
                self.send(200, standin.sse_frame(resp, eol="\r\n"), "text/event-stream")

        self.serve(Handler)
        return self

    def model_info(self, name):
        return {
            "name": f"models/{name}",
            "displayName": name,
            "inputTokenLimit": 1048576,
            "outputTokenLimit": 65536,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }


def sample_for(schema):
    """A minimal value that fits a JSON schema (for the CLI's JSON side checks)."""
    t = schema.get("type")
    if isinstance(t, str):
        t = t.lower()
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if t == "object" or "properties" in schema:
        return {k: sample_for(v) for k, v in (schema.get("properties") or {}).items()}
    if t == "array":
        return []
    if t in ("integer", "number"):
        return 0
    if t == "boolean":
        return False
    return "ok"

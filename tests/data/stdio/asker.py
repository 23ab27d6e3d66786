#!/usr/bin/env python3
"""A legacy (2025-11-25) stdio MCP server, the way SDK servers behave over stdio: a
tool's elicitation/create carries nothing that links it to the call that caused it.

Tools: `ask_later` (waits `delay` seconds, asks one question, returns the answer),
`slow` (waits `seconds`, returns "slow done"), `count` (`n` progress notifications
under the call's own progress token, 100 ms apart, each naming `label`), `tagged`
(answers at once, then asks a question tagged with `related-task` for a task it
never created, as a server following up on its own task would). Each request runs in a thread, so
calls overlap like they do in a real server."""
import json
import sys
import threading
import time

lock = threading.Lock()
waiting = {}  # request id -> (event, [response])
next_id = [0]


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def ask(params):
    with lock:
        next_id[0] += 1
        rid = f"q{next_id[0]}"
        ev = threading.Event()
        waiting[rid] = (ev, [])
    send({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create", "params": params})
    ev.wait(60)
    return waiting.pop(rid)[1][0] if waiting[rid][1] else {"error": {"message": "no answer"}}


def text(t, is_error=False):
    return {"content": [{"type": "text", "text": t}], "isError": is_error}


def call(rid, params):
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "ask_later":
        time.sleep(float(args.get("delay", 1.0)))
        who = args.get("who", "someone")
        answer = ask({"mode": "form", "message": f"secret question for {who}",
                      "requestedSchema": {"type": "object",
                                          "properties": {"word": {"type": "string"}}}})
        if "error" in answer:
            result = text(f"{who} got no answer: {answer['error'].get('message')}", True)
        else:
            word = answer.get("result", {}).get("content", {}).get("word")
            result = text(f"{who} got: {word}")
    elif name == "count":
        token = (params.get("_meta") or {}).get("progressToken")
        n, label = int(args.get("n", 5)), args.get("label", "")
        for i in range(1, n + 1):
            time.sleep(0.1)
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                    "progressToken": token, "progress": i, "total": n, "message": f"{label} {i}"}})
        result = text(f"{label} counted {n}")
    elif name == "tagged":
        def later():
            time.sleep(0.3)
            ask({"mode": "form", "message": "secret follow-up of task t-9",
                 "requestedSchema": {"type": "object", "properties": {}},
                 "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t-9"}}})
        threading.Thread(target=later, daemon=True).start()
        result = text("tagged done")
    elif name == "slow":
        time.sleep(float(args.get("seconds", 2.0)))
        result = text("slow done")
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


TOOLS = [{"name": "ask_later", "inputSchema": {"type": "object"}},
         {"name": "slow", "inputSchema": {"type": "object"}},
         {"name": "count", "inputSchema": {"type": "object"}},
         {"name": "tagged", "inputSchema": {"type": "object"}}]

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, rid = msg.get("method"), msg.get("id")
    if method is None and rid in waiting:
        waiting[rid][1].append(msg)
        waiting[rid][0].set()
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "asker", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        threading.Thread(target=call, args=(rid, msg.get("params") or {}), daemon=True).start()
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})

"""The scripted "model" every agent client is pointed at: one policy, whatever the
vendor's API looks like (each stand-in in this directory translates its API's
requests into a list of tool results and the policy's choice back into a reply).

The policy is a pure function of the conversation the client sends: the tool
results it has handed its model so far, in order. That keeps it right when a
client sends side requests (titles, summaries) or repeats a turn.

What the model does, call by call (`CALLS`, a fast call under tasklift's 2 s
threshold, then a slow one past it):

- call the tool `slow` with the call's arguments;
- a result that says the job is still running and names `tasklift_wait` and a
  taskId (in its text or its structuredContent, whichever the client shows):
  call `tasklift_wait` with the arguments the text gives (`with {...}`), or with
  `{"taskId": ...}` when it gives none, as a model that follows the text would;
- a result that is an error (a client's timeout, a cancellation): call `slow`
  again with the same arguments, up to `MAX_RETRIES` times, as a model retrying
  a failed tool would;
- anything else ends that call; after the last, answer `FINAL_TEXT` and stop.
"""

import json
import os
import re
import threading

# The calls, in order: (arguments, what the upstream answers when it finishes).
CALLS = [{"seconds": 0.5}, {"seconds": 12}]
MAX_RETRIES = 2
# The most tool calls one conversation makes (a runaway loop ends here).
MAX_TOOL_CALLS = 40
FINAL_TEXT = "All done."
# What the user types: the policy, not the prompt, decides the calls.
PROMPT = "Call the slow tool as instructed."

TASK_ID = re.compile(r"taskId\W{0,4}([A-Za-z0-9][A-Za-z0-9_.:-]{7,})")
WAIT_ARGS = re.compile(r"tasklift_wait`? with (\{[^{}]*\})")
ERROR_WORDS = re.compile(
    r"timed out|timeout|time out|cancell?ed|abort|error|failed|disconnect", re.I
)


class Result:
    """One tool result as the client handed it to its model."""

    def __init__(self, tool, text, is_error=False):
        self.tool = tool  # the logical name: "slow", "tasklift_wait", "tasklift_cancel"
        self.text = text  # everything the model was shown, as one string
        self.is_error = is_error  # the client marked it an error

    def as_json(self):
        return {"tool": self.tool, "text": self.text, "isError": self.is_error}


def logical_name(exposed):
    """The logical tool name behind a client's exposed name (`mcp__slow__slow`,
    `slow__tasklift_wait`, `tasklift_wait`, ...)."""
    for name in ("tasklift_wait", "tasklift_cancel", "slow"):
        if exposed == name or exposed.endswith("_" + name) or exposed.endswith("." + name):
            return name
    return exposed


def still_running(text):
    """The arguments for `tasklift_wait` a still-running answer gives, if the text
    is one: those it spells out, else its taskId."""
    if "tasklift_wait" not in text:
        return None
    # Shown as JSON (structuredContent), the sentence's quotes are escaped.
    m = WAIT_ARGS.search(text.replace('\\"', '"'))
    if m:
        try:
            args = json.loads(m.group(1))
            if isinstance(args, dict) and args.get("taskId"):
                return args
        except ValueError:
            pass
    m = TASK_ID.search(text)
    return {"taskId": m.group(1)} if m else None


def is_error(r):
    return r.is_error or bool(ERROR_WORDS.search(r.text) and "slept" not in r.text)


def next_action(results):
    """What the model does after seeing `results` (a list of Result): either
    ("call", logical_tool, arguments) or ("final", text)."""
    i, retries = 0, 0
    action = ("call", "slow", CALLS[0])
    if len(results) >= MAX_TOOL_CALLS:
        return ("final", FINAL_TEXT)
    for r in results:
        wait = still_running(r.text)
        if wait:
            action = ("call", "tasklift_wait", wait)
            continue
        if is_error(r) and retries < MAX_RETRIES:
            retries += 1
            action = ("call", "slow", CALLS[i])
            continue
        i, retries = i + 1, 0
        action = ("call", "slow", CALLS[i]) if i < len(CALLS) else ("final", FINAL_TEXT)
    return action


class Recorder:
    """Keeps the longest conversation the model was shown (its tool results) in
    `path` as JSON: the bed reads it when the client has finished."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.best = -1
        self.requests = 0

    def saw(self, results, extra=None):
        with self.lock:
            self.requests += 1
            if len(results) < self.best:
                return
            self.best = len(results)
            doc = {"toolResults": [r.as_json() for r in results], "modelRequests": self.requests}
            if extra:
                doc.update(extra)
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, self.path)

// A task-aware 2026-07-28 client written with the TypeScript SDK v2
// (@modelcontextprotocol/client) and the Tasks extension package
// (@modelcontextprotocol/ext-tasks), driving ts-v1-server.mjs's tools through
// tasklift. Both packages come from tests/clients/node_modules (pinned in
// tests/clients/package.json, installed by scripts/install-test-tools), resolved
// from this file's location, so this directory needs no v2 dependency of its own.
//
// Usage: node ts-v2-tasks-client.mjs http://127.0.0.1:PORT/mcp
//
// tasklift must front ts-v1-server.mjs with the rules tests/it/peers/clients.rs
// sets: `ask` in mode "always" (a task at once, so its elicitation turns the task
// input_required), `echo` and `stats` in mode "never", `slow` on a threshold under
// a second. Checks, in order:
//   - connect: server/discover pinned to 2026-07-28, the tasks extension advertised
//   - tools/list through the SDK client lists the server's tools
//   - echo answers inline (no task)
//   - slow (3 s) becomes a task followed to "slept 3s", its statusMessage showing
//     the server's progress ("N/15 – step N")
//   - ask (after the handle) goes input_required; the question is answered through
//     the extension (tasks/update) and the result carries the answer
//   - a slow task cancelled with tasks/cancel ends cancelled, and the server's
//     `stats` show the upstream call cancelled, not completed
// Prints each check as `ok - ...`; on the first failed expectation prints
// `FAIL: ...` (and the recent wire exchange) and exits 1.

import { readFileSync } from "node:fs";
import { check, fail, ok, text } from "../../clients/checks.mjs";

const OVERALL_TIMEOUT_MS = 90_000;
const CLIENTS = new URL("../../clients/", import.meta.url);

/** The ESM entry of `pkg`'s `subpath` export under tests/clients/node_modules. */
function entry(pkg, subpath) {
  const dir = new URL(`node_modules/${pkg}/`, CLIENTS);
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(new URL("package.json", dir), "utf8"));
  } catch (e) {
    console.error(`FAIL: ${pkg} is not installed under tests/clients (run scripts/install-test-tools): ${e.message}`);
    process.exit(1);
  }
  let target = manifest.exports?.[subpath];
  while (target && typeof target === "object") target = target.import ?? target.default;
  if (typeof target !== "string") {
    console.error(`FAIL: ${pkg} has no ESM export ${subpath}`);
    process.exit(1);
  }
  return { href: new URL(target, dir).href, version: manifest.version };
}

const clientPkg = entry("@modelcontextprotocol/client", ".");
const tasksPkg = entry("@modelcontextprotocol/ext-tasks", "./client");
// The connection and the raw dispatch ext-tasks needs, shared with
// tests/clients/tasks-client.mjs; it imports @modelcontextprotocol/client from
// tests/clients/node_modules itself, so it is loaded once that is known installed.
const { PROTOCOL_VERSION, RequestCoordinator, connectModern } = await import(
  new URL("tasks-dispatch.mjs", CLIENTS).href
);
const { createApplicationInputHandler, createTaskSessionFromClient, resultFromTaskOutcome } = await import(
  tasksPkg.href
);

const url = process.argv[2];
if (!url) {
  console.error("usage: node ts-v2-tasks-client.mjs <MCP URL>");
  process.exit(2);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const clientInfo = { name: "tasklift-ts-v2-tasks-client", version: "0.0.0" };
  const { client, capabilities } = await connectModern(
    url,
    clientInfo,
    `@modelcontextprotocol/client ${clientPkg.version}, ext-tasks ${tasksPkg.version}`,
  );

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ["echo", "slow", "stats", "ask", "sample", "fail", "big"])
    check(names.includes(want), `tools/list lacks ${want}: ${names.join(", ")}`);
  ok(`tools/list: ${names.join(", ")}`);

  const coordinator = new RequestCoordinator(url, "ts-v2-tasks-client");
  await coordinator.start();

  // Every input request the server makes, with how ext-tasks delivered it.
  const asked = [];
  const onInputRequest = createApplicationInputHandler({
    elicitation: (request, context) => {
      asked.push({ message: request.params.message, delivery: context.delivery, taskId: context.taskId });
      return { action: "accept", content: { name: "Ada" } };
    },
    sampling: () => {
      throw new Error("this client does no sampling");
    },
    roots: () => ({ roots: [] }),
  });
  const backgroundErrors = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: `tasklift-it:${url}`,
    rawDispatch: coordinator.dispatch,
    v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo, clientCapabilities: capabilities },
    onInputRequest,
    onError: (error) => backgroundErrors.push(error),
  });
  check(session.capabilities.execution, `session capabilities: ${JSON.stringify(session.capabilities)}`);

  /** A call's text, however it is answered (inline or as a task). */
  async function callText(name, args) {
    const execution = await session.callTool(name, args);
    const { outcome } = await execution.settle();
    check(outcome.status === "completed", `${name} ended ${outcome.status}: ${outcome.error?.message ?? ""}`);
    return text(resultFromTaskOutcome(outcome));
  }

  /** The server's counters of `slow` calls. */
  async function stats() {
    const t = await callText("stats", {});
    try {
      return JSON.parse(t);
    } catch {
      fail(`stats answered ${JSON.stringify(t)}`);
    }
  }

  /** Poll the counters until `cond` holds (a hang guard, not a timing check). */
  async function statsUntil(what, cond) {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const s = await stats();
      if (cond(s)) return s;
      check(Date.now() < deadline, `timed out waiting for ${what}: ${JSON.stringify(s)}`);
      await sleep(50);
    }
  }

  try {
    // A fast tool: answered inline.
    {
      const execution = await session.callTool("echo", { text: "hi" });
      check(execution.kind === "immediate", `echo became a ${execution.kind}`);
      const { outcome } = await execution.settle();
      const got = text(resultFromTaskOutcome(outcome));
      check(got === "echo: hi", `echo answered ${JSON.stringify(got)}`);
      ok("echo answered inline: echo: hi");
    }

    // A slow tool: a task, followed to its result, the server's progress in statusMessage.
    {
      const gets = coordinator.count("tasks/get");
      const execution = await session.callTool("slow", { seconds: 3 });
      check(execution.kind === "task", `slow answered ${execution.kind}, not a task`);
      const taskId = execution.handle.taskId;
      const seen = [];
      const { outcome } = await execution.settle({
        onEvent: (event) => {
          if (event.type === "task") seen.push(event.task);
        },
      });
      check(outcome.status === "completed", `task ${taskId} ended ${outcome.status}: ${outcome.error?.message ?? ""}`);
      const got = text(resultFromTaskOutcome(outcome));
      check(got === "slept 3s", `slow's result: ${JSON.stringify(got)}`);
      const statuses = [...new Set(seen.map((t) => t.status))];
      check(statuses.includes("working"), `never saw the task working; saw ${statuses.join(", ")}`);
      const polls = coordinator.count("tasks/get") - gets;
      const progress = [...new Set(seen.map((t) => t.statusMessage).filter((m) => m))];
      // The server reports "step N" of 15 every 200 ms; tasklift shows "N/15 – step N".
      check(
        progress.some((m) => /^\d+\/15 – step \d+$/.test(m)),
        `statusMessage never showed the server's progress; saw ${JSON.stringify(progress)}`,
      );
      ok(
        `slow became task ${taskId}: ${statuses.join(" -> ")} after ${polls} tasks/get; ` +
          `result ${JSON.stringify(got)}; progress seen: ${progress.join(", ")}`,
      );
    }

    // A question after the handle: input_required, answered with tasks/update.
    {
      const updates = coordinator.count("tasks/update");
      const execution = await session.callTool("ask", { delay: 0.5 });
      check(execution.kind === "task", `ask answered ${execution.kind}, not a task`);
      const taskId = execution.handle.taskId;
      const seen = [];
      const { outcome } = await execution.settle({
        onEvent: (event) => {
          if (event.type === "task") seen.push(event.task.status);
        },
      });
      check(outcome.status === "completed", `task ${taskId} ended ${outcome.status}: ${outcome.error?.message ?? ""}`);
      const got = text(resultFromTaskOutcome(outcome));
      check(got === 'answer: accept {"name":"Ada"}', `ask's result: ${JSON.stringify(got)}`);
      const mine = asked.filter((a) => a.taskId === taskId);
      check(mine.length === 1, `expected one question for task ${taskId}, got ${JSON.stringify(asked)}`);
      check(mine[0].message === "What is your name?", `the question was ${JSON.stringify(mine[0].message)}`);
      check(mine[0].delivery === "task-update", `the answer went by ${mine[0].delivery}, not task-update`);
      check(coordinator.count("tasks/update") - updates === 1, "tasks/update was not sent exactly once");
      check(seen.includes("input_required"), `never saw input_required; saw ${seen.join(", ")}`);
      ok(
        `ask task ${taskId}: ${[...new Set(seen)].join(" -> ")}; "What is your name?" ` +
          `answered with tasks/update; result: ${got}`,
      );
    }

    // A slow task cancelled with tasks/cancel: the upstream call stops.
    {
      const before = await statsUntil("no slow call running", (s) => s.running === 0);
      const execution = await session.callTool("slow", { seconds: 30 });
      check(execution.kind === "task", `slow answered ${execution.kind}, not a task`);
      const taskId = execution.handle.taskId;
      await statsUntil("the slow call running upstream", (s) => s.running === 1);
      const cancels = coordinator.count("tasks/cancel");
      await execution.cancel();
      const { outcome } = await execution.settle();
      check(outcome.status === "cancelled", `after tasks/cancel the execution ended ${outcome.status}`);
      check(coordinator.count("tasks/cancel") - cancels === 1, "tasks/cancel was not sent exactly once");
      const view = await session.task(taskId).snapshot();
      check(view.status === "cancelled", `tasks/get says task ${taskId} is ${view.status}`);
      const after = await statsUntil(
        "the upstream call stopped",
        (s) => s.running === 0 && s.cancelled > before.cancelled,
      );
      check(after.cancelled === before.cancelled + 1, `stats before ${JSON.stringify(before)}, after ${JSON.stringify(after)}`);
      check(
        after.completed === before.completed,
        `the server finished the cancelled call: before ${JSON.stringify(before)}, after ${JSON.stringify(after)}`,
      );
      ok(`slow task ${taskId} cancelled with tasks/cancel; stats: ${JSON.stringify(after)} (the upstream call cancelled)`);
    }

    check(
      backgroundErrors.length === 0,
      `ext-tasks reported errors: ${backgroundErrors.map((e) => e.message).join("; ")}`,
    );
  } finally {
    await session.close();
    await coordinator.close();
    await client.close();
  }
  console.log("ts-v2-tasks-client: all checks passed");
}

const timer = setTimeout(() => fail(`not done after ${OVERALL_TIMEOUT_MS} ms`), OVERALL_TIMEOUT_MS);
main().then(
  () => {
    clearTimeout(timer);
    process.exit(0);
  },
  (error) => fail(error?.stack ?? String(error)),
);

// A task-aware 2026-07-28 client built from the official TypeScript SDK
// (@modelcontextprotocol/client v2) and the Tasks extension package
// (@modelcontextprotocol/ext-tasks), driving tasklift.
//
// Usage: node tasks-client.mjs http://127.0.0.1:PORT/mcp
//
// tasklift must front the bundled fixture (`tasklift demo-server`) with the rules
// tests/it/peers/ts_clients.rs sets: `confirm_delete` in mode "always" (a task at once, so
// its elicitation turns the task input_required), `greet` in mode "never", the other
// tools on a threshold under a second. Checks, in order:
//   - connect: server/discover pinned to 2026-07-28, the tasks extension advertised
//   - a fast tool answers inline (no task)
//   - a slow tool becomes a task, polled with tasks/get from working to completed
//   - a slow task cancelled with tasks/cancel ends cancelled (seen with tasks/get)
//   - a task whose server asks for confirmation goes input_required and is answered
//     with tasks/update, then completes with the server's answer
//   - an elicitation asked before any task exists comes back as input_required
//     (MRTR) and is answered by retrying the call
// Prints each check; exits 1 with a message (and the recent wire exchange) on the
// first failed expectation.

import {
  createApplicationInputHandler,
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";
import { check, fail, ok, text } from "./checks.mjs";
import { PROTOCOL_VERSION, RequestCoordinator, connectModern } from "./tasks-dispatch.mjs";

const OVERALL_TIMEOUT_MS = 90_000;

const url = process.argv[2];
if (!url) {
  console.error("usage: node tasks-client.mjs <MCP URL>");
  process.exit(2);
}

async function main() {
  const clientInfo = { name: "tasklift-ts-tasks-client", version: "0.0.0" };
  const { client, capabilities } = await connectModern(url, clientInfo);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ["greet", "slow_compute", "generate_report", "confirm_delete", "multi_input"])
    check(names.includes(want), `tools/list lacks ${want}: ${names.join(", ")}`);
  ok(`tools/list through the SDK client: ${names.length} tools`);

  const coordinator = new RequestCoordinator(url, "tasks-client");
  await coordinator.start();

  // Every input request the server makes, with how ext-tasks delivered it.
  const asked = [];
  const onInputRequest = createApplicationInputHandler({
    elicitation: (request, context) => {
      asked.push({ message: request.params.message, delivery: context.delivery, taskId: context.taskId });
      const props = Object.keys(request.params.requestedSchema?.properties ?? {});
      const content = {};
      for (const p of props) content[p] = p === "name" ? "Ada" : true;
      return { action: "accept", content };
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

  try {
    // A fast tool: answered inline.
    {
      const execution = await session.callTool("greet", { name: "tasklift" });
      check(execution.kind === "immediate", `greet became a ${execution.kind}`);
      const { outcome } = await execution.settle();
      const got = text(resultFromTaskOutcome(outcome));
      check(got === "Hello, tasklift!", `greet answered ${JSON.stringify(got)}`);
      ok("fast tool greet answered inline: Hello, tasklift!");
    }

    // A slow tool: a task, polled with tasks/get to completed.
    {
      const gets = coordinator.count("tasks/get");
      const execution = await session.callTool("generate_report", { pages: 2 });
      check(execution.kind === "task", `generate_report answered ${execution.kind}, not a task`);
      const taskId = execution.handle.taskId;
      const seen = [];
      const { outcome } = await execution.settle({
        onEvent: (event) => {
          if (event.type === "task") seen.push(event.task);
        },
      });
      check(outcome.status === "completed", `task ${taskId} ended ${outcome.status}: ${outcome.error?.message ?? ""}`);
      const got = text(resultFromTaskOutcome(outcome));
      check(
        got === "Monthly report: 2 pages, revenue up 12% on last month.",
        `generate_report's result: ${JSON.stringify(got)}`,
      );
      const statuses = [...new Set(seen.map((t) => t.status))];
      check(statuses.includes("working"), `never saw the task working; saw ${statuses.join(", ")}`);
      const polls = coordinator.count("tasks/get") - gets;
      check(polls >= 1, "the task completed without any tasks/get");
      const progress = seen.map((t) => t.statusMessage).filter((m) => m);
      check(
        progress.some((m) => m.includes("/5")),
        `statusMessage never showed the server's progress; saw ${JSON.stringify(progress)}`,
      );
      ok(
        `slow tool generate_report became task ${taskId}: ${statuses.join(" -> ")} ` +
          `after ${polls} tasks/get (progress seen: ${[...new Set(progress)].join(", ")})`,
      );
    }

    // A slow task cancelled with tasks/cancel.
    {
      const cancels = coordinator.count("tasks/cancel");
      const execution = await session.callTool("slow_compute", { seconds: 30, label: "doomed" });
      check(execution.kind === "task", `slow_compute answered ${execution.kind}, not a task`);
      const taskId = execution.handle.taskId;
      await execution.cancel();
      const { outcome } = await execution.settle();
      check(outcome.status === "cancelled", `after tasks/cancel the execution ended ${outcome.status}`);
      check(coordinator.count("tasks/cancel") - cancels === 1, "tasks/cancel was not sent exactly once");
      // The server's view: tasks/get settles on cancelled.
      const controller = session.task(taskId);
      const deadline = Date.now() + 10_000;
      let view = await controller.snapshot();
      while (view.status !== "cancelled" && Date.now() < deadline) {
        check(view.status === "working", `cancelled task ${taskId} went ${view.status}`);
        await new Promise((r) => setTimeout(r, 50));
        view = await controller.snapshot();
      }
      check(view.status === "cancelled", `task ${taskId} still ${view.status} 10 s after tasks/cancel`);
      ok(`slow_compute task ${taskId} cancelled with tasks/cancel; tasks/get says cancelled`);
    }

    // A task that asks for input: input_required, answered with tasks/update.
    {
      const updates = coordinator.count("tasks/update");
      const execution = await session.callTool("confirm_delete", { filename: "notes.txt" });
      check(execution.kind === "task", `confirm_delete answered ${execution.kind}, not a task`);
      const taskId = execution.handle.taskId;
      const seen = [];
      const { outcome } = await execution.settle({
        onEvent: (event) => {
          if (event.type === "task") seen.push(event.task.status);
        },
      });
      check(outcome.status === "completed", `task ${taskId} ended ${outcome.status}: ${outcome.error?.message ?? ""}`);
      const got = text(resultFromTaskOutcome(outcome));
      check(got === "Deleted notes.txt.", `confirm_delete's result: ${JSON.stringify(got)}`);
      const mine = asked.filter((a) => a.taskId === taskId);
      check(mine.length === 1, `expected one question for task ${taskId}, got ${JSON.stringify(asked)}`);
      check(mine[0].message === "Delete notes.txt?", `the question was ${JSON.stringify(mine[0].message)}`);
      check(mine[0].delivery === "task-update", `the answer went by ${mine[0].delivery}, not task-update`);
      check(coordinator.count("tasks/update") - updates === 1, "tasks/update was not sent exactly once");
      check(seen.includes("input_required"), `never saw input_required; saw ${seen.join(", ")}`);
      ok(
        `confirm_delete task ${taskId}: ${[...new Set(seen)].join(" -> ")}; "Delete notes.txt?" ` +
          "answered with tasks/update; result: Deleted notes.txt.",
      );
    }

    // Input asked before any task exists: input_required (MRTR), answered by retrying.
    {
      const before = asked.length;
      const execution = await session.callTool("multi_input", {});
      const { outcome } = await execution.settle();
      check(outcome.status === "completed", `multi_input ended ${outcome.status}: ${outcome.error?.message ?? ""}`);
      const got = text(resultFromTaskOutcome(outcome));
      check(got === 'name "Ada", confirm true', `multi_input's result: ${JSON.stringify(got)}`);
      const mine = asked.slice(before);
      check(mine.length === 2, `expected two questions, got ${JSON.stringify(mine)}`);
      check(
        mine.every((a) => a.delivery === "request-retry"),
        `answers went by ${mine.map((a) => a.delivery).join(", ")}, not request-retry`,
      );
      ok(`multi_input (${execution.kind}): two questions answered by retrying the call; result: ${got}`);
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
  console.log("tasks-client: all checks passed");
}

const timer = setTimeout(() => fail(`not done after ${OVERALL_TIMEOUT_MS} ms`), OVERALL_TIMEOUT_MS);
main().then(
  () => {
    clearTimeout(timer);
    process.exit(0);
  },
  (error) => fail(error?.stack ?? String(error)),
);

// A slow call from a 2025-era client whose request timeout is shorter than the
// tool: the TypeScript SDK v1 (@modelcontextprotocol/sdk 1.29, pinned in
// package.json) with `timeout: 3000` on every callTool, against the Python v1
// server's (tests/peers/python/v1_server.py) `slow {seconds: 10}`. When the
// timeout fires the SDK rejects the call and sends notifications/cancelled.
//
// Usage: node ts-v1-slow-calls.mjs URL MODE
//
// MODE says what is behind URL and what the client must see:
// - direct: the server itself, no tasklift: the call fails with the SDK's timeout.
// - handles: tasklift with non_task_clients = "tool_handles": tasklift_wait and
//   tasklift_cancel are listed (and slow has no outputSchema); the call answers
//   before the timeout with a "still running" result; a scripted model reads only
//   the text, finds the tool to call and the taskId in it (then cross-checks them
//   with structuredContent), and calls tasklift_wait {taskId, waitSeconds: 2},
//   each answer before the timeout, until the real result arrives. The server ran
//   slow once.
// - detach: tasklift with on_disconnect = "detach": the call times out; the
//   identical call, retried with the same timeout, returns the result; the server
//   started slow once and cancelled nothing.
// - cancel: tasklift's defaults (the contrast): the call times out, and so does
//   each retry with the same timeout (each cancels the tool upstream); the last
//   retry, with a long timeout, returns the result; the server started slow more
//   than once.
//
// Prints one JSON line per check ({"check", "ok", "detail"}) and a last line
// `ts-v1-slow-calls MODE: all checks passed`, or exits 1 naming the failed checks.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

const [url, mode] = process.argv.slice(2);
if (!url || !['direct', 'handles', 'detach', 'cancel'].includes(mode)) {
  console.error('usage: node ts-v1-slow-calls.mjs <MCP URL> direct|handles|detach|cancel');
  process.exit(2);
}

const TIMEOUT_MS = 3000; // the client's request timeout
const SECONDS = 10; // how long slow runs: longer than the timeout
const RESULT = `slept ${SECONDS.toFixed(1)}s`; // what slow returns (Python formats its float)
const LIMIT_MS = 60_000; // per check: a hang guard, not a timing expectation
const MAX_ATTEMPTS = 10; // retries (detach) or polls (handles) before giving up

// What a model would look for in the text: the name of the tool to call next, and
// the job's id after the word taskId (`taskId: X`, `taskId "X"`, `"taskId": "X"`).
const TOOL_RE = /\btasklift_wait\b/;
const TASK_ID_RE = /taskId\W{0,4}([A-Za-z0-9][A-Za-z0-9._:-]*[A-Za-z0-9])/;

const text = (r) =>
  (r?.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('');

class Failed extends Error {}
function expect(cond, why) {
  if (!cond) throw new Failed(why);
}

const results = [];
async function check(name, f) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${LIMIT_MS} ms`)), LIMIT_MS);
  });
  let line;
  try {
    const detail = await Promise.race([f(), guard]);
    line = { check: name, ok: true, detail: detail ?? null };
  } catch (e) {
    line = { check: name, ok: false, detail: `${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}` };
  } finally {
    clearTimeout(timer);
  }
  results.push(line);
  console.log(JSON.stringify(line));
}

const client = new Client({ name: 'tasklift-ts-v1-slow-calls', version: '0.0.0' }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);

const stats = async () => JSON.parse(text(await client.callTool({ name: 'stats', arguments: {} })));

/** { r } (a result) or { e } (what the call threw), and the seconds it took. */
async function timedCall(name, args, timeout = TIMEOUT_MS) {
  const t0 = Date.now();
  let out;
  try {
    out = { r: await client.callTool({ name, arguments: args }, undefined, { timeout }) };
  } catch (e) {
    out = { e };
  }
  out.took = Math.round((Date.now() - t0) / 100) / 10;
  return out;
}

/** The SDK's own request timeout. */
const isTimeout = (e) => e instanceof McpError && e.code === ErrorCode.RequestTimeout;
const describe = (e) => (e instanceof McpError ? { code: e.code, message: e.message } : String(e?.message ?? e));

/** What a model reads in a "still running" answer (null if it is not one): the
 * tool to call and the taskId, from the text only. */
function stillRunning(r) {
  const t = text(r);
  const tool = TOOL_RE.exec(t);
  const task = TASK_ID_RE.exec(t);
  return tool && task ? { tool: tool[0], taskId: task[1], text: t } : null;
}

function crossCheck(r, seen) {
  const sc = r.structuredContent ?? {};
  expect(!r.isError, `a still-running answer is not an error: ${JSON.stringify(r)}`);
  expect(
    sc.taskId === seen.taskId && sc.status === 'working' && sc.pollWith === 'tasklift_wait',
    `structuredContent ${JSON.stringify(sc)} agrees with the text (taskId ${seen.taskId}): ${JSON.stringify(r)}`
  );
}

await check('init', async () => ({
  protocolVersion: transport.protocolVersion ?? null,
  server: client.getServerVersion()?.name
}));

if (mode === 'direct') {
  await check('direct: slow times out', async () => {
    const before = await stats();
    const { r, e, took } = await timedCall('slow', { seconds: SECONDS });
    expect(!r, `expected the SDK's timeout, got a result after ${took}s: ${JSON.stringify(r)}`);
    expect(isTimeout(e), `expected the SDK's timeout, got ${JSON.stringify(describe(e))}`);
    return { error: describe(e), after: took, 'stats before': before };
  });
}

if (mode === 'handles') {
  await check('handles: tools listed', async () => {
    const { tools } = await client.listTools();
    const by = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const want of ['tasklift_wait', 'tasklift_cancel', 'slow', 'stats'])
      expect(by[want], `${want} is listed: ${Object.keys(by).join(', ')}`);
    const wait = by.tasklift_wait.inputSchema;
    expect(wait.properties?.taskId, `tasklift_wait takes taskId: ${JSON.stringify(wait)}`);
    expect((wait.required ?? []).includes('taskId'), `taskId is required: ${JSON.stringify(wait)}`);
    expect(wait.properties?.waitSeconds, `tasklift_wait takes waitSeconds: ${JSON.stringify(wait)}`);
    const cancel = by.tasklift_cancel.inputSchema;
    expect(cancel.properties?.taskId, `tasklift_cancel takes taskId: ${JSON.stringify(cancel)}`);
    expect(by.slow.outputSchema === undefined, `slow's outputSchema is dropped: ${JSON.stringify(by.slow)}`);
    return Object.keys(by).sort();
  });

  await check('handles: model loop', async () => {
    const before = await stats();
    let { r, e, took } = await timedCall('slow', { seconds: SECONDS });
    expect(r, `slow failed after ${took}s: ${JSON.stringify(describe(e))}`);
    const seen = stillRunning(r);
    expect(seen, `the text names tasklift_wait and a taskId: ${JSON.stringify(r)}`);
    crossCheck(r, seen);
    const first = { after: took, text: seen.text, structuredContent: r.structuredContent };
    const polls = [];
    // The model: call the tool the text named, with the taskId it gave, until the
    // answer is no longer "still running".
    let done = false;
    for (let i = 0; i < MAX_ATTEMPTS && !done; i++) {
      ({ r, e, took } = await timedCall(seen.tool, { taskId: seen.taskId, waitSeconds: 2 }));
      expect(r, `tasklift_wait failed after ${took}s: ${JSON.stringify(describe(e))}`);
      polls.push(took);
      const again = stillRunning(r);
      if (!again) {
        done = true;
        break;
      }
      expect(again.taskId === seen.taskId, `the same taskId again: ${JSON.stringify([again, seen])}`);
      crossCheck(r, again);
    }
    expect(done, `still running after ${MAX_ATTEMPTS} tasklift_wait calls: ${JSON.stringify(r)}`);
    expect(!r.isError && text(r) === RESULT, `the final answer is slow's result: ${JSON.stringify(r)}`);
    const after = await stats();
    expect(after.started - before.started === 1, `slow started once: ${JSON.stringify([before, after])}`);
    expect(after.completed - before.completed === 1, `slow completed once: ${JSON.stringify([before, after])}`);
    return { first, 'waits took': polls, final: text(r), stats: [before, after] };
  });
}

if (mode === 'detach') {
  await check('detach: retry joins', async () => {
    const before = await stats();
    const attempts = [];
    let r;
    for (let i = 0; i < MAX_ATTEMPTS && !r; i++) {
      const out = await timedCall('slow', { seconds: SECONDS });
      if (out.r) {
        r = out.r;
        attempts.push(['result', out.took]);
      } else {
        expect(isTimeout(out.e), `attempt ${i + 1}: only the SDK's timeout, got ${JSON.stringify(describe(out.e))}`);
        attempts.push(['timeout', out.took]);
      }
    }
    expect(r, `no result in ${MAX_ATTEMPTS} attempts: ${JSON.stringify(attempts)}`);
    expect(attempts[0][0] === 'timeout', `the first call times out: ${JSON.stringify(attempts)}`);
    expect(!r.isError && text(r) === RESULT, `the retry returns slow's result: ${JSON.stringify(r)}`);
    const after = await stats();
    expect(after.started - before.started === 1, `slow started once: ${JSON.stringify([before, after])}`);
    expect(after.cancelled === before.cancelled, `nothing cancelled: ${JSON.stringify([before, after])}`);
    return { attempts, final: text(r), stats: [before, after] };
  });
}

if (mode === 'cancel') {
  await check('cancel: retry runs again', async () => {
    const before = await stats();
    const attempts = [];
    let r;
    // Three attempts with the short timeout (each runs the tool afresh), then one
    // with a timeout long enough for the tool.
    for (let i = 0; i < 4 && !r; i++) {
      const out = await timedCall('slow', { seconds: SECONDS }, i === 3 ? 15_000 : TIMEOUT_MS);
      if (out.r) {
        r = out.r;
        attempts.push(['result', out.took]);
      } else {
        expect(isTimeout(out.e), `attempt ${i + 1}: only the SDK's timeout, got ${JSON.stringify(describe(out.e))}`);
        attempts.push(['timeout', out.took]);
      }
    }
    expect(attempts[0][0] === 'timeout', `the first call times out: ${JSON.stringify(attempts)}`);
    expect(r, `the long last attempt returns: ${JSON.stringify(attempts)}`);
    expect(!r.isError && text(r) === RESULT, `the last attempt returns slow's result: ${JSON.stringify(r)}`);
    const after = await stats();
    expect(after.started - before.started >= 2, `slow ran again: ${JSON.stringify([before, after])}`);
    return { attempts, final: text(r), stats: [before, after] };
  });
}

await client.close();
const failed = results.filter((c) => !c.ok).map((c) => c.check);
if (failed.length) {
  console.log(`ts-v1-slow-calls ${mode}: failed checks: ${failed.join(', ')}`);
  process.exit(1);
}
console.log(`ts-v1-slow-calls ${mode}: all checks passed`);
process.exit(0);

// A 2025-era client written with the TypeScript SDK v1 (@modelcontextprotocol/sdk
// 1.29, pinned in package.json), driving ts-v1-server.mjs's tools, directly or
// through tasklift: it declares sampling and elicitation and answers them with its
// own handlers, as an application built on the SDK does.
//
// Usage: node ts-v1-client.mjs http://127.0.0.1:PORT/mcp
//
// Checks (each reported as `ok - NAME` or `FAIL - NAME: why`, all run even when
// one fails): list, echo, slow (a plain wait with progress), cancel (the server's
// counters show the call stopped), ask and sample (the server's requests reach the
// handlers), fail (isError), big (2,000,000 characters whole). Prints
// `ts-v1-client: all checks passed` and exits 0, or exits 1 naming the failures.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node ts-v1-client.mjs <MCP URL>');
  process.exit(2);
}

// A step that hangs fails after this long (a hang guard, not a timing check).
const STEP_TIMEOUT_MS = 25_000;

const text = (r) =>
  (r?.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('');

function expect(cond, why) {
  if (!cond) throw new Error(why);
}

const failures = [];
async function check(name, f) {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
  });
  try {
    const detail = await Promise.race([f(), guard]);
    console.log(`ok - ${name}${detail ? `: ${detail}` : ''}`);
  } catch (e) {
    failures.push(name);
    console.log(`FAIL - ${name}: ${e?.message ?? e}`);
  } finally {
    clearTimeout(timer);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const client = new Client(
  { name: 'tasklift-ts-v1-client', version: '0.0.0' },
  { capabilities: { sampling: {}, elicitation: { form: {} } } }
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked.push(req.params.message);
  return { action: 'accept', content: { name: 'Ann' } };
});
const sampled = [];
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  sampled.push(req.params.messages);
  return { role: 'assistant', model: 'test-model', content: { type: 'text', text: 'hello from the client' } };
});

const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
console.log(`ok - initialized (${transport.protocolVersion}), session ${transport.sessionId}`);

const stats = async () => JSON.parse(text(await client.callTool({ name: 'stats', arguments: {} })));

await check('list', async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ['echo', 'slow', 'stats', 'ask', 'sample', 'fail', 'big'])
    expect(names.includes(want), `tools/list lacks ${want}: ${names.join(', ')}`);
  return names.join(', ');
});

await check('echo', async () => {
  const r = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
  expect(!r.isError && text(r) === 'echo: hi', JSON.stringify(r));
});

await check('slow', async () => {
  const progress = [];
  const r = await client.callTool({ name: 'slow', arguments: { seconds: 1.2 } }, undefined, {
    onprogress: (p) => progress.push(p)
  });
  // A plain CallToolResult: no task shape of either era.
  expect(!r.isError && text(r) === 'slept 1.2s', JSON.stringify(r));
  expect(r.task === undefined && r.taskId === undefined && r.resultType === undefined, JSON.stringify(r));
  expect(progress.length > 0, 'no progress notification reached the client');
  return `${progress.length} progress notifications`;
});

await check('cancel', async () => {
  const before = await stats();
  const ac = new AbortController();
  const call = client.callTool({ name: 'slow', arguments: { seconds: 30 } }, undefined, { signal: ac.signal });
  // Wait until the server runs it, then cancel (the SDK sends notifications/cancelled).
  for (let i = 0; (await stats()).started === before.started; i++) {
    expect(i < 100, 'the slow call never started upstream');
    await sleep(50);
  }
  ac.abort('the user gave up');
  await call.then(
    () => expect(false, 'the cancelled call returned a result'),
    () => {}
  );
  for (let i = 0; ; i++) {
    const s = await stats();
    if (s.cancelled === before.cancelled + 1 && s.running === 0) return JSON.stringify(s);
    expect(i < 200, `the server never stopped the call: ${JSON.stringify(s)}`);
    await sleep(50);
  }
});

await check('ask', async () => {
  const r = await client.callTool({ name: 'ask', arguments: {} });
  expect(!r.isError && text(r) === 'answer: accept {"name":"Ann"}', JSON.stringify(r));
  expect(asked.includes('What is your name?'), `the handler was asked ${JSON.stringify(asked)}`);
});

await check('sample', async () => {
  const r = await client.callTool({ name: 'sample', arguments: {} });
  expect(!r.isError && text(r) === 'sampled: hello from the client', JSON.stringify(r));
  expect(sampled.length === 1, `the handler was called ${sampled.length} times`);
});

await check('fail', async () => {
  const r = await client.callTool({ name: 'fail', arguments: {} });
  expect(r.isError === true && text(r).includes('the fail tool failed on purpose'), JSON.stringify(r));
});

await check('big', async () => {
  const r = await client.callTool({ name: 'big', arguments: {} });
  const t = text(r);
  expect(!r.isError && t.length === 2_000_000, `${t.length} characters`);
  expect(t.startsWith('0123456789abcdef0123') && t.endsWith('0123456789abcdef'), 'the text was altered');
});

await client.close();
if (failures.length) {
  console.log(`ts-v1-client: failed: ${failures.join(', ')}`);
  process.exit(1);
}
console.log('ts-v1-client: all checks passed');
process.exit(0);

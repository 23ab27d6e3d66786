// A 2025-era client written with the TypeScript SDK v1 (@modelcontextprotocol/sdk
// 1.29) across a tasklift restart, as tests/it/store/session_restart.rs drives it:
// it opens a session, calls `echo`, starts the gated `job` and prints
// `in flight <session id>` once the call's stream can be resumed (the test then
// restarts tasklift on the same address), waits for that call to end, and calls
// `echo` again in the same session. Prints one `outcome <name> <JSON>` line per
// step and `ts-v1-restart: done`; the test judges the outcomes.
//
// Usage: node ts-v1-restart.mjs http://127.0.0.1:PORT/mcp
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node ts-v1-restart.mjs <MCP URL>');
  process.exit(2);
}
// A hang guard for each step, not a timing check.
const STEP_TIMEOUT_MS = 30_000;
const guard = (p, what) =>
  Promise.race([
    p,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS)),
  ]);
const settle = (p) =>
  p.then(
    (r) => ({ result: r }),
    (e) => ({ error: String(e?.message ?? e), code: e?.code })
  );
const outcome = (name, v) => console.log(`outcome ${name} ${JSON.stringify(v)}`);

const client = new Client({ name: 'tasklift-ts-v1-restart', version: '0.0.0' }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const session = transport.sessionId;
outcome('before', await settle(guard(client.callTool({ name: 'echo', arguments: {} }), 'echo before')));

let announced = false;
const call = client.callTool({ name: 'job', arguments: {} }, undefined, {
  timeout: STEP_TIMEOUT_MS,
  onresumptiontoken: (token) => {
    if (!announced) {
      announced = true;
      console.log(`in flight ${session} ${token}`);
    }
  },
});
outcome('inflight', await settle(guard(call, 'the call in flight')));
outcome('after', await settle(guard(client.callTool({ name: 'echo', arguments: {} }), 'echo after')));
outcome('session', { before: session, after: transport.sessionId });
await client.close();
console.log('ts-v1-restart: done');
process.exit(0);

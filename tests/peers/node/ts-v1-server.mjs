// A small MCP server written with the TypeScript SDK v1 (@modelcontextprotocol/sdk
// 1.29, pinned in package.json): McpServer + StreamableHTTPServerTransport, stateful
// (a session id per initialize, a standalone GET stream per session), as the SDK's
// README sets one up. The SDK does the protocol; this file only adds tools.
//
//   node ts-v1-server.mjs --port N      (0: any free port)
//
// Prints `ts-v1-server listening on http://127.0.0.1:PORT/mcp` once it accepts.
//
// Tools:
//   echo {text}                 answers at once: "echo: TEXT"
//   slow {seconds}              sleeps, sending notifications/progress every 200 ms
//                               when the request has a progressToken; stops when
//                               cancelled (the request's AbortSignal)
//   stats {}                    counters of slow calls as JSON text:
//                               {started, completed, cancelled, running}
//   ask {delay?}                after `delay` seconds, elicitation/create with no
//                               related request id (so the SDK sends it on the GET
//                               stream); "answer: ACTION CONTENT-JSON"
//   sample {delay?}             the same with sampling/createMessage; "sampled: TEXT"
//   fail {}                     throws: a tool error (isError), not a protocol error
//   big {bytes?, seconds?}      a text of `bytes` (default 2,000,000) characters,
//                               "0123456789abcdef" repeated, after `seconds`
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import * as z from 'zod/v4';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const args = process.argv.slice(2);
const portAt = args.indexOf('--port');
const port = portAt >= 0 ? Number(args[portAt + 1]) : 0;

// How long a request to the client may wait for its answer: long enough for any
// test, short enough that a request nobody receives ends the call with an error.
const CLIENT_REQUEST_TIMEOUT_MS = 20_000;

// Shared by every session: a test checks that a cancelled call really stopped.
const counters = { started: 0, completed: 0, cancelled: 0, running: 0 };

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new Error('cancelled'));
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(new Error('cancelled'));
      },
      { once: true }
    );
  });

const text = (t) => ({ content: [{ type: 'text', text: t }] });

function makeServer() {
  const server = new McpServer({ name: 'ts-v1-server', version: '1.0.0' }, { capabilities: { logging: {} } });

  server.registerTool(
    'echo',
    { description: 'Echo the text back at once', inputSchema: { text: z.string() } },
    async ({ text: t }) => text(`echo: ${t}`)
  );

  server.registerTool(
    'slow',
    {
      description: 'Sleep for `seconds`, reporting progress every 200 ms',
      inputSchema: { seconds: z.number() }
    },
    async ({ seconds }, extra) => {
      counters.started++;
      counters.running++;
      const token = extra._meta?.progressToken;
      const steps = Math.max(1, Math.round(seconds * 5));
      try {
        for (let i = 1; i <= steps; i++) {
          await sleep(200, extra.signal);
          if (token !== undefined) {
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken: token, progress: i, total: steps, message: `step ${i}` }
            });
          }
        }
      } catch (e) {
        if (extra.signal.aborted) {
          counters.cancelled++;
        }
        throw e;
      } finally {
        counters.running--;
      }
      counters.completed++;
      return text(`slept ${seconds}s`);
    }
  );

  server.registerTool('stats', { description: 'Counters of slow calls' }, async () =>
    text(JSON.stringify(counters))
  );

  server.registerTool(
    'ask',
    {
      description: 'Ask the user for a name (elicitation, no related request id)',
      inputSchema: { delay: z.number().optional() }
    },
    async ({ delay }, extra) => {
      if (delay) await sleep(delay * 1000, extra.signal);
      // No relatedRequestId: the SDK sends the request on the session's GET stream.
      const r = await server.server.elicitInput(
        {
          message: 'What is your name?',
          requestedSchema: {
            type: 'object',
            properties: { name: { type: 'string', description: 'Your name' } },
            required: ['name']
          }
        },
        { timeout: CLIENT_REQUEST_TIMEOUT_MS }
      );
      return text(`answer: ${r.action} ${JSON.stringify(r.content ?? null)}`);
    }
  );

  server.registerTool(
    'sample',
    {
      description: 'Ask the client for an LLM sample (sampling, no related request id)',
      inputSchema: { delay: z.number().optional() }
    },
    async ({ delay }, extra) => {
      if (delay) await sleep(delay * 1000, extra.signal);
      const r = await server.server.createMessage(
        {
          messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }],
          maxTokens: 50
        },
        { timeout: CLIENT_REQUEST_TIMEOUT_MS }
      );
      const c = Array.isArray(r.content) ? r.content[0] : r.content;
      return text(`sampled: ${c?.type === 'text' ? c.text : JSON.stringify(c)}`);
    }
  );

  server.registerTool('fail', { description: 'Always throws' }, async () => {
    throw new Error('the fail tool failed on purpose');
  });

  server.registerTool(
    'big',
    {
      description: 'A large text result',
      inputSchema: { bytes: z.number().int().optional(), seconds: z.number().optional() }
    },
    async ({ bytes, seconds }, extra) => {
      if (seconds) await sleep(seconds * 1000, extra.signal);
      const n = bytes ?? 2_000_000;
      return text('0123456789abcdef'.repeat(Math.ceil(n / 16)).slice(0, n));
    }
  );

  return server;
}

const transports = new Map();

function jsonError(res, status, code, message) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const httpServer = http.createServer(async (req, res) => {
  try {
    if (new URL(req.url, 'http://x').pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'POST') {
      let body;
      try {
        body = await readJson(req);
      } catch {
        return jsonError(res, 400, -32700, 'Parse error');
      }
      if (sid) {
        const t = transports.get(sid);
        if (!t) return jsonError(res, 404, -32001, 'Session not found');
        return await t.handleRequest(req, res, body);
      }
      if (!isInitializeRequest(body)) {
        return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
      }
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport)
      });
      transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
      };
      await makeServer().connect(transport);
      return await transport.handleRequest(req, res, body);
    }
    if (req.method === 'GET' || req.method === 'DELETE') {
      const t = sid && transports.get(sid);
      if (!t) return jsonError(res, sid ? 404 : 400, -32001, 'Session not found');
      return await t.handleRequest(req, res);
    }
    res.writeHead(405, { allow: 'GET, POST, DELETE' }).end();
  } catch (e) {
    console.error('ts-v1-server: request failed:', e);
    if (!res.headersSent) jsonError(res, 500, -32603, 'Internal server error');
  }
});

httpServer.listen(port, '127.0.0.1', () => {
  console.log(`ts-v1-server listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});
process.on('SIGTERM', () => process.exit(0));

// A conformance "everything" server written with the TypeScript SDK v1
// (@modelcontextprotocol/sdk 1.29.0, pinned in package.json): McpServer +
// StreamableHTTPServerTransport, stateful (a session per initialize, with its
// standalone GET stream), an in-memory event store for resumption. The SDK does the
// protocol; this file only supplies the tools, resources and prompts that the
// conformance suite's 2025-11-25 server scenarios name, as their descriptions ask.
//
//   node ts-v1-everything-server.mjs --port N
//
// Prints `listening on http://127.0.0.1:PORT/mcp` once it accepts.
//
// Requests to the client are sent the way SDK v1 servers commonly send them: with
// `server.server.createMessage` / `server.server.elicitInput`, which carry no related
// request id, so the SDK puts them on the session's GET stream, not the call's POST
// stream. Log and progress notifications go with the call (extra.sendNotification).
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import * as z from 'zod/v4';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import {
  isInitializeRequest,
  ListToolsRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema
} from '@modelcontextprotocol/sdk/types.js';

const args = process.argv.slice(2);
const portAt = args.indexOf('--port');
const port = portAt >= 0 ? Number(args[portAt + 1]) : 0;

// A 1x1 PNG and a tiny WAV, as the scenarios ask for "a minimal test image/audio".
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/q842AAAAAElFTkSuQmCC';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==';

// json-schema-2020-12: a tool whose inputSchema uses 2020-12 keywords that a zod
// shape cannot express; tools/list is given this schema verbatim (see below).
const JSON_SCHEMA_TOOL = 'json_schema_2020_12_tool';
const JSON_SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: {
      $anchor: 'addressDef',
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' } }
    }
  },
  properties: {
    name: { type: 'string' },
    address: { $ref: '#/$defs/address' },
    contactMethod: { type: 'string', enum: ['phone', 'email'] },
    phone: { type: 'string' },
    email: { type: 'string' }
  },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });

function makeServer() {
  const server = new McpServer(
    { name: 'ts-v1-everything-server', version: '1.0.0' },
    { capabilities: { logging: {}, resources: { subscribe: true } } }
  );
  const log = (extra, data) =>
    extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });

  // Tools.
  server.registerTool('test_simple_text', { description: 'Returns simple text' }, async () =>
    text('This is a simple text response for testing.')
  );
  server.registerTool('test_image_content', { description: 'Returns an image' }, async () => ({
    content: [{ type: 'image', data: PNG, mimeType: 'image/png' }]
  }));
  server.registerTool('test_audio_content', { description: 'Returns audio' }, async () => ({
    content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }]
  }));
  server.registerTool('test_embedded_resource', { description: 'Returns an embedded resource' }, async () => ({
    content: [
      {
        type: 'resource',
        resource: {
          uri: 'test://embedded-resource',
          mimeType: 'text/plain',
          text: 'This is an embedded resource content.'
        }
      }
    ]
  }));
  server.registerTool('test_multiple_content_types', { description: 'Returns text, an image and a resource' }, async () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: {
          uri: 'test://mixed-content-resource',
          mimeType: 'application/json',
          text: JSON.stringify({ test: 'data', value: 123 })
        }
      }
    ]
  }));
  server.registerTool('test_tool_with_logging', { description: 'Sends three log messages' }, async (extra) => {
    await log(extra, 'Tool execution started');
    await sleep(50);
    await log(extra, 'Tool processing data');
    await sleep(50);
    await log(extra, 'Tool execution completed');
    return text('Tool with logging executed successfully');
  });
  server.registerTool('test_tool_with_progress', { description: 'Reports progress 0, 50, 100 of 100' }, async (extra) => {
    const progressToken = extra._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` }
        });
      }
      if (progress < 100) await sleep(50);
    }
    return text(String(progressToken ?? 'no progress token'));
  });
  server.registerTool('test_error_handling', { description: 'Always fails' }, async () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  server.registerTool(
    'test_sampling',
    { description: 'Asks the client to sample', inputSchema: { prompt: z.string() } },
    async ({ prompt }) => {
      const result = await server.server.createMessage({
        messages: [{ role: 'user', content: { type: 'text', text: prompt } }],
        maxTokens: 100
      });
      const reply = result.content?.type === 'text' ? result.content.text : 'No response';
      return text(`LLM response: ${reply}`);
    }
  );
  server.registerTool(
    'test_elicitation',
    { description: 'Asks the user for input', inputSchema: { message: z.string() } },
    async ({ message }) => {
      const result = await server.server.elicitInput({
        message,
        requestedSchema: {
          type: 'object',
          properties: {
            username: { type: 'string', description: "User's response" },
            email: { type: 'string', description: "User's email address" }
          },
          required: ['username', 'email']
        }
      });
      return text(`User response: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
    }
  );
  server.registerTool(
    'test_elicitation_sep1034_defaults',
    { description: 'Elicitation with a default for every primitive type' },
    async () => {
      const result = await server.server.elicitInput({
        message: 'Please provide user information',
        requestedSchema: {
          type: 'object',
          properties: {
            name: { type: 'string', description: 'User name', default: 'John Doe' },
            age: { type: 'integer', description: 'User age', default: 30 },
            score: { type: 'number', description: 'User score', default: 95.5 },
            status: {
              type: 'string',
              description: 'User status',
              enum: ['active', 'inactive', 'pending'],
              default: 'active'
            },
            verified: { type: 'boolean', description: 'Verification status', default: true }
          }
        }
      });
      return text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
    }
  );
  server.registerTool(
    'test_elicitation_sep1330_enums',
    { description: 'Elicitation with the five enum schema variants' },
    async () => {
      const result = await server.server.elicitInput({
        message: 'Please pick options',
        requestedSchema: {
          type: 'object',
          properties: {
            untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
            titledSingle: {
              type: 'string',
              oneOf: [
                { const: 'value1', title: 'First Option' },
                { const: 'value2', title: 'Second Option' },
                { const: 'value3', title: 'Third Option' }
              ]
            },
            legacyEnum: {
              type: 'string',
              enum: ['opt1', 'opt2', 'opt3'],
              enumNames: ['Option One', 'Option Two', 'Option Three']
            },
            untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
            titledMulti: {
              type: 'array',
              items: {
                anyOf: [
                  { const: 'value1', title: 'First Choice' },
                  { const: 'value2', title: 'Second Choice' },
                  { const: 'value3', title: 'Third Choice' }
                ]
              }
            }
          }
        }
      });
      return text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
    }
  );
  server.registerTool('test_reconnection', { description: 'Closes its SSE stream mid-call' }, async (extra) => {
    await log(extra, 'Before disconnect');
    extra.closeSSEStream?.();
    await sleep(200);
    await log(extra, 'After reconnect');
    return text('Reconnection test completed');
  });
  server.registerTool(JSON_SCHEMA_TOOL, { description: 'Tool with JSON Schema 2020-12 features' }, async () =>
    text('ok')
  );

  // tools/list as McpServer builds it, with the 2020-12 schema put in verbatim.
  const listTools = server.server._requestHandlers.get('tools/list');
  server.server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
    const result = await listTools(request, extra);
    for (const tool of result.tools) if (tool.name === JSON_SCHEMA_TOOL) tool.inputSchema = JSON_SCHEMA_2020_12;
    return result;
  });

  // Resources.
  server.registerResource(
    'static-text',
    'test://static-text',
    { description: 'A static text resource', mimeType: 'text/plain' },
    async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }]
    })
  );
  server.registerResource(
    'static-binary',
    'test://static-binary',
    { description: 'A static binary resource (a PNG)', mimeType: 'image/png' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG }] })
  );
  server.registerResource(
    'template',
    new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { description: 'A resource template', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [
        {
          uri: uri.href,
          mimeType: 'application/json',
          text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` })
        }
      ]
    })
  );
  server.registerResource(
    'watched-resource',
    'test://watched-resource',
    { description: 'A resource to subscribe to', mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Watched resource content' }] })
  );
  const subscriptions = new Set();
  server.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  // Prompts (arg1 is completable, which also serves completion/complete).
  server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, async () => ({
    messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }]
  }));
  server.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: {
        arg1: completable(z.string().describe('First test argument'), () => []),
        arg2: z.string().describe('Second test argument')
      }
    },
    async ({ arg1, arg2 }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }]
    })
  );
  server.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'A prompt embedding a resource', argsSchema: { resourceUri: z.string() } },
    async ({ resourceUri }) => ({
      messages: [
        {
          role: 'user',
          content: {
            type: 'resource',
            resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' }
          }
        },
        { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } }
      ]
    })
  );
  server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, async () => ({
    messages: [
      { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
      { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } }
    ]
  }));
  return server;
}

// Streamable HTTP, one transport and one McpServer per session.
const sessions = new Map();
const httpServer = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://127.0.0.1');
    if (url.pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    let body;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
        return;
      }
    }
    const sessionId = req.headers['mcp-session-id'];
    let transport = sessionId ? sessions.get(sessionId) : undefined;
    if (!transport && !sessionId && req.method === 'POST' && isInitializeRequest(body)) {
      const host = `127.0.0.1:${httpServer.address().port}`;
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new InMemoryEventStore(),
        retryInterval: 100,
        enableDnsRebindingProtection: true,
        allowedHosts: [host, `localhost:${httpServer.address().port}`],
        onsessioninitialized: (id) => sessions.set(id, transport)
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      await makeServer().connect(transport);
    }
    if (!transport) {
      res.writeHead(sessionId ? 404 : 400, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          jsonrpc: '2.0',
          id: null,
          error: { code: -32000, message: sessionId ? 'Session not found' : 'Bad Request: no valid session ID' }
        })
      );
      return;
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    console.error(e);
    if (!res.headersSent) res.writeHead(500).end();
  }
});
httpServer.listen(port, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});

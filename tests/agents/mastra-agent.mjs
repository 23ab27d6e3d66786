// The agent loop for the Mastra client (`tests/agents/clients/mastra.py` runs it under
// Node 22). There is no vendor model API for Mastra: this script is what a Mastra
// agent does around its model, without the model. It connects to tasklift with
// `@mastra/mcp`'s MCPClient (server `slow`, request timeout TOOL_TIMEOUT_MS), takes
// the tools the way an agent is handed them (`listTools()`: Mastra tools named
// `slow_<tool>`), then loops: asks the scripted model (POST MODEL_URL/next) what to
// do, runs the named tool's `execute`, turns what comes back into what a Mastra
// agent's model is shown, and posts that back.
//
// What the model is shown (as @mastra/core's agent does it): the tool's
// `toModelOutput(result)` when the tool has one (MCPClient sets it on tools with an
// outputSchema: the MCP `content` text, else the structured value), otherwise the
// result itself (JSON text when it is an object). A thrown error (the client's
// timeout, an invalid result, an `isError: true` result, which MCPClient throws by
// default) is an error result whose text is the error's message.
//
// Environment: AGENTS (target/tools/agents/node_modules), MCP_URL, MODEL_URL,
// TOOL_TIMEOUT_MS, WIRE_LOG (a file for every MCP HTTP exchange, JSON lines),
// RESULT_FILE (facts for mastra.py: versions, protocol, declaresTasks).

import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`mastra-agent: ${name} is not set`);
  return v;
};
const AGENTS = env("AGENTS");
const MCP_URL = env("MCP_URL");
const MODEL_URL = env("MODEL_URL");
const TOOL_TIMEOUT_MS = Number(env("TOOL_TIMEOUT_MS", "5000"));
const WIRE_LOG = env("WIRE_LOG", "/dev/null");
const RESULT_FILE = env("RESULT_FILE", "/dev/null");
const PROMPT = env("PROMPT", "Call the slow tool as instructed.");

const t0 = Date.now();
const log = (...a) => console.log(`[${((Date.now() - t0) / 1000).toFixed(2)}s]`, ...a);
const version = (pkg) =>
  JSON.parse(fs.readFileSync(path.join(AGENTS, pkg, "package.json"), "utf8")).version;
const facts = {
  version: version("@mastra/mcp"),
  sdkVersion: version("@modelcontextprotocol/client"),
  coreVersion: (() => {
    try {
      return version("@mastra/core");
    } catch {
      return null;
    }
  })(),
  protocol: null,
  wireProtocols: [],
  declaresTasks: null,
  clientCapabilities: null,
  tools: [],
  errors: [],
};
const saveFacts = () => fs.writeFileSync(RESULT_FILE, JSON.stringify(facts, null, 1));

// Every MCP exchange, into WIRE_LOG: what the client sent (method, MCP-Protocol-Version
// header, capabilities) and what came back (status, content type, body).
const wire = fs.createWriteStream(WIRE_LOG, { flags: "a" });
const wireLog = (doc) => wire.write(JSON.stringify({ t: (Date.now() - t0) / 1000, ...doc }) + "\n");
let exchange = 0;
function noteRequest(body, headers) {
  const pv = headers.get("mcp-protocol-version");
  if (pv && !facts.wireProtocols.includes(pv)) facts.wireProtocols.push(pv);
  for (const msg of Array.isArray(body) ? body : [body]) {
    if (!msg || typeof msg !== "object") continue;
    const p = msg.params ?? {};
    // 2026-07-28 carries the client's capabilities in every request's _meta;
    // 2025 revisions in initialize's params.
    const caps =
      p.capabilities ??
      Object.entries(p._meta ?? {}).find(([k]) => k.endsWith("clientCapabilities"))?.[1];
    if (caps && typeof caps === "object") {
      facts.clientCapabilities = caps;
      const ext = caps.extensions ?? {};
      const tasks = "io.modelcontextprotocol/tasks" in ext || "tasks" in caps;
      facts.declaresTasks = (facts.declaresTasks ?? false) || tasks;
    }
    if (typeof p.protocolVersion === "string" && !facts.wireProtocols.includes(p.protocolVersion))
      facts.wireProtocols.push(p.protocolVersion);
  }
}
async function loggingFetch(url, init) {
  const n = ++exchange;
  const headers = new Headers(init?.headers);
  let body = init?.body;
  if (typeof body === "string") {
    try {
      body = JSON.parse(body);
      noteRequest(body, headers);
    } catch {}
  }
  wireLog({
    n,
    dir: "out",
    method: init?.method ?? "GET",
    url: String(url),
    protocolHeader: headers.get("mcp-protocol-version"),
    session: headers.get("mcp-session-id"),
    body: typeof body === "string" || body == null || typeof body === "object" ? body : String(body),
  });
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    wireLog({ n, dir: "err", error: String(e?.cause ?? e) });
    throw e;
  }
  wireLog({
    n,
    dir: "in",
    status: res.status,
    contentType: res.headers.get("content-type"),
    session: res.headers.get("mcp-session-id"),
  });
  // The body, read from a copy in the background (an SSE stream ends when the call does).
  if (res.body) {
    res
      .clone()
      .text()
      .then(
        (text) => wireLog({ n, dir: "body", text: text.length > 8000 ? text.slice(0, 8000) + "…" : text }),
        (e) => wireLog({ n, dir: "body-error", error: String(e) }),
      );
  }
  return res;
}

// What a Mastra agent's model is shown for a tool's output.
async function modelText(tool, output) {
  let shown = output;
  if (typeof tool.toModelOutput === "function" && output != null) {
    const mo = await tool.toModelOutput(output);
    if (mo && typeof mo === "object" && (mo.type === "text" || mo.type === "error-text")) return mo.value;
    shown = mo && typeof mo === "object" && "value" in mo ? mo.value : mo;
  }
  return typeof shown === "string" ? shown : JSON.stringify(shown);
}

async function askModel(results, toolNames) {
  const res = await fetch(`${MODEL_URL}/next`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: PROMPT, tools: toolNames, results }),
  });
  if (!res.ok) throw new Error(`model answered HTTP ${res.status}`);
  return res.json();
}

const { MCPClient } = await import(
  pathToFileURL(path.join(AGENTS, "@mastra/mcp/dist/index.js")).href
);
const { isValidationError } = await import(
  pathToFileURL(path.join(AGENTS, "@mastra/core/dist/tools/index.js")).href
).catch(() => ({ isValidationError: () => false }));

const mcp = new MCPClient({
  id: "tasklift-agent-bed",
  servers: { slow: { url: new URL(MCP_URL), timeout: TOOL_TIMEOUT_MS, fetch: loggingFetch } },
  timeout: TOOL_TIMEOUT_MS,
});

let exitCode = 0;
try {
  const { tools, errors } = await mcp.listToolsWithErrors();
  if (Object.keys(errors).length) throw new Error(`listTools: ${JSON.stringify(errors)}`);
  const internal = await mcp.getClientForServer?.("slow").catch(() => undefined);
  facts.protocol = internal?.client?.getNegotiatedProtocolVersion?.() ?? null;
  facts.tools = Object.keys(tools);
  saveFacts();
  log("protocol", facts.protocol, "tools", facts.tools.join(", "));
  const results = [];
  for (let step = 1; ; step++) {
    const action = await askModel(results, facts.tools);
    if (action.action === "final") {
      log("final:", action.text);
      break;
    }
    const tool = tools[action.tool];
    if (!tool) throw new Error(`the model named an unknown tool ${action.tool}`);
    const started = Date.now();
    let text;
    let isError = false;
    try {
      const out = await tool.execute(action.args ?? {}, {
        toolCallId: `call_${step}`,
        messages: [],
        runId: `run-${t0}`,
      });
      text = await modelText(tool, out);
      isError = isValidationError(out);
    } catch (e) {
      isError = true;
      text = e instanceof Error ? e.message : String(e);
      facts.errors.push({ step, tool: action.tool, name: e?.name, id: e?.id, code: e?.code, message: text });
    }
    log(
      `${action.tool}(${JSON.stringify(action.args)}) after ${((Date.now() - started) / 1000).toFixed(2)}s`,
      isError ? "ERROR" : "ok",
      JSON.stringify(text),
    );
    results.push({ tool: action.tool, text, isError });
  }
} catch (e) {
  exitCode = 1;
  log("failed:", e?.stack ?? e);
  facts.errors.push({ fatal: true, message: String(e?.message ?? e) });
} finally {
  facts.protocol ??= facts.wireProtocols.at(-1) ?? null;
  saveFacts();
  await Promise.race([mcp.disconnect().catch(() => {}), new Promise((r) => setTimeout(r, 3000))]);
  await new Promise((r) => wire.end(r));
  process.exit(exitCode);
}

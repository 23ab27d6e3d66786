// A legacy-era (2025-11-25) client built from the official TypeScript SDK v1
// (@modelcontextprotocol/sdk): initialize, Mcp-Session-Id, StreamableHTTPClientTransport,
// and an elicitation handler for server-to-client requests.
//
// Usage: node legacy-client.mjs http://127.0.0.1:PORT/mcp
//
// The URL is the bundled fixture (`tasklift demo-server`) or tasklift in front of it.
// Checks: the initialize handshake and its session, tools/list, a fast and a slow
// tool, and tools that ask the user (one question, two at once, and a declined one)
// answered by this client's elicitation handler. Prints each check; exits 1 with a
// message on the first failed expectation.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { check, fail, ok, text } from "./checks.mjs";

const OVERALL_TIMEOUT_MS = 60_000;

const url = process.argv[2];
if (!url) {
  console.error("usage: node legacy-client.mjs <MCP URL>");
  process.exit(2);
}

async function main() {
  const client = new Client(
    { name: "tasklift-ts-legacy-client", version: "0.0.0" },
    { capabilities: { elicitation: { form: {} } } },
  );
  // The elicitation requests the server sent, and how they were answered.
  const asked = [];
  let decline = false;
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    const { message, requestedSchema } = request.params;
    asked.push(message);
    if (decline) return { action: "decline" };
    const content = {};
    for (const p of Object.keys(requestedSchema?.properties ?? {})) content[p] = p === "name" ? "Ada" : true;
    return { action: "accept", content };
  });

  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  check(transport.sessionId, "initialize gave no Mcp-Session-Id");
  const version = transport.protocolVersion;
  check(version === LATEST_PROTOCOL_VERSION, `negotiated ${version}, not ${LATEST_PROTOCOL_VERSION}`);
  const server = client.getServerVersion();
  check(server?.name, `initialize gave no serverInfo: ${JSON.stringify(server)}`);
  check(client.getServerCapabilities()?.tools, "the server does not offer tools");
  ok(`initialized (${version}) with ${server.name}; session ${transport.sessionId}`);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ["greet", "slow_compute", "confirm_delete", "multi_input"])
    check(names.includes(want), `tools/list lacks ${want}: ${names.join(", ")}`);
  ok(`tools/list: ${names.length} tools`);

  const greet = await client.callTool({ name: "greet", arguments: { name: "legacy" } });
  check(!greet.isError && text(greet) === "Hello, legacy!", `greet: ${JSON.stringify(greet)}`);
  ok("greet: Hello, legacy!");

  const slow = await client.callTool({ name: "slow_compute", arguments: { seconds: 1.5, label: "legacy" } });
  check(!slow.isError && text(slow) === "computed legacy in 1.5 s", `slow_compute: ${JSON.stringify(slow)}`);
  ok("slow_compute (1.5 s) answered on the same request: computed legacy in 1.5 s");

  const deleted = await client.callTool({ name: "confirm_delete", arguments: { filename: "notes.txt" } });
  check(text(deleted) === "Deleted notes.txt.", `confirm_delete (accepted): ${JSON.stringify(deleted)}`);
  check(
    asked.length === 1 && asked[0] === "Delete notes.txt?",
    `expected one question "Delete notes.txt?", got ${JSON.stringify(asked)}`,
  );
  ok('confirm_delete asked "Delete notes.txt?" (elicitation), accepted: Deleted notes.txt.');

  asked.length = 0;
  const multi = await client.callTool({ name: "multi_input", arguments: {} });
  check(text(multi) === 'name "Ada", confirm true', `multi_input: ${JSON.stringify(multi)}`);
  check(
    asked.length === 2 && asked.includes("Your name?") && asked.includes("Proceed?"),
    `expected the questions "Your name?" and "Proceed?", got ${JSON.stringify(asked)}`,
  );
  ok(`multi_input asked two questions at once, both answered: ${text(multi)}`);

  asked.length = 0;
  decline = true;
  const kept = await client.callTool({ name: "confirm_delete", arguments: { filename: "keep.txt" } });
  check(text(kept) === "Kept keep.txt.", `confirm_delete (declined): ${JSON.stringify(kept)}`);
  check(asked.length === 1, `expected one question, got ${JSON.stringify(asked)}`);
  ok("confirm_delete declined: Kept keep.txt.");

  await transport.terminateSession();
  await client.close();
  console.log("legacy-client: all checks passed");
}

const timer = setTimeout(() => fail(`not done after ${OVERALL_TIMEOUT_MS} ms`), OVERALL_TIMEOUT_MS);
main().then(
  () => {
    clearTimeout(timer);
    process.exit(0);
  },
  (error) => fail(error?.stack ?? String(error)),
);

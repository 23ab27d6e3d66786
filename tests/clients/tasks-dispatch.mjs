// The 2026-07-28 connection and the raw request dispatch that ext-tasks needs, shared
// by tasks-client.mjs and tests/peers/node/ts-v2-tasks-client.mjs. Imports
// @modelcontextprotocol/client from tests/clients/node_modules (resolved from this
// file's location, wherever the importing script lives).

import {
  Client,
  StreamableHTTPClientTransport,
  isJSONRPCErrorResponse,
  isJSONRPCResultResponse,
} from "@modelcontextprotocol/client";
import { check, ok, trace } from "./checks.mjs";

export const PROTOCOL_VERSION = "2026-07-28";
export const TASKS = "io.modelcontextprotocol/tasks";

/**
 * Connect an SDK Client pinned to 2026-07-28 (server/discover) with form elicitation
 * and the tasks extension declared; checks the modern era, the pinned version and
 * that the server advertises the tasks extension, then prints `ok - connected ...`
 * (with `detail` in parentheses when given). Returns the client and the
 * capabilities it declared (ext-tasks' v2RequestFraming wants both).
 */
export async function connectModern(url, clientInfo, detail) {
  const capabilities = { elicitation: { form: {} }, extensions: { [TASKS]: {} } };
  const client = new Client(clientInfo, {
    capabilities,
    versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  check(client.getProtocolEra() === "modern", `era is ${client.getProtocolEra()}, not modern`);
  check(
    client.getNegotiatedProtocolVersion() === PROTOCOL_VERSION,
    `negotiated ${client.getNegotiatedProtocolVersion()}`,
  );
  const advertised = client.getServerCapabilities()?.extensions?.[TASKS];
  check(
    advertised !== undefined,
    `server/discover does not advertise ${TASKS}: ${JSON.stringify(client.getServerCapabilities())}`,
  );
  ok(
    `connected${detail ? ` (${detail})` : ""} with server/discover (${PROTOCOL_VERSION}); ` +
      `the server advertises ${TASKS}`,
  );
  return { client, capabilities };
}

/**
 * The host request coordinator ext-tasks needs for V2 task traffic: the SDK
 * Client's codecs reject `resultType: "task"`, so tools/call and tasks/* go
 * through this instead. It is the SDK's own Streamable HTTP transport, used raw:
 * the transport derives MCP-Protocol-Version, Mcp-Method and Mcp-Name from the
 * framed body; this owns request ids (`${idPrefix}-N`) and matches responses to them.
 */
export class RequestCoordinator {
  constructor(endpoint, idPrefix) {
    this.transport = new StreamableHTTPClientTransport(new URL(endpoint));
    this.idPrefix = idPrefix;
    this.pending = new Map();
    this.nextId = 1;
    this.sent = new Map();
    this.transport.onmessage = (message) => {
      trace("<-", message);
      if (isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) {
        const waiter = this.pending.get(message.id);
        if (waiter) {
          this.pending.delete(message.id);
          waiter.resolve(message);
        }
      }
    };
    this.transport.onerror = () => {
      // Errors of a request reach its own send() or stream-end callback.
    };
    this.dispatch = this.dispatch.bind(this);
  }

  start() {
    return this.transport.start();
  }

  close() {
    return this.transport.close();
  }

  /** How many requests of `method` went out. */
  count(method) {
    return this.sent.get(method) ?? 0;
  }

  /** ext-tasks' RawClientDispatch: one framed request in, its JSON-RPC response out. */
  async dispatch(request, options = {}) {
    const id = `${this.idPrefix}-${this.nextId++}`;
    const message = { jsonrpc: "2.0", id, ...request };
    this.sent.set(request.method, this.count(request.method) + 1);
    trace("->", message);
    const { signal, context } = options;
    const answered = new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
    });
    // When the send itself fails (an aborted poll: ext-tasks aborts the in-flight
    // tasks/get when the task is cancelled), the error is thrown below and nobody
    // awaits `answered`; its rejection must not crash the process as unhandled.
    answered.catch(() => {});
    const settle = (error) => {
      const waiter = this.pending.get(id);
      if (waiter) {
        this.pending.delete(id);
        waiter.reject(error);
      }
    };
    let timer;
    if (context?.requestTimeoutMs !== undefined)
      timer = setTimeout(
        () => settle(new Error(`${request.method} timed out after ${context.requestTimeoutMs} ms`)),
        context.requestTimeoutMs,
      );
    const onAbort = () => settle(signal.reason ?? new Error("aborted"));
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await this.transport.send(message, {
        requestSignal: signal,
        headers: context?.headers,
        onRequestStreamEnd: () =>
          settle(new Error(`${request.method}: the response stream ended without an answer`)),
      });
      const response = await answered;
      return isJSONRPCErrorResponse(response)
        ? { kind: "error", error: response.error }
        : { kind: "result", result: response.result };
    } catch (error) {
      settle(error);
      throw error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

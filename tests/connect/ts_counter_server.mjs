// The counter server of tests/bridge/counter_server.py (slow_counter, get_counter) on the
// official TypeScript SDK's Streamable HTTP server, for scripts/connect.sh.
//
// Goal: a non-tidemark server that resumes (the SDK's InMemoryEventStore: event ids, GET +
// Last-Event-ID replay) and counts executions, so the bridges' double runs can be counted.
// Method: one McpServer + StreamableHTTPServerTransport per session (the SDK's own stateful
// example), the execution counter a process global.
//
// Usage: node ts_counter_server.mjs PORT   (run from its install directory; prints
// `ts_counter_server listening on http://127.0.0.1:PORT/mcp` once it accepts). Stops on SIGTERM.
import { randomUUID } from "node:crypto";
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { InMemoryEventStore } from "@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js";
import { z } from "zod";

const port = Number(process.argv[2] ?? 0);
let executions = 0;
const transports = new Map();

function build() {
  const server = new McpServer({ name: "ts_counter_server", version: "1" });
  server.tool(
    "slow_counter",
    "Counts one execution, then sends `steps` progress notifications `delay_ms` apart.",
    { steps: z.number().int().min(0).max(1000).default(5), delay_ms: z.number().int().min(0).max(10000).default(0) },
    async ({ steps, delay_ms }, extra) => {
      executions += 1;
      const value = executions;
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        await new Promise((r) => setTimeout(r, delay_ms));
        if (token !== undefined) {
          await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: i, total: steps } });
        }
      }
      return { content: [{ type: "text", text: String(value) }] };
    },
  );
  server.tool("get_counter", "Executions of slow_counter so far.", {}, { readOnlyHint: true },
    async () => ({ content: [{ type: "text", text: String(executions) }] }));
  return server;
}

async function body(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  const sid = req.headers["mcp-session-id"];
  const parsed = req.method === "POST" ? await body(req) : undefined;
  let transport = sid ? transports.get(sid) : undefined;
  if (!transport && req.method === "POST" && isInitializeRequest(parsed)) {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new InMemoryEventStore(),
      retryInterval: 200,
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    await build().connect(transport);
  }
  if (!transport) {
    res.writeHead(sid ? 404 : 400).end();
    return;
  }
  await transport.handleRequest(req, res, parsed);
});
httpServer.listen(port, "127.0.0.1", () => {
  console.log(`ts_counter_server listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});
process.on("SIGTERM", () => process.exit(0));

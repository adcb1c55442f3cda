// The browser page's client code, bundled by scripts/browser.sh (esbuild) into
// .cache/browser/site/bundle.js and loaded by index.html from a page server on another origin
// than tidemark's.
//
// Goal: prove that the official TypeScript MCP clients, unmodified, work from a web page of a
// listed --allowed-origin (CORS) in a real browser, and fail from any other origin (the browser
// blocks them). Method: drive the SDK as a web application would; the transport's `fetch` hook
// only records what JavaScript could see of each HTTP exchange (never alters it). The verdict is
// POSTed to the page server (`/report?run=NAME`) and written into the DOM (#result).
//
// Query parameters: mcp=URL (tidemark's endpoint), run=NAME (the report's name),
//   era=legacy   @modelcontextprotocol/sdk 1.x Client + StreamableHTTPClientTransport:
//                initialize, tools/list, echo {text}, slow_counter {steps:3} as an SSE call whose
//                onprogress must see 3 notifications, then terminate the session (DELETE)
//   era=modern   @modelcontextprotocol/client 2.x Client pinned to the 2026-07-28 revision
//                (server/discover, no session): echo and slow_counter with progress
//   expect=blocked  the run must fail at connect with the browser's network error (CORS), and
//                reports ok when it does
//   token=T      the transport sends `Authorization: Bearer T` on every request (requestInit
//                headers), as a web application holding an access token does
//   expect=unauthorized  the run (without a token, against tidemark with --auth-tokens) must
//                fail at its first request with a 401 that JavaScript can read, its
//                WWW-Authenticate challenge included (CORS exposes it)

import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
} from '@modelcontextprotocol/client';

const MODERN_REVISION = '2026-07-28';
const ECHO_TEXT = 'hello from a web page';
const STEPS = 3;
// A run that has not finished by then reports a timeout instead of leaving the script waiting.
const RUN_TIMEOUT_MS = 45000;

const query = new URLSearchParams(location.search);
const mcpUrl = new URL(query.get('mcp'));
const era = query.get('era') ?? 'legacy';
const run = query.get('run') ?? era;
const expectBlocked = query.get('expect') === 'blocked';
const expectUnauthorized = query.get('expect') === 'unauthorized';
const token = query.get('token');
// The SDKs' requestInit: its headers go on every request the transport makes.
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : undefined;

// What JavaScript saw of each exchange: method, status, and whether the session id and the
// content type were readable (they are only when the answer is shared with this origin).
const exchanges = [];
async function recordingFetch(input, init) {
  const method = init?.method ?? 'GET';
  try {
    const response = await fetch(input, init);
    exchanges.push({
      method,
      status: response.status,
      sessionIdReadable: response.headers.get('mcp-session-id') !== null,
      contentType: response.headers.get('content-type'),
      challenge: response.headers.get('www-authenticate'),
    });
    return response;
  } catch (error) {
    exchanges.push({ method, error: String(error) });
    throw error;
  }
}

const steps = [];
function check(name, ok, detail) {
  steps.push({ name, ok: Boolean(ok), detail });
  if (!ok) throw new Error(`${name} failed: ${JSON.stringify(detail)}`);
}

function firstText(result) {
  return result?.content?.[0]?.type === 'text' ? result.content[0].text : undefined;
}

async function legacyRun() {
  const client = new LegacyClient({ name: 'tidemark-browser-legacy', version: '1.0.0' });
  const transport = new LegacyTransport(mcpUrl, { fetch: recordingFetch, requestInit });
  await client.connect(transport);
  check('initialize', transport.sessionId !== undefined, {
    sessionIdReadable: transport.sessionId !== undefined,
    protocolVersion: transport.protocolVersion,
  });
  const tools = (await client.listTools()).tools.map((t) => t.name);
  check('tools/list', tools.includes('echo') && tools.includes('slow_counter'), { tools });
  const echo = await client.callTool({ name: 'echo', arguments: { text: ECHO_TEXT } });
  check('echo', firstText(echo) === ECHO_TEXT, { text: firstText(echo) });
  const progress = [];
  const counted = await client.callTool(
    { name: 'slow_counter', arguments: { steps: STEPS, delay_ms: 50 } },
    undefined,
    { onprogress: (p) => progress.push(p.progress) },
  );
  const sse = exchanges.some((e) => e.method === 'POST' && e.contentType?.startsWith('text/event-stream'));
  check('slow_counter', progress.length === STEPS && sse && /^\d+$/.test(firstText(counted) ?? ''), {
    progress,
    sseResponseSeen: sse,
    text: firstText(counted),
  });
  await transport.terminateSession();
  const deleted = exchanges.filter((e) => e.method === 'DELETE').map((e) => e.status);
  check('delete', deleted.length === 1 && deleted[0] === 200 && transport.sessionId === undefined, {
    deleteStatuses: deleted,
  });
  await client.close();
}

async function modernRun() {
  const client = new ModernClient(
    { name: 'tidemark-browser-modern', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: MODERN_REVISION } } },
  );
  const transport = new ModernTransport(mcpUrl, { fetch: recordingFetch, requestInit });
  await client.connect(transport);
  check('server/discover', client.getProtocolEra() === 'modern', {
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
  });
  const echo = await client.callTool({ name: 'echo', arguments: { text: ECHO_TEXT } });
  check('echo', firstText(echo) === ECHO_TEXT, { text: firstText(echo) });
  const progress = [];
  const counted = await client.callTool(
    { name: 'slow_counter', arguments: { steps: STEPS, delay_ms: 50 } },
    { onprogress: (p) => progress.push(p.progress) },
  );
  check('slow_counter', progress.length === STEPS && /^\d+$/.test(firstText(counted) ?? ''), {
    progress,
    text: firstText(counted),
  });
  await client.close();
}

async function main() {
  const body = era === 'modern' ? modernRun : legacyRun;
  let error;
  try {
    await Promise.race([
      body(),
      new Promise((_, reject) => setTimeout(() => reject(new Error(`timeout after ${RUN_TIMEOUT_MS} ms`)), RUN_TIMEOUT_MS)),
    ]);
  } catch (e) {
    error = `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
  }
  let ok = error === undefined;
  if (expectBlocked) {
    // Blocked by the browser: the very first request fails as a network error, before any
    // answer was readable (a 403 or 405 that JavaScript could read would be a leak).
    const first = exchanges[0];
    ok = error !== undefined && steps.length === 0 && first?.error?.startsWith('TypeError') === true;
  }
  if (expectUnauthorized) {
    // Refused by tidemark, not by the browser: the 401 and its challenge are readable.
    const first = exchanges[0];
    ok = error !== undefined && steps.length === 0 && first?.status === 401
      && first?.challenge?.startsWith('Bearer resource_metadata=') === true;
  }
  const report = { run, era, origin: location.origin, expectBlocked, ok, error, steps, exchanges };
  document.getElementById('result').textContent = JSON.stringify(report);
  await fetch(`/report?run=${encodeURIComponent(run)}`, { method: 'POST', body: JSON.stringify(report) });
}

main();

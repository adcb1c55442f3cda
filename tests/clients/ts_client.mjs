#!/usr/bin/env node
// Real-client check of tidemark with the official TypeScript SDK (Client +
// StreamableHTTPClientTransport), run by scripts/clients.sh.
//
// Goal: prove that an unmodified SDK client completes a whole legacy-era session against the
// server: initialize, tools/list, a progress-emitting tools/call (each notification exactly once,
// in order), echo, then DELETE, and that a dropped response stream is resumed by the SDK itself
// (GET + Last-Event-ID) with no re-POST.
// Method: drive the SDK exactly as an application would; watch the HTTP traffic through the
// transport's `fetch` hook only to count what went on the wire (never to alter it, except
// `--protocol-version`, which rewrites the version offered in `initialize` because the SDK
// always offers its latest).
//
// Usage: node ts_client.mjs --url URL [--protocol-version V] [--steps N] [--delay-ms N]
//            [--check-counter] [--min-resumes N] [--timeout-ms N] [--label TEXT]
//        node ts_client.mjs --url URL --get-counter      prints the counter and exits
//   --check-counter   also call get_counter before and after: slow_counter must run exactly once
//                     (only valid when no other client uses the server at the same time)
//   --min-resumes N   at least N GETs carrying Last-Event-ID must have happened (cut-proxy runs)
// Exit status: 0 when every check passed, 1 on the first mismatch (message on stderr).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const USAGE = 'usage: node ts_client.mjs --url URL [--protocol-version V] [--steps N] ' +
  '[--delay-ms N] [--check-counter] [--min-resumes N] [--timeout-ms N] [--label TEXT] [--get-counter]';

function parseArgs(argv) {
  const opts = {
    url: undefined, protocolVersion: undefined, steps: 5, delayMs: 20, checkCounter: false,
    minResumes: 0, timeoutMs: 60000, label: 'ts', getCounter: false,
  };
  const takesValue = {
    '--url': (v) => { opts.url = v; },
    '--protocol-version': (v) => { opts.protocolVersion = v; },
    '--steps': (v) => { opts.steps = Number.parseInt(v, 10); },
    '--delay-ms': (v) => { opts.delayMs = Number.parseInt(v, 10); },
    '--min-resumes': (v) => { opts.minResumes = Number.parseInt(v, 10); },
    '--timeout-ms': (v) => { opts.timeoutMs = Number.parseInt(v, 10); },
    '--label': (v) => { opts.label = v; },
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--check-counter') opts.checkCounter = true;
    else if (a === '--get-counter') opts.getCounter = true;
    else if (a === '--help') { console.log(USAGE); process.exit(0); }
    else if (takesValue[a] && i + 1 < argv.length) takesValue[a](argv[++i]);
    else { console.error(`unknown or incomplete argument: ${a}\n${USAGE}`); process.exit(2); }
  }
  if (!opts.url) { console.error(USAGE); process.exit(2); }
  for (const k of ['steps', 'delayMs', 'minResumes', 'timeoutMs']) {
    if (!Number.isInteger(opts[k]) || opts[k] < 0) {
      console.error(`bad --${k}: ${opts[k]}`); process.exit(2);
    }
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const started = Date.now();

class CheckFailed extends Error {}
function fail(msg) { throw new CheckFailed(msg); }
function check(cond, msg) { if (!cond) fail(msg); }

// Wire counters, filled by the fetch hook.
const wire = { postsByMethod: new Map(), resumeGets: 0, gets: 0, deletes: 0, statuses: [] };

async function countingFetch(input, init) {
  const method = (init?.method ?? 'GET').toUpperCase();
  const headers = new Headers(init?.headers);
  if (method === 'POST' && typeof init?.body === 'string') {
    try {
      const msg = JSON.parse(init.body);
      for (const m of Array.isArray(msg) ? msg : [msg]) {
        const key = m.method ?? (m.result !== undefined || m.error !== undefined ? '(response)' : '?');
        wire.postsByMethod.set(key, (wire.postsByMethod.get(key) ?? 0) + 1);
      }
    } catch { /* not ours to judge here */ }
  } else if (method === 'GET') {
    wire.gets += 1;
    if (headers.has('last-event-id')) wire.resumeGets += 1;
  } else if (method === 'DELETE') {
    wire.deletes += 1;
  }
  const res = await fetch(input, init);
  wire.statuses.push(`${method} ${res.status}`);
  return res;
}

function makeTransport() {
  const transport = new StreamableHTTPClientTransport(new URL(opts.url), {
    fetch: countingFetch,
    // The server's `retry:` field overrides the initial delay once seen; keep the fallback short.
    reconnectionOptions: {
      initialReconnectionDelay: 100, maxReconnectionDelay: 2000,
      reconnectionDelayGrowFactor: 1.5, maxRetries: 5,
    },
  });
  if (opts.protocolVersion) {
    // The SDK always offers LATEST_PROTOCOL_VERSION; rewrite the offer so older revisions get
    // exercised. The SDK accepts any version it supports in the answer.
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
      if (message?.method === 'initialize') {
        message = { ...message, params: { ...message.params, protocolVersion: opts.protocolVersion } };
      }
      return send(message, options);
    };
  }
  return transport;
}

function textOf(result, what) {
  check(Array.isArray(result?.content) && result.content.length >= 1,
    `${what}: result has no content: ${JSON.stringify(result)}`);
  const c = result.content[0];
  check(c.type === 'text' && typeof c.text === 'string',
    `${what}: first content item is not text: ${JSON.stringify(c)}`);
  check(result.isError !== true, `${what}: isError is true: ${JSON.stringify(result)}`);
  return c.text;
}

async function counterValue(client) {
  const text = textOf(await client.callTool({ name: 'get_counter', arguments: {} }, undefined,
    { timeout: opts.timeoutMs }), 'get_counter');
  check(/^\d+$/.test(text.trim()), `get_counter: text is not a number: ${JSON.stringify(text)}`);
  return Number.parseInt(text.trim(), 10);
}

async function runSequence(client, transport) {
  const negotiated = transport.protocolVersion;
  if (opts.protocolVersion) {
    check(negotiated === opts.protocolVersion,
      `initialize: asked for ${opts.protocolVersion}, server answered ${negotiated}`);
  }
  const sessionId = transport.sessionId;
  check(typeof sessionId === 'string' && sessionId.length > 0,
    'initialize: the response carried no Mcp-Session-Id');
  check(/^[\x21-\x7e]+$/.test(sessionId), `initialize: session id is not visible ASCII: ${sessionId}`);

  const list = await client.listTools(undefined, { timeout: opts.timeoutMs });
  const names = list.tools.map((t) => t.name);
  for (const want of ['echo', 'slow_counter', 'get_counter']) {
    check(names.includes(want), `tools/list: missing ${want}; got ${JSON.stringify(names)}`);
  }

  const before = opts.checkCounter ? await counterValue(client) : undefined;
  const postsBefore = wire.postsByMethod.get('tools/call') ?? 0;
  const progress = [];
  const result = await client.callTool(
    { name: 'slow_counter', arguments: { steps: opts.steps, delay_ms: opts.delayMs } },
    undefined,
    {
      timeout: opts.timeoutMs,
      resetTimeoutOnProgress: true,
      onprogress: (p) => progress.push(p),
    },
  );
  const postsForCall = (wire.postsByMethod.get('tools/call') ?? 0) - postsBefore;
  const text = textOf(result, 'slow_counter');
  check(/^\d+$/.test(text.trim()), `slow_counter: result text is not a number: ${JSON.stringify(text)}`);
  const values = progress.map((p) => p.progress);
  check(progress.length === opts.steps,
    `slow_counter: expected ${opts.steps} progress notifications, got ${progress.length}: ` +
    JSON.stringify(values));
  for (let i = 1; i < values.length; i++) {
    check(values[i] > values[i - 1],
      `slow_counter: progress not strictly increasing (duplicate or out of order): ${JSON.stringify(values)}`);
  }
  for (const p of progress) {
    check(p.total === undefined || p.total === opts.steps,
      `slow_counter: progress total ${p.total}, expected ${opts.steps}`);
  }
  check(postsForCall === 1,
    `slow_counter: the SDK POSTed tools/call ${postsForCall} times (a re-POST, not a resume)`);
  if (opts.checkCounter) {
    const after = await counterValue(client);
    const value = Number.parseInt(text.trim(), 10);
    check(value === before + 1 && after === before + 1,
      `slow_counter ran more than once or not at all: counter before ${before}, ` +
      `result ${value}, after ${after}`);
  }
  check(wire.resumeGets >= opts.minResumes,
    `expected at least ${opts.minResumes} resume GET(s) with Last-Event-ID, saw ${wire.resumeGets}`);

  const echo = textOf(await client.callTool({ name: 'echo', arguments: { text: 'hi' } }, undefined,
    { timeout: opts.timeoutMs }), 'echo');
  check(echo === 'hi', `echo: expected "hi", got ${JSON.stringify(echo)}`);

  await transport.terminateSession();
  check(wire.deletes === 1, `terminateSession: expected 1 DELETE, saw ${wire.deletes}`);
  check(transport.sessionId === undefined, 'terminateSession: the SDK kept the session id (DELETE failed?)');
  // The terminated session must be gone: a request naming it gets 404 (spec: MUST).
  const after = await fetch(opts.url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json', accept: 'application/json, text/event-stream',
      'mcp-session-id': sessionId, 'mcp-protocol-version': negotiated,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9999, method: 'tools/list' }),
  });
  await after.arrayBuffer();
  check(after.status === 404, `after DELETE: POST with the old session id got ${after.status}, expected 404`);
  return { negotiated, values, result: text.trim() };
}

async function main() {
  const transport = makeTransport();
  const client = new Client({ name: 'tidemark-ts-client', version: '1.0.0' });
  transport.onerror = (e) => { if (process.env.TS_CLIENT_DEBUG) console.error(`[${opts.label}] transport: ${e}`); };
  await client.connect(transport, { timeout: opts.timeoutMs });
  try {
    if (opts.getCounter) {
      console.log(String(await counterValue(client)));
      await transport.terminateSession();
      return;
    }
    const r = await runSequence(client, transport);
    const posts = JSON.stringify(Object.fromEntries(wire.postsByMethod));
    console.log(`[${opts.label}] ok: version=${r.negotiated} result=${r.result} ` +
      `progress=${JSON.stringify(r.values)} resumes=${wire.resumeGets} posts=${posts} ` +
      `${Date.now() - started}ms`);
  } finally {
    await client.close().catch(() => {});
  }
}

main().then(() => process.exit(0), (e) => {
  const kind = e instanceof CheckFailed ? 'FAILED' : 'ERROR';
  console.error(`[${opts.label}] ${kind}: ${e?.message ?? e}`);
  console.error(`[${opts.label}] wire: statuses=${JSON.stringify(wire.statuses)}`);
  process.exit(1);
});

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
//            [--expect-retry-ms N] [--scenario sequence|cut-with-echo|reverse] [--echo-at-ms N]
//        node ts_client.mjs --url URL --get-counter      prints the counter and exits
//   --check-counter   also call get_counter before and after: slow_counter must run exactly once
//                     (only valid when no other client uses the server at the same time)
//   --min-resumes N   at least N GETs carrying Last-Event-ID must have happened (cut-proxy runs)
//   --expect-retry-ms N  the last SSE `retry:` field the SDK took from the server must be N
//                     (only 2025-11-25 sessions get priming events with `retry:`)
//   --scenario S      sequence (default): the whole session above, calls one after the other.
//                     cut-with-echo (run through the cut proxy): start slow_counter with progress;
//                     once its stream is cut (the SDK reports the drop), issue echo {text:"during"}
//                     on the same client while slow_counter is still owed; await both. Checks:
//                     both succeed, echo says "during", progress is exactly 1..steps (each once,
//                     in order), slow_counter POSTed once (no re-POST), ran once (with
//                     --check-counter). Prints which result arrived first and the echo's latency
//                     (a strict server holds it until the resume's replay is flushed; reported,
//                     not asserted). Then DELETE as in `sequence`.
//                     reverse (against examples/custom_tool, which serves only `reverse`):
//                     tools/list must contain `reverse` with annotations.readOnlyHint === true
//                     and an inputSchema (type object) requiring a string `text`; each call of
//                     reverse {text} must answer a first content item {type:"text"} holding the
//                     text reversed by Unicode scalar values (ASCII, accented Latin, the empty
//                     string, and a character outside the BMP, which a UTF-16 code-unit reversal
//                     would split); calling an unknown tool must fail cleanly (a JSON-RPC error
//                     -32602, or a result with isError: true) and leave the session usable
//                     (reverse is called again after it); every call POSTed once; then DELETE
//                     as in `sequence`. Not with --check-counter (no get_counter there).
//   --echo-at-ms N    cut-with-echo: issue the echo N ms after starting slow_counter instead of
//                     when the drop is seen (the call must still be running then)
// Exit status: 0 when every check passed, 1 on the first mismatch (message on stderr).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

const USAGE = 'usage: node ts_client.mjs --url URL [--protocol-version V] [--steps N] ' +
  '[--delay-ms N] [--check-counter] [--min-resumes N] [--timeout-ms N] [--label TEXT] ' +
  '[--expect-retry-ms N] [--scenario sequence|cut-with-echo|reverse] [--echo-at-ms N] [--get-counter]';
const SCENARIOS = ['sequence', 'cut-with-echo', 'reverse'];

function parseArgs(argv) {
  const opts = {
    url: undefined, protocolVersion: undefined, steps: 5, delayMs: 20, checkCounter: false,
    minResumes: 0, timeoutMs: 60000, label: 'ts', getCounter: false,
    expectRetryMs: undefined, scenario: 'sequence', echoAtMs: undefined,
  };
  const takesValue = {
    '--url': (v) => { opts.url = v; },
    '--protocol-version': (v) => { opts.protocolVersion = v; },
    '--steps': (v) => { opts.steps = Number.parseInt(v, 10); },
    '--delay-ms': (v) => { opts.delayMs = Number.parseInt(v, 10); },
    '--min-resumes': (v) => { opts.minResumes = Number.parseInt(v, 10); },
    '--timeout-ms': (v) => { opts.timeoutMs = Number.parseInt(v, 10); },
    '--label': (v) => { opts.label = v; },
    '--expect-retry-ms': (v) => { opts.expectRetryMs = Number.parseInt(v, 10); },
    '--scenario': (v) => { opts.scenario = v; },
    '--echo-at-ms': (v) => { opts.echoAtMs = Number.parseInt(v, 10); },
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
  for (const k of ['steps', 'delayMs', 'minResumes', 'timeoutMs', 'expectRetryMs', 'echoAtMs']) {
    if (opts[k] === undefined && (k === 'expectRetryMs' || k === 'echoAtMs')) continue;
    if (!Number.isInteger(opts[k]) || opts[k] < 0) {
      console.error(`bad --${k}: ${opts[k]}`); process.exit(2);
    }
  }
  if (!SCENARIOS.includes(opts.scenario)) {
    console.error(`bad --scenario: ${opts.scenario} (known: ${SCENARIOS.join(', ')})`); process.exit(2);
  }
  if (opts.scenario === 'reverse' && (opts.checkCounter || opts.getCounter)) {
    console.error('--check-counter/--get-counter need the demo tools, not --scenario reverse'); process.exit(2);
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const started = Date.now();

class CheckFailed extends Error {}
function fail(msg) { throw new CheckFailed(msg); }
function check(cond, msg) { if (!cond) fail(msg); }

// Wire counters, filled by the fetch hook. `toolCalls` counts tools/call POSTs per tool name;
// `timeline` notes (ms since start) when requests left and answers' heads came back.
const wire = {
  postsByMethod: new Map(), toolCalls: new Map(), resumeGets: 0, gets: 0, deletes: 0, statuses: [],
  timeline: [],
};
const since = () => Date.now() - started;

async function countingFetch(input, init) {
  const method = (init?.method ?? 'GET').toUpperCase();
  const headers = new Headers(init?.headers);
  let what = method;
  if (method === 'POST' && typeof init?.body === 'string') {
    try {
      const msg = JSON.parse(init.body);
      for (const m of Array.isArray(msg) ? msg : [msg]) {
        const key = m.method ?? (m.result !== undefined || m.error !== undefined ? '(response)' : '?');
        wire.postsByMethod.set(key, (wire.postsByMethod.get(key) ?? 0) + 1);
        if (m.method === 'tools/call') {
          const name = String(m.params?.name);
          wire.toolCalls.set(name, (wire.toolCalls.get(name) ?? 0) + 1);
          what = `POST tools/call ${name} id=${m.id}`;
        } else {
          what = `POST ${key}`;
        }
      }
    } catch { /* not ours to judge here */ }
  } else if (method === 'GET') {
    wire.gets += 1;
    if (headers.has('last-event-id')) {
      wire.resumeGets += 1;
      what = `GET last-event-id=${headers.get('last-event-id')}`;
    }
  } else if (method === 'DELETE') {
    wire.deletes += 1;
  }
  wire.timeline.push(`${since()} > ${what}`);
  const res = await fetch(input, init);
  wire.statuses.push(`${method} ${res.status}`);
  wire.timeline.push(`${since()} < ${res.status} ${what}`);
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

// Checks on the session the SDK set up (version, id) and that tools/list names `required`.
// Returns the listed tools too.
async function checkSessionStart(client, transport, required = ['echo', 'slow_counter', 'get_counter']) {
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
  for (const want of required) {
    check(names.includes(want), `tools/list: missing ${want}; got ${JSON.stringify(names)}`);
  }
  return { negotiated, sessionId, tools: list.tools };
}

// Progress values must be exactly 1..steps: each once, in order, none missing.
function checkProgress(progress) {
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
  return values;
}

function checkRetry(transport) {
  if (opts.expectRetryMs === undefined) return;
  // The SDK keeps the last `retry:` it parsed in a private field (SDK pinned in package.json).
  const seen = transport._serverRetryMs;
  check(seen === opts.expectRetryMs,
    `retry: expected the server's SSE retry field to be ${opts.expectRetryMs} ms, the SDK saw ${seen}`);
}

// DELETE through the SDK, then the old session id must be unknown (404).
async function terminateAndCheck(transport, sessionId, negotiated) {
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
}

async function runSequence(client, transport) {
  const { negotiated, sessionId } = await checkSessionStart(client, transport);

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
  const values = checkProgress(progress);
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
  checkRetry(transport);

  await terminateAndCheck(transport, sessionId, negotiated);
  return { negotiated, values, result: text.trim() };
}

// Resolved by the transport's onerror hook when the SDK reports a dropped SSE stream.
const drop = { at: undefined, resolve: undefined };
drop.seen = new Promise((resolve) => { drop.resolve = resolve; });
function noteTransportError(e) {
  const msg = String(e?.message ?? e);
  wire.timeline.push(`${since()} ! ${msg}`);
  if (drop.at === undefined && msg.startsWith('SSE stream disconnected')) {
    drop.at = since();
    drop.resolve();
  }
}

// --scenario cut-with-echo: a second request on the same session while slow_counter's stream is
// owed (dropped by the proxy, not yet resumed). See the usage header.
async function runCutWithEcho(client, transport) {
  const { negotiated, sessionId } = await checkSessionStart(client, transport);
  const before = opts.checkCounter ? await counterValue(client) : undefined;
  const slowPostsBefore = wire.toolCalls.get('slow_counter') ?? 0;
  const echoPostsBefore = wire.toolCalls.get('echo') ?? 0;

  const arrivals = []; // [name, ms since start]
  const progress = [];
  const slowStarted = since();
  let slowSettled = false;
  const slow = client.callTool(
    { name: 'slow_counter', arguments: { steps: opts.steps, delay_ms: opts.delayMs } },
    undefined,
    {
      timeout: opts.timeoutMs,
      resetTimeoutOnProgress: true,
      onprogress: (p) => progress.push(p),
    },
  ).then(
    (r) => { slowSettled = true; arrivals.push(['slow_counter', since()]); return r; },
    (e) => { slowSettled = true; arrivals.push(['slow_counter(error)', since()]); throw e; },
  );
  slow.catch(() => {}); // judged below, after the echo

  if (opts.echoAtMs !== undefined) {
    await new Promise((r) => setTimeout(r, opts.echoAtMs));
  } else {
    await Promise.race([drop.seen, slow.catch(() => {})]);
  }
  check(!slowSettled,
    `cut-with-echo: slow_counter ended (${arrivals[0]?.[0]}) before the echo could be issued ` +
    `(drop seen: ${drop.at !== undefined}); the echo must overlap the owed stream`);
  const progressAtEcho = progress.length;
  let progressAtEchoDone;
  const echoSent = since();
  const echo = client.callTool({ name: 'echo', arguments: { text: 'during' } }, undefined,
    { timeout: opts.timeoutMs }).then(
    (r) => { arrivals.push(['echo', since()]); progressAtEchoDone = progress.length; return r; },
    (e) => { arrivals.push(['echo(error)', since()]); throw e; },
  );

  const [slowR, echoR] = await Promise.allSettled([slow, echo]);
  const order = arrivals.map(([n]) => n).join('>');
  const echoAt = arrivals.find(([n]) => n.startsWith('echo'))?.[1];
  const slowAt = arrivals.find(([n]) => n.startsWith('slow_counter'))?.[1];
  const echoLatency = echoAt - echoSent;
  const report = `order=${order} echo_latency=${echoLatency}ms ` +
    `drop_at=+${drop.at === undefined ? '?' : drop.at - slowStarted}ms ` +
    `echo_sent=+${echoSent - slowStarted}ms (after ${progressAtEcho} progress) ` +
    `echo_done=+${echoAt - slowStarted}ms (after ${progressAtEchoDone ?? '?'} progress) ` +
    `slow_done=+${slowAt - slowStarted}ms`;
  console.log(`[${opts.label}] scenario: ${report}`);
  console.log(`[${opts.label}] timeline: ${wire.timeline.join(' | ')}`);
  check(slowR.status === 'fulfilled', `slow_counter failed: ${slowR.reason?.message ?? slowR.reason}`);
  check(echoR.status === 'fulfilled', `echo (issued during the owed stream) failed: ` +
    `${echoR.reason?.message ?? echoR.reason}`);

  const text = textOf(slowR.value, 'slow_counter');
  check(/^\d+$/.test(text.trim()), `slow_counter: result text is not a number: ${JSON.stringify(text)}`);
  const echoText = textOf(echoR.value, 'echo');
  check(echoText === 'during', `echo: expected "during", got ${JSON.stringify(echoText)}`);
  const values = checkProgress(progress);
  check(values.every((v, i) => v === i + 1),
    `slow_counter: progress is not exactly 1..${opts.steps}: ${JSON.stringify(values)}`);
  const slowPosts = (wire.toolCalls.get('slow_counter') ?? 0) - slowPostsBefore;
  const echoPosts = (wire.toolCalls.get('echo') ?? 0) - echoPostsBefore;
  check(slowPosts === 1,
    `slow_counter: the SDK POSTed it ${slowPosts} times (a re-POST, not a resume)`);
  check(echoPosts === 1, `echo: the SDK POSTed it ${echoPosts} times, expected 1`);
  if (opts.checkCounter) {
    const after = await counterValue(client);
    const value = Number.parseInt(text.trim(), 10);
    check(value === before + 1 && after === before + 1,
      `slow_counter ran more than once or not at all: counter before ${before}, ` +
      `result ${value}, after ${after}`);
  }
  check(wire.resumeGets >= opts.minResumes,
    `expected at least ${opts.minResumes} resume GET(s) with Last-Event-ID, saw ${wire.resumeGets}`);
  checkRetry(transport);

  await terminateAndCheck(transport, sessionId, negotiated);
  return { negotiated, values, result: text.trim(), extra: ` ${report}` };
}

// --scenario reverse: the one tool of examples/custom_tool. [text, expected] pairs, written out
// (not computed) so the check does not share a bug with the server: reversal is by Unicode
// scalar values, so U+1F600 (a surrogate pair in UTF-16) must stay whole.
const REVERSE_CASES = [
  ['h\u00e9llo w\u00f6rld', 'dlr\u00f6w oll\u00e9h'], // "hello world" with e-acute, o-umlaut
  ['abc', 'cba'],
  ['', ''],
  ['a\u{1F600}b\u20ac', '\u20acb\u{1F600}a'], // U+1F600 (4 UTF-8 bytes), U+20AC (3 bytes)
];
const REVERSE_AFTER_ERROR = ['still here', 'ereh llits'];
const UNKNOWN_TOOL = 'no_such_tool';

async function callReverse(client, text, expected) {
  const what = `reverse(${JSON.stringify(text)})`;
  const got = textOf(await client.callTool({ name: 'reverse', arguments: { text } }, undefined,
    { timeout: opts.timeoutMs }), what);
  check(got === expected, `${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
}

async function runReverse(client, transport) {
  const { negotiated, sessionId, tools } = await checkSessionStart(client, transport, ['reverse']);
  const tool = tools.find((t) => t.name === 'reverse');
  check(tool.annotations?.readOnlyHint === true,
    `tools/list: reverse must be annotated readOnlyHint: true; annotations ${JSON.stringify(tool.annotations)}`);
  const schema = tool.inputSchema;
  check(schema?.type === 'object' && Array.isArray(schema.required) && schema.required.includes('text'),
    `tools/list: reverse's inputSchema must be an object requiring "text": ${JSON.stringify(schema)}`);
  check(schema.properties?.text?.type === 'string',
    `tools/list: reverse's inputSchema must declare text as a string: ${JSON.stringify(schema)}`);

  for (const [text, expected] of REVERSE_CASES) await callReverse(client, text, expected);

  // An unknown tool: a JSON-RPC error -32602 (what tidemark answers; the spec's "unknown tool"),
  // or a tool result with isError: true (what the SDK servers answer). Anything else (transport
  // error, HTTP status, other code, a success) is not clean.
  let unknown;
  try {
    const r = await client.callTool({ name: UNKNOWN_TOOL, arguments: { text: 'x' } }, undefined,
      { timeout: opts.timeoutMs });
    check(r?.isError === true,
      `${UNKNOWN_TOOL}: calling an unknown tool succeeded: ${JSON.stringify(r)}`);
    unknown = 'isError';
  } catch (e) {
    if (e instanceof CheckFailed) throw e;
    check(e instanceof McpError && e.code === ErrorCode.InvalidParams,
      `${UNKNOWN_TOOL}: expected a JSON-RPC error ${ErrorCode.InvalidParams} (or an isError result), ` +
      `got ${e?.constructor?.name}: ${e?.message ?? e}`);
    unknown = `jsonrpc:${e.code}`;
  }
  await callReverse(client, ...REVERSE_AFTER_ERROR);

  const calls = REVERSE_CASES.length + 1;
  check(wire.toolCalls.get('reverse') === calls,
    `reverse: expected ${calls} tools/call POSTs, saw ${wire.toolCalls.get('reverse')}`);
  check(wire.toolCalls.get(UNKNOWN_TOOL) === 1,
    `${UNKNOWN_TOOL}: expected 1 tools/call POST, saw ${wire.toolCalls.get(UNKNOWN_TOOL)}`);
  check(wire.resumeGets >= opts.minResumes,
    `expected at least ${opts.minResumes} resume GET(s) with Last-Event-ID, saw ${wire.resumeGets}`);
  checkRetry(transport);

  await terminateAndCheck(transport, sessionId, negotiated);
  const names = JSON.stringify(tools.map((t) => t.name));
  return { negotiated, summary: `scenario=reverse tools=${names} cases=${calls} unknown=${unknown}` };
}

const RUNNERS = { sequence: runSequence, 'cut-with-echo': runCutWithEcho, reverse: runReverse };

async function main() {
  const transport = makeTransport();
  const client = new Client({ name: 'tidemark-ts-client', version: '1.0.0' });
  transport.onerror = (e) => {
    noteTransportError(e);
    if (process.env.TS_CLIENT_DEBUG) console.error(`[${opts.label}] transport: ${e}`);
  };
  await client.connect(transport, { timeout: opts.timeoutMs });
  try {
    if (opts.getCounter) {
      console.log(String(await counterValue(client)));
      await transport.terminateSession();
      return;
    }
    const r = await RUNNERS[opts.scenario](client, transport);
    const posts = JSON.stringify(Object.fromEntries(wire.postsByMethod));
    const what = r.summary ?? `result=${r.result} progress=${JSON.stringify(r.values)}`;
    console.log(`[${opts.label}] ok: version=${r.negotiated} ${what} ` +
      `resumes=${wire.resumeGets} posts=${posts} ${Date.now() - started}ms${r.extra ?? ''}`);
  } finally {
    await client.close().catch(() => {});
  }
}

main().then(() => process.exit(0), (e) => {
  const kind = e instanceof CheckFailed ? 'FAILED' : 'ERROR';
  console.error(`[${opts.label}] ${kind}: ${e?.message ?? e}`);
  console.error(`[${opts.label}] wire: statuses=${JSON.stringify(wire.statuses)}`);
  console.error(`[${opts.label}] wire: timeline=${wire.timeline.join(' | ')}`);
  process.exit(1);
});

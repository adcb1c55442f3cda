#!/usr/bin/env node
// Real-client check of tidemark's 2026-07-28 ("modern", stateless) era with the TypeScript v2 client
// SDK (@modelcontextprotocol/client: Client + StreamableHTTPClientTransport), run by
// scripts/clients.sh's `modern` stage.
//
// Goal: prove that an unmodified v2 client, with version negotiation switched on, ends in the
// 2026-07-28 era against the server and completes: tools/list; echo; slow_counter with a progress
// callback (each notification exactly once, in order) that ran exactly once (get_counter before
// and after); and the input-required round trip of the demo tool `greet`: the server answers the
// first tools/call with an InputRequiredResult asking, through elicitation/create, "What is your
// name?" (form schema: one required string property `name`); the SDK hands it to the registered
// elicitation handler, which accepts with {name: "Ada"}, and retries tools/call with
// inputResponses (and the echoed requestState) by itself; the result must be "Hello, Ada!".
// Method: drive the SDK as an application would; watch the HTTP traffic through the transport's
// `fetch` hook only to count what went on the wire (never to alter it).
//
// Usage: node modern_ts_client.mjs --url URL [--negotiation auto|pin] [--expect-era modern|legacy|any]
//            [--steps N] [--delay-ms N] [--check-counter] [--no-greet] [--timeout-ms N] [--label TEXT]
//   --negotiation auto   versionNegotiation {mode: 'auto'}: probe server/discover, fall back to
//                        initialize unless the answer is definitive 2026-07-28 evidence (default)
//   --negotiation pin    versionNegotiation {mode: {pin: '2026-07-28'}}: no fallback
//   --expect-era E       the era the connection must end in (default modern: protocol version
//                        2026-07-28, getProtocolEra() === 'modern'); legacy/any for debugging
//   --check-counter      get_counter before and after slow_counter: exactly one execution (only
//                        valid when no other client uses the server at the same time)
//   --no-greet           skip the greet round trip (for servers without the tool)
// Exit status: 0 when every check passed, 1 on the first mismatch (message on stderr), 2 on usage.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const MODERN = '2026-07-28';
const GREET_MESSAGE = 'What is your name?';
const GREET_NAME = 'Ada';
const USAGE = 'usage: node modern_ts_client.mjs --url URL [--negotiation auto|pin] ' +
  '[--expect-era modern|legacy|any] [--steps N] [--delay-ms N] [--check-counter] [--no-greet] ' +
  '[--timeout-ms N] [--label TEXT]';

function parseArgs(argv) {
  const opts = {
    url: undefined, negotiation: 'auto', expectEra: 'modern', steps: 3, delayMs: 20,
    checkCounter: false, greet: true, timeoutMs: 60000, label: 'ts-modern',
  };
  const takesValue = {
    '--url': (v) => { opts.url = v; },
    '--negotiation': (v) => { opts.negotiation = v; },
    '--expect-era': (v) => { opts.expectEra = v; },
    '--steps': (v) => { opts.steps = Number.parseInt(v, 10); },
    '--delay-ms': (v) => { opts.delayMs = Number.parseInt(v, 10); },
    '--timeout-ms': (v) => { opts.timeoutMs = Number.parseInt(v, 10); },
    '--label': (v) => { opts.label = v; },
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--check-counter') opts.checkCounter = true;
    else if (a === '--no-greet') opts.greet = false;
    else if (a === '--help') { console.log(USAGE); process.exit(0); }
    else if (takesValue[a] && i + 1 < argv.length) takesValue[a](argv[++i]);
    else { console.error(`unknown or incomplete argument: ${a}\n${USAGE}`); process.exit(2); }
  }
  if (!opts.url) { console.error(USAGE); process.exit(2); }
  if (!['auto', 'pin'].includes(opts.negotiation)) {
    console.error(`bad --negotiation: ${opts.negotiation}`); process.exit(2);
  }
  if (!['modern', 'legacy', 'any'].includes(opts.expectEra)) {
    console.error(`bad --expect-era: ${opts.expectEra}`); process.exit(2);
  }
  for (const k of ['steps', 'delayMs', 'timeoutMs']) {
    if (!Number.isInteger(opts[k]) || opts[k] < 0) { console.error(`bad --${k}: ${opts[k]}`); process.exit(2); }
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const started = Date.now();

class CheckFailed extends Error {}
function check(cond, msg) { if (!cond) throw new CheckFailed(msg); }

// What went over HTTP (observation only). `greetPosts` keeps each greet tools/call's
// inputResponses and whether it echoed a requestState; `answers` notes the status and
// content-type each POSTed method got; `mcpMethod` counts Mcp-Method[/Mcp-Name] request headers.
const wire = {
  posts: new Map(), toolCalls: new Map(), greetPosts: [], gets: 0, deletes: 0, statuses: [],
  answers: [], mcpMethod: new Map(), sessionIds: new Set(),
};
const bump = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);

async function countingFetch(input, init) {
  const method = (init?.method ?? 'GET').toUpperCase();
  const headers = new Headers(init?.headers);
  let what = method;
  if (method === 'POST' && typeof init?.body === 'string') {
    try {
      const msg = JSON.parse(init.body);
      for (const m of Array.isArray(msg) ? msg : [msg]) {
        const key = m.method ?? (m.result !== undefined || m.error !== undefined ? '(response)' : '?');
        bump(wire.posts, key);
        what = key;
        if (m.method === 'tools/call') {
          const name = String(m.params?.name);
          bump(wire.toolCalls, name);
          what = `tools/call ${name}`;
          if (name === 'greet') {
            wire.greetPosts.push({
              inputResponses: m.params?.inputResponses, requestState: 'requestState' in (m.params ?? {}),
            });
          }
        }
      }
    } catch { /* not ours to judge here */ }
  } else if (method === 'GET') {
    wire.gets += 1;
  } else if (method === 'DELETE') {
    wire.deletes += 1;
  }
  if (headers.has('mcp-method')) {
    const name = headers.get('mcp-name');
    bump(wire.mcpMethod, headers.get('mcp-method') + (name ? ` ${name}` : ''));
  }
  const res = await fetch(input, init);
  wire.statuses.push(`${method} ${res.status}`);
  const sid = res.headers.get('mcp-session-id');
  if (sid) wire.sessionIds.add(sid);
  if (method === 'POST') wire.answers.push(`${what}: ${res.status} ${res.headers.get('content-type') ?? ''}`);
  return res;
}

function textOf(result, what) {
  check(Array.isArray(result?.content) && result.content.length > 0,
    `${what}: result has no content: ${JSON.stringify(result)}`);
  const first = result.content[0];
  check(first.type === 'text', `${what}: first content item is not text: ${JSON.stringify(first)}`);
  check(result.isError !== true, `${what}: isError is true: ${JSON.stringify(result)}`);
  return first.text;
}

async function counterValue(client) {
  const text = textOf(await client.callTool({ name: 'get_counter', arguments: {} }, { timeout: opts.timeoutMs }),
    'get_counter');
  check(/^\d+$/.test(text.trim()), `get_counter: text is not a number: ${JSON.stringify(text)}`);
  return Number.parseInt(text.trim(), 10);
}

function checkGreetQuestion(params) {
  check((params.mode ?? 'form') === 'form', `greet: elicitation is not form mode: ${JSON.stringify(params)}`);
  check(params.message === GREET_MESSAGE,
    `greet: elicitation message ${JSON.stringify(params.message)}, expected ${JSON.stringify(GREET_MESSAGE)}`);
  const schema = params.requestedSchema ?? {};
  const props = schema.properties ?? {};
  check(schema.type === 'object' && JSON.stringify(Object.keys(props)) === '["name"]'
    && props.name?.type === 'string' && JSON.stringify(schema.required) === '["name"]',
  `greet: requestedSchema must be an object with one required string property 'name': ${JSON.stringify(schema)}`);
}

async function main() {
  const mode = opts.negotiation === 'pin' ? { pin: MODERN } : 'auto';
  const client = new Client(
    { name: 'tidemark-modern-ts-client', version: '0.1.0' },
    {
      capabilities: opts.greet ? { elicitation: { form: {} } } : {},
      versionNegotiation: { mode },
    },
  );
  const elicitations = [];
  if (opts.greet) {
    client.setRequestHandler('elicitation/create', async (request) => {
      elicitations.push(request.params);
      return { action: 'accept', content: { name: GREET_NAME } };
    });
  }
  const transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: countingFetch });
  await client.connect(transport, { timeout: opts.timeoutMs });

  const version = client.getNegotiatedProtocolVersion();
  const era = client.getProtocolEra();
  if (opts.expectEra !== 'any') {
    check(era === opts.expectEra && (era !== 'modern' || version === MODERN),
      `connect: negotiation=${JSON.stringify(mode)} ended in era ${era} (version ${version}); ` +
      `expected ${opts.expectEra}${opts.expectEra === 'modern' ? ` (${MODERN})` : ''}; ` +
      `POST answers: ${JSON.stringify(wire.answers)}`);
  }
  if (era === 'modern') {
    check(wire.posts.get('server/discover') >= 1, 'modern era without a server/discover on the wire');
    check(!wire.posts.has('initialize'), 'modern era, but the SDK sent initialize');
  }

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ['echo', 'slow_counter', 'get_counter', ...(opts.greet ? ['greet'] : [])]) {
    check(names.includes(want), `tools/list: missing ${want}; got ${JSON.stringify(names)}`);
  }

  const echo = textOf(await client.callTool({ name: 'echo', arguments: { text: 'hi modern' } },
    { timeout: opts.timeoutMs }), 'echo');
  check(echo === 'hi modern', `echo: expected 'hi modern', got ${JSON.stringify(echo)}`);

  const before = opts.checkCounter ? await counterValue(client) : undefined;
  const postsBefore = wire.toolCalls.get('slow_counter') ?? 0;
  const progress = [];
  const result = await client.callTool(
    { name: 'slow_counter', arguments: { steps: opts.steps, delay_ms: opts.delayMs } },
    { timeout: opts.timeoutMs, onprogress: (p) => progress.push(p) },
  );
  const text = textOf(result, 'slow_counter');
  check(/^\d+$/.test(text.trim()), `slow_counter: result is not a number: ${JSON.stringify(text)}`);
  await new Promise((r) => setTimeout(r, 50)); // a late duplicate is caught, not missed
  const values = progress.map((p) => p.progress);
  check(progress.length === opts.steps,
    `slow_counter: expected ${opts.steps} progress notifications, got ${progress.length}: ${JSON.stringify(values)}`);
  check(values.every((v, i) => i === 0 || v > values[i - 1]),
    `slow_counter: progress not strictly increasing (duplicate or out of order): ${JSON.stringify(values)}`);
  for (const p of progress) {
    check(p.total === undefined || p.total === opts.steps, `slow_counter: progress total ${p.total}, expected ${opts.steps}`);
  }
  const slowPosts = (wire.toolCalls.get('slow_counter') ?? 0) - postsBefore;
  check(slowPosts === 1, `slow_counter: the SDK POSTed tools/call ${slowPosts} times (re-POST)`);
  if (opts.checkCounter) {
    const after = await counterValue(client);
    const value = Number.parseInt(text.trim(), 10);
    check(value === before + 1 && after === before + 1,
      `slow_counter ran more than once or not at all: before ${before}, result ${value}, after ${after}`);
  }

  let greetSummary = '';
  if (opts.greet) {
    const responsesBefore = wire.posts.get('(response)') ?? 0;
    const greet = textOf(await client.callTool({ name: 'greet', arguments: {} }, { timeout: opts.timeoutMs }), 'greet');
    check(greet === `Hello, ${GREET_NAME}!`, `greet: expected 'Hello, ${GREET_NAME}!', got ${JSON.stringify(greet)}`);
    check(elicitations.length === 1, `greet: the elicitation handler ran ${elicitations.length} times, expected 1`);
    checkGreetQuestion(elicitations[0]);
    const posted = (wire.posts.get('(response)') ?? 0) - responsesBefore;
    const posts = wire.greetPosts;
    if (era === 'modern') {
      check(posts.length === 2,
        `greet (${MODERN}): expected 2 tools/call POSTs (first round, retry with inputResponses), saw ${posts.length}`);
      check(posts[0].inputResponses === undefined,
        `greet (${MODERN}): the first round carried inputResponses: ${JSON.stringify(posts[0].inputResponses)}`);
      const answers = posts[1].inputResponses;
      check(answers && typeof answers === 'object' && Object.keys(answers).length === 1,
        `greet (${MODERN}): the retry must carry one inputResponse: ${JSON.stringify(answers)}`);
      const [key, answer] = Object.entries(answers)[0];
      check(answer?.action === 'accept' && JSON.stringify(answer.content) === JSON.stringify({ name: GREET_NAME }),
        `greet (${MODERN}): the retry's inputResponse is not the handler's answer: ${JSON.stringify(answer)}`);
      check(posted === 0, `greet (${MODERN}): ${posted} JSON-RPC response(s) POSTed`);
      greetSummary = ` greet=${JSON.stringify(greet)} via input_required key=${JSON.stringify(key)} ` +
        `requestState=${posts[1].requestState ? 'echoed' : 'absent'}`;
    } else {
      check(posts.length === 1, `greet (legacy): expected 1 tools/call POST, saw ${posts.length}`);
      check(posted === 1, `greet (legacy): expected 1 POSTed elicitation response, saw ${posted}`);
      greetSummary = ` greet=${JSON.stringify(greet)} via server->client request`;
    }
  }

  await client.close();
  const ms = Date.now() - started;
  console.log(`[${opts.label}] ok: negotiation=${opts.negotiation} era=${era} version=${version} ` +
    `echo=ok result=${text.trim()} progress=${JSON.stringify(values)}${greetSummary} ` +
    `posts=${JSON.stringify(Object.fromEntries(wire.posts))} sessions=${wire.sessionIds.size} ${ms}ms`);
  console.log(`[${opts.label}] Mcp-Method headers: ${JSON.stringify(Object.fromEntries(wire.mcpMethod))}`);
}

try {
  await main();
  process.exit(0);
} catch (e) {
  const kind = e instanceof CheckFailed ? 'FAILED' : `ERROR (${e?.constructor?.name ?? typeof e})`;
  console.error(`[${opts.label}] ${kind}: ${e?.message ?? e}`);
  if (!(e instanceof CheckFailed) && e?.data !== undefined) console.error(`[${opts.label}] error data: ${JSON.stringify(e.data)}`);
  console.error(`[${opts.label}] wire: statuses=${JSON.stringify(wire.statuses)} answers=${JSON.stringify(wire.answers)}`);
  process.exit(1);
}

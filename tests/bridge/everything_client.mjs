#!/usr/bin/env node
// Real-client check of tidemark's bridge with the official TypeScript SDK, against tidemark
// fronting the official reference server `@modelcontextprotocol/server-everything` (stdio), run by
// scripts/bridge.sh (stage `everything`).
//
// Goal: prove that what server-everything offers reaches an unmodified SDK client through
// tidemark, both ways: tools, a progress-emitting call (each notification once, in order), the
// server-to-client requests sampling, elicitation and roots (answered by this client's handlers;
// the tool's result must reflect the answer), cancellation, resources (static, templated),
// prompts and completion.
// Method: drive the SDK as an application would (Client + StreamableHTTPClientTransport, with
// sampling/elicitation/roots capabilities and handlers); count requests on the wire through the
// transport's `fetch` hook (observation only). Tool names and arguments are those of
// server-everything 2026.8.31 (dist/tools/*.js in the installed package).
//
// Usage: node everything_client.mjs --url URL [--timeout-ms N] [--label TEXT] [--prefix P]
//                                   [--skip CHECK[,CHECK...]]
//   --prefix P   expect upstream names prefixed (`P__tool`, `P__prompt`, `P+uri`): for a bridge
//                with several named upstreams. Default: names pass through unchanged.
//   --skip       leave out checks by name: tools, progress, sampling, elicitation, roots, cancel,
//                resources, templates, prompts, completion
// Prints one line per check (`[label] check NAME: ok ...` or `FAILED ...`) and a final
// `[label] ok: ...` when all passed. Exit status: 0 when every check passed, 1 otherwise.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema,
  LoggingMessageNotificationSchema, ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const CHECKS = ['tools', 'progress', 'sampling', 'elicitation', 'roots', 'cancel', 'resources',
  'templates', 'prompts', 'completion'];
const USAGE = 'usage: node everything_client.mjs --url URL [--timeout-ms N] [--label TEXT] ' +
  `[--prefix P] [--skip ${CHECKS.join(',')}]`;

function parseArgs(argv) {
  const opts = { url: undefined, timeoutMs: 30000, label: 'everything', prefix: '', skip: new Set() };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === '--help') { console.log(USAGE); process.exit(0); }
    else if (a === '--url' && v) { opts.url = v; i++; }
    else if (a === '--timeout-ms' && v) { opts.timeoutMs = Number.parseInt(v, 10); i++; }
    else if (a === '--label' && v) { opts.label = v; i++; }
    else if (a === '--prefix' && v) { opts.prefix = v; i++; }
    else if (a === '--skip' && v) {
      for (const s of v.split(',')) {
        if (!CHECKS.includes(s)) { console.error(`unknown check ${s}\n${USAGE}`); process.exit(2); }
        opts.skip.add(s);
      }
      i++;
    } else { console.error(`unknown or incomplete argument: ${a}\n${USAGE}`); process.exit(2); }
  }
  if (!opts.url || !Number.isInteger(opts.timeoutMs)) { console.error(USAGE); process.exit(2); }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const started = Date.now();
const since = () => Date.now() - started;
const tool = (n) => (opts.prefix ? `${opts.prefix}__${n}` : n);
const prompt = (n) => (opts.prefix ? `${opts.prefix}__${n}` : n);
const uri = (u) => (opts.prefix ? `${opts.prefix}+${u}` : u);

class CheckFailed extends Error {}
function check(cond, msg) { if (!cond) throw new CheckFailed(msg); }

// ---- wire observation ----------------------------------------------------------------------
const wire = { toolCalls: new Map(), posts: new Map(), statuses: [], timeline: [], resumeGets: 0 };
async function countingFetch(input, init) {
  const method = (init?.method ?? 'GET').toUpperCase();
  let what = method;
  if (method === 'POST' && typeof init?.body === 'string') {
    try {
      const msg = JSON.parse(init.body);
      for (const m of Array.isArray(msg) ? msg : [msg]) {
        const key = m.method ?? (m.result !== undefined ? '(result)' : m.error !== undefined ? '(error)' : '?');
        wire.posts.set(key, (wire.posts.get(key) ?? 0) + 1);
        if (m.method === 'tools/call') {
          const name = String(m.params?.name);
          wire.toolCalls.set(name, (wire.toolCalls.get(name) ?? 0) + 1);
          what = `POST tools/call ${name} id=${m.id}`;
        } else {
          what = `POST ${key}${m.id !== undefined ? ` id=${m.id}` : ''}`;
        }
      }
    } catch { /* not ours to judge */ }
  } else if (method === 'GET' && new Headers(init?.headers).has('last-event-id')) {
    wire.resumeGets += 1;
    what = `GET last-event-id=${new Headers(init.headers).get('last-event-id')}`;
  }
  wire.timeline.push(`${since()} > ${what}`);
  const res = await fetch(input, init);
  wire.statuses.push(`${method} ${res.status}`);
  wire.timeline.push(`${since()} < ${res.status} ${what}`);
  return res;
}

// ---- what the client answers to the server's requests --------------------------------------
const SAMPLING_MODEL = 'tidemark-bridge-test-model';
const ELICIT_NAME = 'Ada Bridge';
const ELICIT_INTEGER = 7;
const ROOT = { uri: 'file:///tmp/tidemark-bridge-root', name: 'bridge-root' };
const seen = { sampling: [], elicitation: [], roots: 0, toolsChanged: 0, logs: [] };

const client = new Client(
  { name: 'tidemark-bridge-everything-client', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } } },
);
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  seen.sampling.push(request.params);
  const first = request.params.messages?.[0]?.content;
  const asked = first?.type === 'text' ? first.text : JSON.stringify(first);
  return {
    model: SAMPLING_MODEL,
    role: 'assistant',
    stopReason: 'endTurn',
    content: { type: 'text', text: `sampled answer to <${asked}>` },
  };
});
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  seen.elicitation.push(request.params);
  return { action: 'accept', content: { name: ELICIT_NAME, check: true, integer: ELICIT_INTEGER } };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  seen.roots += 1;
  return { roots: [ROOT] };
});
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => { seen.toolsChanged += 1; });
client.setNotificationHandler(LoggingMessageNotificationSchema, async (n) => { seen.logs.push(n.params); });

const transport = new StreamableHTTPClientTransport(new URL(opts.url), {
  fetch: countingFetch,
  reconnectionOptions: {
    initialReconnectionDelay: 100, maxReconnectionDelay: 2000, reconnectionDelayGrowFactor: 1.5, maxRetries: 5,
  },
});
const transportErrors = [];
transport.onerror = (e) => {
  wire.timeline.push(`${since()} ! ${e?.message ?? e}`);
  transportErrors.push(String(e?.message ?? e));
};

function textsOf(result, what) {
  check(Array.isArray(result?.content) && result.content.length > 0,
    `${what}: result has no content: ${JSON.stringify(result)}`);
  check(result.isError !== true, `${what}: isError is true: ${JSON.stringify(result)}`);
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}
const callOpts = (extra = {}) => ({ timeout: opts.timeoutMs, ...extra });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the checks ----------------------------------------------------------------------------
async function checkTools() {
  // server-everything registers sampling/elicitation/roots tools once it knows the client's
  // capabilities (after `initialized`) and then sends tools/list_changed; list until they show.
  const want = ['echo', 'trigger-long-running-operation', 'get-sum', 'trigger-sampling-request',
    'trigger-elicitation-request', 'get-roots-list'].map(tool);
  let names = [];
  const deadline = Date.now() + 5000;
  for (;;) {
    names = (await client.listTools(undefined, callOpts())).tools.map((t) => t.name);
    if (want.every((w) => names.includes(w)) || Date.now() > deadline) break;
    await sleep(200);
  }
  const missing = want.filter((w) => !names.includes(w));
  check(missing.length === 0, `tools/list: missing ${JSON.stringify(missing)} (after 5 s, ` +
    `${seen.toolsChanged} tools/list_changed seen); got ${JSON.stringify(names)}`);
  const echo = textsOf(await client.callTool({ name: tool('echo'), arguments: { message: 'héllo bridge' } },
    undefined, callOpts()), 'echo');
  check(echo === 'Echo: héllo bridge', `echo: expected "Echo: héllo bridge", got ${JSON.stringify(echo)}`);
  const sum = textsOf(await client.callTool({ name: tool('get-sum'), arguments: { a: 2, b: 40 } },
    undefined, callOpts()), 'get-sum');
  check(/\b42\b/.test(sum), `get-sum: expected 42 in ${JSON.stringify(sum)}`);
  return `${names.length} tools, list_changed seen ${seen.toolsChanged}, echo ok, get-sum ok`;
}

async function checkProgress() {
  const steps = 5;
  const progress = [];
  const r = await client.callTool(
    { name: tool('trigger-long-running-operation'), arguments: { duration: 1, steps } },
    undefined, callOpts({ resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p) }),
  );
  const text = textsOf(r, 'trigger-long-running-operation');
  check(text.includes(`Steps: ${steps}`), `long-running: unexpected result ${JSON.stringify(text)}`);
  await sleep(100); // a late duplicate would land now
  const values = progress.map((p) => p.progress);
  check(JSON.stringify(values) === JSON.stringify([1, 2, 3, 4, 5]),
    `long-running: progress must be exactly [1,2,3,4,5] (each once, in order), got ${JSON.stringify(values)}`);
  check(progress.every((p) => p.total === steps), `long-running: totals ${JSON.stringify(progress.map((p) => p.total))}`);
  check(wire.toolCalls.get(tool('trigger-long-running-operation')) === 1, 'long-running: POSTed more than once');
  return `progress=${JSON.stringify(values)}`;
}

async function checkSampling() {
  const before = seen.sampling.length;
  const r = await client.callTool(
    { name: tool('trigger-sampling-request'), arguments: { prompt: 'What is a bridge?', maxTokens: 33 } },
    undefined, callOpts());
  const text = textsOf(r, 'trigger-sampling-request');
  check(seen.sampling.length === before + 1,
    `sampling: the client's handler ran ${seen.sampling.length - before} times, expected once`);
  const asked = seen.sampling.at(-1);
  check(asked.maxTokens === 33, `sampling: request maxTokens ${asked.maxTokens}, expected 33 (params altered?)`);
  check(text.includes(SAMPLING_MODEL), `sampling: the tool's result does not carry the client's answer: ${text}`);
  check(text.includes('What is a bridge?'), `sampling: the answer lost the prompt text: ${text}`);
  return `handler ran once, result carries model ${SAMPLING_MODEL}`;
}

async function checkElicitation() {
  const before = seen.elicitation.length;
  const r = await client.callTool({ name: tool('trigger-elicitation-request'), arguments: {} }, undefined,
    callOpts());
  const text = textsOf(r, 'trigger-elicitation-request');
  check(seen.elicitation.length === before + 1,
    `elicitation: the client's handler ran ${seen.elicitation.length - before} times, expected once`);
  check(text.includes(`- Name: ${ELICIT_NAME}`) && text.includes(`- Favorite Integer: ${ELICIT_INTEGER}`),
    `elicitation: the tool's result does not reflect the client's answer: ${text}`);
  return 'handler ran once, result reflects the accepted content';
}

async function checkRoots() {
  const r = await client.callTool({ name: tool('get-roots-list'), arguments: {} }, undefined,
    callOpts({ timeout: Math.min(opts.timeoutMs, 10000) }));
  const text = textsOf(r, 'get-roots-list');
  check(text.includes(ROOT.uri), `roots: the tool's result does not list the client's root ${ROOT.uri}: ${text}`);
  return `roots/list answered ${seen.roots} time(s); result lists ${ROOT.uri}`;
}

async function checkCancel() {
  // Abort a long-running call after its second progress: the SDK sends notifications/cancelled;
  // the call must reject, and the session must go on serving.
  const ac = new AbortController();
  const progress = [];
  const t0 = Date.now();
  let outcome;
  try {
    await client.callTool(
      { name: tool('trigger-long-running-operation'), arguments: { duration: 10, steps: 20 } },
      undefined,
      callOpts({ signal: ac.signal, onprogress: (p) => { progress.push(p.progress); if (progress.length === 2) ac.abort('test cancels'); } }),
    );
    outcome = 'completed';
  } catch (e) {
    outcome = `rejected: ${e?.message ?? e}`;
  }
  const ms = Date.now() - t0;
  check(outcome.startsWith('rejected'), `cancel: the aborted call ${outcome}`);
  check(ms < 5000, `cancel: the aborted call took ${ms} ms to settle`);
  check((wire.posts.get('notifications/cancelled') ?? 0) >= 1, 'cancel: the SDK sent no notifications/cancelled');
  const echo = textsOf(await client.callTool({ name: tool('echo'), arguments: { message: 'after cancel' } },
    undefined, callOpts()), 'echo after cancel');
  check(echo === 'Echo: after cancel', `cancel: echo after the cancel answered ${JSON.stringify(echo)}`);
  return `aborted after progress ${JSON.stringify(progress)} in ${ms} ms, session still serves`;
}

async function checkResources() {
  const list = (await client.listResources(undefined, callOpts())).resources;
  const docs = list.filter((r) => r.uri.startsWith(uri('demo://resource/static/document/')));
  check(docs.length > 0, `resources/list: no demo://resource/static/document/* resource: ${JSON.stringify(list.map((r) => r.uri))}`);
  const first = docs[0];
  const read = await client.readResource({ uri: first.uri }, callOpts());
  check(read.contents?.length === 1 && typeof read.contents[0].text === 'string' && read.contents[0].text.length > 0,
    `resources/read ${first.uri}: ${JSON.stringify(read).slice(0, 300)}`);
  check(read.contents[0].uri === first.uri,
    `resources/read: contents uri ${read.contents[0].uri}, asked ${first.uri}`);
  return `${list.length} resources; read ${first.uri} (${read.contents[0].text.length} chars)`;
}

async function checkTemplates() {
  const templates = (await client.listResourceTemplates(undefined, callOpts())).resourceTemplates;
  const t = templates.find((x) => x.uriTemplate === uri('demo://resource/dynamic/text/{resourceId}'));
  check(t !== undefined, `resources/templates/list: no text template: ${JSON.stringify(templates.map((x) => x.uriTemplate))}`);
  const u = uri('demo://resource/dynamic/text/7');
  const read = await client.readResource({ uri: u }, callOpts());
  check(/^Resource 7: This is a plaintext resource/.test(read.contents?.[0]?.text ?? ''),
    `resources/read ${u}: ${JSON.stringify(read)}`);
  return `template read ${u}`;
}

async function checkPrompts() {
  const prompts = (await client.listPrompts(undefined, callOpts())).prompts.map((p) => p.name);
  for (const p of ['simple-prompt', 'args-prompt', 'completable-prompt'].map(prompt)) {
    check(prompts.includes(p), `prompts/list: missing ${p}; got ${JSON.stringify(prompts)}`);
  }
  const got = await client.getPrompt({ name: prompt('args-prompt'), arguments: { city: 'Paris', state: 'Texas' } },
    callOpts());
  const text = got.messages?.[0]?.content?.text;
  check(text === "What's weather in Paris, Texas?", `prompts/get args-prompt: ${JSON.stringify(got)}`);
  return `${prompts.length} prompts; args-prompt → ${JSON.stringify(text)}`;
}

async function checkCompletion() {
  const r = await client.complete({
    ref: { type: 'ref/prompt', name: prompt('completable-prompt') },
    argument: { name: 'department', value: 'Eng' },
  }, callOpts());
  check(JSON.stringify(r.completion?.values) === JSON.stringify(['Engineering']),
    `completion/complete: expected ["Engineering"], got ${JSON.stringify(r)}`);
  return 'department "Eng" → ["Engineering"]';
}

const RUN = {
  tools: checkTools, progress: checkProgress, sampling: checkSampling, elicitation: checkElicitation,
  roots: checkRoots, cancel: checkCancel, resources: checkResources, templates: checkTemplates,
  prompts: checkPrompts, completion: checkCompletion,
};

async function main() {
  await client.connect(transport, { timeout: opts.timeoutMs });
  check(typeof transport.sessionId === 'string' && transport.sessionId.length > 0, 'initialize: no Mcp-Session-Id');
  const failures = [];
  const failureLines = [];
  for (const name of CHECKS) {
    if (opts.skip.has(name)) { console.log(`[${opts.label}] check ${name}: skipped`); continue; }
    const errorsBefore = transportErrors.length;
    try {
      const note = await RUN[name]();
      console.log(`[${opts.label}] check ${name}: ok ${note}`);
    } catch (e) {
      failures.push(name);
      // What the SDK's transport rejected meanwhile (e.g. a malformed server message) explains
      // a request that then timed out.
      const seenErrors = transportErrors.slice(errorsBefore).map((x) => x.replace(/\s+/g, ' ').slice(0, 400));
      const line = `[${opts.label}] check ${name}: FAILED ${e?.message ?? e}` +
        (seenErrors.length ? ` (transport errors meanwhile: ${seenErrors.join(' | ')})` : '');
      failureLines.push(line);
      console.log(line);
    }
  }
  await transport.terminateSession().catch((e) => failures.push(`delete (${e?.message ?? e})`));
  await client.close().catch(() => {});
  const posts = JSON.stringify(Object.fromEntries(wire.posts));
  if (failures.length > 0) {
    console.error(`[${opts.label}] wire: statuses=${JSON.stringify(wire.statuses)}`);
    console.error(`[${opts.label}] wire: timeline=${wire.timeline.join(' | ').replace(/\s+/g, ' ')}`);
    for (const line of failureLines) console.error(line);
    console.error(`[${opts.label}] FAILED: ${failures.join(', ')}`);
    process.exit(1);
  }
  console.log(`[${opts.label}] ok: ${CHECKS.length - opts.skip.size} checks, sampling=${seen.sampling.length} ` +
    `elicitation=${seen.elicitation.length} roots=${seen.roots} logs=${seen.logs.length} ` +
    `resumes=${wire.resumeGets} posts=${posts} ${since()}ms`);
}

main().then(() => process.exit(0), (e) => {
  console.error(`[${opts.label}] ${e instanceof CheckFailed ? 'FAILED' : 'ERROR'}: ${e?.message ?? e}`);
  console.error(`[${opts.label}] wire: statuses=${JSON.stringify(wire.statuses)}`);
  console.error(`[${opts.label}] wire: timeline=${wire.timeline.join(' | ')}`);
  process.exit(1);
});

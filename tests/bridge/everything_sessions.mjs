#!/usr/bin/env node
// Real-client check of tidemark's per-session tool tables and tool filters (issue 22 items 3
// and 2) with the official TypeScript SDK, against tidemark fronting the official reference
// server `@modelcontextprotocol/server-everything` (stdio), run by scripts/bridge.sh (stage
// `sessions`).
//
// Goal: server-everything offers `trigger-elicitation-request` only to a client that declared
// elicitation (and `trigger-sampling-request`/`get-roots-list` only for sampling/roots). Behind
// tidemark with --upstream-isolation per-session each client session has its own upstream, so
// each must be listed exactly its own upstream's tools and be able to call exactly those.
// Method (--scenario sessions): a probe client with no capabilities connects first (as the
// mcp-remote bridge does), then a client that declares elicitation only; they list and call in
// turns. The elicitor must be listed the probe's tools plus trigger-elicitation-request, call it
// (its handler answers; the result reflects the answer), and the probe's call of it must be
// refused -32602 `unknown tool` by tidemark; both call echo. Then the probe lists again (after
// the elicitor listed last) and still lacks the tool.
// Method (--scenario filter --compare-url URL --hidden NAME[,NAME...]): URL is a second tidemark
// without filters in front of the same server; every tool of --url must be the same JSON as
// --compare-url's (annotations unchanged), --url's names are --compare-url's minus --hidden,
// and each hidden tool's call is refused -32602 `unknown tool`.
//
// Usage: node everything_sessions.mjs --url URL [--label TEXT] [--timeout-ms N]
//                                     [--scenario sessions|filter] [--compare-url URL]
//                                     [--hidden NAME[,NAME...]]
// Prints `[label] ok: ...` when every check passed (exit 0), else `[label] FAILED: ...` (exit 1).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

const USAGE = 'usage: node everything_sessions.mjs --url URL [--label TEXT] [--timeout-ms N] ' +
  '[--scenario sessions|filter] [--compare-url URL] [--hidden NAME[,NAME...]]';

function parseArgs(argv) {
  const opts = { url: undefined, label: 'sessions', timeoutMs: 30000, scenario: 'sessions',
    compareUrl: undefined, hidden: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === '--help') { console.log(USAGE); process.exit(0); }
    else if (a === '--url' && v) { opts.url = v; i++; }
    else if (a === '--label' && v) { opts.label = v; i++; }
    else if (a === '--timeout-ms' && v) { opts.timeoutMs = Number.parseInt(v, 10); i++; }
    else if (a === '--scenario' && (v === 'sessions' || v === 'filter')) { opts.scenario = v; i++; }
    else if (a === '--compare-url' && v) { opts.compareUrl = v; i++; }
    else if (a === '--hidden' && v) { opts.hidden = v.split(','); i++; }
    else { console.error(`unknown or incomplete argument: ${a}\n${USAGE}`); process.exit(2); }
  }
  if (!opts.url || (opts.scenario === 'filter' && (!opts.compareUrl || opts.hidden.length === 0))) {
    console.error(USAGE);
    process.exit(2);
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const callOpts = { timeout: opts.timeoutMs };
const ELICIT = 'trigger-elicitation-request';
const ELICIT_NAME = 'Ada Sessions';

class CheckFailed extends Error {}
function check(cond, msg) { if (!cond) throw new CheckFailed(msg); }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(url, name, capabilities) {
  const client = new Client({ name, version: '1.0.0' }, { capabilities });
  if (capabilities.elicitation) {
    client.setRequestHandler(ElicitRequestSchema, async () => (
      { action: 'accept', content: { name: ELICIT_NAME, check: true, integer: 3 } }));
  }
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  // DELETE ends the session and so its upstream child (bridge.sh checks none is left).
  client.end = async () => {
    await transport.terminateSession();
    await client.close();
  };
  return client;
}

const names = async (client) => (await client.listTools(undefined, callOpts)).tools.map((t) => t.name);

// server-everything registers its capability-dependent tools after `initialized` and then says
// tools/list_changed: list until `want` is in (or the deadline passes).
async function namesOnceListed(client, want) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const listed = await names(client);
    if (listed.includes(want) || Date.now() > deadline) return listed;
    await sleep(200);
  }
}

// The call's JSON-RPC error code when tidemark refuses it, or 'ran' when it ran.
async function callOutcome(client, name, args) {
  try {
    const r = await client.callTool({ name, arguments: args }, undefined, callOpts);
    return { ran: true, result: r };
  } catch (e) {
    if (e instanceof McpError) return { ran: false, code: e.code, message: e.message };
    throw e;
  }
}

function checkUnknown(outcome, name, who) {
  check(!outcome.ran, `${who}: ${name} ran but it is not listed to it: ${JSON.stringify(outcome.result)}`);
  check(outcome.code === -32602 && outcome.message.includes(`unknown tool: ${name}`),
    `${who}: ${name} refused with ${outcome.code} ${JSON.stringify(outcome.message)}, expected -32602 unknown tool`);
}

async function echoes(client, who) {
  const r = await client.callTool({ name: 'echo', arguments: { message: who } }, undefined, callOpts);
  const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
  check(text === `Echo: ${who}`, `${who}: echo answered ${JSON.stringify(text)}`);
}

async function sessions() {
  const probe = await connect(opts.url, 'tidemark-probe', {});
  const probeFirst = await names(probe);
  const elicitor = await connect(opts.url, 'tidemark-elicitor', { elicitation: { form: {} } });
  let summary = '';
  for (let round = 1; round <= 2; round++) {
    const listed = await namesOnceListed(elicitor, ELICIT);
    const probed = await names(probe);
    check(listed.includes(ELICIT), `round ${round}: the elicitor is not listed ${ELICIT}: ${JSON.stringify(listed)}`);
    check(!probed.includes(ELICIT), `round ${round}: the probe is listed ${ELICIT}: ${JSON.stringify(probed)}`);
    const extra = listed.filter((n) => !probed.includes(n));
    const missing = probed.filter((n) => !listed.includes(n));
    check(extra.length === 1 && missing.length === 0,
      `round ${round}: the elicitor's list must be the probe's plus ${ELICIT}; extra ${JSON.stringify(extra)}, missing ${JSON.stringify(missing)}`);
    const ran = await callOutcome(elicitor, ELICIT, {});
    check(ran.ran, `round ${round}: the elicitor's ${ELICIT} was refused: ${ran.code} ${ran.message}`);
    const text = (ran.result.content ?? []).map((c) => c.text ?? '').join('\n');
    check(text.includes(ELICIT_NAME), `round ${round}: ${ELICIT} result lacks the answer: ${text.slice(0, 300)}`);
    checkUnknown(await callOutcome(probe, ELICIT, {}), ELICIT, `round ${round} probe`);
    await echoes(probe, `probe-${round}`);
    await echoes(elicitor, `elicitor-${round}`);
    summary = `probe ${probed.length} tools, elicitor ${listed.length} (+${ELICIT})`;
  }
  const probeLast = await names(probe);
  check(!probeLast.includes(ELICIT) && probeLast.length === probeFirst.length,
    `the probe's list changed after the elicitor listed: ${JSON.stringify(probeFirst)} -> ${JSON.stringify(probeLast)}`);
  await probe.end();
  await elicitor.end();
  return `${summary}; the probe's call of ${ELICIT} refused -32602 twice; echo ok for both`;
}

async function filter() {
  const caps = { elicitation: { form: {} } };
  const full = await connect(opts.compareUrl, 'tidemark-unfiltered', caps);
  const filtered = await connect(opts.url, 'tidemark-filtered', caps);
  await namesOnceListed(full, ELICIT);
  const fullNow = (await full.listTools(undefined, callOpts)).tools;
  const fullNames = fullNow.map((t) => t.name);
  for (const h of opts.hidden) check(fullNames.includes(h), `${h} is not a tool of the upstream: ${JSON.stringify(fullNames)}`);
  const want = fullNames.filter((n) => !opts.hidden.includes(n));
  // The filtered session's upstream registers its late tools too: list until they are in.
  let shown = [];
  const deadline = Date.now() + 5000;
  for (;;) {
    shown = (await filtered.listTools(undefined, callOpts)).tools;
    if (shown.length >= want.length || Date.now() > deadline) break;
    await sleep(200);
  }
  const got = shown.map((t) => t.name);
  check(JSON.stringify(got) === JSON.stringify(want), `filtered list ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
  let annotated = 0;
  for (const t of shown) {
    const same = fullNow.find((f) => f.name === t.name);
    check(JSON.stringify(same) === JSON.stringify(t), `${t.name} differs from the unfiltered listing: ${JSON.stringify(t)} vs ${JSON.stringify(same)}`);
    if (t.annotations) annotated++;
  }
  for (const h of opts.hidden) checkUnknown(await callOutcome(filtered, h, {}), h, 'filtered');
  await echoes(filtered, 'filtered');
  await full.end();
  await filtered.end();
  return `${got.length} of ${fullNames.length} tools listed, same JSON (${annotated} with annotations); ` +
    `${opts.hidden.length} hidden refused -32602`;
}

try {
  const what = opts.scenario === 'sessions' ? await sessions() : await filter();
  console.log(`[${opts.label}] ok: ${what}`);
  process.exit(0);
} catch (e) {
  console.log(`[${opts.label}] FAILED: ${e instanceof CheckFailed ? e.message : e?.stack ?? e}`);
  process.exit(1);
}

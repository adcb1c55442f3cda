// End-to-end authorization checks against a running tidemark and the real authorization server
// of tests/auth/provider.mjs (scripts/auth.sh starts both). Node built-ins only (fetch, crypto).
//
// Usage: node e2e.mjs keygen FILE            writes a JWK Set with one RS256 key to FILE (tidemark
//                                            loads it with --auth-jwks-file) and its private half
//                                            to FILE.private: hostile tokens whose only fault is
//                                            a claim are signed with it
//        node e2e.mjs STAGE                  runs STAGE (wire, rotation, hostile, cross-subject,
//                                            exchange)
// Environment: TIDEMARK_URL (the endpoint), AUTH_ISSUER, AUTH_RESOURCE, AUTH_OTHER_RESOURCE (a
// resource the provider also issues for), TEST_KEYS (keygen's FILE), MIN_REFETCH_SECS,
// TOKENS_SEEN (a file: every token sent is appended, one a line, for the log check).
// Prints what it checks; exits 1 at the first failure.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';

const env = process.env;
const LEGACY_VERSION = '2025-11-25';
const MODERN_VERSION = '2026-07-28';
const MODERN_META = {
  'io.modelcontextprotocol/protocolVersion': MODERN_VERSION,
  'io.modelcontextprotocol/clientCapabilities': {},
};

function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}
function check(cond, message) {
  if (!cond) fail(message);
  console.log(`ok: ${message}`);
}

const b64url = (bytes) => Buffer.from(bytes).toString('base64url');
const b64json = (value) => b64url(JSON.stringify(value));

function remember(token) {
  if (env.TOKENS_SEEN) fs.appendFileSync(env.TOKENS_SEEN, `${token}\n`);
  return token;
}

/** An access token from the provider: client credentials + RFC 8707 resource indicator. */
async function providerToken({ client = 'tidemark-test', scope = 'tools:read', resource } = {}) {
  const form = new URLSearchParams({
    grant_type: 'client_credentials',
    client_id: client,
    client_secret: `${client}-secret`,
    resource: resource ?? env.AUTH_RESOURCE,
    scope,
  });
  const r = await fetch(`${env.AUTH_ISSUER}/token`, { method: 'POST', body: form });
  const body = await r.json();
  if (r.status !== 200) fail(`token endpoint answered ${r.status}: ${JSON.stringify(body)}`);
  return remember(body.access_token);
}

/** One POST to tidemark; answers {status, headers, text, json}. */
async function post(body, { token, headers = {}, url = env.TIDEMARK_URL } = {}) {
  const h = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers };
  if (token !== undefined) h.authorization = `Bearer ${token}`;
  const r = await fetch(url, { method: 'POST', headers: h, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // An SSE body: the last `data:` line carrying a JSON-RPC answer.
    const datas = text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim());
    for (const d of datas.reverse()) {
      try {
        const v = JSON.parse(d);
        if ('result' in v || 'error' in v) { json = v; break; }
      } catch { /* a priming event */ }
    }
  }
  return { status: r.status, headers: r.headers, text, json };
}

async function legacyInitialize(token) {
  const r = await post({
    jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { name: 'e2e', version: '1' } },
  }, { token });
  const session = r.headers.get('mcp-session-id');
  if (r.status === 200 && session) {
    const n = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, {
      token, headers: { 'mcp-session-id': session, 'mcp-protocol-version': LEGACY_VERSION },
    });
    if (n.status !== 202) fail(`notifications/initialized answered ${n.status}`);
  }
  return { r, session };
}

function legacyCall(token, session, name, args, id = 2) {
  return post({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } }, {
    token, headers: { 'mcp-session-id': session, 'mcp-protocol-version': LEGACY_VERSION },
  });
}

function modernCall(token, name, args, id = 3) {
  return post({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, _meta: MODERN_META } }, {
    token,
    headers: { 'mcp-protocol-version': MODERN_VERSION, 'mcp-method': 'tools/call', 'mcp-name': name },
  });
}

function echoed(r, text) {
  return r.status === 200 && JSON.stringify(r.json?.result ?? null).includes(text);
}

function metadataUrl() {
  const u = new URL(env.TIDEMARK_URL);
  return `${u.origin}/.well-known/oauth-protected-resource${u.pathname}`;
}

async function stageWire() {
  const none = await post({ jsonrpc: '2.0', id: 1, method: 'ping' });
  const challenge = none.headers.get('www-authenticate') ?? '';
  check(none.status === 401 && challenge.startsWith('Bearer resource_metadata="'),
    `no token: 401 with a resource_metadata challenge (${none.status} ${challenge})`);
  const metaAt = challenge.match(/resource_metadata="([^"]+)"/)[1];
  check(metaAt === metadataUrl(), `the challenge names ${metadataUrl()}`);
  const meta = await (await fetch(metaAt)).json();
  check(meta.resource === env.AUTH_RESOURCE, `metadata resource is ${env.AUTH_RESOURCE}`);
  check(JSON.stringify(meta.authorization_servers) === JSON.stringify([env.AUTH_ISSUER]),
    `metadata authorization_servers is [${env.AUTH_ISSUER}] (${JSON.stringify(meta.authorization_servers)})`);
  const asMeta = await (await fetch(`${env.AUTH_ISSUER}/.well-known/openid-configuration`)).json();
  check(asMeta.issuer === env.AUTH_ISSUER, 'the authorization server found from the metadata answers its discovery');

  const token = await providerToken();
  const { r, session } = await legacyInitialize(token);
  check(r.status === 200 && session, `legacy initialize with a provider token: ${r.status}, session ${session ? 'set' : 'missing'}`);
  check(echoed(await legacyCall(token, session, 'echo', { text: 'legacy-jwt' }), 'legacy-jwt'),
    'legacy tools/call echo with a provider token');
  check(echoed(await modernCall(token, 'echo', { text: 'modern-jwt' }), 'modern-jwt'),
    '2026-07-28 tools/call echo with a provider token');

  // The policy (scripts/auth.sh): get_counter needs tools:write, the token above has tools:read.
  const denied = await modernCall(token, 'get_counter', {});
  const deniedChallenge = denied.headers.get('www-authenticate') ?? '';
  check(denied.status === 403 && deniedChallenge.endsWith('error="insufficient_scope", scope="tools:write"'),
    `a tools:read token calling get_counter: 403 insufficient_scope tools:write (${denied.status} ${deniedChallenge})`);
  const writer = await providerToken({ scope: 'tools:read tools:write' });
  const allowed = await modernCall(writer, 'get_counter', {});
  check(allowed.status === 200 && allowed.json?.result, `a tools:write token calls get_counter (${allowed.status})`);
}

async function stageRotation() {
  const before = await providerToken();
  check(echoed(await modernCall(before, 'echo', { text: 'pre' }), 'pre'), 'a token of the first key is accepted');
  const rotated = await (await fetch(`${env.AUTH_ISSUER}/control/rotate`, { method: 'POST' })).json();
  const token = await providerToken();
  const kid = JSON.parse(Buffer.from(token.split('.')[0], 'base64url')).kid;
  check(kid === rotated.kid, `the provider signs with the rotated key ${kid}`);
  // The first use of the new kid may be refused (401 invalid_token) while the refresher reads the
  // set in the background; it must be accepted once one refetch interval has passed. Poll until
  // then (a deadline of the interval plus the read's own time), then insist.
  const started = Date.now();
  const deadline = started + (Number(env.MIN_REFETCH_SECS) + 2) * 1000;
  let r = await modernCall(token, 'echo', { text: 'rotated' });
  let refusals = 0;
  while (!echoed(r, 'rotated') && Date.now() < deadline) {
    const challenge = r.headers.get('www-authenticate') ?? '';
    check(r.status === 401 && challenge.includes('error="invalid_token"'),
      `while the keys refresh the new kid is 401 invalid_token (${r.status})`);
    refusals += 1;
    await new Promise((done) => setTimeout(done, 100));
    r = await modernCall(token, 'echo', { text: 'rotated' });
  }
  check(echoed(r, 'rotated'), `a token of the rotated key is accepted after ${Date.now() - started} ms (${refusals} refusals)`);
  check(echoed(await modernCall(before, 'echo', { text: 'old' }), 'old'), 'a token of the old key (still listed) is still accepted');
}

function keygen(file) {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid: `e2e-${crypto.randomBytes(4).toString('hex')}`, alg: 'RS256', use: 'sig' };
  const { d, p, q, dp, dq, qi, ...pub } = jwk;
  fs.writeFileSync(file, JSON.stringify({ keys: [pub] }));
  fs.writeFileSync(`${file}.private`, JSON.stringify(jwk));
}

function sign(header, claims, jwk) {
  const input = `${b64json(header)}.${b64json(claims)}`;
  const key = crypto.createPrivateKey({ key: jwk, format: 'jwk' });
  return `${input}.${b64url(crypto.sign('sha256', Buffer.from(input), key))}`;
}

async function stageHostile() {
  const test = JSON.parse(fs.readFileSync(`${env.TEST_KEYS}.private`, 'utf8'));
  const now = Math.floor(Date.now() / 1000);
  const claims = (over = {}) => ({
    iss: env.AUTH_ISSUER, aud: env.AUTH_RESOURCE, sub: 'mallory', scope: 'tools:read',
    iat: now, exp: now + 300, ...over,
  });
  const header = { alg: 'RS256', typ: 'at+jwt', kid: test.kid };
  // The control: the test key's own token with good claims is accepted, so each refusal below is
  // about the one thing changed.
  const good = remember(sign(header, claims(), test));
  check(echoed(await modernCall(good, 'echo', { text: 'control' }), 'control'), 'control: a good token of the test key is accepted');

  const real = await providerToken();
  const [rh, rp, rs] = real.split('.');
  const rsaPublic = crypto.createPublicKey({ key: test, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
  const hsInput = `${b64json({ alg: 'HS256', typ: 'JWT', kid: test.kid })}.${b64json(claims())}`;
  const stranger = { ...crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }) };
  const tampered = JSON.parse(Buffer.from(rp, 'base64url'));
  tampered.scope = 'tools:read tools:write';
  tampered.sub = 'someone-else';
  const hostile = {
    'alg none': `${b64json({ alg: 'none', typ: 'JWT' })}.${b64json(claims())}.`,
    'HS256 keyed with the RSA public key': `${hsInput}.${b64url(crypto.createHmac('sha256', rsaPublic).update(hsInput).digest())}`,
    expired: sign(header, claims({ iat: now - 3600, exp: now - 600 }), test),
    'nbf in the future': sign(header, claims({ nbf: now + 600 }), test),
    'wrong aud (the provider\'s token for another resource)': await providerToken({ resource: env.AUTH_OTHER_RESOURCE }),
    'wrong iss': sign(header, claims({ iss: 'http://127.0.0.1:9/not-the-issuer' }), test),
    'unknown kid': sign({ ...header, kid: 'no-such-kid' }, claims(), stranger),
    'tampered payload': `${rh}.${b64json(tampered)}.${rs}`,
  };
  for (const [name, token] of Object.entries(hostile)) {
    remember(token);
    for (const [era, r] of [
      ['legacy', await post({
        jsonrpc: '2.0', id: 1, method: 'initialize',
        params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { name: 'e2e', version: '1' } },
      }, { token })],
      ['2026-07-28', await modernCall(token, 'echo', { text: 'x' })],
    ]) {
      const challenge = r.headers.get('www-authenticate') ?? '';
      check(r.status === 401 && challenge.includes('error="invalid_token"'), `${name} (${era}): 401 invalid_token (${r.status} ${challenge})`);
      leaksNothing(r, token, `${name} (${era})`);
    }
  }

  const huge = `${'a'.repeat(100 * 1024)}`;
  const big = await post({ jsonrpc: '2.0', id: 1, method: 'ping' }, { token: huge }).catch((e) => ({ error: e }));
  if (big.error) {
    // The server may answer 431 and close before the client finished sending the head.
    check(/ECONNRESET|EPIPE|other side closed|SocketError/i.test(String(big.error.cause ?? big.error)),
      `a 100 KB Authorization header: the connection is refused (${big.error.cause ?? big.error})`);
  } else {
    check(big.status === 431, `a 100 KB Authorization header: 431 (${big.status})`);
    leaksNothing(big, huge.slice(0, 64), 'a 100 KB header');
  }

  const query = await post({ jsonrpc: '2.0', id: 1, method: 'ping' }, {
    url: `${env.TIDEMARK_URL}?access_token=${encodeURIComponent(real)}`, token: real,
  });
  const qc = query.headers.get('www-authenticate') ?? '';
  check(query.status === 400 && qc.includes('error="invalid_request"'), `a token in the query string: 400 invalid_request (${query.status} ${qc})`);
  leaksNothing(query, real, 'a token in the query string');
}

/** Nothing of the token (any of its three parts, or a long enough slice) in the body or headers. */
function leaksNothing(r, token, what) {
  const seen = `${[...r.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}\n${r.text}`;
  const pieces = token.split('.').filter((p) => p.length >= 16);
  for (const p of pieces.length ? pieces : [token]) {
    if (seen.includes(p) || seen.includes(p.slice(0, 32))) fail(`${what}: the answer carries part of the token`);
  }
  console.log(`ok: ${what}: nothing of the token in the answer`);
}

async function stageCrossSubject() {
  const alice = await providerToken({ client: 'tidemark-test' });
  const bob = await providerToken({ client: 'tidemark-test-b' });
  const subject = (t) => JSON.parse(Buffer.from(t.split('.')[1], 'base64url')).sub;
  check(subject(alice) !== subject(bob), `two subjects: ${subject(alice)} and ${subject(bob)}`);
  const { r, session } = await legacyInitialize(alice);
  check(r.status === 200 && session, "alice's session opens");
  check(echoed(await legacyCall(alice, session, 'echo', { text: 'mine' }), 'mine'), 'alice uses her session');
  const stolen = await legacyCall(bob, session, 'echo', { text: 'theirs' });
  check(stolen.status === 404 && !stolen.text.includes('mine'), `bob's token on alice's session: 404 (${stolen.status})`);
  const unknown = await legacyCall(bob, 'no-such-session-id', 'echo', { text: 'theirs' });
  check(stolen.text === unknown.text, "bob gets exactly what an unknown session gets (nothing confirms alice's exists)");
  for (const method of ['GET', 'DELETE']) {
    const r = await fetch(env.TIDEMARK_URL, {
      method,
      headers: {
        authorization: `Bearer ${bob}`, accept: 'text/event-stream',
        'mcp-session-id': session, 'mcp-protocol-version': LEGACY_VERSION,
      },
    });
    await r.body?.cancel();
    check(r.status === 404, `bob's token, ${method} on alice's session: 404 (${r.status})`);
  }
  check(echoed(await legacyCall(alice, session, 'echo', { text: 'still' }), 'still'), "alice's session is untouched (bob's DELETE ended nothing)");
}

// Token exchange toward an upstream (--upstream-auth who=exchange; scripts/auth.sh starts this
// tidemark at TIDEMARK_URL with the upstream tests/auth/exchange_upstream.mjs at UPSTREAM_URL,
// which takes only tokens whose aud is EXCHANGE_AUDIENCE; exchanged tokens live EXCHANGE_TTL s,
// tidemark's margin is EXCHANGE_MARGIN s). Two users: each upstream request carries that user's
// exchanged token; within its lifetime the cache is used (counted at the authorization
// server), after it a new one is exchanged; a refused exchange ends the call with -32603
// naming the upstream and the server's error, never a token.
async function stageExchange() {
  const exchanges = async () => (await (await fetch(`${env.AUTH_ISSUER}/control/exchanges`)).json()).count;
  const upstream = async () => (await fetch(new URL('/seen', env.UPSTREAM_URL))).json();
  const seen = async () => (await upstream()).requests;
  const whoami = async (user, id) => {
    const r = await legacyCall(user.token, user.session, 'whoami', {}, id);
    return { r, text: r.json?.result?.content?.[0]?.text ?? JSON.stringify(r.json) };
  };
  const audience = env.EXCHANGE_AUDIENCE;
  const start = await exchanges();
  const users = [];
  for (const [name, client] of [['alice', 'tidemark-test'], ['bob', 'tidemark-test-b']]) {
    const token = await providerToken({ client });
    const { r, session } = await legacyInitialize(token);
    check(r.status === 200 && session, `${name} (${client}) opens a session through the exchanging upstream (${r.status})`);
    users.push({ name, client, token, session });
  }
  let id = 10;
  for (const user of [...users, users[0]]) {
    const { text } = await whoami(user, id++);
    check(text === `sub=${user.client} aud=${audience}`, `${user.name}'s call reached the upstream as ${text}`);
  }
  check(await exchanges() - start === 2,
    `one exchange per user for the session's start, listing and calls (${await exchanges() - start})`);
  const requests = await seen();
  console.log('what each upstream request carried (method sub aud act jti):');
  for (const q of requests) console.log(`  ${q.method} sub=${q.sub} aud=${q.aud} act=${q.act} jti=${q.jti}`);
  const subjects = new Set(users.map((u) => u.client));
  check(requests.length > 0 && requests.every((q) => subjects.has(q.sub) && q.aud === audience && q.act === 'tidemark-gateway'),
    'every upstream request carried a user\'s exchanged token (aud the upstream, act the gateway)');
  const calls = requests.filter((q) => q.method === 'tools/call').map((q) => q.sub);
  check(JSON.stringify(calls) === JSON.stringify(['tidemark-test', 'tidemark-test-b', 'tidemark-test']),
    `the upstream saw the calls as alice, bob, alice (${calls.join(', ')})`);
  const firstJti = requests.filter((q) => q.method === 'tools/call')[0].jti;

  // Elapsed time is what is tested: the cached token is past its freshness (ttl - margin).
  const fresh = (Number(env.EXCHANGE_TTL) - Number(env.EXCHANGE_MARGIN)) * 1000;
  await new Promise((resolve) => setTimeout(resolve, fresh + 300));
  const { text } = await whoami(users[0], id++);
  check(text === `sub=tidemark-test aud=${audience}`, `after the token's freshness alice's call still reaches the upstream (${text})`);
  check(await exchanges() - start === 3, `... through a new exchange (${await exchanges() - start} in all)`);
  const last = (await seen()).filter((q) => q.method === 'tools/call').at(-1);
  check(last.sub === 'tidemark-test' && last.jti !== firstJti, `... carrying a new token (jti ${last.jti}, was ${firstJti})`);

  check((await upstream()).refused === 0, 'the upstream refused no request (none went without a valid exchanged token)');

  await fetch(`${env.AUTH_ISSUER}/control/exchange/deny`, { method: 'POST' });
  const refused = await whoami(users[1], id++);
  const error = refused.r.json?.error;
  console.log(`refused exchange: ${JSON.stringify(error)}`);
  check(error?.code === -32603, `a refused exchange ends bob's call with -32603 (${refused.r.status} ${refused.text})`);
  check(error.message.includes('upstream who') && error.message.includes('unauthorized_client'),
    'the refusal names the upstream and the authorization server\'s error');
  check(error.data?.oauth_error === 'unauthorized_client' && error.data?.upstream === 'who', 'its data too');
  check(!refused.r.text.includes(users[1].token) && !/eyJ[A-Za-z0-9_-]{8,}\./.test(refused.r.text),
    'the answer holds no token');

  // The counter: exchanges made (not a cached token's use), by outcome, at tidemark's /metrics.
  const metrics = await (await fetch(env.METRICS_URL)).text();
  const counted = (outcome) => Number(metrics.match(new RegExp(
    `^tidemark_upstream_token_exchanges_total\\{upstream="who",outcome="${outcome}"\\} (\\d+)$`, 'm'))?.[1]);
  const made = await exchanges() - start;
  check(counted('exchanged') === made && counted('refused') === 1 && counted('failed') === 0,
    `tidemark_upstream_token_exchanges_total: exchanged ${counted('exchanged')} (the server issued ${made}), refused ${counted('refused')}, failed ${counted('failed')}`);
}

const [stage, arg] = process.argv.slice(2);
const stages = {
  wire: stageWire, rotation: stageRotation, hostile: stageHostile, 'cross-subject': stageCrossSubject,
  exchange: stageExchange,
};
if (stage === 'keygen') keygen(arg);
else if (stages[stage]) await stages[stage]();
else fail(`unknown stage ${stage}`);

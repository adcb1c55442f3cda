// The official TypeScript clients with the SDK's own OAuth client provider for the client
// credentials grant (ClientCredentialsProvider) against a tidemark that requires JWT access
// tokens: the SDK does the whole discovery itself (401 → the protected resource metadata named by
// the challenge → the authorization server's metadata → token with the resource indicator →
// retry), then lists and calls a tool. --sdk v1: @modelcontextprotocol/sdk, the legacy era;
// --sdk v2: @modelcontextprotocol/client pinned to 2026-07-28 (its server/discover is the first
// request). A fetch wrapper records what the SDK asked for, so the test sees that discovery
// happened in that order (it never alters a request).
//
// Usage (from the directory where that SDK is installed, scripts/auth.sh copies it there):
//   node ts_oauth_client.mjs --sdk v1|v2 --url URL --issuer ISSUER --client-id ID --client-secret S
// Prints what it checks; exits 1 on a failure.

import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    sdk: { type: 'string', default: 'v1' },
    url: { type: 'string' },
    issuer: { type: 'string' },
    'client-id': { type: 'string' },
    'client-secret': { type: 'string' },
  },
});

function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}
function check(cond, message) {
  if (!cond) fail(message);
  console.log(`ok: ${message}`);
}

const v2 = args.sdk === 'v2';
const { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } = v2
  ? await import('@modelcontextprotocol/client')
  : {
    ...(await import('@modelcontextprotocol/sdk/client/index.js')),
    ...(await import('@modelcontextprotocol/sdk/client/auth-extensions.js')),
    ...(await import('@modelcontextprotocol/sdk/client/streamableHttp.js')),
  };

const steps = [];
const recordingFetch = async (input, init) => {
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
  const response = await fetch(input, init);
  const hasToken = new Headers(init?.headers ?? {}).get('authorization')?.startsWith('Bearer ') ?? false;
  steps.push({ method, origin: url.origin, path: url.pathname, status: response.status, hasToken });
  return response;
};

// The client is registered at the authorization server with client_secret_post; its client
// information says so, as a registration answer would, and the SDK then uses that method instead
// of its default (client_secret_basic).
class RegisteredClientCredentials extends ClientCredentialsProvider {
  clientInformation() {
    return { ...super.clientInformation(), token_endpoint_auth_method: 'client_secret_post' };
  }
}
const provider = new RegisteredClientCredentials({
  clientId: args['client-id'],
  clientSecret: args['client-secret'],
  scope: 'tools:read',
  expectedIssuer: args.issuer,
});

const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  authProvider: provider,
  fetch: recordingFetch,
});
const client = new Client({ name: 'tidemark-auth-e2e', version: '1.0.0' },
  v2 ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {});
await client.connect(transport).catch((e) => fail(`connect: ${e?.stack ?? e}`));
if (v2) {
  check(client.getNegotiatedProtocolVersion() === '2026-07-28' && client.getProtocolEra() === 'modern',
    `the v2 client is in the 2026-07-28 era (${client.getNegotiatedProtocolVersion()})`);
}

const mcp = new URL(args.url).origin;
const issuer = new URL(args.issuer).origin;
const endpoint = new URL(args.url).pathname;
const at = (pred) => steps.findIndex(pred);
const firstOk = at((s) => s.origin === mcp && s.path === endpoint && s.method === 'POST' && s.status === 200);
const unauthorized = at((s) => s.origin === mcp && s.status === 401 && !s.hasToken);
const prm = at((s) => s.origin === mcp && s.path.startsWith('/.well-known/oauth-protected-resource') && s.status === 200);
const asMeta = at((s) => s.origin === issuer && s.path.startsWith('/.well-known/') && s.status === 200);
const token = at((s) => s.origin === issuer && s.path === '/token' && s.status === 200);
console.log(steps.map((s) => `${s.method} ${s.origin}${s.path} -> ${s.status}${s.hasToken ? ' (bearer)' : ''}`).join('\n'));
check(unauthorized === 0, 'the first request (no token) is answered 401');
check(prm > unauthorized, 'then the SDK reads the protected resource metadata the challenge names');
check(asMeta > prm, "then the authorization server's metadata");
check(token > asMeta, 'then gets a token at its token endpoint');
check(firstOk > token && steps[firstOk].hasToken, 'then the retry with the bearer token succeeds');
check(provider.tokens()?.access_token, 'the provider holds the access token');

const tools = await client.listTools();
check(tools.tools.some((t) => t.name === 'echo'), `tools/list lists echo (${tools.tools.map((t) => t.name).join(', ')})`);
const result = await client.callTool({ name: 'echo', arguments: { text: 'ts-oauth' } });
check(JSON.stringify(result.content).includes('ts-oauth'), 'tools/call echo answers');
await client.close();

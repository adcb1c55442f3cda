// The official TypeScript client (@modelcontextprotocol/sdk, legacy era) with the SDK's own OAuth
// client provider for the client credentials grant (ClientCredentialsProvider) against a tidemark
// that requires JWT access tokens: the SDK does the whole discovery itself (401 → the protected
// resource metadata named by the challenge → the authorization server's metadata → token with
// the resource indicator → retry), then lists and calls a tool. A fetch wrapper records what it
// asked for, so the test sees that discovery happened in that order.
//
// Usage (from the directory where the SDK is installed, scripts/auth.sh copies it there):
//   node ts_oauth_client.mjs --url URL --issuer ISSUER --client-id ID --client-secret SECRET
// Prints what it checks; exits 1 on a failure.

import { parseArgs } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { values: args } = parseArgs({
  options: {
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

const steps = [];
const recordingFetch = async (input, init) => {
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
  const response = await fetch(input, init);
  const hasToken = new Headers(init?.headers ?? {}).get('authorization')?.startsWith('Bearer ') ?? false;
  steps.push({ method, origin: url.origin, path: url.pathname, status: response.status, hasToken });
  return response;
};

const provider = new ClientCredentialsProvider({
  clientId: args['client-id'],
  clientSecret: args['client-secret'],
  scope: 'tools:read',
  expectedIssuer: args.issuer,
});
// The client is registered at the authorization server with client_secret_post (as a client's
// registration says; the SDK then uses that method instead of its default, client_secret_basic).
provider.saveClientInformation({
  ...provider.clientInformation(),
  token_endpoint_auth_method: 'client_secret_post',
});

const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  authProvider: provider,
  fetch: recordingFetch,
});
const client = new Client({ name: 'tidemark-auth-e2e', version: '1.0.0' });
await client.connect(transport).catch((e) => fail(`connect: ${e?.stack ?? e}`));

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

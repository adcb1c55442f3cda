// An HTTP MCP upstream that accepts only exchanged tokens (scripts/auth.sh, stage `exchange`):
// every request must carry `Authorization: Bearer JWT` signed by the authorization server
// (its JWKS), issued by it, unexpired, with `aud` this upstream's --audience. It records what
// each request carried (method, sub, aud, jti, act) and answers 401 to anything else.
// Node built-ins only; legacy Streamable HTTP with JSON answers (no SSE, no GET stream).
//
// Usage: node exchange_upstream.mjs --issuer URL --audience AUD [--port N]
// Prints `exchange upstream listening on http://127.0.0.1:PORT/mcp` once it listens.
//   tools/call whoami   answers the caller's `sub` and `aud` as text
//   GET /seen           {"requests": [{method, sub, aud, jti, act}...], "refused": N}
// Ends on SIGTERM/SIGINT.

import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    issuer: { type: 'string' },
    audience: { type: 'string' },
    port: { type: 'string', default: '0' },
  },
});
const seen = [];
let refused = 0;

/** The claims of a valid bearer token for this upstream, else null (the reason logged). */
async function claimsOf(authorization) {
  const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
  if (!token) return null;
  const [head, payload, signature] = token.split('.');
  if (!signature) return null;
  const { kid, alg } = JSON.parse(Buffer.from(head, 'base64url'));
  if (alg !== 'RS256') return null;
  const jwks = await (await fetch(`${args.issuer}/jwks`)).json();
  const jwk = jwks.keys.find((k) => k.kid === kid);
  if (!jwk) return null;
  const key = crypto.createPublicKey({ key: jwk, format: 'jwk' });
  const ok = crypto.verify('sha256', Buffer.from(`${head}.${payload}`), key,
    Buffer.from(signature, 'base64url'));
  const claims = JSON.parse(Buffer.from(payload, 'base64url'));
  const fresh = claims.exp > Date.now() / 1000;
  if (!ok || claims.iss !== args.issuer || claims.aud !== args.audience || !fresh) {
    console.error(`refused: signature ${ok}, iss ${claims.iss}, aud ${claims.aud}, fresh ${fresh}`);
    return null;
  }
  return claims;
}

function answer(res, status, body, headers = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body === undefined ? '' : JSON.stringify(body));
}

function result(message, claims) {
  switch (message.method) {
    case 'initialize':
      return {
        protocolVersion: message.params?.protocolVersion ?? '2025-11-25',
        capabilities: { tools: {} },
        serverInfo: { name: 'exchange-upstream', version: '1' },
      };
    case 'tools/list':
      return {
        tools: [{
          name: 'whoami',
          description: 'The subject and audience of the bearer token this call carried.',
          inputSchema: { type: 'object', properties: {} },
        }],
      };
    case 'tools/call':
      return { content: [{ type: 'text', text: `sub=${claims.sub} aud=${claims.aud}` }] };
    case 'ping':
      return {};
    default:
      return null;
  }
}

const server = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/seen') return answer(res, 200, { requests: seen, refused });
  if (req.url !== '/mcp') return answer(res, 404, { error: 'not found' });
  if (req.method === 'GET') return answer(res, 405, undefined);
  const claims = await claimsOf(req.headers.authorization);
  if (!claims) {
    refused += 1;
    return answer(res, 401, { error: 'invalid_token' }, { 'www-authenticate': 'Bearer error="invalid_token"' });
  }
  if (req.method === 'DELETE') return answer(res, 200, undefined);
  let text = '';
  for await (const chunk of req) text += chunk;
  const message = JSON.parse(text);
  seen.push({ method: message.method, sub: claims.sub, aud: claims.aud, jti: claims.jti, act: claims.act?.sub });
  if (message.id === undefined) return answer(res, 202, undefined);
  const value = result(message, claims);
  const body = value === null
    ? { jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'method not found' } }
    : { jsonrpc: '2.0', id: message.id, result: value };
  return answer(res, 200, body, { 'mcp-session-id': 'exchange-upstream-session' });
});

server.listen(Number(args.port), '127.0.0.1', () => {
  console.log(`exchange upstream listening on http://127.0.0.1:${server.address().port}/mcp`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}

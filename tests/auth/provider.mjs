// A real OAuth 2.1 authorization server for tidemark's tests: oidc-provider (the certified
// OpenID Provider for Node) on loopback, issuing JWT access tokens for one resource through the
// client credentials grant with an RFC 8707 resource indicator (aud = the resource).
//
// Usage: node provider.mjs --resource URL [--other-resource URL] [--port N] [--client-id ID]
//                           [--client-secret S]
// A second client, ID-b / ID-b-secret, is a second subject (`sub` is the client id). Tokens are
// also issued for --other-resource (aud = that URL): a real token for another resource.
//
// Prints `authorization server listening on ISSUER` once it listens (ISSUER is
// http://127.0.0.1:PORT; discovery at ISSUER/.well-known/openid-configuration, keys at
// ISSUER/jwks, tokens at ISSUER/token). Test controls, loopback only like the server itself:
//   POST /control/rotate       a new RS256 signing key: it signs every later token and the
//                              JWKS lists it first, the old keys stay listed (as a real rotation
//                              does while old tokens live); answers {"kid": "..."}
//   POST /control/alg/ALG      later tokens are signed with ALG (RS256, ES256 or EdDSA)
// Keys are generated at start (none are stored). Ends on SIGTERM/SIGINT.

import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    resource: { type: 'string' },
    'other-resource': { type: 'string' },
    port: { type: 'string', default: '0' },
    'client-id': { type: 'string', default: 'tidemark-test' },
    'client-secret': { type: 'string', default: 'tidemark-test-secret' },
    scopes: { type: 'string', default: 'tools:read tools:write' },
  },
});
if (!args.resource) {
  console.error('provider.mjs: --resource URL is required');
  process.exit(2);
}

/** A private JWK with its kid, alg and use. */
function signingKey(alg) {
  const kid = `${alg.toLowerCase()}-${crypto.randomBytes(6).toString('hex')}`;
  let pair;
  if (alg === 'RS256') pair = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  else if (alg === 'ES256') pair = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  else if (alg === 'EdDSA') pair = crypto.generateKeyPairSync('ed25519');
  else throw new Error(`no key type for ${alg}`);
  return { ...pair.privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}

let keys = [signingKey('RS256'), signingKey('ES256'), signingKey('EdDSA')];
let tokenAlg = 'RS256';
let handler = null;
let issuer = null;

function build() {
  const provider = new Provider(issuer, {
    clients: [
      [args['client-id'], args['client-secret']],
      [`${args['client-id']}-b`, `${args['client-id']}-b-secret`],
    ].map(([id, secret]) => ({
      client_id: id,
      client_secret: secret,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_post',
      scope: args.scopes,
    })),
    jwks: { keys },
    scopes: args.scopes.split(' '),
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => args.resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resourceIndicator) => {
          if (resourceIndicator !== args.resource && resourceIndicator !== args['other-resource']) {
            throw new Error(`unknown resource ${resourceIndicator}`);
          }
          return {
            scope: args.scopes,
            audience: resourceIndicator,
            accessTokenTTL: 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: tokenAlg } },
          };
        },
      },
    },
    enabledJWA: {
      idTokenSigningAlgValues: ['RS256', 'ES256', 'EdDSA'],
    },
  });
  provider.on('server_error', (_ctx, err) => console.error('provider server_error:', err));
  handler = provider.callback();
}

function answer(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/control/rotate') {
    const fresh = signingKey('RS256');
    keys = [fresh, ...keys];
    build();
    return answer(res, 200, { kid: fresh.kid });
  }
  const alg = req.method === 'POST' && req.url.match(/^\/control\/alg\/(RS256|ES256|EdDSA)$/);
  if (alg) {
    tokenAlg = alg[1];
    return answer(res, 200, { alg: tokenAlg });
  }
  return handler(req, res);
});

server.listen(Number(args.port), '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  build();
  console.log(`authorization server listening on ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}

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
//   POST /control/exchange/deny  later token exchanges by the gateway client are refused
//                              (unauthorized_client), as when its grant is withdrawn
//   GET  /control/exchanges    {"count": N, "subjects": [...]}: token exchanges issued so far
// Token exchange (RFC 8693, for tidemark's --upstream-auth NAME=exchange): the client
// tidemark-gateway / tidemark-gateway-secret (client_secret_basic) may use the grant
// urn:ietf:params:oauth:grant-type:token-exchange, registered with provider.registerGrantType.
// The subject token must be one of this server's access tokens for --resource; the answer is
// a JWT access token with the subject token's `sub`, `aud` the requested audience (one of
// --exchange-audience), `act.sub` the gateway, living --exchange-ttl seconds.
// Keys are generated at start (none are stored). Ends on SIGTERM/SIGINT.

import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    resource: { type: 'string' },
    'other-resource': { type: 'string' },
    port: { type: 'string', default: '0' },
    'client-id': { type: 'string', default: 'tidemark-test' },
    'client-secret': { type: 'string', default: 'tidemark-test-secret' },
    scopes: { type: 'string', default: 'tools:read tools:write' },
    'exchange-audience': { type: 'string', default: '' },
    'exchange-ttl': { type: 'string', default: '300' },
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
let exchangeAllowed = true;
const exchanges = [];
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const GATEWAY = 'tidemark-gateway';
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
    })).concat([{
      client_id: GATEWAY,
      client_secret: `${GATEWAY}-secret`,
      grant_types: [TOKEN_EXCHANGE],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_basic',
    }]),
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
  provider.registerGrantType(TOKEN_EXCHANGE, exchangeToken,
    ['audience', 'resource', 'scope', 'requested_token_type', 'subject_token', 'subject_token_type'],
    ['audience', 'resource']);
  provider.on('server_error', (_ctx, err) => console.error('provider server_error:', err));
  handler = provider.callback();
}

/** The claims of `token` when it is a JWT this server signed (any of its keys), else null. */
function verifiedClaims(token) {
  const [head, payload, signature] = String(token).split('.');
  if (!signature) return null;
  try {
    const { kid, alg } = JSON.parse(Buffer.from(head, 'base64url'));
    const jwk = keys.find((k) => k.kid === kid && k.alg === alg);
    if (!jwk) return null;
    const key = crypto.createPublicKey({ key: jwk, format: 'jwk' });
    const data = Buffer.from(`${head}.${payload}`);
    const sig = Buffer.from(signature, 'base64url');
    const ok = alg === 'EdDSA'
      ? crypto.verify(null, data, key, sig)
      : crypto.verify('sha256', data, alg === 'ES256' ? { key, dsaEncoding: 'ieee-p1363' } : key, sig);
    return ok ? JSON.parse(Buffer.from(payload, 'base64url')) : null;
  } catch {
    return null;
  }
}

/** An RS256 JWT of `claims`, signed with the newest RS256 key (the JWKS lists it). */
function signed(claims) {
  const jwk = keys.find((k) => k.alg === 'RS256');
  const head = Buffer.from(JSON.stringify({ alg: 'RS256', typ: 'at+jwt', kid: jwk.kid })).toString('base64url');
  const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
  const key = crypto.createPrivateKey({ key: jwk, format: 'jwk' });
  const sig = crypto.sign('sha256', Buffer.from(`${head}.${body}`), key).toString('base64url');
  return `${head}.${body}.${sig}`;
}

/** The token exchange grant (RFC 8693 §2): client authentication and the grant's allowance
 * for the client are oidc-provider's; the subject token, audience and resource are checked here. */
async function exchangeToken(ctx) {
  const { params, client } = ctx.oidc;
  if (!exchangeAllowed) {
    throw new errors.UnauthorizedClient('token exchange is withdrawn for this client');
  }
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest('subject_token_type must be an access token');
  }
  const subject = verifiedClaims(params.subject_token);
  const now = Math.floor(Date.now() / 1000);
  if (!subject || subject.iss !== issuer || subject.exp <= now || subject.aud !== args.resource) {
    throw new errors.InvalidGrant('the subject token is not a valid access token for the gateway');
  }
  const audiences = args['exchange-audience'].split(',').filter(Boolean);
  const audience = [].concat(params.audience ?? [])[0];
  if (!audiences.includes(audience)) {
    throw new errors.InvalidTarget('the audience is not one this server issues for');
  }
  const ttl = Number(args['exchange-ttl']);
  const claims = {
    iss: issuer, sub: subject.sub, aud: audience, iat: now, exp: now + ttl,
    jti: crypto.randomBytes(8).toString('hex'), client_id: client.clientId, act: { sub: client.clientId },
  };
  if (params.resource) claims.resource = [].concat(params.resource)[0];
  exchanges.push({ sub: subject.sub, aud: audience, jti: claims.jti });
  ctx.body = {
    access_token: signed(claims), issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer', expires_in: ttl,
  };
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
  if (req.method === 'POST' && req.url === '/control/exchange/deny') {
    exchangeAllowed = false;
    return answer(res, 200, { exchange: 'denied' });
  }
  if (req.method === 'GET' && req.url === '/control/exchanges') {
    return answer(res, 200, { count: exchanges.length, exchanges });
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

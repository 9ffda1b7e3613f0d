// A real OpenID provider (panva/oidc-provider v9) for the Mercury HTTP tests.
//
// Usage: node provider.mjs [port]        (port also from OIDC_PORT; 0 picks a free one)
//
// Once listening on 127.0.0.1 it prints one JSON line on stdout:
//   {"issuer":"http://127.0.0.1:PORT","port":PORT,"kids":["..."]}
//
// Environment (all optional):
//   OIDC_JWKS_FILE            private JWKS to sign with; created with a fresh RS256 key when absent,
//                             rewritten on rotation, so a restart keeps (or shares) the keys
//   OIDC_AUDIENCE             audience of the default resource (default "mercury-http")
//   OIDC_CLIENT_ID            client-credentials client (default "mercury-tests")
//   OIDC_CLIENT_SECRET        its secret (default "mercury-tests-secret")
//   OIDC_CLIENT_NAME          the "name" claim of its access tokens (default "Mercury Tests")
//   OIDC_LOGIN_CLIENT_ID      authorization code + PKCE public client (default "mercury-login")
//   OIDC_LOGIN_REDIRECT_URI   its redirect URI (default "http://127.0.0.1:4100/login/callback")
//   OIDC_ACCESS_TOKEN_TTL     access token lifetime in seconds (default 3600)
//   OIDC_MCP                  "1": also an MCP server's authorization server: dynamic client
//                             registration (POST /reg), Client ID Metadata Documents (an https
//                             client_id is fetched where POST /__admin/fetch-map says, as DNS
//                             and a TLS-terminating proxy in front of it would), token
//                             revocation (RFC 7009, POST /token/revocation), the resource
//                             scopes "mcp:read mcp:write", and no check of fetches to loopback
//
// Resource indicators must be absolute URIs, so the resource "urn:<aud>" yields tokens whose
// "aud" is "<aud>" (the default resource is "urn:" + OIDC_AUDIENCE).
//
// Admin endpoints (test-only, on the same port):
//   POST /__admin/rotate   body {"keep_old": bool}: a new RS256 key signs from now on; the old
//                          ones stay published when keep_old is true. Answers {"kids": [...]}.
//   GET  /__admin/health   answers {"ok": true}.
//   POST /__admin/fetch-map body {"<https origin>": "<http origin on 127.0.0.1>"}: where the
//                          provider fetches documents (client metadata) of that origin from.

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const HOST = '127.0.0.1';
const env = process.env;
const port = Number(process.argv[2] ?? env.OIDC_PORT ?? 0);
const jwksFile = env.OIDC_JWKS_FILE;
const audience = env.OIDC_AUDIENCE ?? 'mercury-http';
const clientId = env.OIDC_CLIENT_ID ?? 'mercury-tests';
const clientSecret = env.OIDC_CLIENT_SECRET ?? 'mercury-tests-secret';
const clientName = env.OIDC_CLIENT_NAME ?? 'Mercury Tests';
const loginClientId = env.OIDC_LOGIN_CLIENT_ID ?? 'mercury-login';
const loginRedirectUri = env.OIDC_LOGIN_REDIRECT_URI ?? 'http://127.0.0.1:4100/login/callback';
const accessTokenTtl = Number(env.OIDC_ACCESS_TOKEN_TTL ?? 3600);
const mcp = env.OIDC_MCP === '1';

// The client metadata document's https URL on 127.0.0.1 is the test's plain-HTTP server: the
// TLS a proxy would terminate in front of Mercury is left out. oidc-provider's own check of
// fetches to special-use addresses is left out with it (every peer here is on loopback).
const fetchMap = {};

async function fetchOverLoopback(url, options) {
  const { dispatcher: _unused, ...rest } = options;
  const target = new URL(url);
  const local = fetchMap[target.origin];
  const mapped = local ? new URL(target.pathname + target.search, local) : target;
  return globalThis.fetch(mapped, rest);
}

function newKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

function loadKeys() {
  if (jwksFile && existsSync(jwksFile)) {
    return JSON.parse(readFileSync(jwksFile, 'utf8')).keys;
  }
  const keys = [newKey()];
  saveKeys(keys);
  return keys;
}

function saveKeys(keys) {
  if (jwksFile) writeFileSync(jwksFile, JSON.stringify({ keys }), { mode: 0o600 });
}

function audienceOf(indicator) {
  return indicator.startsWith('urn:') ? indicator.slice('urn:'.length) : indicator;
}

function build(issuer, keys) {
  return new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
      },
      {
        client_id: loginClientId,
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: [loginRedirectUri],
      },
    ],
    jwks: { keys },
    pkce: { required: () => true },
    ...(mcp ? { fetch: fetchOverLoopback } : {}),
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email'],
    },
    async findAccount(_ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return { sub, name: sub, preferred_username: sub, email: `${sub}@example.test` };
        },
      };
    },
    async extraTokenClaims(_ctx, token) {
      if (token.kind === 'ClientCredentials') return { name: clientName };
      if (token.accountId) {
        return { name: token.accountId, email: `${token.accountId}@example.test` };
      }
      return undefined;
    },
    features: {
      clientCredentials: { enabled: true },
      devInteractions: { enabled: true },
      ...(mcp
        ? {
            registration: { enabled: true },
            revocation: { enabled: true },
            clientIdMetadataDocument: { enabled: true, ack: 'draft-02' },
          }
        : {}),
      resourceIndicators: {
        enabled: true,
        defaultResource: (_ctx, _client, oneOf) => oneOf ?? `urn:${audience}`,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, indicator) => ({
          scope: mcp ? 'api mcp:read mcp:write' : 'api',
          audience: audienceOf(indicator),
          accessTokenTTL: accessTokenTtl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
  });
}

let keys = loadKeys();
let issuer;
let provider;
let handle;

function install() {
  provider = build(issuer, keys);
  handle = provider.callback();
}

function answer(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const server = createServer((req, res) => {
  if (req.url === '/__admin/health') {
    answer(res, 200, { ok: true });
    return;
  }
  if (req.url === '/__admin/fetch-map' && req.method === 'POST') {
    let raw = '';
    req.on('data', (chunk) => { raw += chunk; });
    req.on('end', () => {
      Object.assign(fetchMap, JSON.parse(raw));
      answer(res, 200, { ok: true });
    });
    return;
  }
  if (req.url === '/__admin/rotate' && req.method === 'POST') {
    let raw = '';
    req.on('data', (chunk) => { raw += chunk; });
    req.on('end', () => {
      const { keep_old: keepOld = false } = raw ? JSON.parse(raw) : {};
      keys = [newKey(), ...(keepOld ? keys : [])];
      saveKeys(keys);
      install();
      answer(res, 200, { kids: keys.map((key) => key.kid) });
    });
    return;
  }
  handle(req, res);
});

server.listen(port, HOST, () => {
  const actual = server.address().port;
  issuer = `http://${HOST}:${actual}`;
  install();
  process.stdout.write(`${JSON.stringify({ issuer, port: actual, kids: keys.map((k) => k.kid) })}\n`);
});

function stop() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
}

process.on('SIGTERM', stop);
process.on('SIGINT', stop);

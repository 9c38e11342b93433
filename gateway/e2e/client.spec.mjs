// A REST client generated from a running deskgrid's OpenAPI document, as a
// new user would make one: the document converted to OpenAPI 3
// (swagger2openapi), typed by openapi-typescript, called with openapi-fetch.
// Every call parses its reply as the document says: JSON by default, the
// image as a blob, streams and the export as text (newline-delimited JSON).
//
//   node client.spec.mjs --base-url http://127.0.0.1:8080 --key dg_... --out DIR
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import swagger2openapi from 'swagger2openapi';
import openapiTS, { astToString } from 'openapi-typescript';
import createClient from 'openapi-fetch';

const { values: args } = parseArgs({
  options: { 'base-url': { type: 'string' }, key: { type: 'string' }, out: { type: 'string' } },
});
const base = args['base-url'];
const fail = (msg) => { console.error('FAIL', msg); process.exit(1); };

const swagger = await (await fetch(`${base}/openapi.json`)).json();
const { openapi } = await swagger2openapi.convertObj(swagger, { patch: true, warnOnly: true });
const types = astToString(await openapiTS(openapi));
await writeFile(join(args.out, 'deskgrid.d.ts'), types);
for (const p of ['"/v1/sessions"', '"/v1/sessions/{sessionId}/screenshot"', '"/v1/sessions/{sessionId}/viewerToken"', '"/v1/sessions/{sessionId}/vnc"']) {
  if (!types.includes(p)) fail(`the generated types lack ${p}`);
}

// parseAs is what the document declares for a route's reply.
function parseAs(path, method) {
  const content = openapi.paths[path]?.[method]?.responses?.['200']?.content || {};
  const first = Object.keys(content)[0];
  if (!first || first === 'application/json') return undefined; // the default
  return first.startsWith('image/') ? 'blob' : 'text';
}

const client = createClient({ baseUrl: base, headers: { Authorization: `Bearer ${args.key}` } });
const called = [];
async function call(method, path, options = {}) {
  const as = parseAs(path, method.toLowerCase());
  const res = await client[method](path, as ? { ...options, parseAs: as } : options);
  if (res.error !== undefined || !res.response.ok) {
    fail(`${method} ${path}: ${res.response.status} ${JSON.stringify(res.error)}`);
  }
  called.push(`${method} ${path}${as ? ` (${as})` : ''}`);
  return res.data;
}
const lines = (text) => text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

const session = await call('POST', '/v1/sessions', { body: { display: { width: 320, height: 240 } } });
if (session.state !== 'SESSION_STATE_RUNNING') fail(`created ${JSON.stringify(session)}`);
const id = { params: { path: { sessionId: session.id } } };
await call('GET', '/v1/sessions');
await call('GET', '/v1/sessions/{sessionId}', id);
await call('POST', '/v1/sessions/{sessionId}/actions', { ...id, body: { actions: [{ type: { text: 'hi' } }] } });
const shot = await call('GET', '/v1/sessions/{sessionId}/screenshot', id);
const magic = new Uint8Array(await shot.arrayBuffer()).slice(0, 4);
if (magic[1] !== 0x50 || magic[2] !== 0x4e || magic[3] !== 0x47) fail('the screenshot is not a PNG');
const exec = lines(await call('POST', '/v1/sessions/{sessionId}:exec', { ...id, body: { argv: ['echo', 'generated'] } }));
if (!exec.some((m) => m.result?.stdout === Buffer.from('generated\n').toString('base64'))) fail(`exec: ${JSON.stringify(exec)}`);
await call('POST', '/v1/sessions/{sessionId}/files:write', { ...id, body: { path: 'c.txt', content: Buffer.from('typed').toString('base64') } });
const read = await call('GET', '/v1/sessions/{sessionId}/files:read', { params: { path: { sessionId: session.id }, query: { path: 'c.txt' } } });
if (Buffer.from(read.content, 'base64').toString() !== 'typed') fail(`read ${JSON.stringify(read)}`);
const download = lines(await call('GET', '/v1/sessions/{sessionId}/files:download', { params: { path: { sessionId: session.id }, query: { path: 'c.txt' } } }));
if (!download.length) fail('download: nothing');
await call('GET', '/v1/sessions/{sessionId}/files', id);
await call('GET', '/v1/sessions/{sessionId}/history', id);
const exported = lines(await call('GET', '/v1/sessions/{sessionId}/history:export', id));
if (!exported.length || exported.some((e) => e.sessionId !== session.id)) fail(`export: ${JSON.stringify(exported.slice(0, 2))}`);
const token = await call('POST', '/v1/sessions/{sessionId}/viewerToken', { ...id, body: { mode: 'view' } });
if (!token.token) fail(`viewer token ${JSON.stringify(token)}`);
await call('DELETE', '/v1/viewerTokens/{tokenId}', { params: { path: { tokenId: token.tokenId } } });
await call('DELETE', '/v1/sessions/{sessionId}', id);
for (const c of called) console.log('ok', c);

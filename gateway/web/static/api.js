// What the console's pages share: signing in, REST calls, event streams and
// formatting.

export class APIError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// ---- signing in ----
//
// A gateway with authentication says so in its index (GET /v1: "auth":
// true); the console then asks for an API key, keeps it in sessionStorage
// (gone when the tab closes) and sends it as "Authorization: Bearer" on
// every call. A 401 anywhere brings the sign-in form back with the
// server's message.

const keyItem = 'deskgrid-api-key';
let indexPromise = null;

export function serverIndex() {
  if (!indexPromise) {
    indexPromise = fetch('/v1', { headers: { Accept: 'application/json' } })
      .then((r) => (r.ok ? r.json() : {}))
      .catch(() => ({}));
  }
  return indexPromise;
}

export function apiKey() {
  return sessionStorage.getItem(keyItem) || '';
}

export function authHeaders(headers = {}) {
  const k = apiKey();
  if (k) headers.Authorization = 'Bearer ' + k;
  return headers;
}

const signOutHooks = [];
// onSignOut runs fn (while the key still works) before signing out.
export function onSignOut(fn) { signOutHooks.push(fn); }

export function signOut() {
  for (const fn of signOutHooks) {
    try { fn(); } catch { /* signing out goes on */ }
  }
  sessionStorage.removeItem(keyItem);
  location.reload();
}

function signOutButton() {
  if (document.getElementById('sign-out')) return;
  const b = el('button', { id: 'sign-out', type: 'button', text: 'Sign out' });
  b.addEventListener('click', signOut);
  document.querySelector('header').append(b);
}

let signInShown = null;

// showSignIn puts the sign-in form over the page and resolves once a key
// the server accepts is stored.
function showSignIn(message) {
  if (signInShown) {
    if (message) signInShown.say(message);
    return signInShown.done;
  }
  delete document.body.dataset.signedIn;
  const input = el('input', { name: 'key', type: 'password', autocomplete: 'off', required: true, placeholder: 'dg_…', 'aria-label': 'API key' });
  const error = el('p', { id: 'signin-error', class: 'error', role: 'alert' });
  const submit = el('button', { id: 'signin-submit', type: 'submit', text: 'Sign in' });
  const form = el('form', { id: 'signin', class: 'card signin' },
    el('h2', { text: 'Sign in' }),
    el('p', { text: 'This deskgrid needs an API key (make one with "deskgrid keys create"). It is kept in this tab only.' }),
    el('label', {}, 'API key', input), submit, error);
  const overlay = el('div', { class: 'overlay' }, form);
  document.body.append(overlay);
  input.focus();
  const say = (m) => { error.textContent = m || ''; };
  say(message);
  const done = new Promise((resolve) => {
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      submit.disabled = true;
      say('');
      try {
        // Any key may list sessions (read scope); this is its test.
        const res = await fetch('/v1/sessions?pageSize=1', { headers: { Accept: 'application/json', Authorization: 'Bearer ' + key } });
        if (!res.ok) throw await errorOf(res);
        sessionStorage.setItem(keyItem, key);
        overlay.remove();
        signInShown = null;
        resolve();
      } catch (e) {
        say(e.message);
      }
      submit.disabled = false;
    });
  });
  signInShown = { done, say };
  return done;
}

// signedIn resolves when the page may call the API: at once without
// authentication or with a stored key, else after the sign-in form.
export async function signedIn() {
  const info = await serverIndex();
  document.body.dataset.auth = info.auth ? 'on' : 'off';
  if (info.auth) {
    if (!apiKey()) await showSignIn('');
    signOutButton();
  }
  document.body.dataset.signedIn = 'true';
}

// unauthenticated is every 401's answer: back to the sign-in form, and a
// fresh start of the page once signed in again.
function unauthenticated(message) {
  sessionStorage.removeItem(keyItem);
  showSignIn(message).then(() => location.reload());
}

async function errorOf(res) {
  const text = await res.text().catch(() => '');
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { data = { message: text }; }
  return new APIError(data.message || `${res.status} ${res.statusText}`, res.status);
}

export async function api(method, path, body, init = {}) {
  const headers = authHeaders({ Accept: 'application/json' });
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), ...init });
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401) unauthenticated(err.message);
    throw err;
  }
  const text = await res.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { data = { message: text }; }
  return data;
}

// ---- server-sent events over fetch ----
//
// EventSource cannot send an Authorization header, so streams are read
// with fetch: the event-stream format parsed from the body, and a dropped
// stream resumed with Last-Event-ID after the last event seen. An "end"
// event means the stream finished for good.

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function* sseEvents(body, signal) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const abort = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', abort);
  let buf = '';
  let ev = { id: undefined, event: '', data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let i;
      while ((i = buf.search(/\r\n|\n|\r/)) >= 0) {
        // A lone \r at the end may be the first half of \r\n.
        if (buf[i] === '\r' && i === buf.length - 1) break;
        const line = buf.slice(0, i);
        buf = buf.slice(i + (buf.startsWith('\r\n', i) ? 2 : 1));
        if (line === '') {
          if (ev.data.length) yield { id: ev.id, event: ev.event || 'message', data: ev.data.join('\n') };
          ev = { id: undefined, event: '', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? '' : line.slice(c + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'data') ev.data.push(v);
        else if (field === 'event') ev.event = v;
        else if (field === 'id') ev.id = v;
      }
    }
  } finally {
    signal.removeEventListener('abort', abort);
  }
}

// eventStream follows path's events: onEvent(type, data, id) for each,
// onEnd(status) when the stream finished for good, onFail(APIError) when
// the server refused it (not for a passing failure, which is retried).
// It returns { close() }.
export function eventStream(path, { onEvent, onEnd, onFail } = {}) {
  const ctl = new AbortController();
  let lastId = '';
  let closed = false;
  let delay = 500;
  (async () => {
    while (!closed) {
      let res;
      try {
        const headers = authHeaders({ Accept: 'text/event-stream' });
        if (lastId) headers['Last-Event-ID'] = lastId;
        res = await fetch(path, { headers, signal: ctl.signal, cache: 'no-store' });
      } catch {
        if (closed) return;
        await sleep(delay);
        delay = Math.min(delay * 2, 10000);
        continue;
      }
      if (!res.ok) {
        const err = await errorOf(res);
        if ([429, 502, 503, 504].includes(res.status)) {
          await sleep(Math.max(delay, Number(res.headers.get('Retry-After') || 0) * 1000));
          delay = Math.min(delay * 2, 10000);
          continue;
        }
        closed = true;
        if (res.status === 401) unauthenticated(err.message);
        if (onFail) onFail(err);
        return;
      }
      delay = 500;
      try {
        for await (const ev of sseEvents(res.body, ctl.signal)) {
          if (ev.id) lastId = ev.id;
          // Every event also comes unnamed, for onmessage handlers.
          if (ev.event === 'message') continue;
          if (ev.event === 'end') {
            closed = true;
            ctl.abort();
            let st = {};
            try { st = JSON.parse(ev.data || '{}'); } catch { /* an empty status */ }
            if (onEnd) onEnd(st);
            return;
          }
          if (onEvent) onEvent(ev.event, ev.data, ev.id);
        }
      } catch { /* the connection dropped: resume below */ }
      if (!closed) await sleep(delay);
    }
  })();
  return {
    close() {
      closed = true;
      ctl.abort();
    },
  };
}

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('data-')) e.dataset[k.slice(5).replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== undefined && c !== null) e.append(c);
  return e;
}

export function enumName(v, prefix) {
  return (v || '').replace(prefix, '').toLowerCase().replace(/_/g, ' ');
}

// Durations as protobuf JSON writes them ("3600s") or as people type them
// ("1h30m", "90s", "15m", or bare seconds).
export function parseDuration(text) {
  const s = (text || '').trim();
  if (!s) return undefined;
  if (/^\d+(\.\d+)?$/.test(s)) return `${Number(s)}s`;
  const re = /(\d+(?:\.\d+)?)(h|m|s)/gy;
  let total = 0;
  let m;
  let end = 0;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * { h: 3600, m: 60, s: 1 }[m[2]];
    end = re.lastIndex;
  }
  if (end !== s.length || total <= 0) throw new Error(`"${s}" is not a duration (use e.g. 90s, 15m, 2h)`);
  return `${total}s`;
}

export function formatSeconds(sec) {
  if (!Number.isFinite(sec)) return '';
  sec = Math.max(0, Math.round(sec));
  if (sec < 60) return `${sec}s`;
  if (sec < 3600) return `${Math.floor(sec / 60)}m`;
  if (sec < 86400) return `${Math.floor(sec / 3600)}h${sec % 3600 >= 60 ? Math.floor((sec % 3600) / 60) + 'm' : ''}`;
  return `${Math.floor(sec / 86400)}d`;
}

export function durationSeconds(d) {
  return d ? parseFloat(d) : NaN;
}

export function age(time) {
  return time ? formatSeconds((Date.now() - new Date(time).getTime()) / 1000) : '';
}

export function bytes(n) {
  n = Number(n || 0);
  if (!n) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n >= 10 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

export function cores(millis) {
  const n = Number(millis || 0);
  return n ? `${(n / 1000).toFixed(n % 1000 ? 1 : 0)} CPU` : '';
}

export function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(', ');
}

export function parseLabels(text) {
  const out = {};
  for (const part of (text || '').split(/[,\n]/)) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf('=');
    if (i <= 0) throw new Error(`label "${p}" must be key=value`);
    out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
  }
  return out;
}

// describe says what went wrong with a call: the HTTP status and the
// server's message.
export function describe(e) {
  if (e instanceof APIError && e.status) return `HTTP ${e.status}: ${e.message}`;
  return e && e.message ? e.message : String(e);
}

// apiFetch makes an authenticated call and returns the Response when it
// succeeded (for bodies that are not JSON: images, videos), else throws
// its APIError.
export async function apiFetch(path, init = {}) {
  const res = await fetch(path, { ...init, headers: authHeaders({ ...(init.headers || {}) }) });
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401) unauthenticated(err.message);
    throw err;
  }
  return res;
}

function fromBase64(b64) {
  const bin = atob(b64 || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// toBase64 encodes bytes for a JSON body, a slice at a time.
export function toBase64(bytes) {
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

// streamedDownload reads a server-streaming download (one JSON message a
// line, {"result": {...}} or {"error": {...}}, each with base64 "chunk")
// into a Blob; the first message's other fields come back as info.
export async function streamedDownload(path, type = 'application/octet-stream') {
  const res = await apiFetch(path, { headers: { Accept: 'application/json' } });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const parts = [];
  let info = null;
  let buf = '';
  const line = (l) => {
    if (!l.trim()) return;
    const m = JSON.parse(l);
    if (m.error) throw new APIError(m.error.message || 'download failed', httpStatusOf(m.error.code));
    const r = m.result || {};
    if (!info) info = r;
    if (r.chunk) parts.push(fromBase64(r.chunk));
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      line(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
  line(buf);
  return { info: info || {}, blob: new Blob(parts, { type }) };
}

// httpStatusOf maps a gRPC code (as a stream's error carries it) to HTTP.
function httpStatusOf(code) {
  return { 3: 400, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 11: 400, 12: 501, 13: 500, 14: 503, 16: 401, 4: 504 }[code] || 500;
}

// saveBlob hands a blob to the browser as a download named name.
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

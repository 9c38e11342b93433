// The session list: reads /v1/sessions and /v1/nodes, creates and deletes sessions.
import { api, apiFetch, describe, el, enumName, age, bytes, cores, labelsText, parseDuration, parseLabels, signedIn } from '/static/api.js';

const tbody = document.querySelector('#sessions tbody');
const empty = document.getElementById('empty');
const status = document.getElementById('status');
const form = document.getElementById('create-form');
const toggle = document.getElementById('options-toggle');
const nodesPanel = document.getElementById('nodes-panel');

function say(message, isError = false, sessionId = '') {
  status.textContent = message;
  status.className = isError ? 'error' : '';
  status.dataset.sessionId = sessionId;
}

function limitsText(l) {
  if (!l) return '';
  return [bytes(l.memoryBytes), cores(l.cpuMillis), l.pids && l.pids !== '0' ? `${l.pids} pids` : '', l.diskBytes && l.diskBytes !== '0' ? `${bytes(l.diskBytes)} disk` : '']
    .filter(Boolean).join(', ');
}

function row(s) {
  const state = enumName(s.state, 'SESSION_STATE_');
  const screen = s.display ? `${s.display.width ?? ''}x${s.display.height ?? ''}` : '';
  const del = el('button', { type: 'button', class: 'delete', text: 'Delete' });
  del.addEventListener('click', () => remove(s.id, del));
  const title = [s.expireTime ? `expires ${new Date(s.expireTime).toLocaleString()}` : '', s.lastActiveTime ? `last active ${age(s.lastActiveTime)} ago` : '']
    .filter(Boolean).join('; ');
  return el('tr', { 'data-session-id': s.id },
    el('td', { class: 'preview' }, el('a', { class: 'picture', href: '/sessions/' + encodeURIComponent(s.id), 'aria-label': 'open ' + s.id, tabindex: '-1' }, thumbnailOf(s))),
    el('td', {}, el('a', { class: 'id', href: '/sessions/' + encodeURIComponent(s.id), text: s.id })),
    el('td', { class: 'state', 'data-state': state }, el('span', { class: 'state-name', text: state + (s.stateReason ? ` (${s.stateReason})` : '') }),
      s.state === 'SESSION_STATE_RUNNING' ? holderOf(s) : null),
    el('td', { class: 'image', title: s.imageDigest || '', text: s.image || 'node programs' }),
    el('td', { class: 'size', text: screen }),
    el('td', { class: 'node', text: s.nodeId || '' }),
    el('td', { class: 'age', title: s.createTime ? new Date(s.createTime).toLocaleString() + (title ? '; ' + title : '') : '', text: age(s.createTime) }),
    el('td', { class: 'active', title: s.lastActiveTime ? new Date(s.lastActiveTime).toLocaleString() : '', text: s.lastActiveTime ? age(s.lastActiveTime) + ' ago' : '' }),
    el('td', { class: 'limits', text: limitsText(s.limits) }),
    el('td', { class: 'labels', text: labelsText(s.labels) }),
    el('td', { class: 'actions' }, del));
}

// Stopped sessions stay on record; the list leaves them out unless asked.
const liveStates = ['PENDING', 'STARTING', 'RUNNING', 'SUSPENDING', 'SUSPENDED', 'RESUMING', 'STOPPING', 'FAILED', 'LOST']
  .map((s) => 'states=SESSION_STATE_' + s).join('&');
const showStopped = document.getElementById('show-stopped');
showStopped.addEventListener('change', () => refresh());

async function refreshSessions() {
  const sessions = [];
  let token = '';
  // Every page, bounded so a misbehaving server cannot loop the page forever.
  for (let i = 0; i < 50; i++) {
    const q = [showStopped.checked ? '' : liveStates, token ? 'pageToken=' + encodeURIComponent(token) : ''].filter(Boolean).join('&');
    const data = await api('GET', '/v1/sessions' + (q ? '?' + q : ''));
    sessions.push(...(data.sessions || []));
    token = data.nextPageToken || '';
    if (!token) break;
  }
  listed = new Map(sessions.map((s) => [s.id, s]));
  tbody.replaceChildren(...sessions.map(row));
  empty.hidden = sessions.length > 0;
  for (const id of thumbs.keys()) if (!listed.has(id)) dropThumbnail(id);
  thumbnailsSoon();
}

// ---- live thumbnails ----
//
// Each running session's row shows a small picture of its desktop, asked
// for scaled down (scale_to) as JPEG. One picture is fetched at a time, the
// stalest first, each session's at most every thumbEvery ms, and none while
// the page is hidden. With its picture, the row asks who holds the
// session's input lease.
//
// A picture is a screenshot, which counts as use of the session and holds
// off its idle timeout; so pictures pause once nobody has touched the page
// for thumbPause ms, and go on at the next touch.

const thumbEvery = 10000;
const thumbPause = 5 * 60 * 1000;
let touched = Date.now();
const paused = document.getElementById('thumbs-paused');
const thumbWidth = 160;
const thumbHeight = 100;
let listed = new Map();
// id -> { img, url, at (ms of the last try), n (pictures shown) }
const thumbs = new Map();
let thumbTimer = null;
let thumbBusy = false;

function thumbnailOf(s) {
  let t = thumbs.get(s.id);
  if (!t) {
    t = { img: el('img', { class: 'thumb', alt: 'no picture yet', width: thumbWidth, height: thumbHeight, 'data-loaded': 'false' }), url: '', at: 0, n: 0,
      holder: el('span', { class: 'input-holder', title: 'who holds the input lease', text: '' }) };
    thumbs.set(s.id, t);
  }
  t.img.dataset.state = enumName(s.state, 'SESSION_STATE_');
  return t.img;
}

// holderOf is the row's note of who holds the session's input lease,
// asked together with its picture.
function holderOf(s) {
  thumbnailOf(s);
  return thumbs.get(s.id).holder;
}

function showHolder(t, r) {
  const name = (r.lease && r.lease.holder) || '';
  t.holder.dataset.holder = name;
  t.holder.textContent = 'input: ' + (name || 'free') + (r.waiting ? ` (${r.waiting} waiting)` : '');
  t.holder.title = r.lease && r.lease.expireTime ? `held by ${name} until ${new Date(r.lease.expireTime).toLocaleTimeString()}` : 'nobody holds the input lease';
}

function dropThumbnail(id) {
  const t = thumbs.get(id);
  if (t && t.url) URL.revokeObjectURL(t.url);
  thumbs.delete(id);
}

// thumbSize fits the session's screen in thumbWidth x thumbHeight.
function thumbSize(s) {
  const w = (s.display && s.display.width) || 1280;
  const h = (s.display && s.display.height) || 800;
  const k = Math.min(thumbWidth / w, thumbHeight / h, 1);
  return { width: Math.max(16, Math.round(w * k)), height: Math.max(16, Math.round(h * k)) };
}

function thumbnailsSoon(delay = 0) {
  clearTimeout(thumbTimer);
  thumbTimer = setTimeout(nextThumbnail, delay);
}

async function nextThumbnail() {
  if (thumbBusy || document.hidden) return;
  const now = Date.now();
  if (now - touched > thumbPause) {
    paused.hidden = false;
    document.body.dataset.thumbnails = 'paused';
    return;
  }
  let pick = null;
  for (const [id, t] of thumbs) {
    const s = listed.get(id);
    if (!s || s.state !== 'SESSION_STATE_RUNNING') continue;
    if (now - t.at < thumbEvery) continue;
    if (!pick || t.at < pick.t.at) pick = { s, t };
  }
  if (!pick) {
    // The next one due, or a look again later.
    let due = thumbEvery;
    for (const [id, t] of thumbs) {
      const s = listed.get(id);
      if (s && s.state === 'SESSION_STATE_RUNNING') due = Math.min(due, Math.max(0, thumbEvery - (now - t.at)));
    }
    thumbnailsSoon(Math.max(due, 250));
    return;
  }
  thumbBusy = true;
  const { s, t } = pick;
  t.at = now;
  const size = thumbSize(s);
  try {
    const res = await apiFetch(`/v1/sessions/${encodeURIComponent(s.id)}/screenshot?format=IMAGE_FORMAT_JPEG&quality=60` +
      `&scaleTo.width=${size.width}&scaleTo.height=${size.height}`, { headers: { Accept: 'image/jpeg, image/png' } });
    const blob = await res.blob();
    if (thumbs.get(s.id) === t) {
      const old = t.url;
      t.url = URL.createObjectURL(blob);
      t.img.src = t.url;
      t.img.alt = `${s.id} now`;
      t.img.title = 'the desktop at ' + new Date().toLocaleTimeString();
      t.img.width = size.width;
      t.img.height = size.height;
      t.img.dataset.loaded = 'true';
      t.img.dataset.count = String(++t.n);
      t.img.classList.remove('failed');
      if (old) URL.revokeObjectURL(old);
    }
  } catch (e) {
    t.img.title = 'no picture: ' + describe(e);
    t.img.classList.add('failed');
  }
  // Who holds its input, in the same turn: still one request at a time.
  try {
    const r = await api('GET', `/v1/sessions/${encodeURIComponent(s.id)}/inputLease`);
    if (thumbs.get(s.id) === t) showHolder(t, r);
  } catch (e) {
    t.holder.textContent = 'input: ?';
    t.holder.title = 'could not ask who holds the input lease: ' + describe(e);
  }
  thumbBusy = false;
  thumbnailsSoon();
}

for (const ev of ['pointermove', 'pointerdown', 'keydown', 'wheel', 'focus']) {
  addEventListener(ev, () => {
    touched = Date.now();
    if (!paused.hidden) {
      paused.hidden = true;
      delete document.body.dataset.thumbnails;
      thumbnailsSoon();
    }
  }, { passive: true });
}

document.addEventListener('visibilitychange', () => {
  if (document.hidden) clearTimeout(thumbTimer);
  else thumbnailsSoon();
});

function nodeRow(n) {
  const cap = n.capacity || {};
  const used = n.used || {};
  const of = (u, c, fmt) => (c && c !== '0' ? `${fmt(u) || 0} / ${fmt(c)}` : fmt(u) || '0');
  const state = enumName(n.state, 'NODE_STATE_');
  return el('tr', { 'data-node-id': n.id },
    el('td', { text: n.id }),
    el('td', { class: 'state', 'data-state': state, text: state }),
    el('td', { text: n.address || '' }),
    el('td', { class: 'sessions', text: of(used.sessions, cap.sessions, (x) => (x && x !== '0' ? String(x) : '')) }),
    el('td', { text: of(used.cpuMillis, cap.cpuMillis, cores) }),
    el('td', { text: of(used.memoryBytes, cap.memoryBytes, bytes) }),
    el('td', { text: labelsText(n.labels) }));
}

// The node panel shows only where the API has nodes to show.
let nodesAvailable = true;
async function refreshNodes() {
  if (!nodesAvailable) return;
  try {
    const data = await api('GET', '/v1/nodes');
    document.querySelector('#nodes tbody').replaceChildren(...(data.nodes || []).map(nodeRow));
    nodesPanel.hidden = false;
  } catch (e) {
    if (e.status === 404 || e.status === 501) nodesAvailable = false;
    nodesPanel.hidden = true;
  }
}

async function refresh() {
  try {
    await Promise.all([refreshSessions(), refreshNodes()]);
    document.body.dataset.loaded = 'true';
  } catch (e) {
    say('Could not list sessions: ' + describe(e), true);
  }
}

async function remove(id, button) {
  button.disabled = true;
  try {
    await api('DELETE', '/v1/sessions/' + encodeURIComponent(id));
    say('Deleted ' + id);
  } catch (e) {
    say(`Could not delete ${id}: ${describe(e)}`, true);
  }
  await refresh();
}

function createRequest() {
  if (form.hidden) return {};
  const f = new FormData(form);
  const req = {};
  const display = {};
  if (f.get('width')) display.width = Number(f.get('width'));
  if (f.get('height')) display.height = Number(f.get('height'));
  if (Object.keys(display).length) req.display = display;
  const ttl = parseDuration(f.get('ttl'));
  if (ttl) req.ttl = ttl;
  const idle = parseDuration(f.get('idle'));
  if (idle) req.idleTimeout = idle;
  const limits = {};
  if (Number(f.get('memory')) > 0) limits.memoryBytes = String(Math.round(Number(f.get('memory')) * 1048576));
  if (Number(f.get('cpu')) > 0) limits.cpuMillis = String(Math.round(Number(f.get('cpu')) * 1000));
  if (Object.keys(limits).length) req.limits = limits;
  const labels = parseLabels(f.get('labels'));
  if (Object.keys(labels).length) req.labels = labels;
  const autostart = String(f.get('autostart') || '').split('\n').map((s) => s.trim()).filter(Boolean);
  if (autostart.length) req.autostart = autostart;
  return req;
}

async function create(button) {
  let req;
  try {
    req = createRequest();
  } catch (e) {
    say(e.message, true);
    return;
  }
  button.disabled = true;
  say('Creating…');
  try {
    const s = await api('POST', '/v1/sessions', req);
    say('Created ' + s.id, false, s.id);
  } catch (e) {
    say('Could not create a session: ' + describe(e), true);
  }
  button.disabled = false;
  await refresh();
}

document.getElementById('create').addEventListener('click', (ev) => create(ev.currentTarget));
form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  create(document.getElementById('create-submit'));
});
toggle.addEventListener('click', () => {
  form.hidden = !form.hidden;
  toggle.setAttribute('aria-expanded', String(!form.hidden));
});

signedIn().then(() => {
  refresh();
  setInterval(() => { if (!document.hidden) refresh(); }, 5000);
});

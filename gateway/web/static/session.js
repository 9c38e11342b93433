// One session: its desktop live in noVNC (view-only until taken over with
// the input lease), agent runs with their events as a chat (server-sent
// events), and the session's history.
import { api, apiFetch, authHeaders, bytes, describe, el, enumName, eventStream, formatSeconds, onSignOut, saveBlob, serverIndex, signedIn, streamedDownload, toBase64 } from '/static/api.js';

const id = decodeURIComponent(location.pathname.split('/').pop());
const enc = encodeURIComponent(id);
const $ = (x) => document.getElementById(x);
const screen = $('screen');
const state = $('state');
const reconnect = $('reconnect');
$('title').textContent = id;
document.title = id + ' · deskgrid';

// ---- the desktop ----

let RFB = null;
let rfb = null;
let viewOnly = true;
// With viewer tokens (a gateway with authentication), each connection
// opens with a token of its own: view, or control while the lease is held.
let viewerToken = null;
let connects = 0;

function setState(name, text) {
  state.dataset.state = name;
  state.textContent = text || name;
  reconnect.hidden = name === 'connecting' || name === 'connected';
}

// The browser hides why an upgrade was refused; the REST API can say.
async function explain() {
  try {
    const s = await api('GET', '/v1/sessions/' + enc);
    return `disconnected (session is ${enumName(s.state, 'SESSION_STATE_')})`;
  } catch (e) {
    return 'disconnected: ' + e.message;
  }
}

// revokeToken ends a token no longer needed, so a copied link stops working.
function revokeToken(t, keepalive = false) {
  if (!t) return;
  fetch('/v1/viewerTokens/' + encodeURIComponent(t.tokenId), { method: 'DELETE', keepalive, headers: authHeaders({ Accept: 'application/json' }) })
    .catch(() => {});
}

async function connect() {
  if (!RFB) return;
  const n = ++connects;
  if (rfb) {
    const old = rfb;
    rfb = null;
    old.disconnect();
  }
  setState('connecting');
  let url = new URL('/v1/sessions/' + enc + '/vnc', location.href);
  if ((await serverIndex()).viewer_tokens) {
    let t;
    try {
      t = await api('POST', `/v1/sessions/${enc}/viewerToken`, { mode: viewOnly ? 'view' : 'control', ttl_seconds: 3600 });
    } catch (e) {
      if (n === connects) setState('failed', 'no viewer token: ' + e.message);
      return;
    }
    if (n !== connects) {
      revokeToken(t);
      return;
    }
    revokeToken(viewerToken);
    viewerToken = t;
    window.deskgridViewer = { mode: t.mode, tokenId: t.tokenId };
    url = new URL(t.url, location.href);
  }
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  if (viewOnly) url.searchParams.set('view_only', 'true');
  const conn = new RFB(screen, url.href, { wsProtocols: ['binary'] });
  conn.viewOnly = viewOnly;
  conn.scaleViewport = true;
  conn.background = '#222';
  conn.addEventListener('connect', () => setState('connected'));
  conn.addEventListener('desktopname', (e) => { document.title = e.detail.name + ' · deskgrid'; });
  conn.addEventListener('securityfailure', (e) => setState('failed', 'refused: ' + (e.detail.reason || 'security failure')));
  conn.addEventListener('disconnect', async (e) => {
    if (rfb !== conn) return;
    const why = await explain();
    if (rfb === conn) setState(e.detail.clean ? 'disconnected' : 'failed', why);
  });
  rfb = conn;
  window.deskgridRFB = conn;
}

async function loadViewer() {
  try {
    ({ default: RFB } = await import('/novnc/core/rfb.js'));
  } catch {
    setState('failed', 'live view unavailable: noVNC assets missing (run scripts/setup)');
    return;
  }
  connect();
}
reconnect.addEventListener('click', connect);

// ---- the input lease: watch by default, take over to type and click ----

const control = $('control');
const takeOver = $('take-over');
const handBack = $('hand-back');
let holder = sessionStorage.getItem('deskgrid-holder');
if (!holder) {
  holder = 'console-' + Math.random().toString(36).slice(2, 10);
  sessionStorage.setItem('deskgrid-holder', holder);
}
let lease = null;
let renewTimer = null;

function setControl(name, text) {
  control.dataset.lease = name;
  control.textContent = text;
  takeOver.hidden = name === 'held';
  handBack.hidden = name !== 'held';
  takeOver.disabled = name === 'waiting';
}

function setViewOnly(v) {
  if (viewOnly === v) return;
  viewOnly = v;
  connect();
}

takeOver.addEventListener('click', async () => {
  setControl('waiting', 'waiting for the input lease…');
  try {
    lease = await api('POST', `/v1/sessions/${enc}/inputLease:acquire`, { holder, ttl: '30s', wait: '20s' });
  } catch (e) {
    setControl('none', 'could not take over: ' + e.message);
    return;
  }
  setControl('held', 'in control');
  showHolder(lease);
  setViewOnly(false);
  clearInterval(renewTimer);
  renewTimer = setInterval(renew, 10000);
});

async function renew() {
  if (!lease) return;
  try {
    lease = await api('POST', `/v1/sessions/${enc}/inputLease:renew`, { leaseId: lease.leaseId, ttl: '30s' });
  } catch (e) {
    lost('lost control: ' + e.message);
  }
}

function lost(text) {
  clearInterval(renewTimer);
  lease = null;
  setControl('none', text);
  setViewOnly(true);
  holderSoon(0);
}

// Who holds the input lease (a run, a person on another page, this page),
// asked every holderEvery ms while the page is shown, one request at a time.
const inputHolder = $('input-holder');
const holderEvery = 5000;
let holderTimer = null;
let holderBusy = false;

function showHolder(l) {
  const name = l && l.holder ? l.holder : '';
  inputHolder.dataset.holder = name;
  inputHolder.textContent = 'input: ' + (name || 'free');
  inputHolder.title = l && l.expireTime ? `held by ${name} until ${new Date(l.expireTime).toLocaleTimeString()}` : 'nobody holds the input lease';
}

function holderSoon(delay = holderEvery) {
  clearTimeout(holderTimer);
  holderTimer = setTimeout(refreshHolder, delay);
}

async function refreshHolder() {
  if (holderBusy || document.hidden) return;
  holderBusy = true;
  try {
    const r = await api('GET', `/v1/sessions/${enc}/inputLease`);
    showHolder(r.lease);
    if (r.waiting) inputHolder.textContent += ` (${r.waiting} waiting)`;
  } catch (e) {
    inputHolder.dataset.holder = '';
    inputHolder.textContent = 'input: ?';
    inputHolder.title = 'could not ask who holds the input lease: ' + e.message;
  }
  holderBusy = false;
  holderSoon();
}
document.addEventListener('visibilitychange', () => {
  if (document.hidden) clearTimeout(holderTimer);
  else holderSoon(0);
});
holderSoon(0);

handBack.addEventListener('click', async () => {
  const l = lease;
  lost('watching');
  if (!l) return;
  try {
    await api('POST', `/v1/sessions/${enc}/inputLease:release`, { leaseId: l.leaseId });
  } catch (e) {
    setControl('none', 'watching (release: ' + e.message + ')');
  }
});

// Leaving the page (or signing out) hands control back so waiting runs need
// not wait for the TTL, and ends the page's viewer token.
function leave() {
  stopRecordingsOnLeave();
  revokeToken(viewerToken, true);
  viewerToken = null;
  if (!lease) return;
  const l = lease;
  lease = null;
  fetch(`/v1/sessions/${enc}/inputLease:release`, {
    method: 'POST', keepalive: true, headers: authHeaders({ 'Content-Type': 'application/json' }),
    body: JSON.stringify({ leaseId: l.leaseId }),
  }).catch(() => {});
}
addEventListener('pagehide', leave);
onSignOut(leave);

// ---- the session's state, live ----

const sessionState = $('session-state');
let timelineSoon = null;
function showSession(s) {
  const name = enumName(s.state, 'SESSION_STATE_');
  if (sessionState.dataset.state !== name) {
    clearTimeout(timelineSoon);
    timelineSoon = setTimeout(refreshTimeline, 500);
  }
  sessionState.dataset.state = name;
  sessionState.textContent = name + (s.stateReason ? ` (${s.stateReason})` : '');
}

// watchSession follows the session's changes as server-sent events, and
// falls back to asking every few seconds when the watch is refused.
function watchSession() {
  eventStream(`/v1/sessions/${enc}:watch`, {
    onEvent: (type, data) => { if (type === 'session') showSession(JSON.parse(data).session || {}); },
    onFail: (e) => {
      if (e.status === 401) return;
      const poll = async () => {
        try {
          showSession(await api('GET', '/v1/sessions/' + enc));
        } catch { /* the live view says why */ }
      };
      poll();
      setInterval(() => { if (!document.hidden) poll(); }, 5000);
    },
  });
}

// ---- runs: start one, follow its events as a chat ----

const runForm = $('run-form');
const runStatus = $('run-status');
const transcript = $('transcript');
const runState = $('run-state');
const runCancel = $('run-cancel');
let events = null;
let currentRun = null;

runForm.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const f = new FormData(runForm);
  const req = { prompt: f.get('prompt'), provider: f.get('provider') };
  for (const k of ['model', 'apiKey', 'baseUrl']) if (f.get(k)) req[k] = f.get(k);
  if (Number(f.get('maxSteps')) > 0) req.maxSteps = Number(f.get('maxSteps'));
  if (f.get('approval')) req.options = { approvalTools: ['computer', 'bash', 'str_replace_based_edit_tool'] };
  $('run-submit').disabled = true;
  runStatus.textContent = 'starting…';
  runStatus.className = '';
  try {
    const run = await api('POST', `/v1/sessions/${enc}/runs`, req);
    runStatus.textContent = '';
    runForm.elements.apiKey.value = '';
    follow(run.id);
    listRuns();
  } catch (e) {
    runStatus.textContent = 'could not start: ' + e.message;
    runStatus.className = 'error';
  }
  $('run-submit').disabled = false;
});

runCancel.addEventListener('click', async () => {
  if (!currentRun) return;
  try {
    await api('POST', `/v1/runs/${encodeURIComponent(currentRun)}:cancel`, {});
  } catch (e) {
    runStatus.textContent = 'could not cancel: ' + e.message;
  }
});

function setRunState(name, reason) {
  runState.dataset.state = name;
  runState.textContent = name + (reason ? ` (${reason})` : '');
  runCancel.hidden = !['queued', 'running', 'waiting approval'].includes(name);
}

// follow shows one run's events from the first; the stream resumes after
// the last one it saw (Last-Event-ID) if the connection drops.
function follow(runID) {
  if (events) events.close();
  currentRun = runID;
  transcript.replaceChildren();
  $('usage').textContent = '';
  $('run-id').textContent = runID;
  $('run-panel').hidden = false;
  setRunState('queued');
  const chat = newChat(runID);
  const types = new Set(['text_delta', 'thinking_delta', 'tool_call', 'state', 'usage', 'screenshot', 'user_message']);
  events = eventStream(`/v1/runs/${encodeURIComponent(runID)}/events`, {
    onEvent: (type, data) => { if (types.has(type)) chat.add(type, JSON.parse(data).event || {}); },
    onEnd: (st) => {
      if (st.code) chat.note('events ended: ' + st.message, true);
      transcript.dataset.ended = 'true';
      refreshTimeline();
      listRuns();
    },
    onFail: (e) => chat.note('lost the event stream: ' + e.message, true),
  });
}

function newChat(runID) {
  let assistant = null; // the assistant message text deltas extend
  let thinking = null;
  const tools = new Map();
  const append = (node) => {
    transcript.append(node);
    transcript.scrollTop = transcript.scrollHeight;
    return node;
  };
  const toolCard = (call) => {
    let card = tools.get(call.id);
    if (!card) {
      const input = el('pre', { class: 'input' });
      card = append(el('li', { class: 'tool', 'data-call-id': call.id, 'data-state': 'running' },
        el('div', { class: 'who', text: call.tool || 'tool' }), input, el('div', { class: 'shots' }), el('pre', { class: 'output', hidden: true })));
      input.textContent = summarize(call.inputJson);
      tools.set(call.id, card);
    }
    return card;
  };
  return {
    note(text, isError) {
      append(el('li', { class: 'note' + (isError ? ' error' : ''), text }));
    },
    add(type, ev) {
      if (type !== 'text_delta') assistant = null;
      if (type !== 'thinking_delta') thinking = null;
      switch (type) {
        case 'user_message':
          append(el('li', { class: 'msg user' }, el('div', { class: 'who', text: 'you' }), el('p', { text: ev.userMessage })));
          break;
        case 'text_delta':
          if (!assistant) {
            assistant = el('p');
            append(el('li', { class: 'msg assistant' }, el('div', { class: 'who', text: 'agent' }), assistant));
          }
          assistant.textContent += ev.textDelta;
          break;
        case 'thinking_delta':
          if (!thinking) {
            thinking = el('p');
            append(el('li', { class: 'thinking' }, el('details', {}, el('summary', { text: 'thinking' }), thinking)));
          }
          thinking.textContent += ev.thinkingDelta;
          break;
        case 'tool_call': {
          const call = ev.toolCall || {};
          const card = toolCard(call);
          if (call.finished) {
            card.dataset.state = call.isError ? 'error' : 'done';
            const out = card.querySelector('.output');
            out.hidden = false;
            out.textContent = call.output || '';
          }
          if ((call.safetyChecks || []).length) card.append(el('div', { class: 'error', text: 'safety checks: ' + call.safetyChecks.join(', ') }));
          break;
        }
        case 'screenshot': {
          const ref = ev.screenshot || {};
          const card = ref.toolCallId ? toolCard({ id: ref.toolCallId, tool: 'computer' }) : append(el('li', { class: 'tool' }, el('div', { class: 'shots' })));
          const img = el('img', { class: 'thumb', alt: `screenshot ${ref.width}x${ref.height}`, width: 160 });
          card.querySelector('.shots').append(img);
          screenshotFor(runID, ref.toolCallId, ev.time, img).then((src) => { img.src = src; }, () => { img.alt += ' (not recorded)'; });
          break;
        }
        case 'state': {
          const name = enumName(ev.state, 'RUN_STATE_');
          setRunState(name, ev.reason);
          append(el('li', { class: 'note', 'data-state': name, text: name + (ev.reason ? ` (${ev.reason})` : '') }));
          for (const old of transcript.querySelectorAll('.approval')) old.remove();
          if (name === 'waiting approval') append(approvalCard(runID));
          break;
        }
        case 'usage': {
          const u = ev.usage || {};
          $('usage').textContent = `tokens: ${u.inputTokens || 0} in, ${u.outputTokens || 0} out` +
            (u.cacheReadTokens ? `, ${u.cacheReadTokens} cached` : '');
          break;
        }
      }
    },
  };
}

// approvalCard asks the person to let the pending tool call run or refuse it
// (the model is told the reason).
function approvalCard(runID) {
  const run = encodeURIComponent(runID);
  const reason = el('input', { class: 'reason', placeholder: 'reason, told to the model' });
  const approve = el('button', { type: 'button', class: 'approve', text: 'Approve' });
  const reject = el('button', { type: 'button', class: 'reject', text: 'Reject' });
  const said = el('span', { role: 'status' });
  const card = el('li', { class: 'approval' }, el('div', { class: 'who', text: 'waiting for your approval' }), approve, ' ', reject, ' ', reason, ' ', said);
  const decide = async (verb, body) => {
    approve.disabled = reject.disabled = true;
    try {
      await api('POST', `/v1/runs/${run}:${verb}`, body);
      said.textContent = verb === 'approveStep' ? 'approved' : 'rejected';
    } catch (e) {
      said.textContent = e.message;
      said.className = 'error';
      approve.disabled = reject.disabled = false;
    }
  };
  approve.addEventListener('click', () => decide('approveStep', {}));
  reject.addEventListener('click', () => decide('rejectStep', { reason: reason.value || 'rejected in the console' }));
  return card;
}

function summarize(inputJson) {
  if (!inputJson) return '';
  try {
    const v = JSON.parse(inputJson);
    if (v && typeof v === 'object') {
      return Object.entries(v).map(([k, x]) => `${k}: ${typeof x === 'string' ? x : JSON.stringify(x)}`).join('\n');
    }
  } catch { /* shown as it is */ }
  return inputJson;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// screenshotFor finds a run's screenshot in the history (which records the
// bytes once, as a blob) and returns it as an image URL. The history ingests
// events moments after they happen, so it asks a few times; for a screenshot
// taken just now that the history does not hold, the desktop as it is now
// stands in.
async function screenshotFor(runID, callID, time, img) {
  const recent = time && Date.now() - new Date(time).getTime() < 10000;
  for (let i = 0; i < 20; i++) {
    const data = await api('GET', `/v1/runs/${encodeURIComponent(runID)}/entries?kinds=ENTRY_KIND_SCREENSHOT&pageSize=1000`);
    const entries = data.entries || [];
    const callOf = (x) => (x.data || {}).callId || ((x.data || {}).screenshot || {}).toolCallId;
    const e = entries.find((x) => callOf(x) === callID) || (!callID ? entries[entries.length - 1] : undefined);
    const hash = e && (e.blobHash || (e.data || {}).blobHash);
    if (hash) {
      const blob = await api('GET', '/v1/blobs/' + encodeURIComponent(hash));
      return `data:${blob.contentType || 'image/png'};base64,${blob.data}`;
    }
    if (i === 2 && recent) {
      const res = await fetch(`/v1/sessions/${enc}/screenshot`, { headers: authHeaders() });
      if (res.ok) {
        img.title = 'the desktop when the run took this screenshot';
        return URL.createObjectURL(await res.blob());
      }
    }
    await sleep(250 * Math.min(i + 1, 4));
  }
  throw new Error('not in the history');
}

async function listRuns() {
  try {
    const data = await api('GET', `/v1/sessions/${enc}/runs`);
    $('runs').replaceChildren(...(data.runs || []).map((r) => {
      const b = el('button', { type: 'button', class: 'link', text: r.id });
      b.addEventListener('click', () => follow(r.id));
      return el('li', { 'data-run-id': r.id }, b, ' ', el('span', { text: enumName(r.state, 'RUN_STATE_') }),
        el('span', { class: 'prompt', text: ' ' + (r.prompt || '').slice(0, 80) }));
    }));
  } catch (e) {
    $('runs').replaceChildren(el('li', { class: 'error', text: 'runs: ' + e.message }));
  }
}

// ---- history timeline ----

// entryText says what an entry records. Payloads come as the history's own
// messages (AgentMessage, AgentToolCall, ...) or as the agent's RunEvent and
// the session's SessionStateChanged; both shapes are read.
function entryText(e) {
  const d = e.data || {};
  const call = d.toolCall || {};
  switch (e.kind) {
    case 'ENTRY_KIND_LIFECYCLE': {
      const st = d.to || d.state || (d.session || {}).state;
      return [enumName(st, /^(SESSION|RUN)_STATE_/), d.reason].filter(Boolean).join(' — ');
    }
    case 'ENTRY_KIND_MESSAGE': {
      if (d.userMessage) return 'user: ' + d.userMessage;
      if (d.thinkingDelta || d.thinking) return 'thinking: ' + (d.thinkingDelta || d.thinking);
      const who = d.role ? enumName(d.role, 'ROLE_') : 'agent';
      return `${who}: ${d.text || d.textDelta || ''}`;
    }
    case 'ENTRY_KIND_TOOL_CALL': return `${d.tool || call.tool || 'tool'} ${d.inputJson || call.inputJson || d.input || ''}`.slice(0, 400);
    case 'ENTRY_KIND_TOOL_RESULT': return `${d.tool || call.tool || 'tool'} → ${(d.output || call.output || '').slice(0, 200)}`;
    case 'ENTRY_KIND_SCREENSHOT': {
      const ref = d.screenshot || d;
      if (d.tool) return `${d.tool} (screenshot)`;
      return `screenshot ${ref.width || ''}x${ref.height || ''}`;
    }
    case 'ENTRY_KIND_USAGE': {
      const u = d.usage || d;
      return `${u.inputTokens || 0} tokens in, ${u.outputTokens || 0} out`;
    }
    default: {
      const r = d.recording || {};
      if (r.id) return `recording ${r.id} ${enumName(r.state, 'RECORDING_STATE_')}${r.failureReason ? ' — ' + r.failureReason : ''}`;
      return d.reason || d.message || '';
    }
  }
}

// timelineItems folds a run's streamed text (one entry per delta) into one line.
function timelineItems(entries) {
  const out = [];
  for (const e of entries) {
    const d = e.data || {};
    const delta = e.kind === 'ENTRY_KIND_MESSAGE' ? (d.textDelta ?? (d.event || {}).textDelta) : undefined;
    const prev = out[out.length - 1];
    if (delta !== undefined && prev && prev.delta && prev.runId === e.runId) {
      prev.text += delta;
      continue;
    }
    out.push({ e, runId: e.runId, delta: delta !== undefined, text: delta !== undefined ? 'agent: ' + delta : entryText(e) });
  }
  return out;
}

// historyEntries reads the session's history (every page, bounded), of
// the kinds asked for and between the times given.
async function historyEntries({ kinds = [], start = '', end = '' } = {}) {
  const entries = [];
  let token = '';
  for (let i = 0; i < 10; i++) {
    const q = ['pageSize=500', ...kinds.map((k) => 'kinds=' + k), start ? 'startTime=' + encodeURIComponent(start) : '',
      end ? 'endTime=' + encodeURIComponent(end) : '', token ? 'pageToken=' + encodeURIComponent(token) : ''].filter(Boolean).join('&');
    const data = await api('GET', `/v1/sessions/${enc}/history?` + q);
    entries.push(...(data.entries || []));
    token = data.nextPageToken || '';
    if (!token) break;
  }
  return entries;
}

let timelineAll = [];

// showTimeline lists the loaded entries that pass the type and text filters.
function showTimeline() {
  const list = $('timeline');
  const type = $('history-type').value;
  const text = $('history-text').value.trim().toLowerCase();
  const shown = timelineAll.filter(({ e, text: t }) => (!type || e.type === type) &&
    (!text || t.toLowerCase().includes(text) || (e.type || '').toLowerCase().includes(text)));
  list.replaceChildren(...shown.map(({ e, text: t }) => el('li', { class: 'entry', 'data-kind': enumName(e.kind, 'ENTRY_KIND_'), 'data-type': e.type },
    el('time', { datetime: e.time, text: e.time ? new Date(e.time).toLocaleTimeString() : '' }),
    el('span', { class: 'type', text: e.type }),
    el('span', { class: 'text', text: t }))));
  $('history-count').textContent = `${shown.length} of ${timelineAll.length} entries`;
}

// timelineGen numbers the timeline's refreshes: one answered after a later
// one began (the run's end refreshing as the kind filter changes) is stale
// and dropped, or it would show every kind under a filter for one.
let timelineGen = 0;
async function refreshTimeline() {
  const list = $('timeline');
  const gen = ++timelineGen;
  try {
    const kind = $('history-kind').value;
    const entries = await historyEntries({ kinds: kind ? [kind] : [] });
    if (gen !== timelineGen) return;
    timelineAll = timelineItems(entries);
    const typeSel = $('history-type');
    const want = typeSel.value;
    const types = [...new Set(entries.map((e) => e.type).filter(Boolean))].sort();
    typeSel.replaceChildren(el('option', { value: '', text: 'every type' }), ...types.map((t) => el('option', { value: t, text: t })));
    typeSel.value = types.includes(want) ? want : '';
    showTimeline();
    list.dataset.loaded = 'true';
  } catch (e) {
    if (gen !== timelineGen) return;
    timelineAll = [];
    list.replaceChildren(el('li', { class: 'error', text: 'history: ' + describe(e) }));
    $('history-count').textContent = '';
  }
}
$('history-kind').addEventListener('change', refreshTimeline);
$('history-type').addEventListener('change', showTimeline);
$('history-text').addEventListener('input', showTimeline);
$('history-filter').addEventListener('submit', (ev) => ev.preventDefault());
$('timeline-refresh').addEventListener('click', refreshTimeline);


// ---- tabs ----

const tabLoaders = { files: () => listFiles(cwd), recordings: () => listRecordings(), history: () => refreshTimeline() };
const tabsOpened = new Set(['agent']);
let activeTab = 'agent';
function openTab(name) {
  activeTab = name;
  document.body.dataset.tab = name;
  for (const b of document.querySelectorAll('#tabs [data-tab]')) b.setAttribute('aria-selected', String(b.dataset.tab === name));
  for (const t of document.querySelectorAll('aside .tab')) t.hidden = t.id !== 'tab-' + name;
  if (name !== 'inspector') hideBox($('a11y-hover'));
  showSelected();
  if (!tabsOpened.has(name)) {
    tabsOpened.add(name);
    if (tabLoaders[name]) tabLoaders[name]();
  }
}
for (const b of document.querySelectorAll('#tabs [data-tab]')) b.addEventListener('click', () => openTab(b.dataset.tab));

function say(node, text, isError = false) {
  node.textContent = text;
  node.className = isError ? 'error' : '';
}

// ---- files ----

let cwd = '';
const filesStatus = $('files-status');
const joinPath = (dir, name) => (!dir ? name : dir.endsWith('/') ? dir + name : dir + '/' + name);
function parentOf(dir) {
  const t = dir.replace(/\/+$/, '');
  const i = t.lastIndexOf('/');
  if (i < 0) return '';
  return i === 0 ? '/' : t.slice(0, i);
}

async function listFiles(dir) {
  const tbody = $('files').querySelector('tbody');
  say(filesStatus, 'listing…');
  try {
    const data = await api('GET', `/v1/sessions/${enc}/files?path=` + encodeURIComponent(dir));
    cwd = dir;
    $('files-path').value = dir;
    $('files-up').disabled = dir === '' || dir === '/';
    const files = (data.files || []).slice().sort((a, b) => (Number(!!b.isDir) - Number(!!a.isDir)) || a.name.localeCompare(b.name));
    tbody.replaceChildren(...files.map(fileRow));
    say(filesStatus, `${dir || 'home folder'}: ${files.length} ${files.length === 1 ? 'entry' : 'entries'}`);
    $('files').dataset.path = dir;
  } catch (e) {
    say(filesStatus, `could not list ${dir || 'the home folder'}: ${describe(e)}`, true);
  }
}

function fileRow(f) {
  const path = joinPath(cwd, f.name);
  let name;
  const actions = el('td', { class: 'actions' });
  if (f.isDir) {
    name = el('button', { type: 'button', class: 'link dir', text: f.name + '/' });
    name.addEventListener('click', () => listFiles(path));
  } else {
    name = el('span', { text: f.name });
    const dl = el('button', { type: 'button', class: 'download', text: 'Download' });
    dl.addEventListener('click', () => downloadFile(path, f.name, dl));
    actions.append(dl);
  }
  return el('tr', { 'data-name': f.name, 'data-dir': f.isDir ? 'true' : 'false' },
    el('td', {}, name),
    el('td', { class: 'size', text: f.isDir ? '' : bytes(f.size) || '0 B' }),
    el('td', { class: 'time', title: f.modifyTime || '', text: f.modifyTime ? new Date(f.modifyTime).toLocaleString() : '' }),
    actions);
}

async function downloadFile(path, name, button) {
  button.disabled = true;
  say(filesStatus, `downloading ${name}…`);
  try {
    const { blob } = await streamedDownload(`/v1/sessions/${enc}/files:download?path=` + encodeURIComponent(path));
    saveBlob(blob, name);
    say(filesStatus, `downloaded ${name} (${bytes(blob.size) || '0 B'})`);
  } catch (e) {
    say(filesStatus, `could not download ${name}: ${describe(e)}`, true);
  }
  button.disabled = false;
}

$('files-nav').addEventListener('submit', (ev) => {
  ev.preventDefault();
  listFiles($('files-path').value.trim());
});
$('files-up').addEventListener('click', () => listFiles(parentOf(cwd)));
$('files-upload').addEventListener('change', async (ev) => {
  const input = ev.currentTarget;
  const files = [...input.files];
  input.disabled = true;
  let failed = false;
  for (const f of files) {
    say(filesStatus, `uploading ${f.name}…`);
    try {
      const content = toBase64(new Uint8Array(await f.arrayBuffer()));
      await api('POST', `/v1/sessions/${enc}/files:write`, { path: joinPath(cwd, f.name), content });
    } catch (e) {
      say(filesStatus, `could not upload ${f.name}: ${describe(e)}`, true);
      failed = true;
      break;
    }
  }
  input.value = '';
  input.disabled = false;
  const status = filesStatus.textContent;
  await listFiles(cwd);
  if (failed) say(filesStatus, status, true);
  else say(filesStatus, `uploaded ${files.map((f) => f.name).join(', ')}`);
});
$('files-mkdir').addEventListener('click', async () => {
  const name = $('files-newdir').value.trim();
  if (!name) return;
  try {
    await api('POST', `/v1/sessions/${enc}/files:mkdir`, { path: joinPath(cwd, name), parents: true });
    $('files-newdir').value = '';
    await listFiles(cwd);
  } catch (e) {
    say(filesStatus, `could not make ${name}: ${describe(e)}`, true);
  }
});

// ---- recordings and replay ----

const recStatus = $('rec-status');
// Recordings this page started: stopped when the page is left.
const startedHere = new Set();
const justStarted = new Map();
let recordings = [];
let recPoll = null;

// RFC 3339 with up to nanoseconds, to milliseconds since the epoch.
function timeMs(t) {
  return t ? Date.parse(t.replace(/(\.\d{3})\d+/, '$1')) : NaN;
}

function recordingRow(r) {
  const state = enumName(r.state, 'RECORDING_STATE_');
  const span = ((r.endTime ? timeMs(r.endTime) : Date.now()) - timeMs(r.startTime)) / 1000;
  const info = [state, formatSeconds(span), r.width ? `${r.width}x${r.height}` : '', r.frames && r.frames !== '0' ? `${r.frames} frames` : '',
    bytes(r.sizeBytes), state === 'stopped' && !r.downloadReady ? 'being stored…' : '', r.failureReason || ''].filter(Boolean).join(' · ');
  const li = el('li', { 'data-recording-id': r.id, 'data-state': state, 'data-ready': r.downloadReady ? 'true' : 'false', 'data-start': r.startTime || '', 'data-end': r.endTime || '' },
    el('div', {}, el('strong', { text: r.id }), ' ', el('span', { class: 'muted', text: r.startTime ? new Date(timeMs(r.startTime)).toLocaleTimeString() : '' })),
    el('div', { class: 'muted', text: info }));
  const buttons = el('div', { class: 'buttons' });
  if (state === 'recording') {
    const stop = el('button', { type: 'button', class: 'stop', text: 'Stop' });
    stop.addEventListener('click', () => stopRecording(r.id));
    buttons.append(stop);
  }
  if (r.downloadReady) {
    const play = el('button', { type: 'button', class: 'play', text: 'Replay' });
    play.addEventListener('click', () => replay(r));
    const dl = el('button', { type: 'button', class: 'download', text: 'Download' });
    dl.addEventListener('click', async () => {
      dl.disabled = true;
      try {
        const blob = await (await apiFetch(`/v1/sessions/${enc}/recordings/${encodeURIComponent(r.id)}:download`)).blob();
        saveBlob(blob, r.id + (r.contentType === 'video/webm' ? '.webm' : '.mp4'));
      } catch (e) {
        say(recStatus, `could not download ${r.id}: ${describe(e)}`, true);
      }
      dl.disabled = false;
    });
    buttons.append(play, ' ', dl);
  }
  li.append(buttons);
  return li;
}

async function listRecordings() {
  clearTimeout(recPoll);
  try {
    const data = await api('GET', `/v1/sessions/${enc}/recordings`);
    recordings = data.recordings || [];
    // The history lists a recording moments after it started: until then
    // the page shows what starting it answered.
    for (const [rid, r] of justStarted) {
      if (recordings.some((x) => x.id === rid)) justStarted.delete(rid);
      else recordings.unshift(r);
    }
    $('recordings').replaceChildren(...recordings.map(recordingRow));
    if (!recordings.length) $('recordings').replaceChildren(el('li', { class: 'muted', text: 'No recordings of this session.' }));
    $('recordings').dataset.loaded = 'true';
    const live = recordings.filter((r) => r.state === 'RECORDING_STATE_RECORDING');
    $('rec-stop').hidden = live.length === 0;
    $('rec-start').disabled = live.length > 0;
    // Follow a recording until the history holds its video.
    const pending = recordings.some((r) => r.state === 'RECORDING_STATE_RECORDING' || (r.state === 'RECORDING_STATE_STOPPED' && !r.downloadReady));
    if (pending) recPoll = setTimeout(() => { if (!document.hidden) listRecordings(); else recPoll = setTimeout(listRecordings, 5000); }, live.length && !justStarted.size ? 5000 : 1000);
  } catch (e) {
    say(recStatus, 'recordings: ' + describe(e), true);
  }
}

$('rec-start').addEventListener('click', async () => {
  const b = $('rec-start');
  b.disabled = true;
  say(recStatus, 'starting…');
  const body = { format: $('rec-format').value };
  if (Number($('rec-fps').value) > 0) body.fps = Number($('rec-fps').value);
  try {
    const out = await api('POST', `/v1/sessions/${enc}/recordings`, body);
    const r = out.recording || {};
    startedHere.add(r.id);
    justStarted.set(r.id, r);
    say(recStatus, `recording ${r.id}`);
  } catch (e) {
    say(recStatus, 'could not start recording: ' + describe(e), true);
    b.disabled = false;
  }
  await listRecordings();
});

async function stopRecording(rid) {
  say(recStatus, `stopping ${rid}…`);
  try {
    const out = await api('POST', `/v1/sessions/${enc}/recordings/${encodeURIComponent(rid)}:stop`, {});
    startedHere.delete(rid);
    if (justStarted.has(rid)) justStarted.set(rid, out.recording || justStarted.get(rid));
    say(recStatus, `stopped ${rid}`);
  } catch (e) {
    say(recStatus, `could not stop ${rid}: ${describe(e)}`, true);
  }
  await listRecordings();
}
$('rec-stop').addEventListener('click', () => {
  for (const r of recordings) if (r.state === 'RECORDING_STATE_RECORDING') stopRecording(r.id);
});
$('rec-refresh').addEventListener('click', listRecordings);

function stopRecordingsOnLeave() {
  for (const rid of startedHere) {
    fetch(`/v1/sessions/${enc}/recordings/${encodeURIComponent(rid)}:stop`, {
      method: 'POST', keepalive: true, headers: authHeaders({ 'Content-Type': 'application/json' }), body: '{}',
    }).catch(() => {});
  }
  startedHere.clear();
}

const video = $('replay-video');
let videoURL = '';
let replayEvents = [];

// replay plays a recording with the session's actions, tool calls and
// screenshots of its time under it; an event's place is its time less the
// recording's start.
async function replay(r) {
  const status = $('replay-status');
  $('replay').hidden = false;
  $('replay').dataset.recordingId = r.id;
  $('replay-id').textContent = r.id;
  say(status, 'loading the video…');
  $('replay-events').replaceChildren();
  $('replay-track').replaceChildren();
  replayEvents = [];
  try {
    const res = await apiFetch(`/v1/sessions/${enc}/recordings/${encodeURIComponent(r.id)}:download`);
    const blob = await res.blob();
    if (videoURL) URL.revokeObjectURL(videoURL);
    videoURL = URL.createObjectURL(blob);
    video.src = videoURL;
  } catch (e) {
    say(status, `could not load ${r.id}: ${describe(e)}`, true);
    return;
  }
  const start = timeMs(r.startTime);
  const span = Math.max(0.001, (timeMs(r.endTime) - start) / 1000);
  let entries = [];
  try {
    entries = await historyEntries({ kinds: ['ENTRY_KIND_TOOL_CALL', 'ENTRY_KIND_SCREENSHOT', 'ENTRY_KIND_MESSAGE'], start: r.startTime, end: r.endTime });
  } catch (e) {
    say(status, 'the history of the recording: ' + describe(e), true);
  }
  const items = timelineItems(entries).filter(({ e }) => e.time && !/ConnectVNC/.test(((e.data || {}).tool) || ''));
  const track = $('replay-track');
  for (const { e, text } of items) {
    const offset = Math.max(0, (timeMs(e.time) - start) / 1000);
    const kind = enumName(e.kind, 'ENTRY_KIND_');
    const seek = () => {
      video.currentTime = offset;
      mark(offset);
    };
    const b = el('button', { type: 'button', class: 'event', 'data-offset': String(offset), 'data-time': e.time, 'data-kind': kind, title: text },
      el('span', { class: 'at', text: '+' + offset.toFixed(1) + 's' }), el('span', { class: 'kind', text: kind }), el('span', { class: 'text', text }));
    b.addEventListener('click', seek);
    const li = el('li', {}, b);
    const pin = el('button', { type: 'button', class: 'pin', 'data-kind': kind, 'data-offset': String(offset), title: `+${offset.toFixed(1)}s ${text}`, 'aria-label': text });
    pin.style.left = Math.min(100, (offset / span) * 100) + '%';
    pin.addEventListener('click', seek);
    track.append(pin);
    $('replay-events').append(li);
    replayEvents.push({ offset, li, pin });
  }
  say(status, `${items.length} events in ${formatSeconds(span)}; pick one to go to it`);
}

// mark highlights the last event at or before t seconds.
function mark(t) {
  let cur = null;
  for (const ev of replayEvents) if (ev.offset <= t + 0.001) cur = ev;
  for (const ev of replayEvents) {
    ev.li.classList.toggle('current', ev === cur);
    ev.pin.classList.toggle('current', ev === cur);
  }
}
video.addEventListener('timeupdate', () => mark(video.currentTime));

// ---- the accessibility inspector ----

const a11yStatus = $('a11y-status');
let a11yFlat = []; // { node, li, area }
let selectedNode = null;
let hoveredNode = null;

function nodeLabel(n) {
  return `${n.role || '?'}${n.name ? ' "' + n.name + '"' : ''}`;
}

function treeItem(n, depth) {
  const kids = n.children || [];
  const b = n.bounds;
  const li = el('li', { 'data-node-id': n.id, 'data-role': n.role || '', 'data-bounds': b ? `${b.x || 0},${b.y || 0},${b.width || 0},${b.height || 0}` : '' });
  const toggle = el('button', { type: 'button', class: 'toggle', 'aria-label': 'expand', text: kids.length ? '▸' : '' });
  if (!kids.length) toggle.disabled = true;
  const label = el('button', { type: 'button', class: 'node', text: nodeLabel(n) });
  const more = (n.childCount || 0) > kids.length
    ? el('span', { class: 'muted', title: 'children not showing on the screen, or beyond the limits of the read', text: ` (+${n.childCount - kids.length} more)` }) : null;
  li.append(toggle, label, more || '');
  const entry = { node: n, li, area: b && b.width > 0 && b.height > 0 ? b.width * b.height : 0 };
  a11yFlat.push(entry);
  label.addEventListener('click', () => select(entry));
  if (kids.length) {
    const ul = el('ul', {});
    for (const c of kids) ul.append(treeItem(c, depth + 1));
    li.append(ul);
    setOpen(li, depth < 2);
    toggle.addEventListener('click', () => setOpen(li, li.dataset.open !== 'true'));
  }
  return li;
}

function setOpen(li, open) {
  li.dataset.open = String(open);
  const t = li.querySelector(':scope > .toggle');
  if (t && !t.disabled) {
    t.textContent = open ? '▾' : '▸';
    t.setAttribute('aria-expanded', String(open));
  }
}

function reveal(li) {
  for (let p = li.parentElement; p && p.id !== 'a11y-tree'; p = p.parentElement) if (p.tagName === 'LI') setOpen(p, true);
}

$('a11y-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const q = ['maxNodes=3000'];
  if ($('a11y-visible').checked) q.push('onlyVisible=true');
  if ($('a11y-app').value.trim()) q.push('application=' + encodeURIComponent($('a11y-app').value.trim()));
  $('a11y-load').disabled = true;
  say(a11yStatus, 'reading the tree…');
  try {
    const data = await api('GET', `/v1/sessions/${enc}/accessibility?` + q.join('&'));
    a11yFlat = [];
    selectedNode = hoveredNode = null;
    hideBox($('a11y-hover'));
    hideBox($('a11y-selected'));
    $('a11y-details').replaceChildren();
    const apps = data.applications || [];
    $('a11y-tree').replaceChildren(...apps.map((a) => treeItem(a, 0)));
    $('a11y-tree').dataset.loaded = 'true';
    say(a11yStatus, `${data.nodeCount || 0} nodes in ${apps.length} application${apps.length === 1 ? '' : 's'}${data.truncated ? ' (cut short: narrow it to an application)' : ''}`);
  } catch (e) {
    say(a11yStatus, 'could not read the tree: ' + describe(e), true);
  }
  $('a11y-load').disabled = false;
});

// canvasMap tells where the live view's framebuffer is drawn in #screen.
function canvasMap() {
  const c = screen.querySelector('canvas');
  if (!c || !c.width || !c.height) return null;
  const r = c.getBoundingClientRect();
  if (!r.width || !r.height) return null;
  return { r, o: screen.getBoundingClientRect(), kx: r.width / c.width, ky: r.height / c.height };
}

function hideBox(box) { box.hidden = true; }

function placeBox(box, b) {
  const m = canvasMap();
  if (!m || !b) {
    box.hidden = true;
    return;
  }
  box.style.left = `${m.r.left - m.o.left + (b.x || 0) * m.kx}px`;
  box.style.top = `${m.r.top - m.o.top + (b.y || 0) * m.ky}px`;
  box.style.width = `${(b.width || 0) * m.kx}px`;
  box.style.height = `${(b.height || 0) * m.ky}px`;
  box.hidden = false;
}

function showSelected() {
  const box = $('a11y-selected');
  if (activeTab === 'inspector' && selectedNode && selectedNode.area) placeBox(box, selectedNode.node.bounds);
  else hideBox(box);
}

function select(entry) {
  if (selectedNode) selectedNode.li.classList.remove('selected');
  selectedNode = entry;
  entry.li.classList.add('selected');
  entry.li.dataset.selected = 'true';
  for (const li of $('a11y-tree').querySelectorAll('li[data-selected="true"]')) if (li !== entry.li) delete li.dataset.selected;
  showSelected();
  const n = entry.node;
  const b = n.bounds;
  const rows = [['role', n.role], ['name', n.name], ['description', n.description], ['text', n.text], ['value', n.value],
    ['states', (n.states || []).join(', ')], ['actions', (n.actions || []).join(', ')],
    ['bounds', b ? `${b.width || 0}x${b.height || 0} at ${b.x || 0},${b.y || 0}` : 'none'], ['id', n.id]];
  $('a11y-details').replaceChildren(el('dl', {}, ...rows.filter(([, v]) => v !== undefined && v !== '').flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })])));
}

// The node under the pointer: the smallest on-screen node holding it (the
// deepest, among equals).
function nodeAt(x, y) {
  let best = null;
  for (const e of a11yFlat) {
    const b = e.node.bounds;
    if (!e.area || x < (b.x || 0) || y < (b.y || 0) || x >= (b.x || 0) + b.width || y >= (b.y || 0) + b.height) continue;
    if (!best || e.area <= best.area) best = e;
  }
  return best;
}

screen.addEventListener('mousemove', (ev) => {
  if (activeTab !== 'inspector' || !a11yFlat.length) return;
  const m = canvasMap();
  const box = $('a11y-hover');
  if (!m) return;
  const x = (ev.clientX - m.r.left) / m.kx;
  const y = (ev.clientY - m.r.top) / m.ky;
  const hit = nodeAt(x, y);
  if (hit !== hoveredNode) {
    if (hoveredNode) hoveredNode.li.classList.remove('hovered');
    hoveredNode = hit;
    if (hit) {
      hit.li.classList.add('hovered');
      reveal(hit.li);
      hit.li.scrollIntoView({ block: 'nearest' });
    }
  }
  if (!hit) {
    hideBox(box);
    delete box.dataset.nodeId;
    return;
  }
  placeBox(box, hit.node.bounds);
  box.dataset.nodeId = hit.node.id;
  box.querySelector('.tag').textContent = nodeLabel(hit.node);
}, { capture: true });
screen.addEventListener('mouseleave', () => {
  hideBox($('a11y-hover'));
  if (hoveredNode) hoveredNode.li.classList.remove('hovered');
  hoveredNode = null;
});
addEventListener('resize', showSelected);

signedIn().then(() => {
  loadViewer();
  watchSession();
  listRuns();
  const want = new URLSearchParams(location.hash.slice(1)).get('tab');
  if (want && document.querySelector(`#tabs [data-tab="${want}"]`)) openTab(want);
});

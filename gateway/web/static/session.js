// One session: its desktop live in noVNC (view-only until taken over with
// the input lease), agent runs with their events as a chat (server-sent
// events), and the session's history.
import { api, authHeaders, el, enumName, eventStream, onSignOut, serverIndex, signedIn } from '/static/api.js';

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
  fetch('/v1/viewerTokens/' + encodeURIComponent(t.token_id), { method: 'DELETE', keepalive, headers: authHeaders({ Accept: 'application/json' }) })
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
    window.deskgridViewer = { mode: t.mode, tokenId: t.token_id };
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
}

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
    case 'ENTRY_KIND_TOOL_CALL': return `${d.tool || call.tool || 'tool'} ${d.inputJson || call.inputJson || ''}`;
    case 'ENTRY_KIND_TOOL_RESULT': return `${d.tool || call.tool || 'tool'} → ${(d.output || call.output || '').slice(0, 200)}`;
    case 'ENTRY_KIND_SCREENSHOT': {
      const ref = d.screenshot || d;
      return `screenshot ${ref.width || ''}x${ref.height || ''}`;
    }
    case 'ENTRY_KIND_USAGE': {
      const u = d.usage || d;
      return `${u.inputTokens || 0} tokens in, ${u.outputTokens || 0} out`;
    }
    default: return '';
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

async function refreshTimeline() {
  const list = $('timeline');
  try {
    const entries = [];
    let token = '';
    for (let i = 0; i < 10; i++) {
      const data = await api('GET', `/v1/sessions/${enc}/history?pageSize=500` + (token ? '&pageToken=' + encodeURIComponent(token) : ''));
      entries.push(...(data.entries || []));
      token = data.nextPageToken || '';
      if (!token) break;
    }
    list.replaceChildren(...timelineItems(entries).map(({ e, text }) => el('li', { class: 'entry', 'data-kind': enumName(e.kind, 'ENTRY_KIND_') },
      el('time', { datetime: e.time, text: e.time ? new Date(e.time).toLocaleTimeString() : '' }),
      el('span', { class: 'type', text: e.type }),
      el('span', { class: 'text', text }))));
    list.dataset.loaded = 'true';
  } catch (e) {
    list.replaceChildren(el('li', { class: 'error', text: 'history: ' + e.message }));
  }
}
$('timeline-refresh').addEventListener('click', refreshTimeline);

signedIn().then(() => {
  loadViewer();
  watchSession();
  listRuns();
  refreshTimeline();
});

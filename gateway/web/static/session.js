// One session's desktop, live in noVNC over the gateway's WebSocket.
import RFB from '/novnc/core/rfb.js';

const id = decodeURIComponent(location.pathname.split('/').pop());
const screen = document.getElementById('screen');
const state = document.getElementById('state');
const viewOnlyBox = document.getElementById('view-only');
const reconnect = document.getElementById('reconnect');
document.getElementById('title').textContent = id;
document.title = id + ' · deskgrid';
viewOnlyBox.checked = new URLSearchParams(location.search).get('view_only') === 'true';

let rfb = null;

function setState(name, text) {
  state.dataset.state = name;
  state.textContent = text || name;
  reconnect.hidden = name === 'connecting' || name === 'connected';
}

// The browser hides why an upgrade was refused; the REST API can say.
async function explain() {
  try {
    const res = await fetch('/v1/sessions/' + encodeURIComponent(id), { headers: { Accept: 'application/json' } });
    const data = await res.json();
    if (!res.ok) return 'disconnected: ' + (data.message || `session ${id}: ${res.status}`);
    const s = (data.state || '').replace('SESSION_STATE_', '').toLowerCase();
    return `disconnected (session is ${s})`;
  } catch {
    return 'disconnected';
  }
}

function connect() {
  if (rfb) rfb.disconnect();
  const url = new URL('/v1/sessions/' + encodeURIComponent(id) + '/vnc', location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  if (viewOnlyBox.checked) url.searchParams.set('view_only', 'true');
  setState('connecting');
  const conn = new RFB(screen, url.href, { wsProtocols: ['binary'] });
  conn.viewOnly = viewOnlyBox.checked;
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

viewOnlyBox.addEventListener('change', () => {
  const u = new URL(location.href);
  if (viewOnlyBox.checked) u.searchParams.set('view_only', 'true'); else u.searchParams.delete('view_only');
  history.replaceState(null, '', u);
  connect();
});
reconnect.addEventListener('click', connect);
connect();

// The session list: reads /v1/sessions, creates and deletes sessions.
const tbody = document.querySelector('#sessions tbody');
const empty = document.getElementById('empty');
const status = document.getElementById('status');

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { data = { message: text }; }
  if (!res.ok) throw new Error(data.message || `${res.status} ${res.statusText}`);
  return data;
}

function say(message, isError = false) {
  status.textContent = message;
  status.className = isError ? 'error' : '';
}

function cell(content) {
  const td = document.createElement('td');
  if (content instanceof Node) td.append(content); else td.textContent = content ?? '';
  return td;
}

function row(s) {
  const tr = document.createElement('tr');
  tr.dataset.sessionId = s.id;
  const link = document.createElement('a');
  link.href = '/sessions/' + encodeURIComponent(s.id);
  link.textContent = s.id;
  const state = (s.state || '').replace('SESSION_STATE_', '').toLowerCase();
  const screen = s.display ? `${s.display.width ?? ''}x${s.display.height ?? ''}` : '';
  const created = s.createTime ? new Date(s.createTime).toLocaleString() : '';
  const del = document.createElement('button');
  del.type = 'button';
  del.className = 'delete';
  del.textContent = 'Delete';
  del.addEventListener('click', () => remove(s.id, del));
  const actions = cell(del);
  actions.className = 'actions';
  tr.append(cell(link), cell(state + (s.stateReason ? ` (${s.stateReason})` : '')), cell(screen), cell(created), actions);
  return tr;
}

async function refresh() {
  try {
    const sessions = [];
    let token = '';
    // Every page, bounded so a misbehaving server cannot loop the page forever.
    for (let i = 0; i < 50; i++) {
      const data = await api('GET', '/v1/sessions' + (token ? '?pageToken=' + encodeURIComponent(token) : ''));
      sessions.push(...(data.sessions || []));
      token = data.nextPageToken || '';
      if (!token) break;
    }
    tbody.replaceChildren(...sessions.map(row));
    empty.hidden = sessions.length > 0;
    document.body.dataset.loaded = 'true';
  } catch (e) {
    say('Could not list sessions: ' + e.message, true);
  }
}

async function remove(id, button) {
  button.disabled = true;
  try {
    await api('DELETE', '/v1/sessions/' + encodeURIComponent(id));
    say('Deleted ' + id);
  } catch (e) {
    say(`Could not delete ${id}: ${e.message}`, true);
  }
  await refresh();
}

document.getElementById('create').addEventListener('click', async (ev) => {
  const button = ev.currentTarget;
  button.disabled = true;
  say('Creating…');
  try {
    const s = await api('POST', '/v1/sessions', {});
    say('Created ' + s.id);
  } catch (e) {
    say('Could not create a session: ' + e.message, true);
  }
  button.disabled = false;
  await refresh();
});

refresh();
setInterval(() => { if (!document.hidden) refresh(); }, 5000);

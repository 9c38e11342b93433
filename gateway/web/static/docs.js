// The API reference: renders /openapi.json (Swagger 2.0, generated from the
// protos) as one page, operations grouped by service tag, with their
// parameters, request body, response and examples. Plain DOM, so the page
// runs under the console's strict Content-Security-Policy.

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// prose renders the document's text: paragraphs split on blank lines and
// `code` spans; everything else stays text (never HTML).
function prose(text, cls = 'prose') {
  const box = el('div', { class: cls });
  for (const para of String(text || '').split(/\n\s*\n/)) {
    if (!para.trim()) continue;
    const p = el('p');
    String(para).split('`').forEach((part, i) => p.append(i % 2 ? el('code', { text: part }) : document.createTextNode(part)));
    box.append(p);
  }
  return box;
}

function refName(ref) { return ref ? ref.replace('#/definitions/', '') : ''; }

function anchorFor(name) { return 'def-' + name.replace(/[^A-Za-z0-9_-]/g, '_'); }

// typeOf describes a schema in a few words, linking to a definition.
function typeOf(schema) {
  if (!schema) return document.createTextNode('');
  if (schema.$ref) {
    const name = refName(schema.$ref);
    return el('a', { href: '#' + anchorFor(name), class: 'type' }, name);
  }
  if (schema.type === 'array') {
    const span = el('span', { class: 'type' }, 'array of ');
    span.append(typeOf(schema.items));
    return span;
  }
  if (schema.type === 'object' && schema.additionalProperties) {
    const span = el('span', { class: 'type' }, 'map of ');
    span.append(typeOf(schema.additionalProperties));
    return span;
  }
  let t = schema.type || 'object';
  if (schema.format) t += ' (' + schema.format + ')';
  return el('span', { class: 'type' }, t);
}

function resolve(spec, schema) {
  if (schema && schema.$ref) return spec.definitions[refName(schema.$ref)] || {};
  return schema || {};
}

function enumNote(schema) {
  const s = schema.items && schema.items.enum ? schema.items : schema;
  return s.enum ? el('div', { class: 'enum' }, 'one of: ', s.enum.map((v, i) => [i ? ', ' : '', el('code', { text: v })])) : null;
}

// fields is a table of a schema's properties.
function fields(spec, schema) {
  const s = resolve(spec, schema);
  const props = s.properties || {};
  const names = Object.keys(props);
  if (!names.length) return el('p', { class: 'muted' }, 'No fields.');
  const body = el('tbody');
  for (const name of names) {
    const p = props[name];
    const desc = el('td');
    const text = p.description || p.title || (p.$ref ? (spec.definitions[refName(p.$ref)] || {}).description : '');
    if (text) desc.append(prose(text, 'prose small'));
    const en = enumNote(p.$ref ? resolve(spec, p) : p);
    if (en) desc.append(en);
    body.append(el('tr', {}, el('td', {}, el('code', { text: name })), el('td', {}, typeOf(p)), desc));
  }
  return el('table', { class: 'fields' }, el('thead', {}, el('tr', {}, el('th', { text: 'Field' }), el('th', { text: 'Type' }), el('th', { text: 'Description' }))), body);
}

function example(value, label) {
  if (value === undefined) return null;
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
  return el('figure', { class: 'example' }, el('figcaption', { text: label }), el('pre', {}, el('code', { text })));
}

function parameters(spec, params) {
  const plain = params.filter((p) => p.in !== 'body');
  if (!plain.length) return null;
  const body = el('tbody');
  for (const p of plain) {
    const desc = el('td');
    if (p.description) desc.append(prose(p.description, 'prose small'));
    const en = enumNote(p);
    if (en) desc.append(en);
    const type = p.type === 'array' ? 'array of ' + ((p.items && p.items.type) || 'string') : (p.type || '') + (p.format ? ' (' + p.format + ')' : '');
    body.append(el('tr', {},
      el('td', {}, el('code', { text: p.name }), p.required ? el('span', { class: 'required', title: 'required' }, ' *') : null),
      el('td', { text: p.in }), el('td', { class: 'type', text: type }), desc));
  }
  return [el('h4', { text: 'Parameters' }),
    el('table', { class: 'fields' }, el('thead', {}, el('tr', {}, el('th', { text: 'Name' }), el('th', { text: 'In' }), el('th', { text: 'Type' }), el('th', { text: 'Description' }))), body)];
}

function requestBody(spec, params) {
  const b = params.find((p) => p.in === 'body');
  if (!b) return null;
  const s = resolve(spec, b.schema);
  return [el('h4', {}, 'Request body ', typeOf(b.schema)), fields(spec, b.schema), example(s.example, 'Example request body')];
}

function responses(spec, op) {
  const out = [el('h4', { text: 'Response' })];
  if (op.produces) out.push(el('p', { class: 'muted' }, 'Content types: ', op.produces.map((t, i) => [i ? ', ' : '', el('code', { text: t })])));
  for (const [code, r] of Object.entries(op.responses || {})) {
    if (code === 'default') continue;
    out.push(el('p', {}, el('strong', { text: code }), ' ', r.description || '', ' ', r.schema ? typeOf(r.schema) : ''));
    for (const [type, ex] of Object.entries(r.examples || {})) out.push(example(ex, 'Example response (' + type + ')'));
  }
  if (op.responses && op.responses.default) {
    out.push(el('p', { class: 'muted' }, 'Errors: ', typeOf(op.responses.default.schema), ' with the HTTP status of its gRPC code.'));
  }
  return out;
}

function operation(spec, path, method, op) {
  const id = op.operationId || method + ' ' + path;
  const params = op.parameters || [];
  const sec = el('section', { class: 'op', id: 'op-' + id.replace(/[^A-Za-z0-9_-]/g, '_'), 'data-search': [id, path, method, op.summary, op.description].join(' ').toLowerCase() },
    el('h3', {}, el('span', { class: 'method ' + method, text: method.toUpperCase() }), ' ', el('code', { class: 'path', text: path })),
    el('p', { class: 'summary' }, el('strong', { text: op.summary || '' }), ' ', el('span', { class: 'opid', text: id })),
    prose(op.description || ''),
    parameters(spec, params),
    requestBody(spec, params),
    responses(spec, op));
  return sec;
}

function definitions(spec) {
  const box = el('section', { class: 'group', id: 'definitions' }, el('h2', { text: 'Types' }));
  for (const name of Object.keys(spec.definitions || {}).sort()) {
    const d = spec.definitions[name];
    box.append(el('section', { class: 'def', id: anchorFor(name), 'data-search': name.toLowerCase() },
      el('h3', {}, el('code', { text: name })),
      d.description || d.title ? prose(d.description || d.title) : null,
      d.enum ? enumNote(d) : fields(spec, d),
      example(d.example, 'Example')));
  }
  return box;
}

function render(spec) {
  const doc = document.getElementById('doc');
  const toc = document.getElementById('toc-list');
  doc.replaceChildren();
  const info = spec.info || {};
  doc.append(el('section', { class: 'intro' },
    el('h2', {}, info.title || 'API', ' ', el('span', { class: 'muted', text: info.version || '' })),
    prose(info.description)));
  const schemes = Object.entries(spec.securityDefinitions || {});
  if (schemes.length) {
    doc.append(el('section', { class: 'intro' }, el('h3', { text: 'Authentication' }),
      schemes.map(([name, s]) => el('p', {}, el('code', { text: s.in === 'header' ? s.name + ' header' : name }), ' ', prose(s.description, 'prose inline')))));
  }

  // Operations grouped by their first tag, in the document's tag order.
  const groups = new Map((spec.tags || []).map((t) => [t.name, { tag: t, ops: [] }]));
  for (const [path, item] of Object.entries(spec.paths || {})) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const tag = (op.tags && op.tags[0]) || 'Other';
      if (!groups.has(tag)) groups.set(tag, { tag: { name: tag }, ops: [] });
      groups.get(tag).ops.push([path, method, op]);
    }
  }
  for (const { tag, ops } of groups.values()) {
    if (!ops.length) continue;
    const gid = 'tag-' + tag.name;
    const group = el('section', { class: 'group', id: gid }, el('h2', { text: tag.name }), tag.description ? prose(tag.description) : null);
    const sub = el('ul');
    for (const [path, method, op] of ops) {
      const sec = operation(spec, path, method, op);
      group.append(sec);
      sub.append(el('li', { 'data-for': sec.id }, el('a', { href: '#' + sec.id }, el('span', { class: 'method ' + method, text: method.toUpperCase() }), ' ', op.summary || op.operationId)));
    }
    doc.append(group);
    toc.append(el('li', {}, el('a', { href: '#' + gid, class: 'tag', text: tag.name }), sub));
  }
  doc.append(definitions(spec));
  toc.append(el('li', {}, el('a', { href: '#definitions', class: 'tag', text: 'Types' })));
  document.body.dataset.loaded = 'true';
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
}

function filter(q) {
  q = q.trim().toLowerCase();
  for (const sec of document.querySelectorAll('section.op, section.def')) {
    const hit = !q || sec.dataset.search.includes(q);
    sec.hidden = !hit;
    const li = document.querySelector(`#toc li[data-for="${sec.id}"]`);
    if (li) li.hidden = !hit;
  }
}

async function main() {
  document.getElementById('filter').addEventListener('input', (e) => filter(e.target.value));
  try {
    const resp = await fetch('/openapi.json', { headers: { Accept: 'application/json' } });
    if (!resp.ok) throw new Error('GET /openapi.json: HTTP ' + resp.status);
    render(await resp.json());
  } catch (e) {
    const s = document.getElementById('status');
    s.className = 'error';
    s.textContent = 'Could not load the API document: ' + e.message;
  }
}

main();

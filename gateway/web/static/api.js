// What the console's pages share: REST calls and formatting.

export class APIError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export async function api(method, path, body, init = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), ...init });
  const text = await res.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { data = { message: text }; }
  if (!res.ok) throw new APIError(data.message || `${res.status} ${res.statusText}`, res.status);
  return data;
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

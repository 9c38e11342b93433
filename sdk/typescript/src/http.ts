// The HTTP transport: JSON calls, newline-delimited JSON streams, retries on
// 429 and Unavailable, timeouts. Only fetch: Node 20+ and browsers.

import { DeadlineExceeded, DeskgridError, StreamError, Unavailable, errorFromReply } from './errors.js';

export type QueryValue = string | number | boolean | readonly string[] | undefined | null;
export type Query = Record<string, QueryValue>;

export interface TransportOptions {
  baseUrl: string;
  apiKey?: string;
  /** Milliseconds one call may take; for streams, one wait for the next message. */
  timeoutMs: number;
  /** Tries in all for a call that may be repeated (1: no retries). */
  retries: number;
  /** The longest wait between tries, whatever Retry-After says. */
  maxRetryWaitMs: number;
  fetch: typeof fetch;
  onRetry?: (attempt: number, error: DeskgridError, waitMs: number) => void;
}

export interface CallOptions {
  query?: Query;
  body?: unknown;
  /** A body sent as it is rather than as one JSON value (the messages of a client-streaming route). */
  rawBody?: string;
  /** Whether repeating the call after Unavailable is safe (default: GET and DELETE). */
  idempotent?: boolean;
  timeoutMs?: number;
  signal?: AbortSignal;
  accept?: string;
}

function retryAfter(h: Headers): number | undefined {
  for (const name of ['retry-after', 'grpc-metadata-retry-after']) {
    const v = h.get(name);
    if (v) {
      const n = Number(v);
      return Number.isFinite(n) ? Math.max(0, n) : undefined;
    }
  }
  return undefined;
}

async function errorOf(res: Response): Promise<DeskgridError> {
  const text = await res.text().catch(() => '');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the text is the message
  }
  return errorFromReply(res.status, body, retryAfter(res.headers));
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      reject(signal.reason);
    }, { once: true });
  });

export class Transport {
  readonly baseUrl: string;
  constructor(readonly o: TransportOptions) {
    let u = o.baseUrl;
    if (!/^https?:\/\//.test(u)) u = `http://${u}`;
    this.baseUrl = u.replace(/\/+$/, '');
  }

  url(path: string, query?: Query): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === null || v === '' || v === false) continue;
      if (Array.isArray(v)) for (const x of v) params.append(k, String(x));
      else params.append(k, String(v));
    }
    const qs = params.toString();
    return this.baseUrl + path + (qs ? `?${qs}` : '');
  }

  private async open(method: string, path: string, c: CallOptions, signal: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = { Accept: c.accept ?? 'application/json' };
    let body: string | undefined;
    if (c.rawBody !== undefined) body = c.rawBody;
    else if (c.body !== undefined) body = JSON.stringify(c.body);
    else if (method === 'POST') body = '{}';
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (this.o.apiKey) headers.Authorization = `Bearer ${this.o.apiKey}`;
    let res: Response;
    try {
      res = await this.o.fetch(this.url(path, c.query), { method, headers, body, signal });
    } catch (e) {
      if (c.signal?.aborted) throw c.signal.reason;
      if (signal.aborted) throw new DeadlineExceeded(`${method} ${path}: no answer in time`, { cause: e });
      throw new Unavailable(`${method} ${path}: ${(e as Error).message}`, { cause: e });
    }
    if (!res.ok) throw await errorOf(res);
    return res;
  }

  private async withRetries<T>(method: string, c: CallOptions, fn: () => Promise<T>): Promise<T> {
    const idempotent = c.idempotent ?? (method === 'GET' || method === 'DELETE');
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (e) {
        if (!(e instanceof DeskgridError)) throw e;
        // 429: refused before doing anything, so any call may be repeated.
        const again = e.status === 429 || (idempotent && e.code === 14 && [0, 502, 503, 504].includes(e.status));
        if (!again || attempt >= this.o.retries) throw e;
        let wait = Math.min(100 * 2 ** (attempt - 1), 2000) * (0.5 + Math.random());
        if (e.retryAfter !== undefined) wait = e.retryAfter * 1000;
        wait = Math.min(wait, this.o.maxRetryWaitMs);
        this.o.onRetry?.(attempt, e, wait);
        await sleep(wait, c.signal);
      }
    }
  }

  /** One request; the reply's bytes and content type. */
  async raw(method: string, path: string, c: CallOptions = {}): Promise<{ data: Uint8Array; contentType: string }> {
    return this.withRetries(method, c, async () => {
      const timeout = AbortSignal.timeout(c.timeoutMs ?? this.o.timeoutMs);
      const signal = c.signal ? AbortSignal.any([c.signal, timeout]) : timeout;
      const res = await this.open(method, path, c, signal);
      try {
        const data = new Uint8Array(await res.arrayBuffer());
        return { data, contentType: res.headers.get('content-type') ?? '' };
      } catch (e) {
        if (c.signal?.aborted) throw c.signal.reason;
        throw new Unavailable(`${method} ${path}: ${(e as Error).message}`, { cause: e });
      }
    });
  }

  /** One request; its JSON reply. */
  async call<T>(method: string, path: string, c: CallOptions = {}): Promise<T> {
    const { data } = await this.raw(method, path, c);
    if (!data.length) return {} as T;
    return JSON.parse(new TextDecoder().decode(data)) as T;
  }

  /**
   * The `result` of each line of a newline-delimited JSON stream; an `error`
   * line throws its exception. `timeoutMs` bounds each wait for a line.
   */
  async *stream<T>(method: string, path: string, c: CallOptions = {}): AsyncGenerator<T, void, undefined> {
    const idle = new AbortController();
    const signal = c.signal ? AbortSignal.any([c.signal, idle.signal]) : idle.signal;
    const limit = c.timeoutMs ?? this.o.timeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => idle.abort(new Unavailable(`${method} ${path}: nothing for ${limit} ms`)), limit);
    };
    arm();
    try {
      const res = await this.withRetries(method, { ...c, idempotent: c.idempotent ?? method === 'GET' },
        () => this.open(method, path, { ...c, accept: 'application/x-ndjson' }, signal));
      if (!res.body) return;
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      try {
        for (;;) {
          arm();
          let chunk: ReadableStreamReadResult<Uint8Array>;
          try {
            chunk = await reader.read();
          } catch (e) {
            if (c.signal?.aborted) throw c.signal.reason;
            throw new StreamError(`${method} ${path}: stream broken: ${(e as Error).message}`, { cause: e });
          }
          if (chunk.done) buf += dec.decode();
          else buf += dec.decode(chunk.value, { stream: true });
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0 || (chunk.done && buf.trim())) {
            const line = (nl >= 0 ? buf.slice(0, nl) : buf).trim();
            buf = nl >= 0 ? buf.slice(nl + 1) : '';
            if (!line) continue;
            let msg: { result?: T; error?: unknown };
            try {
              msg = JSON.parse(line);
            } catch (e) {
              throw new StreamError(`${method} ${path}: not JSON: ${line.slice(0, 200)}`, { cause: e });
            }
            if (msg.error) throw errorFromReply(0, msg.error);
            yield (msg.result ?? ({} as T));
          }
          if (chunk.done) return;
        }
      } finally {
        reader.cancel().catch(() => {});
      }
    } finally {
      clearTimeout(timer);
    }
  }
}

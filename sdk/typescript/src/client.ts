import type { components } from './openapi.js';
import { DeskgridError, FailedPrecondition, NotFound, StreamError } from './errors.js';
import { Transport, type CallOptions, type Query } from './http.js';
import * as actions from './actions.js';
import type { Action } from './actions.js';

type S = components['schemas'];
/** A session as the API describes it. */
export type SessionData = S['v1Session'];
export type SessionState = S['v1SessionState'];
export type PerformActionsResponse = S['v1PerformActionsResponse'];
export type FileInfo = S['v1FileInfo'];
export type Run = S['v1Run'];
export type RunEvent = S['v1RunEvent'];
export type Image = S['v1Image'];
export type ExecExit = S['v1ExecExit'];
export type Display = S['v1Display'];
export type Window = S['v1Window'];
export type Recording = S['v1Recording'];
export type WindowState = S['v1WindowState'];
export type InputLease = S['v1InputLease'];
export type Sandbox = S['v1Sandbox'];
export type Process = S['v1Process'];
export type Change = S['v1Change'];
export type Snapshot = S['v1Snapshot'];
export type HistoryEntry = S['v1Entry'];
export type Node = S['v1Node'];

/** Options of the client. */
export interface ClientOptions {
  /** REST base URL; default `DESKGRID_URL` (Node) or http://127.0.0.1:8080. */
  baseUrl?: string;
  /** API key; default `DESKGRID_API_KEY` (Node). */
  apiKey?: string;
  /** Milliseconds one call may take (streams: one wait for the next message). Default 60 000. */
  timeoutMs?: number;
  /** Tries in all for a call refused with 429, or unavailable and safe to repeat. Default 4. */
  retries?: number;
  /** The longest wait between tries, whatever Retry-After says. Default 30 000. */
  maxRetryWaitMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** Called before each retry. */
  onRetry?: (attempt: number, error: DeskgridError, waitMs: number) => void;
}

export interface CreateSessionOptions {
  width?: number;
  height?: number;
  depth?: number;
  dpi?: number;
  /** OCI image ('' for the default desktop). */
  image?: string;
  labels?: Record<string, string>;
  nodeSelector?: Record<string, string>;
  /** Programs started on the desktop, such as "xterm". */
  autostart?: string[];
  workspace?: string;
  /** Seconds. */
  ttl?: number;
  /** Seconds. */
  idleTimeout?: number;
  network?: boolean;
  limits?: { memoryBytes?: number; cpuMillis?: number; pids?: number; diskBytes?: number };
  /** Makes a retried create return the first session; one is picked when absent. */
  requestId?: string;
  signal?: AbortSignal;
}

export interface ListSessionsOptions {
  /** Names such as "SESSION_STATE_RUNNING" or "RUNNING". */
  states?: string[];
  labels?: Record<string, string>;
  pageSize?: number;
  signal?: AbortSignal;
}

export interface ScreenshotOptions {
  format?: 'png' | 'jpeg';
  quality?: number;
  scaleTo?: { width: number; height: number };
  region?: { x: number; y: number; width: number; height: number };
  cursor?: boolean;
  signal?: AbortSignal;
}

export interface ActOptions {
  /** Take a screenshot after the actions (in the reply's `screenshot`). */
  screenshot?: boolean;
  scaleTo?: { width: number; height: number };
  screenshotFormat?: 'png' | 'jpeg';
  leaseToken?: string;
  settle?: S['v1Settle'];
  signal?: AbortSignal;
}

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  stdin?: string | Uint8Array;
  /** The command's own limit, in seconds. */
  timeout?: number;
  /**
   * Run as root of the session's own user namespace (a session from an
   * image: to `apt-get install`, write /etc); not the host's root.
   */
  asRoot?: boolean;
  signal?: AbortSignal;
}

/** How a command ended and what it printed. */
export interface ExecResult {
  stdout: Uint8Array;
  stderr: Uint8Array;
  exitCode: number;
  signal: string;
  timedOut: boolean;
  /** stdout decoded as UTF-8. */
  text: string;
}

export type ExecOutput =
  | { kind: 'stdout'; data: Uint8Array }
  | { kind: 'stderr'; data: Uint8Array }
  | { kind: 'exit'; exit: ExecExit };

export interface ShellResult {
  output: string;
  exitCode: number;
  timedOut: boolean;
  truncated: boolean;
}

export interface ViewerToken {
  token: string;
  tokenId: string;
  sessionId: string;
  mode: string;
  expireTime: string;
  url: string;
}

export interface CreateRunOptions {
  provider?: string;
  model?: string;
  maxSteps?: number;
  apiKey?: string;
  baseUrl?: string;
  options?: S['v1RunOptions'];
  signal?: AbortSignal;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

function toBase64(data: string | Uint8Array): string {
  const bytes = typeof data === 'string' ? enc.encode(data) : data;
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(s: string | undefined): Uint8Array {
  if (!s) return new Uint8Array();
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const dur = (seconds: number | undefined) => (seconds === undefined ? undefined : `${seconds}s`);
const q = encodeURIComponent;

function requestId(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

/**
 * A deskgrid deployment, reached over its REST gateway.
 *
 * ```ts
 * const dg = new Deskgrid({ baseUrl: 'http://127.0.0.1:8080', apiKey });
 * await using s = await dg.sessions.create({ width: 1024, height: 768 });
 * const png = await s.screenshot();
 * ```
 */
export class Deskgrid {
  readonly transport: Transport;
  readonly sessions: Sessions;
  readonly runs: Runs;
  readonly images: Images;
  readonly history: History;
  readonly nodes: Nodes;

  constructor(o: ClientOptions = {}) {
    this.transport = new Transport({
      baseUrl: o.baseUrl ?? env('DESKGRID_URL') ?? 'http://127.0.0.1:8080',
      apiKey: o.apiKey ?? env('DESKGRID_API_KEY'),
      timeoutMs: o.timeoutMs ?? 60_000,
      retries: Math.max(1, o.retries ?? 4),
      maxRetryWaitMs: o.maxRetryWaitMs ?? 30_000,
      fetch: o.fetch ?? globalThis.fetch.bind(globalThis),
      onRetry: o.onRetry,
    });
    this.sessions = new Sessions(this);
    this.runs = new Runs(this);
    this.images = new Images(this);
    this.history = new History(this);
    this.nodes = new Nodes(this);
  }

  get baseUrl(): string {
    return this.transport.baseUrl;
  }

  /** Whether every backend answers (`/readyz`). */
  async ready(): Promise<boolean> {
    try {
      await this.transport.raw('GET', '/readyz', { accept: '*/*', idempotent: false });
      return true;
    } catch {
      return false;
    }
  }
}

/** The session API: `dg.sessions`. */
export class Sessions {
  constructor(private readonly dg: Deskgrid) {}

  /** Starts a session and resolves once its desktop answers. */
  async create(o: CreateSessionOptions = {}): Promise<Session> {
    const display: Record<string, number> = {};
    for (const k of ['width', 'height', 'depth', 'dpi'] as const) if (o[k] !== undefined) display[k] = o[k]!;
    const body: S['v1CreateSessionRequest'] = { requestId: o.requestId ?? requestId() };
    if (Object.keys(display).length) body.display = display;
    if (o.limits) {
      body.limits = Object.fromEntries(
        Object.entries(o.limits).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]),
      );
    }
    if (o.labels) body.labels = o.labels;
    if (o.nodeSelector) body.nodeSelector = o.nodeSelector;
    if (o.autostart) body.autostart = o.autostart;
    if (o.workspace) body.workspace = o.workspace;
    if (o.image) body.image = o.image;
    if (o.ttl !== undefined) body.ttl = dur(o.ttl);
    if (o.idleTimeout !== undefined) body.idleTimeout = dur(o.idleTimeout);
    if (o.network) body.network = true;
    const data = await this.dg.transport.call<SessionData>('POST', '/v1/sessions', {
      body, idempotent: true, timeoutMs: Math.max(this.dg.transport.o.timeoutMs, 120_000), signal: o.signal,
    });
    return new Session(this.dg, data);
  }

  /** A session by id (NotFound when the caller has none such). */
  async get(id: string, signal?: AbortSignal): Promise<Session> {
    return new Session(this.dg, await this.dg.transport.call<SessionData>('GET', `/v1/sessions/${q(id)}`, { signal }));
  }

  /** Every session that matches, fetching pages as it goes. */
  async *list(o: ListSessionsOptions = {}): AsyncGenerator<Session, void, undefined> {
    let pageToken = '';
    const states = (o.states ?? []).map((s) => (s.startsWith('SESSION_STATE_') ? s : `SESSION_STATE_${s.toUpperCase()}`));
    for (;;) {
      const query: Query = { pageSize: o.pageSize ?? 100, pageToken, states };
      for (const [k, v] of Object.entries(o.labels ?? {})) query[`labels[${k}]`] = v;
      const page = await this.dg.transport.call<S['v1ListSessionsResponse']>('GET', '/v1/sessions', { query, signal: o.signal });
      for (const s of page.sessions ?? []) yield new Session(this.dg, s);
      pageToken = page.nextPageToken ?? '';
      if (!pageToken) return;
    }
  }

  /** Stops a session and frees what it used. */
  async delete(id: string, signal?: AbortSignal): Promise<void> {
    await this.dg.transport.call('DELETE', `/v1/sessions/${q(id)}`, { signal });
  }
}

/**
 * One desktop. `data` is the session as last read. `await using` (or
 * `Symbol.asyncDispose`) deletes it.
 */
export class Session implements AsyncDisposable {
  /** The session's files; relative paths are under its home. */
  readonly files: Files;

  constructor(private readonly dg: Deskgrid, public data: SessionData) {
    this.files = new Files(this);
  }

  get id(): string {
    return this.data.id ?? '';
  }
  get state(): SessionState | undefined {
    return this.data.state;
  }
  get width(): number {
    return this.data.display?.width ?? 0;
  }
  get height(): number {
    return this.data.display?.height ?? 0;
  }

  /** @internal */
  path(suffix = ''): string {
    return `/v1/sessions/${q(this.id)}${suffix}`;
  }

  /** @internal */
  call<T>(method: string, suffix: string, c: CallOptions = {}): Promise<T> {
    return this.dg.transport.call<T>(method, this.path(suffix), c);
  }

  /** @internal */
  get transport(): Transport {
    return this.dg.transport;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }

  /** Reads the session again. */
  async refresh(): Promise<this> {
    this.data = await this.call<SessionData>('GET', '');
    return this;
  }

  /** Stops the session. */
  async delete(): Promise<void> {
    this.data = await this.call<SessionData>('DELETE', '');
  }

  /** Resets the session's idle timer. */
  async keepalive(): Promise<void> {
    this.data = await this.call<SessionData>('POST', ':keepalive', { idempotent: true });
  }

  /** Suspends the session (mode such as "SUSPEND_MODE_FREEZE"; none: the server's choice). */
  async suspend(mode?: S['v1SuspendMode']): Promise<void> {
    this.data = await this.call<SessionData>('POST', ':suspend', { body: mode ? { mode } : {}, timeoutMs: 120_000 });
  }

  /** Resumes a suspended session. */
  async resume(): Promise<void> {
    this.data = await this.call<SessionData>('POST', ':resume', { timeoutMs: 120_000 });
  }

  /**
   * Turns the session's changes into a new image tagged `image` (such as
   * "my-team/qa-desktop:v3"), on top of the session's image.
   */
  commit(image: string): Promise<S['v1CommitSessionResponse']> {
    const body: S['SessionServiceCommitSessionBody'] = { image };
    return this.call('POST', ':commit', { body, timeoutMs: Math.max(this.dg.transport.o.timeoutMs, 600_000) });
  }

  /** The session's X display: size, depth, dpi and its windows. */
  display(): Promise<Display> {
    return this.call<Display>('GET', '/display');
  }

  /** Changes the size of the screen; windows stay open, screenshots and input follow. */
  async resize(width: number, height: number): Promise<Display> {
    const body: S['DisplayServiceResizeDisplayBody'] = { width, height };
    return (await this.call<S['v1ResizeDisplayResponse']>('POST', '/display:resize', { body })).display ?? {};
  }

  /** The text a program on the desktop copied (CLIPBOARD, or PRIMARY, the mouse selection). */
  async clipboard(o: { primary?: boolean } = {}): Promise<string> {
    const r = await this.call<S['v1GetClipboardResponse']>('GET', '/clipboard', {
      query: { selection: o.primary ? 'SELECTION_PRIMARY' : undefined },
    });
    return r.text ?? '';
  }

  /** Puts text (at most 1 MiB) on the clipboard (or PRIMARY) for the desktop's programs to paste. */
  async setClipboard(text: string, o: { primary?: boolean; leaseToken?: string } = {}): Promise<void> {
    const body: S['DisplayServiceSetClipboardBody'] = { text };
    if (o.primary) body.selection = 'SELECTION_PRIMARY';
    if (o.leaseToken) body.leaseToken = o.leaseToken;
    await this.call('POST', '/clipboard', { body, idempotent: true });
  }

  /** The desktop's top-level windows, bottom to top. */
  async windows(): Promise<Window[]> {
    return (await this.call<S['v1ListWindowsResponse']>('GET', '/windows')).windows ?? [];
  }

  /** Raises a window and gives it the focus; resolves to the window afterwards. */
  async activateWindow(id: number, o: { leaseToken?: string } = {}): Promise<Window> {
    const body: S['DisplayServiceActivateWindowBody'] = { leaseToken: o.leaseToken };
    return (await this.call<S['v1ActivateWindowResponse']>('POST', `/windows/${id}:activate`, { body })).window ?? {};
  }

  /** Asks a window's program to close it (`force`: destroys it); resolves to whether it is gone. */
  async closeWindow(id: number, o: { force?: boolean; leaseToken?: string } = {}): Promise<boolean> {
    const body: S['DisplayServiceCloseWindowBody'] = { force: o.force || undefined, leaseToken: o.leaseToken };
    return (await this.call<S['v1CloseWindowResponse']>('POST', `/windows/${id}:close`, { body })).closed ?? false;
  }

  /** Puts a window's client area at (x, y) with the given size (0 keeps it). */
  async moveWindow(id: number, geometry: { x: number; y: number; width?: number; height?: number }, o: { leaseToken?: string } = {}): Promise<Window> {
    const body: S['DisplayServiceMoveWindowBody'] = { geometry, leaseToken: o.leaseToken };
    return (await this.call<S['v1MoveWindowResponse']>('POST', `/windows/${id}:move`, { body })).window ?? {};
  }

  /** Minimises, maximises, makes full-screen or restores a window; it needs a window manager. */
  async setWindowState(id: number, state: WindowState | 'normal' | 'minimized' | 'maximized' | 'fullscreen', o: { leaseToken?: string } = {}): Promise<Window> {
    const full = (state.startsWith('WINDOW_STATE_') ? state : `WINDOW_STATE_${state.toUpperCase()}`) as WindowState;
    const body: S['DisplayServiceSetWindowStateBody'] = { state: full, leaseToken: o.leaseToken };
    return (await this.call<S['v1SetWindowStateResponse']>('POST', `/windows/${id}:setState`, { body })).window ?? {};
  }

  /**
   * Waits its turn (first come, first served) for the session's input lease,
   * at most `wait` seconds (default: the call's timeout), and holds it `ttl`
   * seconds (default 30). Pass the lease's `token` as `leaseToken` of actions.
   */
  acquireInputLease(holder: string, o: { ttl?: number; wait?: number } = {}): Promise<InputLease> {
    const body: S['AgentServiceAcquireInputLeaseBody'] = { holder, ttl: dur(o.ttl), wait: dur(o.wait) };
    return this.call<InputLease>('POST', '/inputLease:acquire', {
      body, timeoutMs: Math.max(this.dg.transport.o.timeoutMs, ((o.wait ?? 0) + 30) * 1000),
    });
  }

  /**
   * Who holds the session's input lease now: `lease` (holder, token, expiry;
   * absent when nobody holds it) and `waiting`, how many callers wait for it.
   * The `leaseId` is never told.
   */
  inputLease(): Promise<S['v1GetInputLeaseResponse']> {
    return this.call<S['v1GetInputLeaseResponse']>('GET', '/inputLease');
  }

  /** Extends a lease the caller still holds by `ttl` seconds (default 30). */
  renewInputLease(lease: InputLease, o: { ttl?: number } = {}): Promise<InputLease> {
    const body: S['AgentServiceRenewInputLeaseBody'] = { holder: lease.holder, token: lease.token, leaseId: lease.leaseId, ttl: dur(o.ttl) };
    return this.call<InputLease>('POST', '/inputLease:renew', { body });
  }

  /** Gives the lease up, to the next caller waiting for it. */
  async releaseInputLease(lease: InputLease): Promise<void> {
    const body: S['AgentServiceReleaseInputLeaseBody'] = { holder: lease.holder, token: lease.token, leaseId: lease.leaseId };
    await this.call('POST', '/inputLease:release', { body });
  }

  /**
   * The session now and after every change, until it ends. `timeoutMs`
   * bounds each wait for a change (default: a day).
   */
  async *watch(o: { signal?: AbortSignal; timeoutMs?: number } = {}): AsyncGenerator<SessionData, void, undefined> {
    for await (const m of this.dg.transport.stream<S['v1WatchSessionResponse']>('GET', this.path(':watch'), {
      signal: o.signal, timeoutMs: o.timeoutMs ?? 86_400_000,
    })) {
      if (m.session) {
        this.data = m.session;
        yield m.session;
      }
    }
  }

  /** The screen as PNG (or JPEG) bytes. */
  async screenshot(o: ScreenshotOptions = {}): Promise<Uint8Array> {
    const query: Query = {
      format: `IMAGE_FORMAT_${(o.format ?? 'png').toUpperCase()}`,
      quality: o.quality,
      cursor: o.cursor,
      'scaleTo.width': o.scaleTo?.width,
      'scaleTo.height': o.scaleTo?.height,
      'region.x': o.region?.x,
      'region.y': o.region?.y,
      'region.width': o.region?.width,
      'region.height': o.region?.height,
    };
    const { data, contentType } = await this.dg.transport.raw('GET', this.path('/screenshot'), {
      query, accept: 'image/*', signal: o.signal,
    });
    if (contentType.startsWith('application/json')) {
      return fromBase64((JSON.parse(dec.decode(data)) as S['v1ScreenshotResponse']).data);
    }
    return data;
  }

  /** Performs actions (see `actions`) in order. */
  async act(list: Action[], o: ActOptions = {}): Promise<PerformActionsResponse> {
    const body: S['DisplayServicePerformActionsBody'] = { actions: list as S['v1Action'][] };
    if (o.screenshot) body.screenshot = true;
    if (o.scaleTo) body.scaleTo = o.scaleTo;
    if (o.screenshotFormat) body.screenshotFormat = `IMAGE_FORMAT_${o.screenshotFormat.toUpperCase()}` as S['v1ImageFormat'];
    if (o.leaseToken) body.leaseToken = o.leaseToken;
    if (o.settle) body.settle = o.settle;
    return this.call<PerformActionsResponse>('POST', '/actions', { body, signal: o.signal });
  }

  async click(x: number, y: number, o: { button?: actions.Button; clicks?: number } = {}): Promise<void> {
    await this.act([actions.click(x, y, o)]);
  }
  async doubleClick(x: number, y: number): Promise<void> {
    await this.act([actions.click(x, y, { clicks: 2 })]);
  }
  async rightClick(x: number, y: number): Promise<void> {
    await this.act([actions.click(x, y, { button: 'right' })]);
  }
  async moveMouse(x: number, y: number): Promise<void> {
    await this.act([actions.mouseMove(x, y)]);
  }
  async drag(path: Array<[number, number]>): Promise<void> {
    await this.act([actions.drag(path)]);
  }
  /** Turns the wheel at (x, y): dy > 0 scrolls down. */
  async scroll(x: number, y: number, dy: number, dx = 0): Promise<void> {
    await this.act([actions.scroll(x, y, dy, dx)]);
  }
  /** Presses a chord such as "ctrl+l" or "Return". */
  async key(chord: string): Promise<void> {
    await this.act([actions.key(chord)]);
  }
  /** Types text, any Unicode. */
  async type(text: string): Promise<void> {
    await this.act([actions.type(text)]);
  }
  /** Where the pointer is. */
  async cursorPosition(): Promise<{ x: number; y: number }> {
    const r = await this.act([actions.cursorPosition()]);
    return { x: r.cursor?.x ?? 0, y: r.cursor?.y ?? 0 };
  }

  /** A short-lived token for the live view. */
  async viewerToken(mode: 'view' | 'control' = 'view', ttlSeconds?: number): Promise<ViewerToken> {
    return this.call<ViewerToken>('POST', '/viewerToken', { body: { mode, ttl_seconds: ttlSeconds } });
  }

  /** Runs argv in the session's sandbox, yielding its output as it comes and last its exit. */
  async *execStream(argv: string[], o: ExecOptions = {}): AsyncGenerator<ExecOutput, void, undefined> {
    if (!argv.length) throw new TypeError('exec needs a command');
    const body: S['SandboxServiceExecBody'] = { argv };
    if (o.env) body.env = Object.entries(o.env).map(([k, v]) => `${k}=${v}`);
    if (o.cwd) body.cwd = o.cwd;
    if (o.stdin !== undefined) body.stdin = toBase64(o.stdin);
    if (o.timeout !== undefined) body.timeout = dur(o.timeout);
    if (o.asRoot) body.asRoot = true;
    const timeoutMs = Math.max(this.dg.transport.o.timeoutMs, ((o.timeout ?? 0) + 30) * 1000);
    for await (const m of this.dg.transport.stream<S['v1ExecResponse']>('POST', this.path(':exec'), {
      body, signal: o.signal, timeoutMs,
    })) {
      if (m.stdout !== undefined) yield { kind: 'stdout', data: fromBase64(m.stdout) };
      else if (m.stderr !== undefined) yield { kind: 'stderr', data: fromBase64(m.stderr) };
      else if (m.exit !== undefined) {
        yield { kind: 'exit', exit: m.exit };
        return;
      }
    }
  }

  /** Runs argv in the session's sandbox and waits for it. */
  async exec(argv: string[], o: ExecOptions = {}): Promise<ExecResult> {
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    for await (const m of this.execStream(argv, o)) {
      if (m.kind === 'stdout') out.push(m.data);
      else if (m.kind === 'stderr') err.push(m.data);
      else {
        const stdout = concat(out);
        return {
          stdout, stderr: concat(err), exitCode: m.exit.exitCode ?? 0, signal: m.exit.signal ?? '',
          timedOut: m.exit.timedOut ?? false, text: dec.decode(stdout),
        };
      }
    }
    throw new StreamError('exec: the stream ended without an exit status');
  }

  /**
   * Runs a command in the session's persistent shell (cwd and exports carry
   * over); `asRoot` uses the session's root shell, a second persistent shell
   * as root of the session's own user namespace (sessions from an image).
   */
  async shell(command: string, o: { timeout?: number; asRoot?: boolean; signal?: AbortSignal } = {}): Promise<ShellResult> {
    const r = await this.call<S['v1RunShellResponse']>('POST', '/shell:run', {
      body: { command, timeout: dur(o.timeout), ...(o.asRoot ? { asRoot: true } : {}) }, signal: o.signal,
      timeoutMs: Math.max(this.dg.transport.o.timeoutMs, ((o.timeout ?? 0) + 30) * 1000),
    });
    return { output: dec.decode(fromBase64(r.output)), exitCode: r.exitCode ?? 0, timedOut: r.timedOut ?? false, truncated: r.truncated ?? false };
  }

  /** What the session changed in its filesystem. */
  async changes(path = ''): Promise<NonNullable<S['v1ListChangesResponse']['changes']>> {
    return (await this.call<S['v1ListChangesResponse']>('GET', '/changes', { query: { path } })).changes ?? [];
  }

  /** A changed file's unified diff against the session's image. */
  diff(path: string): Promise<S['v1DiffFileResponse']> {
    return this.call<S['v1DiffFileResponse']>('GET', '/changes:diff', { query: { path } });
  }

  /**
   * Writes the session's changes (those under `paths`, or all) into its
   * workspace folder; a file changed there meanwhile is left alone and
   * reported in `conflicts`.
   */
  applyChanges(paths: string[] = []): Promise<S['v1ApplyChangesResponse']> {
    const body: S['SandboxServiceApplyChangesBody'] = { paths };
    return this.call<S['v1ApplyChangesResponse']>('POST', '/changes:apply', { body, timeoutMs: 120_000 });
  }

  /** Drops the session's changes (those under `paths`, or all); refused while processes run. */
  async discardChanges(paths: string[] = []): Promise<string[]> {
    const body: S['SandboxServiceDiscardChangesBody'] = { paths };
    return (await this.call<S['v1DiscardChangesResponse']>('POST', '/changes:discard', { body, timeoutMs: 120_000 })).discarded ?? [];
  }

  /** The session's snapshots. */
  async snapshots(): Promise<Snapshot[]> {
    return (await this.call<S['v1ListSnapshotsResponse']>('GET', '/snapshots')).snapshots ?? [];
  }

  /** Saves the session's filesystem as it is now. */
  createSnapshot(): Promise<Snapshot> {
    return this.call<Snapshot>('POST', '/snapshots', { timeoutMs: 120_000 });
  }

  /** Puts the session's filesystem back as the snapshot saved it. */
  async restoreSnapshot(snapshotId: string): Promise<void> {
    await this.call('POST', `/snapshots/${q(snapshotId)}:restore`, { timeoutMs: 120_000 });
  }

  /** Deletes one of the session's snapshots. */
  async deleteSnapshot(snapshotId: string): Promise<void> {
    await this.call('DELETE', `/snapshots/${q(snapshotId)}`);
  }

  /** Ends the persistent shell; the next `shell` starts afresh. */
  async restartShell(): Promise<void> {
    await this.call('POST', '/shell:restart');
  }

  /** The session's sandbox: image, limits, usage. */
  sandbox(): Promise<Sandbox> {
    return this.call<Sandbox>('GET', '/sandbox');
  }

  /** The programs started on the desktop (its autostart programs), running or ended. */
  /** The programs the desktop's menu offers (the image's .desktop entries). */
  async applications(): Promise<NonNullable<S['v1ListApplicationsResponse']['applications']>> {
    return (await this.call<S['v1ListApplicationsResponse']>('GET', '/applications')).applications ?? [];
  }

  /**
   * Starts a program of applications() by id or name, with files or URLs as args. A launch
   * is input: while input leases are in use, end the args with `{ leaseToken }`, the lease's
   * token.
   */
  async launch(application: string, ...args: string[] | [...string[], { leaseToken?: string }]): Promise<S['v1LaunchApplicationResponse']> {
    const all: (string | { leaseToken?: string })[] = args;
    const last = all[all.length - 1];
    const o = typeof last === 'object' ? last : {};
    const files = all.filter((a): a is string => typeof a === 'string');
    const body: S['SandboxServiceLaunchApplicationBody'] = { application, args: files, leaseToken: o.leaseToken };
    return this.call<S['v1LaunchApplicationResponse']>('POST', '/applications:launch', { body });
  }

  /**
   * Opens a file of the session (a path relative to its user's home, or absolute) or an
   * http, https or file URL with the session's default application for it, as its file
   * manager would: the application, the started process, the target handed to it and the
   * content type it was chosen for. An open is input, as a launch is.
   */
  async open(target: string, opts: { leaseToken?: string } = {}): Promise<S['v1OpenResponse']> {
    const body: S['SandboxServiceOpenBody'] = { target, leaseToken: opts.leaseToken };
    return this.call<S['v1OpenResponse']>('POST', '/applications:open', { body });
  }

  /**
   * The desktop's accessibility tree (AT-SPI); `truncated` says when the bounds cut it.
   * `root`, a node's id, reads only that node's subtree.
   */
  async accessibilityTree(
    o: {
      maxDepth?: number; maxNodes?: number; onlyVisible?: boolean; application?: string; root?: string;
      windowId?: number; focusedWindow?: boolean; pid?: number; osworldXml?: boolean;
    } = {},
  ): Promise<S['v1GetAccessibilityTreeResponse']> {
    return this.call<S['v1GetAccessibilityTreeResponse']>('GET', '/accessibility', {
      query: {
        maxDepth: o.maxDepth, maxNodes: o.maxNodes, onlyVisible: o.onlyVisible ? 'true' : undefined,
        application: o.application, root: o.root, windowId: o.windowId,
        focusedWindow: o.focusedWindow ? 'true' : undefined, pid: o.pid,
        format: o.osworldXml ? 'ACCESSIBILITY_FORMAT_OSWORLD_XML' : undefined,
      },
    });
  }

  /**
   * Acts on the node of accessibilityTree() whose id is `id`, through its application:
   * `{ action: 'click' }` performs one of its actions by name, `{ text }` replaces its
   * editable text ('' clears it), `{ focus: true }` gives it the keyboard focus. Returns the
   * node afterwards, or undefined when the act made it go away. A stale id rejects with
   * NotFound; a node that cannot do it with FailedPrecondition, saying what it can do. An
   * act is input: pass the input lease's token as `leaseToken` while leases are in use.
   */
  async actOnAccessible(
    id: string,
    act: { action: string } | { text: string } | { focus: true },
    o: { leaseToken?: string } = {},
  ): Promise<S['v1AccessibleNode'] | undefined> {
    const body: S['SandboxServiceActOnAccessibleBody'] = { id, ...act, leaseToken: o.leaseToken };
    return (await this.call<S['v1ActOnAccessibleResponse']>('POST', '/accessibility:act', { body })).node;
  }

  async processes(): Promise<Process[]> {
    return (await this.call<S['v1ListProcessesResponse']>('GET', '/processes')).processes ?? [];
  }

  /** The session's history entries, oldest first. */
  async *history(o: { pageSize?: number; types?: string[] } = {}): AsyncGenerator<
    NonNullable<S['v1ListSessionHistoryResponse']['entries']>[number], void, undefined> {
    let pageToken = '';
    for (;;) {
      const page = await this.call<S['v1ListSessionHistoryResponse']>('GET', '/history', {
        query: { pageSize: o.pageSize ?? 100, pageToken, types: o.types },
      });
      yield* page.entries ?? [];
      pageToken = page.nextPageToken ?? '';
      if (!pageToken) return;
    }
  }

  /** The whole history as JSON Lines (what `deskgrid history import` reads back). */
  async exportHistory(o: { includeBlobs?: boolean } = {}): Promise<string> {
    const { data } = await this.dg.transport.raw('GET', this.path('/history:export'), {
      query: { includeBlobs: o.includeBlobs }, accept: 'application/x-ndjson',
      timeoutMs: Math.max(this.dg.transport.o.timeoutMs, 300_000),
    });
    return dec.decode(data);
  }

  /**
   * Starts recording the screen to a video: `mp4` (H.264, the default) or
   * `webm` (VP9), at most `fps` frames a second (1-30; default 5), taken only
   * when the screen changes, at `width` x `height` (each 16-1920; default the
   * screen's). One recording at a time per session.
   */
  async startRecording(o: { format?: 'mp4' | 'webm'; fps?: number; width?: number; height?: number } = {}): Promise<Recording> {
    const body: S['DisplayServiceStartRecordingBody'] = {
      format: `RECORDING_FORMAT_${(o.format ?? 'mp4').toUpperCase()}` as S['v1RecordingFormat'],
      fps: o.fps || undefined,
      size: o.width || o.height ? { width: o.width, height: o.height } : undefined,
    };
    return (await this.call<S['v1StartRecordingResponse']>('POST', '/recordings', { body })).recording ?? {};
  }

  /**
   * Ends a recording and finalises its video; resolves to it as the history
   * keeps it, once it does (up to `waitMs`, default 30 s), so
   * `downloadRecording` finds it.
   */
  async stopRecording(recordingId: string, o: { waitMs?: number } = {}): Promise<Recording> {
    const stopped = (await this.call<S['v1StopRecordingResponse']>('POST', `/recordings/${encodeURIComponent(recordingId)}:stop`, { body: {} })).recording ?? {};
    const deadline = Date.now() + (o.waitMs ?? 30_000);
    while (Date.now() < deadline) {
      try {
        const kept = await this.recording(recordingId);
        if (kept.state !== 'RECORDING_STATE_RECORDING') return kept;
      } catch (e) {
        if (!(e instanceof NotFound)) throw e;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return stopped;
  }

  /** The session's recordings, newest first. */
  async recordings(): Promise<Recording[]> {
    return (await this.call<S['v1ListRecordingsResponse']>('GET', '/recordings')).recordings ?? [];
  }

  /** One recording: `state`, `frames`, `sizeBytes`, `downloadReady`, ... */
  async recording(recordingId: string): Promise<Recording> {
    return (await this.call<S['v1GetRecordingResponse']>('GET', `/recordings/${encodeURIComponent(recordingId)}`)).recording ?? {};
  }

  /**
   * The recording's video (MP4 or WebM) and its content type. A video stopped
   * moments ago that the history has not stored yet is waited for up to
   * `waitMs` (default a minute).
   */
  async downloadRecording(recordingId: string, o: { waitMs?: number } = {}): Promise<{ data: Uint8Array; contentType: string }> {
    const deadline = Date.now() + (o.waitMs ?? 60_000);
    for (;;) {
      try {
        const { data, contentType } = await this.dg.transport.raw('GET', this.path(`/recordings/${encodeURIComponent(recordingId)}:download`), {
          accept: 'video/mp4, video/webm', timeoutMs: Math.max(this.dg.transport.o.timeoutMs, 300_000),
        });
        return { data, contentType };
      } catch (e) {
        if (!(e instanceof FailedPrecondition) || !e.message.includes('not stored yet') || Date.now() > deadline) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** Starts an agent run on this session. */
  run(prompt: string, o: CreateRunOptions = {}): Promise<Run> {
    return this.dg.runs.create(this.id, prompt, o);
  }
}

/** A session's files. */
export class Files {
  constructor(private readonly s: Session) {}

  async read(path: string): Promise<Uint8Array> {
    return fromBase64((await this.s.call<S['v1ReadFileResponse']>('GET', '/files:read', { query: { path } })).content);
  }
  async readText(path: string): Promise<string> {
    return dec.decode(await this.read(path));
  }
  /** Creates or replaces a file (mode 0 means 0644). */
  async write(path: string, content: string | Uint8Array, mode = 0): Promise<void> {
    await this.s.call('POST', '/files:write', { body: { path, content: toBase64(content), mode: mode || undefined }, idempotent: true });
  }
  async list(path = ''): Promise<FileInfo[]> {
    return (await this.s.call<S['v1ListFilesResponse']>('GET', '/files', { query: { path } })).files ?? [];
  }
  /** Describes one path. */
  async stat(path: string): Promise<FileInfo> {
    return this.s.call<FileInfo>('GET', '/files:stat', { query: { path } });
  }
  /** Removes a file, or a directory (with what it holds when `recursive`). */
  async delete(path: string, recursive = false): Promise<void> {
    const body: S['SandboxServiceDeleteFileBody'] = { path, recursive };
    await this.s.call('POST', '/files:delete', { body, idempotent: true });
  }
  /** Makes a directory (mode 0 means 0755), and its missing parents with `parents`. */
  async mkdir(path: string, o: { parents?: boolean; mode?: number } = {}): Promise<void> {
    const body: S['SandboxServiceMakeDirectoryBody'] = { path, parents: o.parents || undefined, mode: o.mode || undefined };
    await this.s.call('POST', '/files:mkdir', { body, idempotent: o.parents ?? false });
  }
  /** Renames `source` to `destination`; an existing destination is replaced only with `overwrite`. */
  async move(source: string, destination: string, o: { overwrite?: boolean } = {}): Promise<void> {
    const body: S['SandboxServiceMoveFileBody'] = { fromPath: source, toPath: destination, overwrite: o.overwrite || undefined };
    await this.s.call('POST', '/files:move', { body });
  }
  /** A file's content in chunks, for files too large for `read`. */
  async *download(path: string): AsyncGenerator<Uint8Array, void, undefined> {
    for await (const m of this.s.transport.stream<S['v1DownloadFileResponse']>('GET', this.s.path('/files:download'), { query: { path } })) {
      if (m.chunk) yield fromBase64(m.chunk);
    }
  }
}

const runDone = new Set(['RUN_STATE_SUCCEEDED', 'RUN_STATE_FAILED', 'RUN_STATE_CANCELLED']);

/** Agent runs: `dg.runs`. */
export class Runs {
  constructor(private readonly dg: Deskgrid) {}

  async create(sessionId: string, prompt: string, o: CreateRunOptions = {}): Promise<Run> {
    const body: S['AgentServiceCreateRunBody'] = { prompt };
    if (o.provider) body.provider = o.provider;
    if (o.model) body.model = o.model;
    if (o.maxSteps) body.maxSteps = o.maxSteps;
    if (o.apiKey) body.apiKey = o.apiKey;
    if (o.baseUrl) body.baseUrl = o.baseUrl;
    if (o.options) body.options = o.options;
    return this.dg.transport.call<Run>('POST', `/v1/sessions/${q(sessionId)}/runs`, { body, signal: o.signal });
  }
  get(id: string): Promise<Run> {
    return this.dg.transport.call<Run>('GET', `/v1/runs/${q(id)}`);
  }
  async *list(sessionId: string, pageSize = 100): AsyncGenerator<Run, void, undefined> {
    let pageToken = '';
    for (;;) {
      const page = await this.dg.transport.call<S['v1ListRunsResponse']>('GET', `/v1/sessions/${q(sessionId)}/runs`, { query: { pageSize, pageToken } });
      yield* page.runs ?? [];
      pageToken = page.nextPageToken ?? '';
      if (!pageToken) return;
    }
  }
  cancel(id: string): Promise<Run> {
    return this.dg.transport.call<Run>('POST', `/v1/runs/${q(id)}:cancel`, { idempotent: true });
  }
  approve(id: string, body: S['AgentServiceApproveStepBody'] = {}): Promise<Run> {
    return this.dg.transport.call<Run>('POST', `/v1/runs/${q(id)}:approveStep`, { body });
  }
  reject(id: string, body: S['AgentServiceRejectStepBody'] = {}): Promise<Run> {
    return this.dg.transport.call<Run>('POST', `/v1/runs/${q(id)}:rejectStep`, { body });
  }
  sendMessage(id: string, text: string): Promise<Run> {
    return this.dg.transport.call<Run>('POST', `/v1/runs/${q(id)}:sendMessage`, { body: { text } });
  }

  /**
   * A run's events after `afterSequence` until it ends. A dropped connection
   * is resumed after the last event seen, up to `reconnects` times in a row.
   */
  async *events(id: string, o: { afterSequence?: number; reconnects?: number; signal?: AbortSignal } = {}): AsyncGenerator<RunEvent, void, undefined> {
    let after = o.afterSequence ?? 0;
    let failures = 0;
    for (;;) {
      try {
        for await (const m of this.dg.transport.stream<S['v1StreamRunEventsResponse']>('GET', `/v1/runs/${q(id)}/events`, {
          query: { afterSequence: after || undefined }, signal: o.signal, timeoutMs: 86_400_000,
        })) {
          const ev = m.event ?? {};
          const seq = Number(ev.sequence ?? 0);
          if (seq && seq <= after) continue;
          after = Math.max(after, seq);
          failures = 0;
          yield ev;
        }
        return;
      } catch (e) {
        if (!(e instanceof StreamError)) throw e;
        failures++;
        if (failures > (o.reconnects ?? 5)) throw e;
        const run = await this.get(id);
        if (failures > 1 && runDone.has(run.state ?? '')) throw e;
      }
    }
  }

  /** A run's history entries, oldest first. */
  async *entries(id: string, o: { pageSize?: number; types?: string[] } = {}): AsyncGenerator<HistoryEntry, void, undefined> {
    let pageToken = '';
    for (;;) {
      const page = await this.dg.transport.call<S['v1ListRunEntriesResponse']>('GET', `/v1/runs/${q(id)}/entries`, {
        query: { pageSize: o.pageSize ?? 100, pageToken, types: o.types },
      });
      yield* page.entries ?? [];
      pageToken = page.nextPageToken ?? '';
      if (!pageToken) return;
    }
  }

  /** A run's whole transcript: its entries in order and usage totals. */
  transcript(id: string): Promise<S['v1GetRunTranscriptResponse']> {
    return this.dg.transport.call<S['v1GetRunTranscriptResponse']>('GET', `/v1/runs/${q(id)}/transcript`);
  }

  /** Follows a run until it ends; resolves to its final state. */
  async wait(id: string): Promise<Run> {
    for await (const _ of this.events(id)) { /* drain */ }
    return this.get(id);
  }
}

/**
 * OCI images: `dg.images`. Each node of a cluster keeps its own images:
 * `dg.images.onNode(id)` acts on one; without it a cluster's `list` and
 * `get` ask every live node (`nodeIds` says which hold each image) and the
 * calls that change a store fail with FAILED_PRECONDITION. A single machine
 * ignores the node.
 */
export class Images {
  constructor(private readonly dg: Deskgrid, private readonly node?: string) {}
  /** The image API of one node of a cluster (an id of `dg.nodes.list()`). */
  onNode(id: string): Images {
    return new Images(this.dg, id);
  }
  private q(q: Record<string, string> = {}): Record<string, string> {
    return this.node ? { ...q, node_id: this.node } : q;
  }
  async list(): Promise<Image[]> {
    return (await this.dg.transport.call<S['v1ListImagesResponse']>('GET', '/v1/images', { query: this.q() })).images ?? [];
  }
  async get(ref: string): Promise<Image> {
    return (await this.dg.transport.call<S['v1GetImageResponse']>('GET', '/v1/images:get', { query: this.q({ ref }) })).image ?? {};
  }
  async delete(ref: string): Promise<void> {
    await this.dg.transport.call('DELETE', '/v1/images', { query: this.q({ ref }) });
  }
  /** Fetches ref from its registry onto the node. */
  async pull(ref: string, progress?: (p: S['v1PullProgress']) => void): Promise<Image> {
    const body: S['v1PullImageRequest'] = { ref, nodeId: this.node };
    for await (const m of this.dg.transport.stream<S['v1PullImageResponse']>('POST', '/v1/images:pull', { body, timeoutMs: 600_000 })) {
      if (m.image) return m.image;
      if (m.progress && progress) progress(m.progress);
    }
    throw new StreamError(`pull ${ref}: the stream ended without an image`);
  }
  /** Makes the caller's tag visible to every tenant, or private again. */
  async setPublic(ref: string, isPublic = true): Promise<Image> {
    const body: S['v1SetImagePublicRequest'] = { ref, public: isPublic, nodeId: this.node };
    return (await this.dg.transport.call<S['v1SetImagePublicResponse']>('POST', '/v1/images:setPublic', { body, idempotent: true })).image ?? {};
  }
  /** The node's image store disk use. */
  usage(): Promise<S['v1GetImageUsageResponse']> {
    return this.dg.transport.call<S['v1GetImageUsageResponse']>('GET', '/v1/images:usage', { query: this.q() });
  }
}

/** History across sessions: `dg.history`. */
export class History {
  constructor(private readonly dg: Deskgrid) {}
  async *search(query: string, o: { sessionId?: string; pageSize?: number } = {}): AsyncGenerator<
    NonNullable<S['v1SearchHistoryResponse']['entries']>[number], void, undefined> {
    let pageToken = '';
    for (;;) {
      const page = await this.dg.transport.call<S['v1SearchHistoryResponse']>('GET', '/v1/history:search', {
        query: { query, sessionId: o.sessionId, pageSize: o.pageSize ?? 100, pageToken },
      });
      yield* page.entries ?? [];
      pageToken = page.nextPageToken ?? '';
      if (!pageToken) return;
    }
  }

  /** Deletes every history entry of a session; resolves to how many. */
  async delete(sessionId: string): Promise<number> {
    const r = await this.dg.transport.call<S['v1DeleteSessionHistoryResponse']>('DELETE', `/v1/sessions/${q(sessionId)}/history`);
    return Number(r.deletedEntries ?? 0);
  }

  /** Stored bytes, such as a screenshot an entry refers to, by their SHA-256 (hex). */
  async blob(sha256: string): Promise<{ data: Uint8Array; contentType: string }> {
    const r = await this.dg.transport.call<S['v1GetBlobResponse']>('GET', `/v1/blobs/${q(sha256)}`);
    return { data: fromBase64(r.data), contentType: r.contentType ?? '' };
  }

  /**
   * Stores JSON Lines as `Session.exportHistory` returns them as the history
   * of `sessionId`, all or nothing; entries already stored are skipped.
   */
  async importSession(sessionId: string, jsonl: string | Uint8Array, chunkSize = 256 << 10): Promise<S['v1ImportSessionHistoryResponse']> {
    const data = typeof jsonl === 'string' ? enc.encode(jsonl) : jsonl;
    // The route takes a stream of request messages: one JSON object each.
    const msgs: string[] = [];
    for (let i = 0; i < Math.max(data.length, 1); i += chunkSize) {
      const m: S['v1ImportSessionHistoryRequest'] = { chunk: toBase64(data.subarray(i, i + chunkSize)) };
      if (i === 0) m.sessionId = sessionId;
      msgs.push(JSON.stringify(m));
    }
    const { data: raw } = await this.dg.transport.raw('POST', '/v1/history:import', {
      rawBody: msgs.join('\n'), idempotent: true, timeoutMs: Math.max(this.dg.transport.o.timeoutMs, 300_000),
    });
    return raw.length ? (JSON.parse(dec.decode(raw)) as S['v1ImportSessionHistoryResponse']) : {};
  }
}

/** The nodes that run sessions: `dg.nodes`. Draining needs an admin key. */
export class Nodes {
  constructor(private readonly dg: Deskgrid) {}

  /** Every node with its state, labels and resources. */
  async list(): Promise<Node[]> {
    return (await this.dg.transport.call<S['v1ListNodesResponse']>('GET', '/v1/nodes')).nodes ?? [];
  }
  /** One node by id. */
  get(id: string): Promise<Node> {
    return this.dg.transport.call<Node>('GET', `/v1/nodes/${q(id)}`);
  }
  /** Stops placing new sessions on a node; the sessions it runs go on. */
  drain(id: string): Promise<Node> {
    return this.dg.transport.call<Node>('POST', `/v1/nodes/${q(id)}:drain`, { idempotent: true });
  }
  /** Lets a drained node take new sessions again. */
  undrain(id: string): Promise<Node> {
    return this.dg.transport.call<Node>('POST', `/v1/nodes/${q(id)}:undrain`, { idempotent: true });
  }
  /** Pulls ref onto every live node at once; `progress` sees each node's progress. Returns every node's result; throws when any node failed. */
  async pullImage(ref: string, progress?: (p: S['v1NodePullProgress']) => void): Promise<S['v1NodePullResult'][]> {
    const results: S['v1NodePullResult'][] = [];
    for await (const m of this.dg.transport.stream<S['v1PullImageOnNodesResponse']>('POST', '/v1/nodes:pullImage', { body: { ref }, timeoutMs: 1_800_000 })) {
      if (m.result) results.push(m.result);
      else if (m.progress && progress) progress(m.progress);
    }
    return results;
  }
}

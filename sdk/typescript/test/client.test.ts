// The TypeScript SDK against a real `deskgrid up`: `npm test`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as netServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  actions, DeadlineExceeded, Deskgrid, DeskgridError, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, Session, Unauthenticated,
  Unavailable,
} from '../dist/index.js';
import { DeskgridServer, freeAddr } from './server.js';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(pkgDir, '..', '..');

function pngSize(b: Uint8Array): [number, number] {
  assert.deepEqual([...b.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'not a PNG');
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return [v.getUint32(16), v.getUint32(20)];
}

let srv: DeskgridServer;
let dg: Deskgrid;
let model: Server;
// The folder whose subfolders sessions may use as workspaces.
let workspaces: string;

// Answers every Messages call with a short final text, streamed in the
// Messages API's server-sent events (the one fake: an LLM provider).
function fakeAnthropic(): Promise<Server> {
  const m = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      const ev = (name: string, data: unknown) => res.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
      ev('message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-test', content: [], usage: { input_tokens: 10, output_tokens: 1 } } });
      ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
      ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Done.' } });
      ev('content_block_stop', { type: 'content_block_stop', index: 0 });
      ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 2 } });
      ev('message_stop', { type: 'message_stop' });
      res.end();
    });
  });
  return new Promise((r) => m.listen(0, '127.0.0.1', () => r(m)));
}

before(async () => {
  model = await fakeAnthropic();
  const port = (model.address() as AddressInfo).port;
  workspaces = mkdtempSync(join(tmpdir(), 'dgts-workspaces-'));
  srv = await DeskgridServer.start(['-anthropic-api-key', 'sk-test', '-anthropic-base-url', `http://127.0.0.1:${port}`,
    '-workspace-roots', workspaces]);
  dg = srv.client();
});
after(async () => {
  await srv?.stop();
  model?.close();
  if (workspaces) rmSync(workspaces, { recursive: true, force: true });
});

describe('a session', () => {
  let s: Session;
  before(async () => {
    s = await dg.sessions.create({ width: 640, height: 480, labels: { suite: 'ts-sdk' } });
  });
  after(async () => {
    await s?.[Symbol.asyncDispose]();
  });

  test('is created running, found by id and by label', async () => {
    assert.match(s.id, /^s-/);
    assert.equal(s.state, 'SESSION_STATE_RUNNING');
    assert.deepEqual([s.width, s.height], [640, 480]);
    assert.equal((await dg.sessions.get(s.id)).data.labels?.suite, 'ts-sdk');
    const ids: string[] = [];
    for await (const x of dg.sessions.list({ labels: { suite: 'ts-sdk' }, pageSize: 1 })) ids.push(x.id);
    assert.deepEqual(ids, [s.id]);
    for await (const x of dg.sessions.list({ labels: { suite: 'nobody' } })) assert.fail(`unexpected ${x.id}`);
    const running: string[] = [];
    for await (const x of dg.sessions.list({ states: ['RUNNING'], labels: { suite: 'ts-sdk' } })) running.push(x.id);
    assert.deepEqual(running, [s.id]);
    for await (const x of dg.sessions.list({ states: ['SESSION_STATE_STOPPED'], labels: { suite: 'ts-sdk' } })) assert.fail(`unexpected ${x.id}`);
  });

  test('screenshot is a PNG of the screen, scaled on request', async () => {
    assert.deepEqual(pngSize(await s.screenshot()), [640, 480]);
    assert.deepEqual(pngSize(await s.screenshot({ scaleTo: { width: 320, height: 240 } })), [320, 240]);
    const jpeg = await s.screenshot({ format: 'jpeg', quality: 50 });
    assert.deepEqual([...jpeg.subarray(0, 2)], [0xff, 0xd8]);
  });

  test('click, type and key move the real pointer', async () => {
    await s.click(100, 120);
    assert.deepEqual(await s.cursorPosition(), { x: 100, y: 120 });
    await s.type('héllo');
    await s.key('Return');
    const r = await s.act([actions.mouseMove(33, 44), actions.cursorPosition()], {
      screenshot: true, scaleTo: { width: 160, height: 120 },
    });
    assert.deepEqual(r.cursor, { x: 33, y: 44 });
    assert.deepEqual(pngSize(Buffer.from(r.screenshot!.data!, 'base64')), [160, 120]);
  });

  test('exec returns output and exit code', async () => {
    const r = await s.exec(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    assert.equal(r.text, 'out\n');
    assert.equal(new TextDecoder().decode(r.stderr), 'err\n');
    assert.equal(r.exitCode, 3);
    assert.equal((await s.exec(['cat'], { stdin: 'from stdin' })).text, 'from stdin');
    assert.equal((await s.exec(['sh', '-c', 'echo "$A"'], { env: { A: 'b c' } })).text, 'b c\n');
    const kinds: string[] = [];
    for await (const m of s.execStream(['sh', '-c', 'echo one; echo two'])) kinds.push(m.kind);
    assert.equal(kinds.at(-1), 'exit');
    assert.equal((await s.exec(['sleep', '30'], { timeout: 0.5 })).timedOut, true);
    // asRoot reaches the node: a session from no image has no user
    // namespace of its own to be root in.
    await assert.rejects(s.exec(['id', '-u'], { asRoot: true }), FailedPrecondition);
    await assert.rejects(s.shell('id -u', { asRoot: true }), FailedPrecondition);
  });

  test('the shell keeps its directory and variables', async () => {
    await s.shell('cd /tmp && export X=kept');
    assert.equal((await s.shell('echo $X $PWD')).output.trim(), 'kept /tmp');
  });

  test('files round trip', async () => {
    const blob = new Uint8Array(2560).map((_, i) => i % 256);
    await s.files.write('dir-ts/blob.bin', blob);
    assert.deepEqual(await s.files.read('dir-ts/blob.bin'), blob);
    await s.files.write('dir-ts/a.txt', 'text ✓');
    assert.equal(await s.files.readText('dir-ts/a.txt'), 'text ✓');
    assert.deepEqual((await s.files.list('dir-ts')).map((f) => f.name).sort(), ['a.txt', 'blob.bin']);
    const chunks: Uint8Array[] = [];
    for await (const c of s.files.download('dir-ts/blob.bin')) chunks.push(c);
    assert.deepEqual(new Uint8Array(Buffer.concat(chunks)), blob);
    assert.equal((await s.exec(['cat', 'dir-ts/a.txt'])).text, 'text ✓');
    await assert.rejects(s.files.read('dir-ts/missing'), (e: unknown) => e instanceof NotFound && e.status === 404);
  });

  test('history records the calls', async () => {
    const entries = [];
    for await (const e of s.history()) entries.push(e);
    assert.ok(entries.length > 0);
    assert.ok((await s.exportHistory()).trim().startsWith('{'));
  });

  test('viewer token', async () => {
    const t = await s.viewerToken('view', 60);
    assert.ok(t.token);
    assert.equal(t.sessionId, s.id);
    assert.ok(t.tokenId && Date.parse(t.expireTime) > Date.now());
  });
});

describe('errors', () => {
  test('404 is NotFound with status and code', async () => {
    const e = await dg.sessions.get('s-aaaaaaaaaaaaaaaaaaaa').catch((x: unknown) => x);
    assert.ok(e instanceof NotFound, String(e));
    assert.ok(e instanceof DeskgridError);
    assert.equal(e.status, 404);
    assert.equal(e.code, 5);
    assert.match(e.message, /not found/);
  });

  test('400 is InvalidArgument and creates nothing', async () => {
    const before: string[] = [];
    for await (const x of dg.sessions.list()) before.push(x.id);
    const e = await dg.sessions.create({ width: 1 }).catch((x: unknown) => x);
    assert.ok(e instanceof InvalidArgument, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.code, 3);
    assert.match(e.message, /display\.width/);
    const now: string[] = [];
    for await (const x of dg.sessions.list()) now.push(x.id);
    assert.deepEqual(now.sort(), before.sort());
  });

  test('no key is Unauthenticated', async () => {
    const e = await new Deskgrid({ baseUrl: srv.url, apiKey: '' }).sessions.get('s-x').catch((x: unknown) => x);
    assert.ok(e instanceof Unauthenticated, String(e));
    assert.equal(e.status, 401);
  });

  test('an unreachable server is Unavailable after the retries', async () => {
    const tries: number[] = [];
    const dead = new Deskgrid({ baseUrl: `http://${await freeAddr()}`, apiKey: 'k', retries: 3, onRetry: (n) => tries.push(n) });
    await assert.rejects(dead.sessions.get('s-x'), Unavailable);
    assert.deepEqual(tries, [1, 2]);
  });

  test('no answer within timeoutMs is DeadlineExceeded', async () => {
    const conns: Socket[] = [];
    const silent = netServer((c) => conns.push(c)); // accepts and never answers
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const c = new Deskgrid({ baseUrl: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, apiKey: 'k', timeoutMs: 300 });
      await assert.rejects(c.sessions.get('s-x'), DeadlineExceeded);
    } finally {
      for (const c of conns) c.destroy();
      silent.close();
    }
  });

  test('429 is retried after Retry-After, and surfaces as ResourceExhausted', async () => {
    // One request a second per key: the burst below is refused with 429.
    await using slow = await DeskgridServer.start(['-rate-limit', '1']);
    const retried: Array<[number, number | undefined]> = [];
    const c = slow.client({ onRetry: (_, e) => retried.push([e.status, e.retryAfter]) });
    for (let i = 0; i < 4; i++) for await (const x of c.sessions.list()) assert.fail(`unexpected ${x.id}`);
    assert.ok(retried.length > 0, 'no call was refused');
    for (const [status, after] of retried) {
      assert.equal(status, 429);
      assert.ok(after !== undefined && after >= 1);
    }
    const once = slow.client({ retries: 1 });
    const e = await (async () => {
      for (let i = 0; i < 10; i++) for await (const _ of once.sessions.list()) { /* none */ }
    })().catch((x: unknown) => x);
    assert.ok(e instanceof ResourceExhausted, String(e));
    assert.equal(e.status, 429);
    assert.ok(e.retryAfter !== undefined);
  });
});

describe('runs', () => {
  test('events follow a run until it ends, and resume after a sequence', async () => {
    await using s = await dg.sessions.create({ width: 320, height: 240 });
    const run = await s.run('Say done', { provider: 'anthropic', model: 'claude-test', maxSteps: 2 });
    assert.match(run.id ?? '', /^run-/);
    const events = [];
    for await (const e of dg.runs.events(run.id!)) events.push(e);
    assert.match(events.map((e) => e.textDelta ?? '').join(''), /Done\./);
    const seqs = events.map((e) => Number(e.sequence));
    assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b));
    assert.equal((await dg.runs.get(run.id!)).state, 'RUN_STATE_SUCCEEDED');
    const later = [];
    for await (const e of dg.runs.events(run.id!, { afterSequence: seqs[0] })) later.push(Number(e.sequence));
    assert.deepEqual(later, seqs.slice(1));
    const ids = [];
    for await (const r of dg.runs.list(s.id)) ids.push(r.id);
    assert.deepEqual(ids, [run.id]);
    // The run's history and transcript, once recorded, hold the answer.
    for (const deadline = Date.now() + 30_000; ; await new Promise((r) => setTimeout(r, 100))) {
      const t = await dg.runs.transcript(run.id!).catch((e) => {
        if (e instanceof NotFound) return undefined; // nothing recorded yet
        throw e;
      });
      if (t && JSON.stringify(t).includes('Done.')) {
        assert.equal(t.runId, run.id);
        break;
      }
      if (Date.now() > deadline) assert.fail('the answer never reached the transcript');
    }
    const entries = [];
    for await (const e of dg.runs.entries(run.id!, { pageSize: 2 })) entries.push(e);
    assert.ok(entries.length > 0);
    assert.ok(entries.every((e) => e.runId === run.id));
  });
});

describe('desktop API', () => {
  let s: Session;
  before(async () => {
    s = await dg.sessions.create({ width: 640, height: 480, autostart: ['exec xmessage -name dgts hello'] });
  });
  after(async () => {
    await s?.[Symbol.asyncDispose]();
  });

  async function eventually<T>(what: string, check: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = await check();
      if (v) return v;
      if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  test('applications and the accessibility tree', async () => {
    for (const a of await s.applications()) assert.ok(a.id && a.name, JSON.stringify(a));
    await assert.rejects(s.launch('no-such-application-anywhere'), NotFound);
    // Opening what the session does not have, or a URL of another scheme.
    await assert.rejects(s.open('no-such-file.txt'), NotFound);
    await assert.rejects(s.open('mailto:someone@example.org'), InvalidArgument);
    // This desktop runs no accessibility bus: a precondition, not an empty tree.
    await assert.rejects(s.accessibilityTree({ maxDepth: 3 }), FailedPrecondition);
    await assert.rejects(s.accessibilityTree({ maxDepth: 1000 }), InvalidArgument);
    // Acting needs the bus too; an id that is no node's is refused first.
    await assert.rejects(s.actOnAccessible(':1.5:/org/a11y/atspi/accessible/1', { action: 'click' }), FailedPrecondition);
    await assert.rejects(s.actOnAccessible('not-a-node', { focus: true }), InvalidArgument);
    await assert.rejects(s.accessibilityTree({ root: 'not-a-node' }), InvalidArgument);
  });

  test('a recording starts, stops and downloads as a video', async () => {
    await assert.rejects(s.startRecording({ fps: 31 }), InvalidArgument);
    const rec = await s.startRecording({ fps: 10, width: 320, height: 240 });
    assert.equal(rec.state, 'RECORDING_STATE_RECORDING');
    await assert.rejects(s.startRecording(), (e: unknown) => e instanceof DeskgridError && e.code === 6);
    // The screen changes: xmessage's window moves.
    const win = await eventually("xmessage's window", async () => (await s.windows()).find((w) => w.instance === 'dgts'));
    await s.moveWindow(win.id!, { x: 100, y: 120 });
    const done = await s.stopRecording(rec.id!);
    assert.equal(done.state, 'RECORDING_STATE_STOPPED');
    const { data, contentType } = await s.downloadRecording(rec.id!);
    assert.equal(contentType, 'video/mp4');
    assert.equal(new TextDecoder().decode(data.subarray(4, 8)), 'ftyp');
    assert.equal(String(data.length), String(done.sizeBytes));
    assert.ok((await s.recordings()).some((r) => r.id === rec.id && r.downloadReady));
    await assert.rejects(s.stopRecording(rec.id!), FailedPrecondition);
  });

  test('processes list the autostart program', async () => {
    const mine = (await s.processes()).filter((p) => (p.argv ?? []).join(' ').includes('xmessage -name dgts hello'));
    assert.equal(mine.length, 1);
    assert.equal(mine[0].state, 'PROCESS_STATE_RUNNING');
  });

  test('windows: list, move, activate, close', async () => {
    const find = async () => (await s.windows()).find((w) => w.instance === 'dgts');
    const win = await eventually("xmessage's window", find);
    assert.ok(win.id);
    assert.equal((await s.display()).width, 640);
    const moved = await s.moveWindow(win.id!, { x: 30, y: 40, width: 300, height: 120 });
    assert.deepEqual([moved.geometry?.x, moved.geometry?.y, moved.geometry?.width], [30, 40, 300]);
    assert.equal((await s.activateWindow(win.id!)).id, win.id);
    await assert.rejects(s.activateWindow(0x7ffffff), NotFound);
    assert.equal(await s.closeWindow(win.id!), true);
    await eventually('the window to go', async () => ((await find()) === undefined ? true : undefined));
  });

  test('clipboard round trip', async () => {
    await s.setClipboard('héllo 世界');
    await s.setClipboard('mouse', { primary: true });
    assert.equal(await s.clipboard(), 'héllo 世界');
    assert.equal(await s.clipboard({ primary: true }), 'mouse');
    await assert.rejects(s.setClipboard('x'.repeat((1 << 20) + 1)), InvalidArgument);
  });

  test('input lease: acquire, fence, renew, release', async () => {
    const lease = await s.acquireInputLease('ts-a', { ttl: 60 });
    assert.equal(lease.holder, 'ts-a');
    assert.ok(lease.leaseId);
    await s.act([actions.mouseMove(5, 6)], { leaseToken: lease.token });
    // Anyone may ask who holds it; its id stays with the holder.
    const told = await s.inputLease();
    assert.equal(told.lease?.holder, 'ts-a');
    assert.equal(told.lease?.token, lease.token);
    assert.ok(!told.lease?.leaseId);
    await assert.rejects(s.acquireInputLease('ts-b', { wait: 0.5 }), (e: DeskgridError) => e instanceof DeadlineExceeded && e.status === 504);
    const renewed = await s.renewInputLease(lease, { ttl: 120 });
    assert.equal(renewed.token, lease.token);
    assert.ok(renewed.expireTime! > lease.expireTime!);
    await s.releaseInputLease(lease);
    assert.ok(!(await s.inputLease()).lease);
    const other = await s.acquireInputLease('ts-b', { wait: 10 });
    try {
      assert.ok(BigInt(other.token!) > BigInt(lease.token!));
      await s.act([actions.mouseMove(7, 8)], { leaseToken: other.token });
      // The old holder's token is fenced off once a newer one was used.
      await assert.rejects(s.act([actions.mouseMove(9, 10)], { leaseToken: lease.token }),
        (e: DeskgridError) => e instanceof FailedPrecondition && /stale input lease/.test(e.message));
    } finally {
      await s.releaseInputLease(other);
    }
  });
});

describe('sandbox API', () => {
  test('changes: list, diff, apply into the workspace, discard', async () => {
    const ws = mkdtempSync(join(workspaces, 'ws-'));
    writeFileSync(join(ws, 'kept.txt'), 'one\n');
    try {
      await using s = await dg.sessions.create({ width: 320, height: 240, workspace: ws });
      await s.files.write('kept.txt', 'one\ntwo\n');
      await s.files.write('new.txt', 'fresh');
      const paths = (await s.changes()).map((c) => c.path);
      assert.ok(paths.includes('new.txt') && paths.includes('kept.txt'), String(paths));
      const d = await s.diff('kept.txt');
      assert.match(d.diff ?? '', /\+two/);
      assert.deepEqual((await s.applyChanges(['new.txt'])).applied, ['new.txt']);
      assert.equal(readFileSync(join(ws, 'new.txt'), 'utf8'), 'fresh');
      assert.deepEqual(await s.discardChanges(['kept.txt']), ['kept.txt']);
      assert.equal(await s.files.readText('kept.txt'), 'one\n');
      await s.files.mkdir('a/b', { parents: true });
      await s.files.write('a/b/x.txt', 'x');
      await s.files.move('a/b/x.txt', 'a/y.txt');
      assert.equal((await s.files.stat('a/y.txt')).size, '1');
      const snap = await s.createSnapshot();
      await s.files.write('a/y.txt', 'changed');
      await s.restoreSnapshot(snap.snapshotId!);
      assert.equal(await s.files.readText('a/y.txt'), 'x');
      await s.deleteSnapshot(snap.snapshotId!);
      assert.deepEqual(await s.snapshots(), []);
      await s.shell('export KEEP=1');
      await s.restartShell();
      assert.equal((await s.shell('echo ${KEEP:-gone}')).output.trim(), 'gone');
      assert.equal((await s.sandbox()).frozen ?? false, false);
    } finally {
      rmSync(ws, { recursive: true, force: true });
    }
  });
});

describe('nodes and history API', () => {
  test('nodes', async () => {
    // deskgrid up is one node, shown like a cluster's (draining it is left
    // to the Go SDK's test, whose deskgrid no other test shares).
    const nodes = await dg.nodes.list();
    assert.deepEqual(nodes.map((n) => n.id), ['local']);
    assert.equal(nodes[0].state, 'NODE_STATE_READY');
    assert.equal((await dg.nodes.get('local')).id, 'local');
    for (const call of [() => dg.nodes.get('elsewhere'), () => dg.nodes.drain('elsewhere'), () => dg.nodes.undrain('elsewhere')]) {
      await assert.rejects(call(), (e: DeskgridError) => e instanceof NotFound && e.status === 404);
    }
  });

  test('images: usage, and a tag that does not exist', async () => {
    assert.equal(typeof (await dg.images.usage()), 'object');
    await assert.rejects(dg.images.setPublic('no/such-image:v1', true), NotFound);
    // One machine is one node: naming it changes nothing.
    const local = dg.images.onNode('local');
    assert.deepEqual((await local.list()).map((i) => i.ref), (await dg.images.list()).map((i) => i.ref));
    assert.deepEqual(await local.usage(), await dg.images.usage());
    await assert.rejects(local.get('no/such-image:v1'), NotFound);
  });

  test('history: export, delete, import back', async () => {
    const s = await dg.sessions.create({ width: 320, height: 240 });
    await s.exec(['true']);
    await s.delete();
    // History is recorded as events arrive: once the session's end is in it, nothing more comes.
    let jsonl = '';
    for (const deadline = Date.now() + 60_000; !jsonl.includes('SESSION_STATE_STOPPED'); await new Promise((r) => setTimeout(r, 100))) {
      if (Date.now() > deadline) assert.fail("the session's end never reached its history");
      jsonl = await s.exportHistory();
    }
    const n = jsonl.trim().split('\n').length;
    assert.equal(await dg.history.delete(s.id), n);
    const imported = await dg.history.importSession(s.id, jsonl);
    assert.equal(Number(imported.imported ?? 0), n);
    let count = 0;
    for await (const _ of s.history({ pageSize: 2 })) count++;
    assert.equal(count, n);
    const again = await dg.history.importSession(s.id, jsonl);
    assert.deepEqual([Number(again.imported ?? 0), Number(again.skipped ?? 0)], [0, n]);
    await assert.rejects(dg.history.importSession(s.id, 'not json\n'), InvalidArgument);
  });
});

describe('life', () => {
  test('await using deletes the session, and watch sees it end', async () => {
    const seen: string[] = [];
    let id = '';
    let watching: Promise<void> | undefined;
    {
      await using s = await dg.sessions.create({ width: 320, height: 240 });
      id = s.id;
      let first!: () => void;
      const started = new Promise<void>((r) => { first = r; });
      watching = (async () => {
        for await (const snap of s.watch()) {
          seen.push(snap.state ?? '');
          first();
        }
      })();
      await started;
      await s.keepalive();
    }
    await watching;
    assert.equal(seen[0], 'SESSION_STATE_RUNNING');
    assert.match(seen.at(-1)!, /SESSION_STATE_STOPP(ED|ING)/);
    assert.match((await dg.sessions.get(id)).state ?? '', /SESSION_STATE_STOPP(ED|ING)/);
  });

  test('a request id makes create idempotent', async () => {
    const a = await dg.sessions.create({ width: 320, height: 240, requestId: 'ts-sdk-req-1' });
    try {
      const b = await dg.sessions.create({ width: 320, height: 240, requestId: 'ts-sdk-req-1' });
      assert.equal(b.id, a.id);
    } finally {
      await a.delete();
    }
  });
});

describe('package', () => {
  test('the generated types match the served OpenAPI document', () => {
    execFileSync(process.execPath, [join(pkgDir, 'scripts', 'generate.mjs'), '--check', `${srv.url}/openapi.json`], {
      stdio: 'pipe',
    });
  });

  test('npm pack installs, and the examples run from it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deskgrid-ts-example-'));
    try {
      const tgz = execFileSync('npm', ['pack', '--silent', '--ignore-scripts', '--pack-destination', dir], { cwd: pkgDir, encoding: 'utf8' }).trim().split('\n').at(-1)!;
      // The folder is set up as quickstart.ts's header says, the registry
      // aside: the SDK from the tarball, typescript and @types/node from
      // this package's own.
      const examples = ['quickstart.ts', 'parallel.ts', 'agent_loop.ts'];
      const header = (f: string) => readFileSync(join(repo, 'examples', 'typescript', f), 'utf8').split('\n')
        .filter((l) => l.startsWith('//   ')).map((l) => l.slice(5).replace(/\s+#.*$/, '').trim());
      const steps = header('quickstart.ts');
      const install = steps.find((l) => l.startsWith('npm install '))?.split(/\s+/) ?? [];
      for (const p of ['@deskgrid/sdk', 'typescript', '@types/node']) assert.ok(install.includes(p), `quickstart.ts installs ${p}: ${install.join(' ')}`);
      for (const l of steps.filter((l) => l.startsWith('npm init') || l.startsWith('npm pkg'))) {
        for (const cmd of l.split('&&')) {
          const [bin, ...args] = cmd.trim().split(/\s+/);
          execFileSync(bin, args, { cwd: dir, stdio: 'pipe' });
        }
      }
      execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--silent', join(dir, tgz)], { cwd: dir });
      mkdirSync(join(dir, 'node_modules', '@types'), { recursive: true });
      symlinkSync(join(pkgDir, 'node_modules', 'typescript'), join(dir, 'node_modules', 'typescript'));
      symlinkSync(join(pkgDir, 'node_modules', '@types', 'node'), join(dir, 'node_modules', '@types', 'node'));
      for (const f of examples) {
        copyFileSync(join(repo, 'examples', 'typescript', f), join(dir, f));
        // Each compiles with the command its header gives.
        const tsc = header(f).find((l) => l.startsWith('npx tsc '));
        assert.ok(tsc, `${f} says how to compile it`);
        const args = tsc.split('&&')[0].trim().split(/\s+/).slice(2);
        try {
          execFileSync(join(pkgDir, 'node_modules', '.bin', 'tsc'), args, { cwd: dir, stdio: 'pipe' });
        } catch (e) {
          assert.fail(`${f}: npx tsc ${args.join(' ')}: ${(e as { stdout?: Buffer }).stdout}`);
        }
      }
      // The README's example, as written.
      const readme = readFileSync(join(repo, 'README.md'), 'utf8');
      const section = readme.slice(readme.indexOf('### Python and TypeScript SDKs'));
      const code = section.slice(section.indexOf('```ts\n') + 6);
      writeFileSync(join(dir, 'readme.ts'), code.slice(0, code.indexOf('```')));
      execFileSync(join(pkgDir, 'node_modules', '.bin', 'tsc'), [
        '--target', 'ES2022', '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--strict',
        '--lib', 'ES2022,DOM,ESNext.Disposable', '--typeRoots', join(pkgDir, 'node_modules', '@types'), '--types', 'node',
        '--skipLibCheck', 'readme.ts',
      ], { cwd: dir, stdio: 'pipe' });
      const out = execFileSync(process.execPath, ['quickstart.js', join(dir, 'shot.png')], {
        cwd: dir, encoding: 'utf8', env: { ...process.env, DESKGRID_URL: srv.url, DESKGRID_API_KEY: srv.apiKey },
      });
      assert.match(out, /hello from Linux/);
      assert.deepEqual(pngSize(readFileSync(join(dir, 'shot.png'))), [1024, 768]);
      rmSync(join(dir, 'shot.png'));
      const par = execFileSync(process.execPath, ['parallel.js', '3'], {
        cwd: dir, encoding: 'utf8', env: { ...process.env, DESKGRID_URL: srv.url, DESKGRID_API_KEY: srv.apiKey },
      });
      assert.match(par, /3\/3 tasks passed/);
      const loop = execFileSync(process.execPath, ['agent_loop.js'], {
        cwd: dir, encoding: 'utf8', env: { ...process.env, DESKGRID_URL: srv.url, DESKGRID_API_KEY: srv.apiKey },
      });
      assert.deepEqual(loop.trim().split('\n'), ['step 1: click, type', 'step 2: key', 'step 3: result: done']);
      execFileSync(process.execPath, ['readme.js'], {
        cwd: dir, env: { ...process.env, DESKGRID_URL: srv.url, DESKGRID_API_KEY: srv.apiKey },
      });
      assert.deepEqual(pngSize(readFileSync(join(dir, 'shot.png'))), [1024, 768]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

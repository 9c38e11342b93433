// End-to-end test of deskgrid's web console in headless Chromium
// (playwright-core driving the system's Chromium; no browser download).
//
//   node console.spec.mjs --base-url http://127.0.0.1:8080 --provider-url http://127.0.0.1:9000 [options]
//
// Scenario "console" (the default): create a session with options, see it in
// the list, open it and see its desktop, take over and hand back the input
// lease, start a run against the provider at --provider-url, see the
// transcript (and screenshot thumbnails and the history timeline), then
// delete the session and see the page say so.
//
// --provider-url builtin starts fake-anthropic.mjs here (a stand-in for the
// Anthropic Messages API that takes one screenshot and answers
// "The desktop is ready."), for a real deskgrid on this machine.
//
// With --features, the same session also serves: its live thumbnail in the
// list (a real JPEG of the desktop), a recording started before the run and
// stopped after it, replayed in a <video> with the run's events under it
// (clicking one seeks to its time less the recording's start), a file
// uploaded into a new folder through the browser and downloaded with the
// same bytes, the history's kind and text filters, and the accessibility
// inspector (the node under the pointer and the picked node outlined).
//
// Scenario "thumbnails" (under a fake clock): with three running sessions
// listed, the pictures are fetched one at a time, each session's at most
// every 10 s; after 5 minutes in which nobody touches the page they pause
// (and say so), and a touch resumes them.
//
// Scenario "viewer": open --session's page and see its desktop.
//
// Scenario "docs": follow the console's "API docs" link to /docs, see every
// operation of /openapi.json rendered, CreateSession's request and response
// examples among them, and the filter narrowing the list.
//
// With --api-key (a gateway with authentication) the console is signed in
// first: a wrong key is refused with the server's message, the right one
// lets in; the live view must use viewer tokens (view, control while taken
// over); at the end a key the server refuses brings the sign-in form back,
// and "Sign out" forgets the key. Without it, the console must show no
// sign-in at all.
//
// Options:
//   --scenario console|viewer|docs|thumbnails  what to test (console)
//   --provider anthropic          provider of the run
//   --model NAME                  model of the run (claude-sonnet-4-5)
//   --api-key KEY                 deskgrid API key to sign in with (none: the gateway has no authentication)
//   --provider-key KEY            provider key sent with the run (test-key)
//   --prompt TEXT                 the run's task
//   --expect TEXT                 text the agent's answer must contain (The desktop is ready.)
//   --expect-tool NAME            a tool call the transcript must show (none)
//   --expect-screenshot           the transcript must show a screenshot thumbnail
//   --expect-color R,G,B          colour at the middle of the desktop
//   --expect-size WxH             size of the desktop's framebuffer
//   --expect-title TEXT           the viewer page's title once connected
//   --expect-nodes                the nodes panel must list a node
//   --approve                     start the run asking before each action, and approve it
//   --width/--height N            desktop size to create (640x400)
//   --session ID                  the session of the viewer scenario
//   --features                    also test the live thumbnails, the file browser, recordings and
//                                 their replay, the history filters and the accessibility inspector
//                                 (a real deskgrid on the desktop image)
//   --expect-errors               the gateway serves no files, recordings or accessibility tree:
//                                 their tabs must say so with the HTTP status and message
//   --autostart CMD               a program the created session starts (for the inspector's tree)
//   --keep                        do not delete the session at the end
//   --artifacts DIR               where a failure's screenshot goes
//   --shots DIR                   save pictures of the list and session pages
//   --chromium PATH               the browser (/usr/bin/chromium, or $CHROMIUM)
//   --timeout MS                  bound on each wait (30000)
//
// Prints one line per step and exits 0 when every step passed, 1 otherwise.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startFakeAnthropic } from './fake-anthropic.mjs';

const flags = new Set(['--expect-screenshot', '--expect-nodes', '--keep', '--approve', '--features', '--expect-errors']);
function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}`);
    const [k, inline] = a.slice(2).split(/=(.*)/s);
    if (flags.has('--' + k)) { o[k] = true; continue; }
    const v = inline !== undefined ? inline : argv[++i];
    if (v === undefined) throw new Error(`${a} needs a value`);
    o[k] = v;
  }
  return o;
}

const args = parseArgs(process.argv.slice(2));
const scenario = args.scenario || 'console';
const base = (args['base-url'] || '').replace(/\/$/, '');
if (!base) {
  console.error('usage: node console.spec.mjs --base-url URL --provider-url URL [options] (see the file header)');
  process.exit(2);
}
if (scenario === 'console' && !args['provider-url']) {
  console.error('--provider-url is required for the console scenario');
  process.exit(2);
}
const timeout = Number(args.timeout || 30000);
const width = Number(args.width || 640);
const height = Number(args.height || 400);

function step(what) { console.log('ok - ' + what); }
function fail(what) { throw new Error(what); }

// The middle pixel of noVNC's canvas, its size, and whether it is view-only.
const probe = () => {
  const c = document.querySelector('#screen canvas');
  if (!c || !c.width) return null;
  const d = c.getContext('2d').getImageData(c.width >> 1, c.height >> 1, 1, 1).data;
  return { rgb: [d[0], d[1], d[2]], width: c.width, height: c.height, viewOnly: window.deskgridRFB ? window.deskgridRFB.viewOnly : null };
};

async function seeDesktop(page) {
  await page.locator('#state[data-state="connected"]').waitFor({ timeout }).catch(async () => {
    fail(`the live view did not connect: ${await page.locator('#state').textContent()}`);
  });
  const deadline = Date.now() + timeout;
  let got = null;
  for (;;) {
    got = await page.evaluate(probe);
    let ok = got !== null;
    if (ok && args['expect-color']) ok = got.rgb.join(',') === args['expect-color'].split(',').map(Number).join(',');
    if (ok && args['expect-size']) ok = `${got.width}x${got.height}` === args['expect-size'];
    if (ok) break;
    if (Date.now() > deadline) fail(`the desktop never showed as expected: ${JSON.stringify(got)}`);
    await page.waitForTimeout(50);
  }
  if (args['expect-title']) {
    await page.waitForFunction((t) => document.title === t, args['expect-title'], { timeout })
      .catch(async () => fail(`title ${JSON.stringify(await page.title())}, want ${JSON.stringify(args['expect-title'])}`));
  }
  step(`the desktop shows (${got.width}x${got.height}, middle pixel ${got.rgb.join(',')})`);
  return got;
}

async function viewOnlyIs(page, want) {
  await page.waitForFunction((w) => window.deskgridRFB && window.deskgridRFB.viewOnly === w &&
    document.getElementById('state').dataset.state === 'connected', want, { timeout });
  if (!args['api-key']) return;
  const viewer = await page.evaluate(() => window.deskgridViewer || null);
  const mode = want ? 'view' : 'control';
  if (!viewer || viewer.mode !== mode) fail(`the live view's viewer token is ${JSON.stringify(viewer)}, want mode ${mode}`);
}

const badKey = 'dg_0000000000000000_' + 'a'.repeat(52);

// signIn signs the page in with --api-key (after a wrong key is refused),
// or checks that a gateway without authentication asks for nothing.
async function signIn(page) {
  if (!args['api-key']) {
    await page.locator('body[data-signed-in="true"]').waitFor({ timeout });
    if (await page.locator('#signin').count()) fail('the console asks for a key of a gateway without authentication');
    if ((await page.locator('body').getAttribute('data-auth')) !== 'off') fail('the page did not see that authentication is off');
    return;
  }
  await page.locator('#signin').waitFor({ timeout }).catch(() => fail('no sign-in form'));
  await page.fill('#signin [name=key]', badKey);
  await page.click('#signin-submit');
  await page.waitForFunction(() => document.getElementById('signin-error').textContent !== '', null, { timeout });
  const said = await page.locator('#signin-error').textContent();
  if (!/not recognised/.test(said)) fail(`a wrong key was answered ${JSON.stringify(said)}`);
  await page.fill('#signin [name=key]', args['api-key']);
  await page.click('#signin-submit');
  await page.locator('body[data-signed-in="true"]').waitFor({ timeout })
    .catch(async () => fail(`sign-in: ${await page.locator('#signin-error').textContent().catch(() => '')}`));
  step(`signed in (a wrong key was refused: ${JSON.stringify(said)})`);
}

// signOutAndBack: a key the server refuses brings the sign-in form back
// with its message; signing in again works; "Sign out" forgets the key.
async function signOutAndBack(page) {
  await page.evaluate((k) => sessionStorage.setItem('deskgrid-api-key', k), badKey);
  // (A first look at the history tab may already meet the 401.)
  await page.evaluate(() => {
    document.querySelector('#tabs [data-tab="history"]').click();
    document.getElementById('timeline-refresh').click();
  });
  await page.locator('#signin').waitFor({ timeout }).catch(() => fail('a 401 did not bring the sign-in form back'));
  const said = await page.locator('#signin-error').textContent();
  if (!/not recognised/.test(said)) fail(`after a 401 the form says ${JSON.stringify(said)}`);
  await page.fill('#signin [name=key]', args['api-key']);
  await page.click('#signin-submit');
  await page.locator('body[data-signed-in="true"] #sign-out').waitFor({ timeout });
  step(`a refused key brought the sign-in form back (${JSON.stringify(said)}); signed in again`);
  await page.click('#sign-out');
  await page.locator('#signin').waitFor({ timeout });
  if (await page.evaluate(() => sessionStorage.getItem('deskgrid-api-key'))) fail('sign out kept the key');
  step('signed out');
}


// restCall makes a REST call from the page, with its key.
async function restCall(page, method, path, body) {
  const got = await page.evaluate(async ({ method, path, body }) => {
    const key = sessionStorage.getItem('deskgrid-api-key');
    const headers = { Accept: 'application/json', 'Content-Type': 'application/json' };
    if (key) headers.Authorization = 'Bearer ' + key;
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, text: await res.text() };
  }, { method, path, body });
  if (got.status !== 200) fail(`${method} ${path}: HTTP ${got.status} ${got.text}`);
  return got.text ? JSON.parse(got.text) : {};
}

// The last thumbnail picture of each session, as the server sent it.
const thumbnailBodies = new Map();
// (passed through the test on their way to the page).
async function watchThumbnails(page) {
  await page.route(/\/v1\/sessions\/[^/]+\/screenshot\?format=IMAGE_FORMAT_JPEG/, async (route) => {
    const res = await route.fetch();
    const body = await res.body();
    const m = /\/v1\/sessions\/([^/]+)\/screenshot/.exec(route.request().url());
    if (res.status() === 200) thumbnailBodies.set(decodeURIComponent(m[1]), { body, type: res.headers()['content-type'] });
    await route.fulfill({ response: res, body });
  });
}

const shot = async (page, name) => { if (args.shots) await page.screenshot({ path: join(args.shots, name) }); };

// seeThumbnail: the list shows a picture of the session's desktop, a real
// JPEG or PNG of it, scaled down.
async function seeThumbnail(page, id) {
  const img = page.locator(`tr[data-session-id="${id}"] img.thumb`);
  await page.locator(`tr[data-session-id="${id}"] img.thumb[data-loaded="true"]`).waitFor({ timeout: Math.max(timeout, 60000) })
    .catch(async () => fail(`no thumbnail of ${id}: ${await img.getAttribute('title')}`));
  const got = await img.evaluate((i) => ({ w: i.naturalWidth, h: i.naturalHeight, complete: i.complete }));
  for (let i = 0; i < 100 && !thumbnailBodies.has(id); i++) await page.waitForTimeout(50);
  const seen = thumbnailBodies.get(id);
  if (!seen) fail(`no screenshot response of ${id} was seen`);
  const body = seen.body;
  got.head = [...body.subarray(0, 4)];
  got.size = body.length;
  got.type = seen.type;
  const jpeg = got.head[0] === 0xff && got.head[1] === 0xd8 && got.head[2] === 0xff;
  const png = got.head.join(',') === '137,80,78,71';
  if (!jpeg && !png) fail(`the thumbnail is not an image: ${got.type}, starting ${got.head}`);
  if (!got.complete || got.w <= 0 || got.w > 160 || got.h <= 0 || got.h > 100) fail(`the thumbnail is ${got.w}x${got.h}`);
  // The list's layout is a width/height ratio of the desktop's.
  if (Math.abs(got.w / got.h - width / height) > 0.1) fail(`the thumbnail is ${got.w}x${got.h}, not the shape of ${width}x${height}`);
  step(`the list shows a ${jpeg ? 'JPEG' : 'PNG'} thumbnail of the desktop (${got.w}x${got.h}, ${got.size} bytes)`);
}

// thumbnailShowsDesktop: back in the list, the session's picture shows
// its desktop (not one colour), then back to the session's page.
// A recording started on the page is stopped when the page is left.
async function thumbnailShowsDesktop(page, id) {
  await page.click('#tabs [data-tab="recordings"]');
  const known = new Set(await page.locator('#recordings li[data-recording-id]').evaluateAll((l) => l.map((x) => x.dataset.recordingId)));
  await page.click('#rec-start');
  await page.locator('#recordings li[data-state="recording"]').first().waitFor({ timeout })
    .catch(async () => fail(`a second recording did not start: ${await page.locator('#rec-status').textContent()}`));
  const rid = await page.locator('#recordings li[data-state="recording"]').first().getAttribute('data-recording-id');
  if (known.has(rid)) fail(`the new recording has the old id ${rid}`);
  await page.goto(base + '/');
  const img = page.locator(`tr[data-session-id="${id}"] img.thumb[data-loaded="true"]`);
  await img.waitFor({ timeout });
  const colours = await img.evaluate(async (i) => {
    await i.decode();
    const c = document.createElement('canvas');
    c.width = i.naturalWidth;
    c.height = i.naturalHeight;
    const g = c.getContext('2d');
    g.drawImage(i, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let k = 0; k < d.length; k += 4) seen.add((d[k] >> 4) << 8 | (d[k + 1] >> 4) << 4 | (d[k + 2] >> 4));
    return seen.size;
  });
  if (colours < 8) fail(`the thumbnail of ${id} has ${colours} colours: not the desktop`);
  await shot(page, 'console-sessions-live.png');
  step(`the list's thumbnail shows the desktop (${colours} colours)`);
  const deadline = Date.now() + timeout;
  for (;;) {
    const recs = (await restCall(page, 'GET', `/v1/sessions/${encodeURIComponent(id)}/recordings`)).recordings || [];
    const r = recs.find((x) => x.id === rid);
    if (r && r.state !== 'RECORDING_STATE_RECORDING') {
      step(`leaving the page stopped recording ${rid} it had started (${r.state})`);
      break;
    }
    if (Date.now() > deadline) fail(`recording ${rid} still runs after its page was left: ${JSON.stringify(r)}`);
    await page.waitForTimeout(250);
  }
  await page.goBack();
  await page.locator('#state[data-state="connected"]').waitFor({ timeout });
}

async function startRecording(page) {
  await page.click('#tabs [data-tab="recordings"]');
  await page.locator('#recordings[data-loaded="true"]').waitFor({ timeout });
  await page.click('#rec-start');
  const live = page.locator('#recordings li[data-state="recording"]');
  await live.first().waitFor({ timeout }).catch(async () => fail(`recording did not start: ${await page.locator('#rec-status').textContent()}`));
  const rid = await live.first().getAttribute('data-recording-id');
  if (await page.locator('#rec-stop').isHidden()) fail('no Stop button while recording');
  step(`started recording ${rid} from the page`);
  return rid;
}

// fileBrowser: make a folder, go into it, upload a file through the
// browser, see it listed, download it with the same bytes, go back up.
async function fileBrowser(page) {
  await page.click('#tabs [data-tab="files"]');
  await page.locator('#files[data-path=""]').waitFor({ timeout })
    .catch(async () => fail(`the home folder was not listed: ${await page.locator('#files-status').textContent()}`));
  const dir = 'e2e-files';
  await page.fill('#files-newdir', dir);
  await page.click('#files-mkdir');
  await page.locator(`#files tr[data-name="${dir}"][data-dir="true"] button.dir`).click();
  await page.locator(`#files[data-path="${dir}"]`).waitFor({ timeout });
  const payload = Buffer.alloc(70000);
  for (let i = 0; i < payload.length; i++) payload[i] = (i * 7919 + (i >> 8)) & 0xff;
  await page.setInputFiles('#files-upload', { name: 'upload.bin', mimeType: 'application/octet-stream', buffer: payload });
  const row = page.locator('#files tr[data-name="upload.bin"]');
  await row.waitFor({ timeout }).catch(async () => fail(`the uploaded file is not listed: ${await page.locator('#files-status').textContent()}`));
  await shot(page, 'console-files.png');
  const [download] = await Promise.all([page.waitForEvent('download', { timeout }), row.locator('button.download').click()]);
  const { readFile } = await import('node:fs/promises');
  const got = await readFile(await download.path());
  if (download.suggestedFilename() !== 'upload.bin') fail(`the download is named ${download.suggestedFilename()}`);
  if (!got.equals(payload)) fail(`the download has ${got.length} bytes, not the ${payload.length} uploaded`);
  await page.click('#files-up');
  await page.locator(`#files[data-path=""] tr[data-name="${dir}"]`).waitFor({ timeout });
  // A folder that is not there: the status and message, the listing kept.
  await page.fill('#files-path', 'no-such-folder');
  await page.click('#files-go');
  await page.waitForFunction(() => document.getElementById('files-status').className === 'error', null, { timeout });
  const said = await page.locator('#files-status').textContent();
  if (!/HTTP 404: /.test(said)) fail(`opening a missing folder says ${JSON.stringify(said)}`);
  if ((await page.locator(`#files[data-path=""] tr[data-name="${dir}"]`).count()) !== 1) fail('a failed listing lost the one shown');
  step(`a missing folder is refused: ${JSON.stringify(said)}`);
  step(`uploaded ${payload.length} bytes into ${dir}/ through the browser; listed; downloaded the same bytes`);
}

// historyFilters: the kind filter asks for one kind, the text filter narrows.
async function historyFilters(page) {
  const all = await page.locator('#timeline li.entry').count();
  await page.selectOption('#history-kind', 'ENTRY_KIND_SCREENSHOT');
  await page.waitForFunction(() => {
    const li = [...document.querySelectorAll('#timeline li.entry')];
    return li.length > 0 && li.every((x) => x.dataset.kind === 'screenshot');
  }, null, { timeout }).catch(async () => fail(`the kind filter shows ${JSON.stringify(await page.locator('#timeline li.entry').evaluateAll((l) => l.map((x) => x.dataset.kind)))}`));
  const shots = await page.locator('#timeline li.entry').count();
  await page.selectOption('#history-kind', '');
  await page.waitForFunction((n) => document.querySelectorAll('#timeline li.entry').length >= n, all, { timeout });
  await page.fill('#history-text', 'computer');
  await page.waitForFunction((n) => {
    const li = [...document.querySelectorAll('#timeline li.entry')];
    return li.length > 0 && li.length < n && li.every((x) => x.textContent.toLowerCase().includes('computer'));
  }, all, { timeout }).catch(async () => fail(`the text filter left ${await page.locator('#timeline li.entry').count()} of ${all}`));
  const texts = await page.locator('#timeline li.entry').count();
  await shot(page, 'console-history.png');
  await page.fill('#history-text', '');
  step(`the history filters: ${shots} screenshots, ${texts} entries saying "computer", of ${all}`);
}

// tabsSayWhy: a tab whose calls fail shows the status and message.
async function tabsSayWhy(page) {
  const said = [];
  for (const [tab, status, act] of [['files', '#files-status'], ['recordings', '#rec-status'], ['inspector', '#a11y-status', '#a11y-load']]) {
    await page.click(`#tabs [data-tab="${tab}"]`);
    if (act) await page.click(act);
    await page.waitForFunction((sel) => /HTTP \d{3}: \S/.test(document.querySelector(sel).textContent), status, { timeout })
      .catch(async () => fail(`the ${tab} tab says ${JSON.stringify(await page.locator(status).textContent())}`));
    if ((await page.locator(status).getAttribute('class')) !== 'error') fail(`the ${tab} tab's failure is not shown as an error`);
    said.push(await page.locator(status).textContent());
  }
  await page.click('#tabs [data-tab="agent"]');
  step(`tabs the server cannot serve say why: ${said.map((x) => JSON.stringify(x)).join('; ')}`);
}

// replay: stop the recording, play it, and seek by clicking an event.
async function replay(page, rid) {
  await page.click('#tabs [data-tab="recordings"]');
  await page.locator(`#recordings li[data-recording-id="${rid}"] button.stop`).click();
  const li = page.locator(`#recordings li[data-recording-id="${rid}"][data-ready="true"]`);
  await li.waitFor({ timeout: Math.max(timeout, 60000) })
    .catch(async () => fail(`recording ${rid} never became ready: ${await page.locator('#recordings').innerText()} ${await page.locator('#rec-status').textContent()}`));
  const start = await li.getAttribute('data-start');
  await li.locator('button.play').click();
  await page.waitForFunction(() => {
    const v = document.getElementById('replay-video');
    return v.readyState >= 1 && v.duration > 0;
  }, null, { timeout }).catch(async () => fail(`the video did not load: ${await page.locator('#replay-status').textContent()} ${JSON.stringify(await page.evaluate(() => {
    const v = document.getElementById('replay-video');
    return { readyState: v.readyState, duration: v.duration, error: v.error && v.error.message };
  }))}`));
  await page.locator('#replay-events button.event').first().waitFor({ timeout })
    .catch(async () => fail(`no events under the replay: ${await page.locator('#replay-status').textContent()}`));
  const video = await page.evaluate(() => { const v = document.getElementById('replay-video'); return { duration: v.duration, w: v.videoWidth, h: v.videoHeight }; });
  const ms = (t) => Date.parse(t.replace(/(\.\d{3})\d+/, '$1'));
  const events = await page.locator('#replay-events button.event').evaluateAll((b) => b.map((x) => ({ time: x.dataset.time, kind: x.dataset.kind, text: x.title })));
  // The latest event the video reaches, so the seek is not clamped.
  let pick = -1;
  events.forEach((e, i) => { const off = (ms(e.time) - ms(start)) / 1000; if (off > 0 && off < video.duration) pick = i; });
  if (pick < 0) fail(`no event inside the video's ${video.duration}s: ${JSON.stringify(events)}`);
  const want = (ms(events[pick].time) - ms(start)) / 1000;
  await page.locator('#replay-events button.event').nth(pick).click();
  const got = await page.evaluate(() => document.getElementById('replay-video').currentTime);
  if (Math.abs(got - want) > 0.01) fail(`clicking the event at ${events[pick].time} set the video to ${got}s, want ${want}s`);
  if (!(await page.locator('#replay-events li.current button.event').getAttribute('data-time') === events[pick].time)) fail('the clicked event is not marked current');
  await shot(page, 'console-replay.png');
  step(`replayed ${rid} (${video.w}x${video.h}, ${video.duration.toFixed(1)}s) with ${events.length} events; clicking "${events[pick].text.slice(0, 60)}" went to ${got.toFixed(2)}s`);
}

// inspector: read the tree, point at a node on the live view and see its
// box drawn, pick a node in the list and see it outlined.
async function inspector(page, sessionId) {
  await page.click('#tabs [data-tab="inspector"]');
  const deadline = Date.now() + Math.max(timeout, 90000);
  let nodes = [];
  let launched = false;
  for (;;) {
    await page.click('#a11y-load');
    await page.waitForFunction(() => !document.getElementById('a11y-load').disabled, null, { timeout });
    nodes = await page.locator('#a11y-tree li[data-bounds]').evaluateAll((l) => l.filter((x) => x.dataset.bounds).map((x) => {
      const [bx, by, bw, bh] = x.dataset.bounds.split(',').map(Number);
      return { id: x.dataset.nodeId, role: x.dataset.role, x: bx, y: by, w: bw, h: bh };
    }).filter((n) => n.w > 0 && n.h > 0));
    if (nodes.length >= 3) break;
    if (Date.now() > deadline) fail(`the inspector found no nodes on the screen: ${await page.locator('#a11y-status').textContent()}`);
    // A program started before the desktop's accessibility bus was up is
    // not in the tree: once the tree answers, start it again.
    if (!launched && args.autostart && /nodes in/.test(await page.locator('#a11y-status').textContent())) {
      launched = true;
      const code = await page.evaluate(async ({ id, cmd }) => {
        const key = sessionStorage.getItem('deskgrid-api-key');
        const headers = { Accept: 'application/json', 'Content-Type': 'application/json' };
        if (key) headers.Authorization = 'Bearer ' + key;
        const res = await fetch(`/v1/sessions/${encodeURIComponent(id)}:exec`, { method: 'POST', headers, body: JSON.stringify({ argv: ['sh', '-c', `setsid -f ${cmd} >/dev/null 2>&1`], timeout: '20s' }) });
        await res.text();
        return res.status;
      }, { id: sessionId, cmd: args.autostart });
      if (code !== 200) fail(`starting ${args.autostart} again: HTTP ${code}`);
      console.log(`# the tree was empty: started ${args.autostart} again`);
    }
    await page.waitForTimeout(1000);
  }
  const c = await page.evaluate(() => {
    const cv = document.querySelector('#screen canvas');
    const r = cv.getBoundingClientRect();
    return { left: r.left, top: r.top, kx: r.width / cv.width, ky: r.height / cv.height, fw: cv.width, fh: cv.height };
  });
  // The node to point at: a small one well inside the screen, not a window.
  const inside = nodes.filter((n) => n.x >= 0 && n.y >= 0 && n.x + n.w <= c.fw && n.y + n.h <= c.fh && n.w >= 8 && n.h >= 8 && n.w * n.h < c.fw * c.fh / 4);
  if (!inside.length) fail(`no small node on the screen: ${JSON.stringify(nodes.slice(0, 10))}`);
  inside.sort((a, b) => a.w * a.h - b.w * b.h);
  const target = inside[Math.floor(inside.length / 2)];
  const px = target.x + target.w / 2;
  const py = target.y + target.h / 2;
  // What is under that point: the smallest node holding it.
  let want = null;
  for (const n of nodes) if (px >= n.x && py >= n.y && px < n.x + n.w && py < n.y + n.h && (!want || n.w * n.h <= want.w * want.h)) want = n;
  await page.mouse.move(c.left + px * c.kx, c.top + py * c.ky);
  const box = page.locator('#a11y-hover');
  await box.waitFor({ state: 'visible', timeout }).catch(() => fail('pointing at the live view highlighted nothing'));
  const near = (b, n) => Math.abs(b.x - (c.left + n.x * c.kx)) <= 1.5 && Math.abs(b.y - (c.top + n.y * c.ky)) <= 1.5 &&
    Math.abs(b.width - n.w * c.kx) <= 1.5 && Math.abs(b.height - n.h * c.ky) <= 1.5;
  const hb = await box.boundingBox();
  if (!near(hb, want)) fail(`the highlight is ${JSON.stringify(hb)}, want ${want.role} ${JSON.stringify(want)} scaled by ${c.kx.toFixed(3)}`);
  if ((await box.getAttribute('data-node-id')) !== want.id) fail('the highlight names another node');
  const hovered = page.locator('#a11y-tree li.hovered');
  if ((await hovered.count()) !== 1 || (await hovered.getAttribute('data-node-id')) !== want.id) fail('the list does not mark the node under the pointer');
  await shot(page, 'console-inspector.png');
  step(`pointing at ${px.toFixed(0)},${py.toFixed(0)} highlighted the ${want.role} node (${want.w}x${want.h} at ${want.x},${want.y}) of ${nodes.length} on screen`);
  // Pick another node in the list: it is outlined.
  const other = inside.find((n) => n.id !== want.id) || want;
  await page.mouse.move(5, 5);
  const item = page.locator(`#a11y-tree li[data-node-id="${other.id.replace(/"/g, '\\"')}"]`);
  await item.evaluate((li) => { for (let p = li.parentElement; p && p.id !== 'a11y-tree'; p = p.parentElement) if (p.tagName === 'LI') p.dataset.open = 'true'; });
  await item.locator(':scope > button.node').click();
  const sel = page.locator('#a11y-selected');
  await sel.waitFor({ state: 'visible', timeout });
  const sb = await sel.boundingBox();
  if (!near(sb, other)) fail(`the outline is ${JSON.stringify(sb)}, want ${JSON.stringify(other)}`);
  if (!/role/.test(await page.locator('#a11y-details').textContent())) fail('no details of the picked node');
  step(`picking the ${other.role} node in the list outlined it`);
}

async function consoleScenario(page) {
  if (args.features) await watchThumbnails(page);
  await page.goto(base + '/');
  await signIn(page);
  await page.locator('body[data-loaded="true"]').waitFor({ timeout });
  step('the console lists sessions');

  if (args['expect-nodes']) {
    await page.locator('#nodes-panel:not([hidden]) #nodes tbody tr').first().waitFor({ timeout });
    step(`the nodes panel lists ${await page.locator('#nodes tbody tr').count()} node(s)`);
  }

  // The quick way: "New session" with the defaults, then Delete in its row.
  const before = new Set(await page.locator('#sessions tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.sessionId)));
  await page.click('#create');
  await page.waitForFunction(() => document.getElementById('status').dataset.sessionId || document.getElementById('status').className === 'error',
    null, { timeout: Math.max(timeout, 60000) });
  if ((await page.locator('#status').getAttribute('class')) === 'error') fail(await page.locator('#status').textContent());
  const quick = await page.locator('#status').getAttribute('data-session-id');
  if (before.has(quick)) fail(`"New session" reported ${quick}, which was there before`);
  await page.locator(`tr[data-session-id="${quick}"] a.id[href="/sessions/${encodeURIComponent(quick)}"]`).waitFor({ timeout });
  await page.click(`tr[data-session-id="${quick}"] button.delete`);
  await page.locator(`tr[data-session-id="${quick}"]`).waitFor({ state: 'detached', timeout });
  const deleted = await page.locator('#status').textContent();
  if (deleted !== 'Deleted ' + quick) fail(`after Delete the page says ${JSON.stringify(deleted)}`);
  step(`"New session" made ${quick}; Delete removed it`);

  await page.click('#options-toggle');
  await page.fill('#create-form [name=width]', String(width));
  await page.fill('#create-form [name=height]', String(height));
  await page.fill('#create-form [name=ttl]', '30m');
  await page.fill('#create-form [name=idle]', '10m');
  await page.fill('#create-form [name=labels]', 'e2e=console');
  if (args.autostart) await page.fill('#create-form [name=autostart]', args.autostart);
  await page.click('#create-submit');
  await page.waitForFunction(() => {
    const s = document.getElementById('status');
    return s.dataset.sessionId || s.className === 'error';
  }, null, { timeout: Math.max(timeout, 60000) });
  const status = page.locator('#status');
  if ((await status.getAttribute('class')) === 'error') fail(await status.textContent());
  const id = await status.getAttribute('data-session-id');
  const row = page.locator(`tr[data-session-id="${id}"]`);
  await row.waitFor({ timeout });
  const size = await row.locator('.size').textContent();
  const labels = await row.locator('.labels').textContent();
  if (size !== `${width}x${height}`) fail(`the list shows size ${size}, want ${width}x${height}`);
  if (!labels.includes('e2e=console')) fail(`the list shows labels ${JSON.stringify(labels)}`);
  step(`created ${id} (${size}, ${await row.locator('.state-name').textContent()}, node ${await row.locator('.node').textContent()})`);
  if (args.features) await seeThumbnail(page, id);
  if (args.shots) await page.screenshot({ path: join(args.shots, 'console-sessions.png'), fullPage: true });

  await row.locator('a.id').click();
  await page.waitForURL('**/sessions/' + encodeURIComponent(id));
  await seeDesktop(page);
  await page.locator('#session-state[data-state="running"]').waitFor({ timeout })
    .catch(async () => fail(`the session page shows state ${JSON.stringify(await page.locator('#session-state').textContent())}`));
  await viewOnlyIs(page, true);
  step('the desktop is view-only until taken over');

  await page.click('#take-over');
  await page.locator('#control[data-lease="held"]').waitFor({ timeout })
    .catch(async () => fail(`take over: ${await page.locator('#control').textContent()}`));
  await viewOnlyIs(page, false);
  const holderIs = (want) => page.waitForFunction((w) => w.test(document.getElementById('input-holder').textContent), want, { timeout })
    .catch(async () => fail(`the header says ${JSON.stringify(await page.locator('#input-holder').textContent())}, want ${want}`));
  await holderIs(/^input: console-/);
  step(`took over the input lease (${await page.locator('#input-holder').textContent()})`);
  await page.click('#hand-back');
  await page.locator('#control[data-lease="none"]').waitFor({ timeout });
  await viewOnlyIs(page, true);
  await holderIs(/^input: free$/);
  step('handed the input lease back (input: free)');

  let rec = null;
  if (args.features) {
    rec = await startRecording(page);
    await fileBrowser(page);
    // Something happens on the screen while it is recorded.
    await restCall(page, 'POST', `/v1/sessions/${encodeURIComponent(id)}/actions`,
      { actions: [{ click: { at: { x: width >> 1, y: height >> 1 }, button: 'MOUSE_BUTTON_LEFT', clicks: 1 } }, { type: { text: 'recorded for the replay' } }] });
    await page.click('#tabs [data-tab="agent"]');
  }

  const prompt = args.prompt || 'Take a screenshot and tell me what the desktop shows.';
  await page.fill('#run-form [name=prompt]', prompt);
  await page.selectOption('#run-form [name=provider]', args.provider || 'anthropic');
  await page.fill('#run-form [name=model]', args.model || 'claude-sonnet-4-5');
  await page.fill('#run-form [name=apiKey]', args['provider-key'] || 'test-key');
  await page.fill('#run-form [name=baseUrl]', args['provider-url']);
  if (args.approve) await page.check('#run-form [name=approval]');
  await page.click('#run-submit');
  await page.waitForFunction(() => !document.getElementById('run-panel').hidden || document.getElementById('run-status').className === 'error',
    null, { timeout });
  if (await page.locator('#run-panel').isHidden()) fail(`the run did not start: ${await page.locator('#run-status').textContent()}`);
  if (args.approve) {
    await page.locator('#transcript .approval button.approve').click({ timeout: Math.max(timeout, 60000) });
    await page.locator('#transcript .approval').waitFor({ state: 'detached', timeout });
    step('approved the pending action');
  }
  const runID = await page.locator('#run-id').textContent();
  await page.waitForFunction(() => ['succeeded', 'failed', 'cancelled'].includes(document.getElementById('run-state').dataset.state),
    null, { timeout: Math.max(timeout, 120000) });
  const runState = await page.locator('#run-state').textContent();
  if (!runState.startsWith('succeeded')) fail(`run ${runID} ended ${runState}: ${await page.locator('#transcript').innerText()}`);
  const said = (await page.locator('#transcript .assistant').allTextContents()).join('\n');
  const expect = args.expect || 'The desktop is ready.';
  if (!said.includes(expect)) fail(`the transcript does not say ${JSON.stringify(expect)}: ${JSON.stringify(said)}`);
  step(`run ${runID} ${runState}; the transcript says ${JSON.stringify(expect)}`);
  if (args['expect-tool']) {
    const tool = page.locator(`#transcript .tool[data-state="done"]`).filter({ hasText: args['expect-tool'] });
    if ((await tool.count()) === 0) fail(`no finished ${args['expect-tool']} call in the transcript`);
    step(`the transcript shows the ${args['expect-tool']} call and its result`);
  }
  if (args['expect-screenshot']) {
    await page.waitForFunction(() => [...document.querySelectorAll('#transcript img.thumb')].some((i) => i.complete && i.naturalWidth > 0),
      null, { timeout }).catch(() => fail('no screenshot thumbnail loaded in the transcript'));
    step('the transcript shows the screenshot');
  }

  if (args.shots) await page.screenshot({ path: join(args.shots, 'console-session.png') });
  await page.click('#tabs [data-tab="history"]');
  await page.click('#timeline-refresh');
  await page.waitForFunction((r) => [...document.querySelectorAll('#timeline li.entry')].length > 0, runID, { timeout })
    .catch(() => fail('the history timeline stayed empty'));
  step(`the history timeline shows ${await page.locator('#timeline li.entry').count()} entries`);

  if (args['expect-errors']) await tabsSayWhy(page);
  if (args.features) {
    await historyFilters(page);
    await replay(page, rec);
    await inspector(page, id);
    await thumbnailShowsDesktop(page, id);
  }

  if (!args.keep) {
    const code = await page.evaluate(async (sid) => {
      const key = sessionStorage.getItem('deskgrid-api-key');
      const headers = key ? { Authorization: 'Bearer ' + key } : {};
      return (await fetch('/v1/sessions/' + encodeURIComponent(sid), { method: 'DELETE', headers })).status;
    }, id);
    if (code !== 200) fail(`delete ${id}: HTTP ${code}`);
    await page.waitForFunction(() => ['disconnected', 'failed'].includes(document.getElementById('state').dataset.state), null, { timeout })
      .catch(() => fail('the page did not notice the session ended'));
    step(`deleted ${id}; the page says ${JSON.stringify(await page.locator('#state').textContent())}`);
  }
  if (args['api-key']) await signOutAndBack(page);
}

async function thumbnailsScenario(page) {
  let inflight = 0;
  let most = 0;
  let count = 0;
  // Who holds each session's input is asked in the pictures' turns: one
  // request at a time, pictures and holders together.
  let holderAsks = 0;
  await page.route(/\/v1\/sessions\/[^/]+\/inputLease$/, async (route) => {
    if (route.request().method() !== 'GET') return route.continue();
    inflight++;
    most = Math.max(most, inflight);
    holderAsks++;
    try {
      const res = await route.fetch();
      await route.fulfill({ response: res });
    } finally {
      inflight--;
    }
  });
  await page.route(/\/v1\/sessions\/[^/]+\/screenshot\?/, async (route) => {
    inflight++;
    most = Math.max(most, inflight);
    count++;
    try {
      const res = await route.fetch();
      await route.fulfill({ response: res });
    } finally {
      inflight--;
    }
  });
  await page.clock.install();
  await page.goto(base + '/');
  await signIn(page);
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await restCall(page, 'POST', '/v1/sessions', {})).id);
  // Fake time runs in steps, with a moment of real time for the calls.
  const tick = async (ms, n = 1) => {
    for (let i = 0; i < n; i++) {
      await page.clock.runFor(ms);
      await page.waitForTimeout(30);
    }
  };
  await tick(1000, 6);
  for (const id of ids) await page.locator(`tr[data-session-id="${id}"] img.thumb`).waitFor({ timeout });
  const running = await page.locator('#sessions tbody tr img.thumb[data-state="running"]').count();
  if (running < 3) fail(`${running} running sessions listed, want 3 or more`);
  const c0 = count;
  await tick(1000, 40);
  const got = count - c0;
  // Each at most every 10 s: 5 in 40 s at most; and they do go on.
  if (got > running * 5 || got < running * 2) fail(`${got} pictures of ${running} sessions in 40 s`);
  if (most !== 1) fail(`${most} pictures or input holders were fetched at once`);
  step(`${got} pictures of ${running} sessions in 40 s, one at a time`);
  // An input lease acquired through REST shows as its holder on the row.
  const holderCell = page.locator(`tr[data-session-id="${ids[0]}"] .input-holder`);
  if ((await holderCell.textContent()) !== 'input: free') fail(`before any lease the row says ${JSON.stringify(await holderCell.textContent())}`);
  const held = await restCall(page, 'POST', `/v1/sessions/${encodeURIComponent(ids[0])}/inputLease:acquire`, { holder: 'run-abc', ttl: '60s' });
  await tick(1000, 12);
  if ((await holderCell.textContent()) !== 'input: run-abc') fail(`after run-abc took the lease the row says ${JSON.stringify(await holderCell.textContent())}`);
  if (holderAsks > count) fail(`${holderAsks} holder asks for ${count} pictures`);
  const told = await restCall(page, 'GET', `/v1/sessions/${encodeURIComponent(ids[0])}/inputLease`);
  if (told.lease?.holder !== 'run-abc' || told.lease?.leaseId) fail(`GET inputLease answered ${JSON.stringify(told)}`);
  await restCall(page, 'POST', `/v1/sessions/${encodeURIComponent(ids[0])}/inputLease:release`, { leaseId: held.leaseId });
  step('the row shows who holds the input lease (run-abc), asked with the pictures');
  // A hidden tab fetches none (the browser's visibility, as the page sees it).
  const setHidden = (h) => page.evaluate((hidden) => {
    Object.defineProperty(document, 'hidden', { get: () => hidden, configurable: true });
    document.dispatchEvent(new Event('visibilitychange'));
  }, h);
  await setHidden(true);
  await tick(1000, 2);
  const ch = count;
  await tick(1000, 30);
  if (count !== ch) fail(`${count - ch} pictures fetched while the tab was hidden`);
  await setHidden(false);
  await tick(1000, 12);
  if (count <= ch) fail('the pictures did not go on when the tab was shown again');
  step('none while the tab is hidden; they go on when it is shown');
  await tick(10000, 32);
  await page.locator('#thumbs-paused').waitFor({ state: 'visible', timeout }).catch(() => fail('the pictures did not pause after 5 minutes untouched'));
  const c1 = count;
  await tick(10000, 6);
  if (count !== c1) fail(`${count - c1} pictures fetched while paused`);
  step('after 5 minutes untouched the pictures pause, and the page says so');
  await page.mouse.move(300, 300);
  await page.mouse.move(310, 305);
  await tick(1000, 15);
  if (count <= c1) fail('a touch did not resume the pictures');
  if (await page.locator('#thumbs-paused').isVisible()) fail('the page still says the pictures are paused');
  step(`a touch resumed them (${count - c1} since)`);
}

async function viewerScenario(page) {
  if (!args.session) fail('--session is required for the viewer scenario');
  await page.goto(base + '/sessions/' + encodeURIComponent(args.session));
  await signIn(page);
  await seeDesktop(page);
}

async function docsScenario(page) {
  await page.goto(base + '/');
  await page.getByRole('link', { name: 'API docs' }).click();
  await page.waitForURL(base + '/docs');
  await page.locator('body[data-loaded="true"]').waitFor();
  const spec = await (await page.request.get(base + '/openapi.json')).json();
  let want = 0;
  for (const item of Object.values(spec.paths)) want += ['get', 'post', 'put', 'patch', 'delete'].filter((m) => item[m]).length;
  const got = await page.locator('section.op').count();
  if (got !== want) fail(`/docs shows ${got} operations, /openapi.json has ${want}`);
  step(`the console links to /docs, which shows all ${got} operations`);
  const create = page.locator('#op-SessionService_CreateSession');
  await create.locator('text=Create a session').waitFor();
  const examples = await create.locator('figure.example pre').allTextContents();
  if (!examples.some((e) => e.includes('"requestId"'))) fail(`CreateSession shows no request example: ${JSON.stringify(examples)}`);
  if (!examples.some((e) => e.includes('SESSION_STATE_RUNNING'))) fail(`CreateSession shows no response example: ${JSON.stringify(examples)}`);
  step('CreateSession shows its summary, request example and response example');
  await create.locator('a.type', { hasText: 'v1DisplaySpec' }).first().click();
  await page.locator('#def-v1DisplaySpec figure.example').waitFor();
  step('a field links to its type, with its example');
  await page.locator('#filter').fill('files:write');
  await page.locator('#op-SessionService_CreateSession').waitFor({ state: 'hidden' });
  await page.locator('#op-SandboxService_WriteFile').waitFor({ state: 'visible' });
  step('the filter narrows the list to matching operations');
  if (args.shots) await page.screenshot({ path: join(args.shots, 'docs.png') });
}

if (args.shots) mkdirSync(args.shots, { recursive: true });
let fakeProvider = null;
if (scenario === 'console' && args['provider-url'] === 'builtin') {
  fakeProvider = await startFakeAnthropic();
  args['provider-url'] = fakeProvider.url;
  args.provider = 'anthropic';
  console.log('# fake Anthropic API at ' + fakeProvider.url);
}
const browser = await chromium.launch({
  executablePath: args.chromium || process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const problems = [];
let code = 0;
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await context.newPage();
  page.setDefaultTimeout(timeout);
  page.on('pageerror', (e) => problems.push('uncaught: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|SyntaxError|TypeError|ReferenceError/.test(m.text())) problems.push('console: ' + m.text());
  });
  if (scenario === 'console') await consoleScenario(page);
  else if (scenario === 'viewer') await viewerScenario(page);
  else if (scenario === 'thumbnails') await thumbnailsScenario(page);
  else if (scenario === 'docs') await docsScenario(page);
  else fail(`unknown scenario ${scenario}`);
  if (problems.length) fail('the page reported errors:\n  ' + problems.join('\n  '));
} catch (e) {
  code = 1;
  console.log('not ok - ' + e.message);
  for (const p of problems) console.log('# ' + p);
  if (page && args.artifacts) {
    mkdirSync(args.artifacts, { recursive: true });
    const file = join(args.artifacts, `console-${scenario}-failure.png`);
    await page.screenshot({ path: file, fullPage: true }).then(() => console.log('# screenshot: ' + file), () => {});
  }
} finally {
  await browser.close();
  if (fakeProvider) await fakeProvider.close();
}
process.exit(code);

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
//   --scenario console|viewer|docs  what to test (console)
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

const flags = new Set(['--expect-screenshot', '--expect-nodes', '--keep', '--approve']);
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
  await page.click('#timeline-refresh');
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

async function consoleScenario(page) {
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
  await page.locator(`tr[data-session-id="${quick}"] a[href="/sessions/${encodeURIComponent(quick)}"]`).waitFor({ timeout });
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
  if (args.shots) await page.screenshot({ path: join(args.shots, 'console-sessions.png'), fullPage: true });
  step(`created ${id} (${size}, ${await row.locator('.state').textContent()}, node ${await row.locator('.node').textContent()})`);

  await row.locator('a').click();
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
  step('took over the input lease');
  await page.click('#hand-back');
  await page.locator('#control[data-lease="none"]').waitFor({ timeout });
  await viewOnlyIs(page, true);
  step('handed the input lease back');

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

  await page.click('#timeline-refresh');
  await page.waitForFunction((r) => [...document.querySelectorAll('#timeline li.entry')].length > 0, runID, { timeout })
    .catch(() => fail('the history timeline stayed empty'));
  if (args.shots) await page.screenshot({ path: join(args.shots, 'console-session.png') });
  step(`the history timeline shows ${await page.locator('#timeline li.entry').count()} entries`);

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

// Parallel sessions for an evaluation run: create N desktops at once, run a
// task on each, collect the results, delete them all.
//
//   (in a folder set up as quickstart.ts says)
//   npx tsc --module nodenext --target es2022 parallel.ts && node parallel.js 10
import { Deskgrid } from '@deskgrid/sdk';

const n = Number(process.argv[2] ?? 10);
const dg = new Deskgrid();

async function task(i: number) {
  // Each task gets its own desktop, deleted when the task ends however it ends.
  await using s = await dg.sessions.create({ width: 800, height: 600, labels: { eval: 'demo', task: String(i) } });
  await s.files.write('input.txt', `task ${i}\n`);
  const r = await s.exec(['sh', '-c', 'tr a-z A-Z < input.txt']);
  const png = await s.screenshot();
  const out = { task: i, session: s.id, exitCode: r.exitCode, output: r.text.trim(), screenshotBytes: png.length };
  return r.exitCode === 0 ? out : { ...out, stderr: new TextDecoder().decode(r.stderr).trim() };
}

const results = await Promise.all(Array.from({ length: n }, (_, i) => task(i)));
for (const r of results) console.log(JSON.stringify(r));
const passed = results.filter((r) => r.output === `TASK ${r.task}`).length;
console.log(`${passed}/${n} tasks passed`);
process.exitCode = passed === n ? 0 : 1;

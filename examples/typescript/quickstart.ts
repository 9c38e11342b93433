// Quickstart: create a desktop, act on it, run a command in its sandbox,
// save a screenshot, and delete the desktop (`await using`).
//
//   bin/deskgrid up &
//   export DESKGRID_API_KEY=$(cat /var/lib/deskgrid/admin.key)
//   npm init -y && npm pkg set type=module   # an ES module: top-level await
//   npm install @deskgrid/sdk typescript @types/node   # the SDK: or the tarball `npm pack` makes in sdk/typescript
//   npx tsc --module nodenext --target es2022 quickstart.ts && node quickstart.js shot.png
import { writeFile } from 'node:fs/promises';
import { Deskgrid } from '@deskgrid/sdk';

const out = process.argv[2] ?? 'shot.png';
const dg = new Deskgrid(); // DESKGRID_URL (default http://127.0.0.1:8080), DESKGRID_API_KEY

{
  await using s = await dg.sessions.create({ width: 1024, height: 768 });
  console.log(`session ${s.id} (${s.width}x${s.height})`);
  await s.click(512, 384);
  await s.type('hello');
  const r = await s.exec(['sh', '-c', 'echo hello from $(uname -s) > hello.txt && cat hello.txt']);
  process.stdout.write(`exec: exit ${r.exitCode}, ${r.text}`);
  await s.files.write('notes.txt', 'written by the TypeScript SDK\n');
  process.stdout.write(`notes.txt: ${await s.files.readText('notes.txt')}`);
  const png = await s.screenshot();
  await writeFile(out, png);
  console.log(`saved ${out} (${png.length} bytes)`);
} // the session is deleted here

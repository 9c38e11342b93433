// A real `deskgrid up` for the tests: free loopback ports, its own data and
// runtime directories, stopped with SIGINT at the end. The binary is
// $DESKGRID_BIN, else `deskgrid` on PATH.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Deskgrid, type ClientOptions } from '../dist/index.js';

export async function freeAddr(): Promise<string> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      srv.close(() => (a && typeof a === 'object' ? resolve(`127.0.0.1:${a.port}`) : reject(new Error('no address'))));
    });
  });
}

export class DeskgridServer {
  url = '';
  apiKey = '';
  dir = '';
  private proc?: ChildProcess;

  static async start(flags: string[] = []): Promise<DeskgridServer> {
    const s = new DeskgridServer();
    await s.start(flags);
    return s;
  }

  client(o: ClientOptions = {}): Deskgrid {
    return new Deskgrid({ baseUrl: this.url, apiKey: this.apiKey, ...o });
  }

  logs(): string {
    try {
      return readFileSync(join(this.dir, 'deskgrid.log'), 'utf8');
    } catch {
      return '';
    }
  }

  private async start(flags: string[]): Promise<void> {
    const bin = process.env.DESKGRID_BIN || 'deskgrid';
    this.dir = mkdtempSync(join(tmpdir(), 'deskgrid-ts-'));
    const http = await freeAddr();
    const grpc = await freeAddr();
    this.url = `http://${http}`;
    const log = openSync(join(this.dir, 'deskgrid.log'), 'w');
    const data = join(this.dir, 'data');
    this.proc = spawn(bin, ['up', '-http-addr', http, '-grpc-addr', grpc, '-data-dir', data,
      '-runtime-dir', join(this.dir, 'run'), '-default-image', '', ...flags], { stdio: ['ignore', log, log] });
    let exited = false;
    this.proc.on('exit', () => { exited = true; });
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (exited) throw new Error(`deskgrid up exited before it was ready:\n${this.logs()}`);
      try {
        const r = await fetch(`${this.url}/readyz`);
        if (r.ok && existsSync(join(data, 'admin.key'))) {
          this.apiKey = readFileSync(join(data, 'admin.key'), 'utf8').trim();
          return;
        }
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        await this.stop();
        throw new Error(`deskgrid up not ready in 60 s:\n${this.logs()}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (p && p.exitCode === null) {
      const done = new Promise((r) => p.once('exit', r));
      p.kill('SIGINT');
      const t = setTimeout(() => p.kill('SIGKILL'), 30_000);
      await done;
      clearTimeout(t);
    }
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CellvmError, CommandExitError, CommandHandle, NotFound, Sandbox } from '../src/index.js';
import { SOCKET, needsDaemon } from '../test-support/fake.js';

// The fake's processes are scripted by argv[0] (echo, fail, sleep, cat, sh
// with a PTY); a sandbox labelled cellvm-test-echo-port=N gets an echo server
// on its port N.

async function withSandbox(fn, opts = {}) {
  const sbx = await Sandbox.create({ socketPath: SOCKET, ...opts });
  try {
    return await fn(sbx);
  } finally {
    await sbx.kill();
  }
}

async function until(cond, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('the condition did not hold in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('commands: streaming, CommandExitError, background, stdin, list, kill, connect', needsDaemon, () => withSandbox(async (sbx) => {
  const out = [];
  const r = await sbx.commands.run(['echo', 'hi'], { onStdout: (t) => out.push(t) });
  assert.deepEqual([r.exitCode, r.stdout, out], [0, 'hi\n', ['hi\n']]);
  const err = await sbx.commands.run(['fail'], { onStderr: () => {} }).catch((e) => e);
  assert.ok(err instanceof CommandExitError);
  assert.deepEqual([err.exitCode, err.stderr], [1, 'failed\n']);
  assert.match((await sbx.commands.run(['nope'], { user: 'user' }).catch((e) => e)).error, /no such file/);
  // the plain run keeps its contract: a failure is a result
  assert.equal((await sbx.commands.run(['argv'])).exitCode, 3);

  const h = await sbx.commands.run(['cat'], { background: true, stdin: true, tag: 't', timeoutMs: 0 });
  assert.ok(h instanceof CommandHandle);
  assert.deepEqual((await sbx.commands.list()).map((p) => [p.pid, p.cmd, p.tag]), [[h.pid, 'cat', 't']]);
  await sbx.commands.sendStdin(h.pid, 'abc\n');
  await until(() => h.stdout === 'abc\n');
  await h.disconnect();
  const again = await sbx.commands.connect(h.pid);
  await until(() => again.stdout === 'abc\n');
  await sbx.commands.sendStdin(h.pid, new Uint8Array([0xff]), { eof: true });
  assert.equal((await again.wait()).stdout, 'abc\n\ufffd');

  const s = await sbx.commands.run(['sleep'], { background: true });
  assert.equal(await s.kill(), true);
  const killed = await s.wait().catch((e) => e);
  assert.deepEqual([killed.exitCode, killed.result.signal], [-1, 'SIGKILL']);
  assert.equal(await sbx.commands.kill(s.pid), false);
  await assert.rejects(sbx.commands.sendStdin(s.pid, 'x'), NotFound);
  await assert.rejects((await sbx.commands.connect(99999)).wait(), NotFound);
  await assert.rejects(sbx.commands.run(['cat'], { background: true, stdin: 'data' }), TypeError);
  await assert.rejects(sbx.commands.kill(1, { signal: 'SIGSTOP' }), TypeError);

  const data = [];
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => data.push(Buffer.from(d)) });
  await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(t.pid, 'exit\n');
  assert.equal((await t.wait()).exitCode, 0);
  assert.match(Buffer.concat(data).toString(), /resized 100x30/);
}));

test('files: list, getInfo, exists, makeDir, rename, remove, watchDir', needsDaemon, () => withSandbox(async (sbx) => {
  const f = sbx.files;
  assert.equal(await f.makeDir('/home/user/d/e'), true);
  assert.equal(await f.makeDir('/home/user/d/e'), false);
  await f.write('/home/user/d/a.txt', 'hello');
  assert.deepEqual((await f.list('/home/user/d')).map((e) => [e.name, e.type]).sort(), [['a.txt', 'file'], ['e', 'dir']]);
  assert.ok((await f.list('/home/user', { depth: 3 })).some((e) => e.path === '/home/user/d/e'));
  const info = await f.getInfo('/home/user/d/a.txt');
  assert.deepEqual([info.size, info.type, info.permissions], [5, 'file', 'rw-r--r--']);
  assert.equal(await f.exists('/home/user/d/a.txt'), true);
  assert.equal(await f.exists('/home/user/none'), false);
  assert.equal((await f.rename('/home/user/d/a.txt', '/home/user/b.txt')).path, '/home/user/b.txt');
  await f.remove('/home/user/d');
  assert.equal(await f.exists('/home/user/d'), false);
  await assert.rejects(f.getInfo('/home/user/d'), NotFound);

  const events = [];
  const w = await f.watchDir('/home/user', (e) => events.push(e));
  await f.write('/home/user/x', '1');
  await until(() => events.length > 0);
  await w.stop();
  assert.deepEqual(events[0], { name: 'x', type: 'create' });
  await assert.rejects(f.watchDir('/home/user/none', () => {}), NotFound);
}));

test('connectPort: a socket to a guest port, port_closed when nothing listens', needsDaemon, () => withSandbox(async (sbx) => {
  let s;
  await until(async () => {
    try {
      s = await sbx.connectPort(8000);
      return true;
    } catch (e) {
      if (e.status !== 502) throw e;
      return false;
    }
  });
  s.write('ping');
  const got = await new Promise((resolve) => s.once('data', resolve));
  assert.equal(got.toString(), 'ping');
  s.destroy();
  const e = await sbx.connectPort(8001).catch((x) => x);
  assert.ok(e instanceof CellvmError);
  assert.deepEqual([e.status, e.code], [502, 'port_closed']);
  await assert.rejects(sbx.connectPort(0), RangeError);
}, { metadata: { 'cellvm-test-echo-port': '8000' } }));

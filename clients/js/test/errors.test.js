import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ConnectError, Connection, Forbidden, Full, Invalid, NotFound, NotSupported, Sandbox, Timeout } from '../src/index.js';
import { fromResponse, Busy, Lost, TooLarge, Internal } from '../src/errors.js';
import { FORBIDDEN_SOCKET, SOCKET, needsDaemon } from '../test-support/fake.js';

test('every error code arrives as its own class', needsDaemon, async () => {
  await assert.rejects(Sandbox.create({ socketPath: SOCKET, vcpus: 999 }),
    (e) => e instanceof Invalid && e.code === 'invalid' && e.status === 400 && /vcpus 999/.test(e.message));
  await assert.rejects(Sandbox.connect('sb-nope', { socketPath: SOCKET }), (e) => e instanceof NotFound && e.status === 404);
  await assert.rejects(Sandbox.create({ socketPath: SOCKET, memoryMiB: 60000 }), (e) => e instanceof Full && e.status === 503 && e.retryAfter === 5);
  await assert.rejects(Sandbox.create({ socketPath: SOCKET, network: ['not-supported.test'] }), NotSupported);
  if (FORBIDDEN_SOCKET) {
    await assert.rejects(Sandbox.create({ socketPath: FORBIDDEN_SOCKET }),
      (e) => e instanceof Forbidden && e.status === 403 && /may not use this socket/.test(e.message));
  }
  for (const [code, cls] of [['busy', Busy], ['lost', Lost], ['too_large', TooLarge], ['internal', Internal]]) {
    const e = fromResponse(499, Buffer.from(`{"error":{"code":"${code}","message":"m"}}`));
    assert.ok(e instanceof cls, code);
    assert.equal(e.message, 'm');
  }
  assert.ok(fromResponse(502, Buffer.from('<html>bad gateway</html>')) instanceof Internal);
});

test('bad input is refused before anything is sent', needsDaemon, async () => {
  await assert.rejects(Sandbox.create({ socketPath: SOCKET, env: { A: 1 } }), TypeError);
  await assert.rejects(Sandbox.create({ socketPath: SOCKET, network: 'pypi.org' }), TypeError);
  await assert.rejects(Sandbox.create({ socketPath: SOCKET, memoryMiB: 1.5 }), TypeError);
  await assert.rejects(Sandbox.connect('', { socketPath: SOCKET }), TypeError);
});

test('no daemon, a stale socket, a silent one', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cellvm-js-'));
  await assert.rejects(Sandbox.create({ socketPath: join(dir, 'none.sock') }),
    (e) => e instanceof ConnectError && /does not exist/.test(e.message) && /CELLVM_SOCKET/.test(e.message));
  const silent = net.createServer(() => {});
  await new Promise((r) => silent.listen(join(dir, 'silent.sock'), r));
  try {
    await assert.rejects(Sandbox.list({ connection: new Connection({ socketPath: join(dir, 'silent.sock'), timeoutMs: 300 }) }),
      (e) => e instanceof Timeout && /GET \/v1\/sandboxes/.test(e.message));
  } finally {
    silent.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the socket comes from the argument, then CELLVM_SOCKET, then the default', () => {
  const old = process.env.CELLVM_SOCKET;
  try {
    delete process.env.CELLVM_SOCKET;
    assert.equal(new Connection().socketPath, '/run/cellvm/cellvm.sock');
    process.env.CELLVM_SOCKET = '/tmp/x.sock';
    assert.equal(new Connection().socketPath, '/tmp/x.sock');
    assert.equal(new Connection({ socketPath: '/tmp/y.sock' }).socketPath, '/tmp/y.sock');
  } finally {
    if (old === undefined) delete process.env.CELLVM_SOCKET;
    else process.env.CELLVM_SOCKET = old;
  }
});

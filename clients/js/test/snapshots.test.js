import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Busy, ConnectError, Full, Invalid, Lost, NotFound, Sandbox } from '../src/index.js';
import { SOCKET, fromClient, needsDaemon, nowhere } from '../test-support/fake.js';

const opts = { socketPath: SOCKET };

/** Runs fn with a sandbox and a list of snapshots to delete, then deletes both. */
async function withSandbox(createOpts, fn) {
  const sbx = await Sandbox.create({ ...opts, ...createOpts });
  const snaps = [];
  try {
    return await fn(sbx, snaps);
  } finally {
    for (const id of snaps) await Sandbox.deleteSnapshot(id, opts);
    await sbx.kill();
  }
}

test('a fork has what the sandbox had at the snapshot', needsDaemon, () => withSandbox({ memoryMiB: 1024, env: { GREETING: 'hello' } }, async (sbx, snaps) => {
  assert.equal(sbx.created.startedFrom, 'template');
  await sbx.runCode('x = 41');
  await sbx.files.write('/workspace/kept.txt', 'from the parent');
  const snap = await sbx.snapshot();
  snaps.push(snap.snapshotId);
  assert.match(snap.snapshotId, /^snap-[0-9a-f]{12}$/);
  assert.equal(snap.sandboxId, sbx.sandboxId);
  assert.deepEqual([snap.vcpus, snap.memoryMiB], [1, 1024]);
  assert.ok(snap.sizeBytes > 0);
  assert.match(snap.createdAt, /^20/);
  assert.equal((await sbx.info()).state, 'running');
  await sbx.runCode('after = 1');

  const fork = await Sandbox.create({ ...opts, snapshot: snap.snapshotId });
  try {
    assert.notEqual(fork.sandboxId, sbx.sandboxId);
    assert.equal(fork.created.startedFrom, 'snapshot');
    assert.equal((await fork.info()).startedFrom, 'snapshot');
    assert.equal((await fork.runCode('x')).text, '41');
    assert.equal((await fork.runCode('after')).error.name, 'NameError');
    assert.equal(Buffer.from(await fork.files.read('kept.txt')).toString(), 'from the parent');
    assert.deepEqual([fork.created.config.vcpus, fork.created.config.memory_mib], [1, 1024]);
    assert.deepEqual((await fork.runCode('env')).logs.stdout, ['{"GREETING":"hello"}\n']);
    // A change in the fork stays in the fork.
    await fork.runCode('x = 7');
    assert.equal((await fork.runCode('x')).text, '7');
    assert.equal((await sbx.runCode('x')).text, '41');
  } finally {
    await fork.kill();
  }
}));

test('pause, then a cell resumes and finds the variable', needsDaemon, () => withSandbox({}, async (sbx) => {
  await sbx.runCode('x = 41');
  assert.equal(await sbx.pause(), undefined);
  assert.equal((await sbx.info()).state, 'paused');
  await assert.rejects(sbx.pause(), (e) => e instanceof Busy && e.status === 409 && /already paused/.test(e.message));
  assert.equal((await sbx.runCode('x')).text, '41');
  assert.equal((await sbx.info()).state, 'running');
}));

test('pause and resume', needsDaemon, () => withSandbox({}, async (sbx) => {
  await sbx.runCode('x = 41');
  await sbx.pause();
  assert.equal(await sbx.resume(), undefined);
  assert.equal((await sbx.info()).state, 'running');
  await assert.rejects(sbx.resume(), (e) => e instanceof Busy && /not paused/.test(e.message));
  assert.equal((await sbx.runCode('x')).text, '41');
}));

test('list, get and delete snapshots', needsDaemon, () => withSandbox({}, async (sbx) => {
  const snap = await sbx.snapshot();
  assert.ok((await Sandbox.listSnapshots(opts)).some((s) => s.snapshotId === snap.snapshotId));
  assert.deepEqual(await Sandbox.getSnapshot(snap.snapshotId, opts), snap);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), true);
  await assert.rejects(Sandbox.getSnapshot(snap.snapshotId, opts),
    (e) => e instanceof NotFound && e.status === 404 && e.code === 'not_found' && e.message.includes(`no snapshot ${snap.snapshotId}`));
  assert.ok(!(await Sandbox.listSnapshots(opts)).some((s) => s.snapshotId === snap.snapshotId));
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), false);
  await assert.rejects(Sandbox.create({ ...opts, snapshot: snap.snapshotId }), NotFound);
}));

test('start reaches the daemon', needsDaemon, async () => {
  await withSandbox({ start: 'cold' }, async (sbx) => {
    assert.equal(sbx.created.startedFrom, 'boot');
    assert.equal((await sbx.info()).startedFrom, 'boot');
  });
  await withSandbox({ start: 'template' }, async (sbx) => assert.equal(sbx.created.startedFrom, 'template'));
});

test('busy while a cell runs', needsDaemon, () => withSandbox({}, async (sbx) => {
  const ex = await sbx.runCode('gate', {
    timeoutMs: 30_000,
    onStdout: async (t) => {
      if (t !== 'waiting\n') return;
      for (const call of [() => sbx.snapshot(), () => sbx.pause()]) {
        await assert.rejects(call(), (e) => e instanceof Busy && e.status === 409 && /a cell is running/.test(e.message));
      }
      await sbx.interrupt();
    },
  });
  assert.equal(ex.status, 'ok');
  assert.ok(!(await Sandbox.listSnapshots(opts)).some((s) => s.sandboxId === sbx.sandboxId));
}));

test('a full disk', needsDaemon, () => withSandbox({ memoryMiB: 6000 }, async (sbx) => {
  for (const call of [() => sbx.snapshot(), () => sbx.pause()]) {
    await assert.rejects(call(), (e) => e instanceof Full && e.status === 503 && e.retryAfter === 5 && /snapshot disk cap/.test(e.message));
  }
  assert.equal((await sbx.info()).state, 'running');
}));

test('the daemon refuses a bad fork', needsDaemon, () => withSandbox({}, async (sbx, snaps) => {
  const snap = await sbx.snapshot();
  snaps.push(snap.snapshotId);
  await assert.rejects(Sandbox.create({ ...opts, snapshot: snap.snapshotId, start: 'cold' }),
    (e) => e instanceof Invalid && e.status === 400 && /a fork starts from its snapshot/.test(e.message));
  await assert.rejects(Sandbox.create({ ...opts, snapshot: snap.snapshotId, memoryMiB: 2048 }),
    (e) => e instanceof Invalid && /the snapshot's 1 vCPUs and 512 MiB/.test(e.message));
}));

test('a lost sandbox', needsDaemon, () => withSandbox({}, async (sbx) => {
  await sbx.runCode('die');
  await assert.rejects(sbx.snapshot(), (e) => e instanceof Lost && /VM exited/.test(e.message));
  await assert.rejects(sbx.pause(), Lost);
  await assert.rejects(sbx.resume(), (e) => e instanceof Busy && /is lost, not paused/.test(e.message));
}));

// Bad snapshot ids and start values are refused before any request: the
// socket does not exist, so a request would be a ConnectError.
test('bad snapshot ids are refused before any request', async () => {
  for (const bad of ['snap-123', 'snap-0123456789AB', 'snap-0123456789abc', 'sb-0123456789ab', '../sandboxes', '', `snap-${'0'.repeat(100)}`]) {
    await assert.rejects(Sandbox.create({ ...nowhere, snapshot: bad }), fromClient(RangeError, /is not a snapshot id \(snap- and 12 hex digits/));
    await assert.rejects(Sandbox.getSnapshot(bad, nowhere), fromClient(RangeError));
    await assert.rejects(Sandbox.deleteSnapshot(bad, nowhere), fromClient(RangeError));
  }
  await assert.rejects(Sandbox.getSnapshot('x'.repeat(10000), nowhere), (e) => e instanceof RangeError && e.message.length < 200);
  await assert.rejects(Sandbox.deleteSnapshot(null, nowhere), fromClient(TypeError));
  await assert.rejects(Sandbox.create({ ...nowhere, snapshot: 123 }), fromClient(TypeError));
});

test('a bad start is refused before any request', async () => {
  await assert.rejects(Sandbox.create({ ...nowhere, start: 'warm' }), fromClient(RangeError, /start is 'template' or 'cold'/));
  await assert.rejects(Sandbox.create({ ...nowhere, start: '' }), fromClient(RangeError));
  await assert.rejects(Sandbox.create({ ...nowhere, start: true }), fromClient(TypeError));
});

test('good snapshot ids and start values are sent', async () => {
  await assert.rejects(Sandbox.create({ ...nowhere, snapshot: 'snap-0123456789ab' }), ConnectError);
  await assert.rejects(Sandbox.create({ ...nowhere, start: 'cold' }), ConnectError);
  await assert.rejects(Sandbox.getSnapshot('snap-0123456789ab', nowhere), ConnectError);
  await assert.rejects(Sandbox.deleteSnapshot('snap-0123456789ab', nowhere), ConnectError);
});

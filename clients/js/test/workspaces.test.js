import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Busy, ConnectError, Invalid, NotFound, NotSupported, Sandbox } from '../src/index.js';
import { BAD_NAMES, GOOD_NAMES, SOCKET, fromClient, needsDaemon, nowhere, withSandboxes } from '../test-support/fake.js';

const opts = { socketPath: SOCKET };
const text = (bytes) => Buffer.from(bytes).toString();

/** The workspace of that name in the daemon's list, or undefined. */
async function listed(name) {
  return (await Sandbox.listWorkspaces(opts)).find((w) => w.name === name);
}

/**
 * Runs fn with a function that creates sandboxes, then kills them and
 * deletes the workspace named (the other test files share the daemon, so
 * each test has names of its own).
 */
async function withWorkspace(name, fn) {
  try {
    return await withSandboxes(fn);
  } finally {
    await Sandbox.deleteWorkspace(name, opts);
  }
}

test('files in a workspace outlive the sandbox', needsDaemon, () => withWorkspace('js-notes', async (create) => {
  const first = await create({ workspace: 'js-notes' });
  assert.equal(first.created.config.workspace, 'js-notes');
  assert.equal((await first.info()).config.workspace, 'js-notes');
  assert.equal(first.created.startedFrom, 'boot'); // a template's machine has no workspace disk
  assert.equal(await first.files.write('notes.txt', 'kept across sandboxes'), 21);
  await first.files.write('/tmp/scratch.txt', "the sandbox's own");
  assert.equal(await first.kill(), true);

  const second = await create({ workspace: 'js-notes' });
  assert.notEqual(second.sandboxId, first.sandboxId);
  assert.equal(text(await second.files.read('/workspace/notes.txt')), 'kept across sandboxes');
  await assert.rejects(second.files.read('/tmp/scratch.txt'), NotFound);
  // A sandbox without the workspace does not see its files.
  const plain = await create();
  await assert.rejects(plain.files.read('notes.txt'), NotFound);
}));

test('one sandbox at a time holds a workspace', needsDaemon, () => withWorkspace('js-held', async (create) => {
  const holder = await create({ workspace: 'js-held' });
  await assert.rejects(create({ workspace: 'js-held' }), (e) => e instanceof Busy && e.status === 409 && e.code === 'busy'
    && e.message.includes(`workspace js-held is mounted by sandbox ${holder.sandboxId}`));

  await holder.files.write('data.bin', '12345');
  const ws = await listed('js-held');
  assert.equal(ws.sandboxId, holder.sandboxId);
  assert.deepEqual([ws.sizeBytes, ws.diskBytes], [2 ** 31, 5]);
  assert.match(ws.createdAt, /^20/);
  assert.equal(ws.raw.sandbox, holder.sandboxId);

  await assert.rejects(Sandbox.deleteWorkspace('js-held', opts),
    (e) => e instanceof Busy && e.status === 409 && e.message.includes(`held by sandbox ${holder.sandboxId}`));
  await assert.rejects(holder.snapshot(), (e) => e instanceof NotSupported && /workspace/.test(e.message));

  assert.equal(await holder.kill(), true);
  assert.equal((await listed('js-held')).sandboxId, null);
  assert.equal(await Sandbox.deleteWorkspace('js-held', opts), true);
  assert.equal(await listed('js-held'), undefined);
  assert.equal(await Sandbox.deleteWorkspace('js-held', opts), false);
  // The next sandbox with the name gets a new, empty workspace.
  const fresh = await create({ workspace: 'js-held' });
  await assert.rejects(fresh.files.read('data.bin'), NotFound);
}));

test('the daemon refuses a workspace for a fork', needsDaemon, () => withWorkspace('js-fork', async (create) => {
  const snap = await (await create()).snapshot();
  try {
    await assert.rejects(create({ snapshot: snap.snapshotId, workspace: 'js-fork' }),
      (e) => e instanceof Invalid && e.status === 400 && /workspace with snapshot/.test(e.message));
    assert.equal(await listed('js-fork'), undefined);
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId, opts);
  }
}));

// Bad workspace names are refused before any request: the socket does not
// exist, so a request would be a ConnectError.
test('bad workspace names are refused before any request', async () => {
  for (const bad of BAD_NAMES) {
    await assert.rejects(Sandbox.create({ ...nowhere, workspace: bad }),
      fromClient(RangeError, /is not a workspace name \(1 to 64 of a-z, 0-9, '-', '_' and '.'/));
    await assert.rejects(Sandbox.deleteWorkspace(bad, nowhere), fromClient(RangeError));
  }
  await assert.rejects(Sandbox.deleteWorkspace('x/'.repeat(10000), nowhere), (e) => e instanceof RangeError && e.message.length < 200);
  await assert.rejects(Sandbox.deleteWorkspace(null, nowhere), fromClient(TypeError));
  await assert.rejects(Sandbox.create({ ...nowhere, workspace: 123 }), fromClient(TypeError));
});

test('good workspace names are sent', async () => {
  for (const good of GOOD_NAMES) {
    await assert.rejects(Sandbox.create({ ...nowhere, workspace: good }), ConnectError);
    await assert.rejects(Sandbox.deleteWorkspace(good, nowhere), ConnectError);
  }
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Invalid, NotFound, Sandbox } from '../src/index.js';
import { SOCKET, fromClient, needsDaemon, nowhere } from '../test-support/fake.js';

const opts = { socketPath: SOCKET };

/** Runs fn with sandboxes made by make, then deletes them. */
async function withSandboxes(fn) {
  const made = [];
  const make = async (o) => { const s = await Sandbox.create({ ...opts, ...o }); made.push(s); return s; };
  try {
    return await fn(make);
  } finally {
    for (const s of made) await s.kill();
  }
}

test('every-cell checkpoints: undo and restore bring a variable back', needsDaemon, () => withSandboxes(async (make) => {
  const sbx = await make({ checkpoints: { everyCell: true, keep: 5 } });
  assert.deepEqual(sbx.created.config.checkpoints, { every_cell: true, keep: 5 });
  const ns = [];
  for (const code of ['x = 1', 'x = 2', 'x = 3']) ns.push((await sbx.runCode(code)).checkpoint);
  assert.deepEqual(ns, [1, 2, 3]);
  const cps = await sbx.checkpoints();
  assert.deepEqual(cps.map((c) => c.n), [1, 2, 3]);
  assert.deepEqual([cps[1].kind, cps[1].executionCount, cps[1].depth], ['cell', 2, 2]);
  assert.equal(cps[1].codeSha256.length, 64);
  assert.equal((await sbx.undo()).n, 2);
  assert.equal((await sbx.runCode('x')).text, '2');
  const back = await sbx.restoreCheckpoint(1);
  assert.deepEqual([back.n, back.executionCount], [1, 1]);
  const ex = await sbx.runCode('x');
  assert.deepEqual([ex.text, ex.executionCount, ex.checkpoint], ['1', 2, 2]);
  await assert.rejects(sbx.restoreCheckpoint(9), NotFound);
}));

test('a manual checkpoint brings a file back; a command records one', needsDaemon, () => withSandboxes(async (make) => {
  const sbx = await make({ checkpoints: true });
  const r = await sbx.commands.run(['echo', 'hi']);
  assert.deepEqual([r.stdout, r.checkpoint, r.checkpointError], ['hi\n', 1, null]);
  await sbx.files.write('/workspace/a.txt', 'before');
  const cp = await sbx.checkpoint();
  assert.deepEqual([cp.n, cp.kind], [2, 'manual']);
  await sbx.files.write('/workspace/a.txt', 'after');
  await sbx.restoreCheckpoint(cp.n);
  assert.equal(Buffer.from(await sbx.files.read('/workspace/a.txt')).toString(), 'before');
}));

test('without checkpoints: no checkpoint on results, undo is invalid', needsDaemon, () => withSandboxes(async (make) => {
  const sbx = await make({});
  const ex = await sbx.runCode('x = 1');
  assert.deepEqual([ex.checkpoint, ex.checkpointError], [null, null]);
  await assert.rejects(sbx.undo(), Invalid);
}));

test('branches of a checkpoint keep apart and leave the parent alone', needsDaemon, () => withSandboxes(async (make) => {
  const parent = await make({ memoryMiB: 1024, checkpoints: true });
  await parent.runCode('x = 1');
  await parent.runCode('x = 5');
  const kids = [await make({ checkpoint: { sandbox: parent.sandboxId, n: 1 } }),
    await make({ memoryMiB: 1024, checkpoint: { sandbox: parent, n: 1 } })];
  for (const [kid, v] of [[kids[0], '10'], [kids[1], '20']]) {
    assert.equal(kid.created.startedFrom, 'snapshot');
    assert.equal((await kid.runCode('x')).text, '1');
    await kid.runCode(`x = ${v}`);
  }
  assert.deepEqual([(await kids[0].runCode('x')).text, (await kids[1].runCode('x')).text, (await parent.runCode('x')).text], ['10', '20', '5']);
  await assert.rejects(Sandbox.create({ ...opts, checkpoint: { sandbox: parent.sandboxId, n: 7 } }), NotFound);
}));

test('bad checkpoint options are refused before sending', async () => {
  for (const bad of [{ keep: 0 }, { keep: 33 }, { keep: '3' }, { everyCell: 1 }, { each: true }, 'yes', [1]]) {
    await assert.rejects(Sandbox.create({ ...nowhere, checkpoints: bad }), (e) => fromClient(TypeError)(e) || fromClient(RangeError)(e), JSON.stringify(bad));
  }
  for (const bad of [{ sandbox: 'sb-1', n: 0 }, { sandbox: '', n: 1 }, { sandbox: 'sb-1', n: true }, 'sb-1', ['sb-1', 1]]) {
    await assert.rejects(Sandbox.create({ ...nowhere, checkpoint: bad }), (e) => fromClient(TypeError)(e) || fromClient(RangeError)(e), JSON.stringify(bad));
  }
});

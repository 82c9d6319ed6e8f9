import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Interpreter, Sandbox, runtimeStatus } from '../src/compat/withruntime.js';
import { Execution } from '../src/models.js';
import { SOCKET, needsDaemon } from '../test-support/fake.js';

test('a Runtime-style interpreter', needsDaemon, async () => {
  const sbx = await Sandbox.create({ memoryMiB: 2048, network: { internet: false }, socketPath: SOCKET });
  try {
    const out = await sbx.interpreter.run('chart', { timeoutMs: 30_000 });
    assert.equal(out.status, 'ok');
    const [fig, main] = out.results;
    assert.equal('image/png' in fig.data, false);
    assert.equal(fig.data['text/plain'], '<Figure size 640x480 with 1 Axes>');
    const png = sbx.interpreter.result(fig.refs['image/png']);
    assert.ok(png instanceof Uint8Array);
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
    assert.deepEqual(main.refs, {});
    assert.throws(() => sbx.interpreter.result('ref_nope'), RangeError);

    const err = await sbx.interpreter.run('raise');
    assert.equal(err.status, 'error');
    assert.equal(err.error.name, 'KeyError');
    assert.equal(typeof err.error.traceback, 'string');
    assert.equal(err.error.traceback.split('\n')[0], 'Traceback (most recent call last):');

    const t = await sbx.interpreter.run('timeout', { timeoutMs: 1000 });
    assert.deepEqual([t.status, t.stateKept], ['timeout', true]);
    await sbx.interpreter.run('v = 5');
    assert.equal((await sbx.interpreter.run('v')).results[0].data['text/plain'], '5');

    assert.equal(await sbx.files.write('/workspace/a.txt', 'hi'), 2);
    assert.deepEqual(await sbx.exec(['echo', 'ok'], { timeoutMs: 5000 }), { stdout: 'ok\n', stderr: '', exitCode: 0, timedOut: false });
  } finally {
    await sbx.close();
  }
  await assert.rejects(Sandbox.connect(sbx.id, { socketPath: SOCKET }));
});

test('network options', needsDaemon, async () => {
  const sbx = await Sandbox.create({ network: { allow: ['pypi.org'] }, socketPath: SOCKET });
  try {
    assert.deepEqual((await sbx._native.info()).config.network, { allow: ['pypi.org'] });
  } finally {
    await sbx.close();
  }
  await assert.rejects(Sandbox.create({ network: { internet: true }, socketPath: SOCKET }), RangeError);
});

// The outcome's status comes from state_kept and killed_by, never from
// cellvm's status alone: a killed interpreter is 'lost'.
test('a killed interpreter is lost, an interrupted one a timeout', () => {
  const base = { stdout: '', stderr: '', results: [], error: { name: 'TimeoutError', value: 'killed', traceback: [] } };
  const outcome = (raw) => new Interpreter(null)._outcome(new Execution({ ...base, ...raw }));
  for (const [name, raw] of [
    ['killed timeout', { status: 'timeout', state_kept: false, killed_by: 'timeout' }],
    ['oom', { status: 'error', state_kept: false, killed_by: 'oom' }],
    ['crash', { status: 'lost', state_kept: false, killed_by: 'signal' }],
    ['exited', { status: 'lost', state_kept: false, killed_by: null }],
    ['no state_kept', { status: 'timeout' }],
  ]) {
    const out = outcome(raw);
    assert.equal(out.status, 'lost', name);
    assert.equal(out.stateKept, false, name);
  }
  assert.equal(outcome({ status: 'timeout', state_kept: false, killed_by: 'timeout' }).killedBy, 'timeout');
  const kept = outcome({ status: 'timeout', state_kept: true, killed_by: 'timeout' });
  assert.deepEqual([kept.status, kept.stateKept], ['timeout', true]);
  assert.equal(outcome({ status: 'ok', state_kept: true, killed_by: null, error: null }).status, 'ok');
  assert.equal(outcome({ status: 'ok', state_kept: false, killed_by: null, error: null }).status, 'ok');
  assert.equal(runtimeStatus({ status: 'timeout', stateKept: false, killedBy: 'timeout' }), 'lost');
});

// E2B's names with E2B's meanings (timeoutMs as the lifetime, template, metadata, envs), list filters, setTimeout
// and the daemon's version.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConnectError, Execution, Invalid, Sandbox } from '../src/index.js';
import { SOCKET, fromClient, needsDaemon, nowhere } from '../test-support/fake.js';

test('create takes E2B\'s names and meanings', needsDaemon, async () => {
  const sbx = await Sandbox.create('base', { socketPath: SOCKET, timeoutMs: 120_000, metadata: { run: 'e2b-names' }, envs: { GREETING: 'hi' } });
  try {
    const info = await sbx.info();
    assert.equal(info.config.ttl_s, 120); // the lifetime, not the boot wait
    assert.deepEqual(info.metadata, { run: 'e2b-names' });
    assert.equal(info.config.image ?? '', ''); // 'base' is the daemon's own image
    assert.ok(info.raw.env_names.includes('GREETING'));
  } finally {
    await sbx.kill();
  }
  const team = await Sandbox.create({ socketPath: SOCKET, template: 'team' });
  try {
    assert.equal((await team.info()).config.image, 'team');
  } finally {
    await team.kill();
  }
});

test('list filters by metadata and state', needsDaemon, async () => {
  const a = await Sandbox.create({ socketPath: SOCKET, metadata: { suite: 'js-labels', who: 'a' } });
  const b = await Sandbox.create({ socketPath: SOCKET, metadata: { suite: 'js-labels', who: 'b' } });
  try {
    await b.pause();
    const ids = async (opts) => (await Sandbox.list({ socketPath: SOCKET, ...opts })).map((s) => s.sandboxId);
    assert.deepEqual(await ids({ metadata: { suite: 'js-labels' } }), [a.sandboxId, b.sandboxId]);
    assert.deepEqual(await ids({ metadata: { suite: 'js-labels', who: 'b' } }), [b.sandboxId]);
    assert.deepEqual(await ids({ metadata: { suite: 'js-labels' }, state: 'running' }), [a.sandboxId]);
    assert.deepEqual(await ids({ query: { metadata: { suite: 'js-labels' }, state: ['paused', 'lost'] } }), [b.sandboxId]);
    assert.deepEqual(await ids({ metadata: { suite: 'none' } }), []);
  } finally {
    await a.kill();
    await b.kill();
  }
});

test('setTimeout and the server\'s version', needsDaemon, async () => {
  const sbx = await Sandbox.create({ socketPath: SOCKET, timeoutMs: 60_000 });
  try {
    assert.equal((await sbx.setTimeout(3_600_000)).config.ttl_s, 3600);
    assert.equal((await sbx.info()).config.ttl_s, 3600);
    await assert.rejects(sbx.setTimeout(1e12), Invalid);
  } finally {
    await sbx.kill();
  }
  const v = await Sandbox.serverVersion({ socketPath: SOCKET });
  assert.deepEqual(Object.keys(v).sort(), ['commit', 'go', 'version']);
});

test('bad E2B-named arguments fail before anything is sent', async () => {
  for (const opts of [
    { timeoutMs: 0 }, { timeoutMs: -1 }, { timeoutMs: '1h' }, { timeoutMs: 1000, ttlS: 1 },
    { env: { A: '1' }, envs: { A: '1' } }, { metadata: { 'bad key': 'x' } }, { metadata: { k: 'line\nbreak' } },
    { metadata: { k: 1 } }, { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [String(i), 'x'])) },
    { template: 'team', image: 'other' }, { template: 5 },
  ]) {
    await assert.rejects(Sandbox.create({ ...nowhere, ...opts }), fromClient(TypeError), JSON.stringify(opts));
  }
  await assert.rejects(Sandbox.list({ ...nowhere, state: 'asleep' }), fromClient(TypeError));
  // Good ones reach the (missing) daemon.
  await assert.rejects(Sandbox.create('base', { ...nowhere, timeoutMs: 1500, metadata: { a: 'b' } }), ConnectError);
});

test('logs are lists of lines and PNG is base64 text', () => {
  const ex = new Execution({ stdout: 'a\nb', stderr: '', results: [{ data: { 'image/png': 'iVBORw0KGgo=' } }] });
  assert.deepEqual(ex.logs, { stdout: ['a\n', 'b'], stderr: [] });
  assert.equal(ex.results[0].png, 'iVBORw0KGgo=');
  assert.deepEqual([...ex.results[0].pngBytes], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Busy, ConnectError, Invalid, Sandbox } from '../src/index.js';
import { BAD_NAMES, GOOD_NAMES, SOCKET, fromClient, needsDaemon, nowhere, withSandboxes } from '../test-support/fake.js';

// The fake daemon's images (sandbox/sandboxtest/images.go): 'default', 'team'
// (built with --apt jq) and 'scratch', which nothing uses and which one
// test here deletes. Only this file uses images (the other test files
// share the daemon).

const opts = { socketPath: SOCKET };

/** The image of that name in the daemon's list, or undefined. */
async function listed(name) {
  return (await Sandbox.listImages(opts)).find((i) => i.name === name);
}

test('listImages describes each image', needsDaemon, async () => {
  const images = await Sandbox.listImages(opts);
  const names = images.map((i) => i.name);
  assert.equal(names[0], 'default');
  assert.ok(names.includes('team'), names);
  assert.deepEqual(names.slice(1), [...names.slice(1)].sort());

  const team = await listed('team');
  assert.deepEqual([team.sizeBytes, team.python, team.sandboxes], [1006 * 2 ** 20, '3.11.2', 0]);
  assert.ok(team.modules.includes('pandas 1.5.3'), team.modules);
  assert.deepEqual([team.key, team.apt, team.buildSeconds], ['sha256:5f0c2e8a91d3', ['jq'], 31.5]);
  assert.equal(team.builtAt, '2023-11-14T23:13:20Z');
  assert.deepEqual(team.raw.apt, ['jq']);

  const def = images[0];
  assert.deepEqual([def.python, def.key, def.apt, def.buildSeconds], ['3.11.2', null, [], 0]);
  assert.equal('key' in def.raw, false); // omitted for the default image, as the daemon does
});

test('a create boots the image it names', needsDaemon, () => withSandboxes(async (create) => {
  const sbx = await create({ image: 'team' });
  assert.equal(sbx.created.config.image, 'team');
  assert.equal((await sbx.info()).config.image, 'team');
  assert.equal((await listed('team')).sandboxes, 1);
  const plain = await create({ image: 'default' });
  assert.equal(plain.created.config.image, 'default');
  assert.equal(await sbx.kill(), true);
  assert.equal((await listed('team')).sandboxes, 0);
}));

test('an unknown image is invalid and names the images', needsDaemon, async () => {
  await assert.rejects(Sandbox.create({ ...opts, image: 'no-such-image' }), (e) => e instanceof Invalid && e.status === 400
    && e.code === 'invalid' && e.message.includes('no image "no-such-image"; the images here are default, ') && e.message.includes('team'));
  assert.equal((await Sandbox.list(opts)).filter((s) => s.config.image === 'no-such-image').length, 0);
});

test('an image a sandbox or a snapshot uses is busy', needsDaemon, () => withSandboxes(async (create) => {
  const holder = await create({ image: 'team' });
  await assert.rejects(Sandbox.deleteImage('team', opts), (e) => e instanceof Busy && e.status === 409 && e.code === 'busy'
    && e.message.includes(`image team is used by sandbox ${holder.sandboxId}`));

  const snap = await holder.snapshot();
  try {
    assert.equal(await holder.kill(), true);
    await assert.rejects(Sandbox.deleteImage('team', opts),
      (e) => e instanceof Busy && e.message.includes(`image team is the image of snapshot ${snap.snapshotId}`));
    // A fork has its snapshot's image; another is refused.
    const fork = await create({ snapshot: snap.snapshotId });
    assert.equal(fork.created.config.image, 'team');
    await assert.rejects(create({ snapshot: snap.snapshotId, image: 'default' }),
      (e) => e instanceof Invalid && /it has its snapshot's image/.test(e.message));
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId, opts);
  }
  assert.notEqual(await listed('team'), undefined);
}));

test('the default image is not deleted', needsDaemon, async () => {
  await assert.rejects(Sandbox.deleteImage('default', opts),
    (e) => e instanceof Invalid && e.status === 400 && e.message.includes("the default image is the daemon's own"));
  assert.notEqual(await listed('default'), undefined);
});

test('deleteImage deletes a built image', needsDaemon, async () => {
  assert.notEqual(await listed('scratch'), undefined);
  assert.equal(await Sandbox.deleteImage('scratch', opts), true);
  assert.equal(await listed('scratch'), undefined);
  // Gone (404): false, as for snapshots and workspaces.
  assert.equal(await Sandbox.deleteImage('scratch', opts), false);
  await assert.rejects(Sandbox.create({ ...opts, image: 'scratch' }), (e) => e instanceof Invalid && e.message.includes('no image "scratch"'));
});

// Bad image names are refused before any request: the socket does not
// exist, so a request would be a ConnectError.
test('bad image names are refused before any request', async () => {
  for (const bad of BAD_NAMES) {
    await assert.rejects(Sandbox.create({ ...nowhere, image: bad }),
      fromClient(RangeError, /is not an image name \(1 to 64 of a-z, 0-9, '-', '_' and '.'/));
    await assert.rejects(Sandbox.deleteImage(bad, nowhere), fromClient(RangeError, /is not an image name/));
  }
  await assert.rejects(Sandbox.deleteImage('x/'.repeat(10000), nowhere), (e) => e instanceof RangeError && e.message.length < 200);
  await assert.rejects(Sandbox.deleteImage(null, nowhere), fromClient(TypeError));
  await assert.rejects(Sandbox.create({ ...nowhere, image: 123 }), fromClient(TypeError, /an image name is a string/));
});

test('good image names are sent', async () => {
  for (const good of [...GOOD_NAMES, 'default']) {
    await assert.rejects(Sandbox.create({ ...nowhere, image: good }), ConnectError);
    await assert.rejects(Sandbox.deleteImage(good, nowhere), ConnectError);
  }
  await assert.rejects(Sandbox.listImages(nowhere), ConnectError);
});

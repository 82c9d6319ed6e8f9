import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { ConnectionLost, Invalid, NotFound, Sandbox, TooLarge } from '../src/index.js';
import { SOCKET, needsDaemon } from '../test-support/fake.js';

async function withSandbox(fn) {
  const sbx = await Sandbox.create({ socketPath: SOCKET });
  try {
    return await fn(sbx);
  } finally {
    await sbx.kill();
  }
}

const allBytes = (n) => Uint8Array.from({ length: n }, (_, i) => i % 256);

test('binary round trip', needsDaemon, () => withSandbox(async (sbx) => {
  const data = allBytes((1 << 20) - 1);
  assert.equal(await sbx.files.write('/workspace/blob.bin', data), data.length);
  const got = await sbx.files.read('/workspace/blob.bin');
  assert.ok(got instanceof Uint8Array);
  assert.deepEqual(Buffer.from(got), Buffer.from(data));
}));

test('text, ArrayBuffer, streams and relative paths', needsDaemon, () => withSandbox(async (sbx) => {
  await sbx.files.write('notes/é.txt', 'héllo ✓');
  assert.equal(Buffer.from(await sbx.files.read('/workspace/notes/é.txt')).toString(), 'héllo ✓');
  assert.equal(await sbx.files.write('ab', new Uint8Array([0, 1, 2]).buffer), 3);
  assert.equal(await sbx.files.write('streamed', Readable.from([Buffer.from('piped '), Buffer.from('bytes\0')])), 12);
  assert.equal(Buffer.from(await sbx.files.read('streamed')).toString(), 'piped bytes\0');
}));

test('missing file, bad path', needsDaemon, () => withSandbox(async (sbx) => {
  await assert.rejects(sbx.files.read('/workspace/nope'), NotFound);
  await assert.rejects(sbx.files.write('/proc/self/mem', 'x'), Invalid);
  await assert.rejects(sbx.files.read('/'), RangeError);
  await assert.rejects(sbx.files.write('x', 42), TypeError);
  await assert.rejects(sbx.commands.run([]), TypeError);
}));

test('too large: declared, and streamed', needsDaemon, () => withSandbox(async (sbx) => {
  await assert.rejects(sbx.files.write('big', new Uint8Array((1 << 20) + 1)), (e) => e instanceof TooLarge && e.status === 413);
  async function* chunks() {
    for (let i = 0; i < 24; i++) yield Buffer.alloc(64 << 10, 0x79);
  }
  await assert.rejects(sbx.files.write('big-streamed', chunks()), TooLarge);
}));

test('a download cut off is an error; the read limit', needsDaemon, () => withSandbox(async (sbx) => {
  await assert.rejects(sbx.files.read('/workspace/fail-midway'), (e) => e instanceof ConnectionLost && /cut off/.test(e.message));
  await sbx.files.write('ten', '0123456789');
  await assert.rejects(sbx.files.read('ten', { maxBytes: 5 }), TooLarge);
}));

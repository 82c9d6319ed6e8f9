import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { ConnectError, Connection, Sandbox, Unauthorized } from '../src/index.js';

// A daemon's TLS listener (cellvm serve --listen) with a bearer token,
// served by the Go test over the fake manager.
const URL_ = process.env.CELLVM_TEST_FAKE_URL ?? '';
const TOKEN = process.env.CELLVM_TEST_FAKE_TOKEN ?? '';
const CA = process.env.CELLVM_TEST_FAKE_CA ?? '';
const needsRemote = URL_ ? {} : { skip: "needs the fake daemon: run 'go test ./clients' (it serves one over TLS too)" };

const remote = (over = {}) => new Connection({ url: URL_, token: TOKEN, caFile: CA, ...over });

test('cells over TLS with the token', needsRemote, async () => {
  const sbx = await Sandbox.create({ connection: remote() });
  try {
    assert.equal((await sbx.runCode('x = 5')).status, 'ok');
    assert.equal((await sbx.runCode('x')).text, '5');
    assert.equal((await Sandbox.connect(sbx.sandboxId, { connection: remote() })).sandboxId, sbx.sandboxId);
  } finally {
    await sbx.kill();
  }
});

test('no token or a wrong one is Unauthorized', needsRemote, async () => {
  for (const token of ['', 'wrong-token-0123456789']) {
    await assert.rejects(Sandbox.list({ connection: remote({ token }) }), (e) => e instanceof Unauthorized && e.status === 401 && e.code === 'unauthorized');
  }
});

test('an untrusted certificate is a ConnectError', needsRemote, async () => {
  const saved = process.env.CELLVM_TLS_CA;
  delete process.env.CELLVM_TLS_CA;
  try {
    await assert.rejects(Sandbox.list({ connection: new Connection({ url: URL_, token: TOKEN }) }), (e) => e instanceof ConnectError && /certificate/.test(e.message));
  } finally {
    if (saved !== undefined) process.env.CELLVM_TLS_CA = saved;
  }
});

test('the environment and a token file', needsRemote, async () => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cvjs-')), 'tokens');
  fs.writeFileSync(file, `# the daemon's format\n\n${TOKEN}\n`);
  const keys = ['CELLVM_URL', 'CELLVM_TOKEN', 'CELLVM_TOKEN_FILE', 'CELLVM_TLS_CA'];
  const saved = Object.fromEntries(keys.map((k) => [k, process.env[k]]));
  try {
    delete process.env.CELLVM_TOKEN;
    Object.assign(process.env, { CELLVM_URL: URL_, CELLVM_TOKEN_FILE: file, CELLVM_TLS_CA: CA });
    const c = new Connection();
    assert.equal(c.url, URL_);
    assert.ok(!String(c).includes(TOKEN) && !JSON.stringify(c).includes(TOKEN), 'the token shows');
    await Sandbox.list({ connection: c });
  } finally {
    for (const k of keys) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  }
});

test('bad URLs are refused before any connection', () => {
  for (const url of ['http://127.0.0.1:1', 'https://127.0.0.1:1/v1', 'not a url']) {
    assert.throws(() => new Connection({ url, token: 'x'.repeat(20) }), TypeError);
  }
  assert.throws(() => new Connection({ socketPath: '/run/x.sock', url: 'https://127.0.0.1:1' }), TypeError);
});

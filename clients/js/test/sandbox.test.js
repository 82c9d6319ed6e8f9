import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Busy, ConnectionLost, Internal, Invalid, Lost, NotFound, NotSupported, Sandbox, Timeout } from '../src/index.js';
import { SOCKET, needsDaemon, waitIdle } from '../test-support/fake.js';

async function withSandbox(opts, fn) {
  const sbx = await Sandbox.create({ socketPath: SOCKET, ...opts });
  try {
    return await fn(sbx);
  } finally {
    await sbx.kill();
  }
}

test('lifetimes left out are the daemon\'s; 0 is none', needsDaemon, async () => {
  // The fake daemon has serve's defaults: 1 h and 15 min.
  for (const [opts, want] of [[{}, [3600, 900]], [{ ttlS: 0, idleTimeoutS: 0 }, [0, 0]], [{ ttlS: 60 }, [60, 900]], [{ idleTimeoutS: 0 }, [3600, 0]]]) {
    await withSandbox(opts, async (sbx) => {
      const { config } = await sbx.info();
      assert.deepEqual([config.ttl_s, config.idle_timeout_s], want, JSON.stringify(opts));
    });
  }
});

test('streaming order and the execution', needsDaemon, () => withSandbox({}, async (sbx) => {
  const seen = [];
  const ex = await sbx.runCode('stream', {
    onStdout: (t) => seen.push(['stdout', t]),
    onStderr: async (t) => { await null; seen.push(['stderr', t]); },
    onResult: (r) => seen.push(['result', r.text, r.main]),
  });
  assert.deepEqual(seen, [['stdout', 'out 1\n'], ['stderr', 'err 1\n'], ['stdout', 'out 2\n'], ['result', '3', true]]);
  assert.equal(ex.status, 'ok');
  assert.equal(ex.text, '3');
  assert.deepEqual(ex.logs, { stdout: ['out 1\n', 'out 2\n'], stderr: ['err 1\n'] }); // E2B's lists
  assert.equal(ex.executionCount, 1);
  assert.equal(ex.stateKept, true);
  assert.equal(ex.killedBy, null);
  assert.equal(ex.error, null);
  assert.deepEqual(ex.truncated, { stdoutBytes: 0, stderrBytes: 0 });
}));

test('events arrive while the cell runs', needsDaemon, () => withSandbox({}, async (sbx) => {
  // The gate cell blocks after its first event until the sandbox is
  // interrupted: only a client that hands events over as they arrive can
  // release it, from the callback.
  const seen = [];
  const ex = await sbx.runCode('gate', {
    timeoutMs: 30_000,
    onStdout: async (t) => {
      seen.push(t);
      if (t === 'waiting\n') {
        await assert.rejects(sbx.runCode('x = 1'), (e) => e instanceof Busy && e.status === 409);
        assert.equal((await sbx.info()).cellRunning, true);
        await sbx.interrupt();
      }
    },
  });
  assert.deepEqual(seen, ['waiting\n', 'released\n']);
  assert.equal(ex.status, 'ok');
}));

test('state across cells and restart', needsDaemon, () => withSandbox({}, async (sbx) => {
  await sbx.runCode('x = 41');
  assert.equal((await sbx.runCode('x')).text, '41');
  await sbx.restart();
  const ex = await sbx.runCode('x');
  assert.equal(ex.status, 'error');
  assert.equal(ex.error.name, 'NameError');
}));

test('an error is a result; a timeout keeps state', needsDaemon, () => withSandbox({}, async (sbx) => {
  const errors = [];
  const ex = await sbx.runCode('raise', { onError: (e) => errors.push(e.name) });
  assert.deepEqual(errors, ['KeyError']);
  assert.equal(ex.error.value, "'x'");
  assert.equal(ex.error.traceback, "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\n    {}['x']\nKeyError: 'x'");
  const t = await sbx.runCode('timeout', { timeoutMs: 1500 });
  assert.equal(t.status, 'timeout');
  assert.equal(t.stateKept, true);
  assert.equal(t.killedBy, 'timeout');
  assert.deepEqual((await sbx.runCode('timeout_ms', { timeoutMs: 2500 })).logs.stdout, ['2500\n']);
  assert.deepEqual((await sbx.runCode('timeout_ms')).logs.stdout, ['60000\n']);
  await assert.rejects(sbx.runCode('x', { timeoutMs: -1 }), RangeError);
}));

test('rich results, a large event and env', needsDaemon, () => withSandbox({ env: { GREETING: 'hello', TOKEN: 's3cret' } }, async (sbx) => {
  const ex = await sbx.runCode('chart');
  const [fig, main] = ex.results;
  assert.equal(fig.main, false);
  assert.deepEqual([...fig.pngBytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.ok(fig.pngBytes instanceof Uint8Array);
  assert.equal(Buffer.from(fig.png, 'base64').compare(Buffer.from(fig.pngBytes)), 0); // E2B's base64 text
  assert.equal(main.html, '<b>done</b>');
  assert.deepEqual(main.json, { a: [1, 2] });
  assert.equal(main.markdown, '**done**');
  assert.equal(ex.text, "'done'");
  assert.equal((await sbx.runCode('big')).logs.stdout.join('').length, 1 << 20);
  assert.deepEqual((await sbx.runCode('env')).logs.stdout, ['{"GREETING":"hello","TOKEN":"s3cret"}\n']);
}));

test('a connection broken mid-stream', needsDaemon, () => withSandbox({}, async (sbx) => {
  const seen = [];
  await assert.rejects(sbx.runCode('break', { onStdout: (t) => seen.push(t) }), (e) => e instanceof ConnectionLost && /may have run in part/.test(e.message));
  assert.deepEqual(seen, ['partial\n']);
}));

test("a call's timeout closes its connection", needsDaemon, () => withSandbox({}, async (sbx) => {
  await assert.rejects(sbx.runCode('hang', { requestTimeoutMs: 500 }), (e) => e instanceof Timeout && /\/cells/.test(e.message));
  await waitIdle(sbx);
  assert.equal((await sbx.runCode('stream')).status, 'ok');
}));

test('a callback that throws ends the call', needsDaemon, () => withSandbox({}, async (sbx) => {
  await assert.rejects(sbx.runCode('gate', { onStdout: () => { throw new Error('callback failed'); } }), /callback failed/);
  await waitIdle(sbx);
  assert.equal((await sbx.runCode('stream')).status, 'ok');
}));

test('a lost sandbox, an internal error', needsDaemon, () => withSandbox({}, async (sbx) => {
  await assert.rejects(sbx.runCode('internal'), (e) => e instanceof Internal && e.status === 500 && /disk is on fire/.test(e.message));
  const ex = await sbx.runCode('die');
  assert.equal(ex.status, 'lost');
  assert.equal(ex.stateKept, false);
  await assert.rejects(sbx.runCode('x = 1'), (e) => e instanceof Lost && e.status === 410 && e.code === 'lost');
  assert.equal((await sbx.info()).state, 'lost');
}));

test('commands', needsDaemon, () => withSandbox({}, async (sbx) => {
  let r = await sbx.commands.run(['echo', 'a', 'b c']);
  assert.deepEqual([r.exitCode, r.stdout, r.timedOut], [0, 'a b c\n', false]);
  assert.equal((await sbx.commands.run(['cat'], { stdin: 'héllo' })).stdout, 'héllo');
  assert.equal((await sbx.commands.run(['hex'], { stdin: new Uint8Array([0, 255, 254]) })).stdout, '00fffe');
  r = await sbx.commands.run('ls -l /workspace');
  assert.deepEqual(JSON.parse(r.stdout), ['sh', '-c', 'ls -l /workspace']);
  r = await sbx.commands.run(['prog', 'x'], { cwd: '/tmp', envs: { A: '1' } });
  assert.deepEqual(JSON.parse(r.stdout), ['sh', '-c', 'cd -- "$1" || exit 125; shift; exec "$@"', 'sh', '/tmp', 'env', 'A=1', 'prog', 'x']);
  r = await sbx.commands.run(['argv']);
  assert.deepEqual([r.exitCode, r.stderr], [3, 'to stderr\n']);
  r = await sbx.commands.run(['sleep', '100'], { timeoutMs: 1000 });
  assert.deepEqual([r.timedOut, r.exitCode], [true, 137]);
}));

test('network and info', needsDaemon, () => withSandbox({}, async (sbx) => {
  await sbx.network.set(['pypi.org', '10.0.0.0/8']);
  const info = await sbx.info();
  assert.deepEqual(info.config.network, { allow: ['pypi.org', '10.0.0.0/8'] });
  assert.equal(info.sandboxId, sbx.sandboxId);
  await assert.rejects(sbx.network.set(['not a host!']), Invalid);
  await assert.rejects(sbx.network.set(['not-supported.test']), (e) => e instanceof NotSupported && e.status === 501);
}));

test('connect, list, kill and asyncDispose', needsDaemon, async () => {
  const sbx = await Sandbox.create({ socketPath: SOCKET });
  const other = await Sandbox.connect(sbx.sandboxId, { socketPath: SOCKET });
  await other.runCode('y = 7');
  assert.equal((await sbx.runCode('y')).text, '7');
  assert.ok((await Sandbox.list({ socketPath: SOCKET })).some((i) => i.sandboxId === sbx.sandboxId));
  await sbx[Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose')]();
  assert.equal(await other.kill(), false);
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { socketPath: SOCKET }), NotFound);
});

test('concurrent sandboxes keep their own state', needsDaemon, async () => {
  const got = await Promise.all([0, 1, 2, 3, 4].map((i) => withSandbox({}, async (sbx) => {
    await sbx.runCode(`v = ${i}`);
    return (await sbx.runCode('v')).text;
  })));
  assert.deepEqual(got, ['0', '1', '2', '3', '4']);
});

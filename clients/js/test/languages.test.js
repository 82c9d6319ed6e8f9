// runCode's language and context, restart of one session and the contexts
// calls, checked on the wire: a small recording server stands in for the
// daemon. Over the fake daemon (go test ./clients), each language's
// session has its own variables.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Invalid, Sandbox } from '../src/index.js';
import { SOCKET, needsDaemon } from '../test-support/fake.js';

const END = { type: 'end', end: { status: 'ok', state_kept: true, stdout: '', stderr: '', results: [], execution_count: 1 } };

async function recorder(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cvjs'));
  const sock = path.join(dir, 'd.sock');
  const seen = [];
  const srv = http.createServer((req, res) => {
    let data = '';
    req.on('data', (d) => { data += d; });
    req.on('end', () => {
      const body = data ? JSON.parse(data) : undefined;
      seen.push([req.method, req.url, body]);
      const p = req.url.split('?')[0];
      const json = (status, v) => { res.writeHead(status, { 'Content-Type': 'application/json' }); res.end(JSON.stringify(v)); };
      if (req.method === 'GET' && p === '/v1/sandboxes/sb-1') return json(200, { id: 'sb-1', state: 'running', config: {} });
      if (p.endsWith('/cells')) { res.writeHead(200, { 'Content-Type': 'application/x-ndjson' }); return res.end(JSON.stringify(END) + '\n'); }
      if (p.endsWith('/restart') || req.method === 'DELETE') { res.writeHead(204); return res.end(); }
      if (p.endsWith('/contexts') && req.method === 'POST') return json(201, { language: body.language, name: body.name ?? 'c1', cwd: body.cwd ?? '', running: false });
      if (p.endsWith('/contexts')) return json(200, [{ language: 'python', name: 'default', running: true }, { language: 'javascript', name: 'c1', cwd: '/tmp' }]);
      json(404, { error: { code: 'not_found', message: 'no' } });
    });
  });
  await new Promise((r) => srv.listen(sock, r));
  t.after(() => { srv.close(); fs.rmSync(dir, { recursive: true, force: true }); });
  return { sbx: await Sandbox.connect('sb-1', { socketPath: sock }), seen, last: () => seen[seen.length - 1] };
}

test('runCode passes language and context', async (t) => {
  const { sbx, last } = await recorder(t);
  await sbx.runCode('1 + 1');
  assert.deepEqual(last()[2], { code: '1 + 1', timeout_ms: 60000 });
  await sbx.runCode('x + 1', { language: 'js' });
  assert.deepEqual(last()[2], { code: 'x + 1', timeout_ms: 60000, language: 'js' });
  await sbx.runCode('echo $V', { language: 'bash', context: 'build' });
  assert.deepEqual(last()[2], { code: 'echo $V', timeout_ms: 60000, language: 'bash', context: 'build' });
  await assert.rejects(sbx.runCode('1', { language: 3 }), TypeError);
});

test('restart restarts the session it names', async (t) => {
  const { sbx, last } = await recorder(t);
  await sbx.restart();
  assert.deepEqual(last(), ['POST', '/v1/sandboxes/sb-1/restart', undefined]);
  await sbx.restart({ language: 'ts', context: 'c1' });
  assert.deepEqual(last(), ['POST', '/v1/sandboxes/sb-1/restart', { language: 'ts', context: 'c1' }]);
});

test('contexts: create, list, remove', async (t) => {
  const { sbx, last } = await recorder(t);
  const info = await sbx.createContext({ language: 'js', name: 'c1', cwd: '/tmp' });
  assert.deepEqual(last(), ['POST', '/v1/sandboxes/sb-1/contexts', { language: 'js', name: 'c1', cwd: '/tmp' }]);
  assert.deepEqual([info.language, info.name, info.cwd, info.running], ['js', 'c1', '/tmp', false]);
  await sbx.createContext();
  assert.deepEqual(last()[2], { language: 'python' });
  const list = await sbx.listContexts();
  assert.deepEqual(list.map((c) => [c.language, c.name, c.cwd, c.running]), [['python', 'default', '', true], ['javascript', 'c1', '/tmp', false]]);
  await sbx.removeContext('c1', { language: 'javascript' });
  assert.deepEqual(last(), ['DELETE', '/v1/sandboxes/sb-1/contexts/c1?language=javascript', undefined]);
  await sbx.removeContext('a/b');
  assert.equal(last()[1], '/v1/sandboxes/sb-1/contexts/a%2Fb?language=python');
  await assert.rejects(sbx.removeContext(''), TypeError);
});

test('over the fake daemon: sessions are separate, a bad language is Invalid naming them', needsDaemon, async () => {
  const sbx = await Sandbox.create({ socketPath: SOCKET });
  try {
    await sbx.runCode('x = 1');
    await sbx.runCode('x = 2', { language: 'javascript' });
    assert.equal((await sbx.runCode('x')).text, '1');
    assert.equal((await sbx.runCode('x', { language: 'js' })).text, '2');
    await sbx.restart({ language: 'js' });
    assert.equal((await sbx.runCode('x', { language: 'js' })).error?.name !== undefined, true);
    assert.equal((await sbx.runCode('x')).text, '1');
    await assert.rejects(sbx.runCode('1', { language: 'cobol' }), (e) => e instanceof Invalid && /javascript \(js\)/.test(e.message));
  } finally {
    await sbx.kill();
  }
});

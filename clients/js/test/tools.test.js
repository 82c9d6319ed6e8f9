import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Sandbox, tools } from '../src/index.js';
import { SOCKET, needsDaemon } from '../test-support/fake.js';

test('tool definitions', () => {
  const a = tools.anthropicTool();
  assert.equal(a.name, 'run_python');
  assert.deepEqual(a.input_schema.required, ['code']);
  assert.match(a.description, /no network access at all/);
  assert.match(a.description, /at most 60 seconds/);
  const o = tools.openaiTool({ network: ['pypi.org'], timeoutS: 30 });
  assert.equal(o.type, 'function');
  assert.match(o.function.description, /limited to: pypi\.org/);
  assert.doesNotMatch(o.function.description, /\$\{/);
  o.function.parameters.required.push('mutated');
  assert.deepEqual(tools.INPUT_SCHEMA.required, ['code']);
});

test('clipMiddle states the count and counts characters, not UTF-16 units', () => {
  const [text, cut] = tools.clipMiddle('a'.repeat(100) + '🐍'.repeat(100), 50);
  assert.equal(cut, 150);
  assert.ok(text.startsWith('a'.repeat(30)));
  assert.ok(text.endsWith('🐍'.repeat(20)));
  assert.match(text, /\[150 characters cut from the middle\]/);
});

test('runToolCall runs and formats; mistakes are tool errors', needsDaemon, async () => {
  const sbx = await Sandbox.create({ socketPath: SOCKET });
  try {
    const out = await tools.runToolCall(sbx, JSON.stringify({ code: 'chart' }));
    assert.equal(out.isError, false);
    assert.equal(out.images.length, 1);
    assert.match(out.text, /\[image 1: image\/png/);
    assert.deepEqual(tools.anthropicToolResult(out, 'toolu_1').content.map((c) => c.type), ['text', 'image']);
    const msgs = tools.openaiToolMessages([{ id: 'call_1', name: 'run_python', output: out }]);
    assert.deepEqual(msgs.map((m) => m.role), ['tool', 'user']);
    for (const [args, want] of [['{not json', /not a JSON object/], [{}, /needs "code"/], [{ code: 1 }, /needs "code"/],
      [{ code: 'x', timeout_s: 99999 }, /out of range/], [[1], /not a JSON object/]]) {
      const r = await tools.runToolCall(sbx, args);
      assert.equal(r.isError, true);
      assert.match(r.text, /^Tool error: /);
      assert.match(r.text, want);
    }
    await sbx.runCode('die');
    assert.match((await tools.runToolCall(sbx, { code: '1' })).text, /VM is gone/);
  } finally {
    await sbx.kill();
  }
});

/** A stand-in sandbox that records the code it is asked to run. */
function recorder() {
  const ran = [];
  return {
    ran,
    async runCode(code) {
      ran.push(code);
      return { status: 'ok', execution_count: ran.length, stdout: 'ran\n', stderr: '', results: [], error: null,
        state_kept: true, killed_by: null, truncated: {} };
    },
  };
}

test('approve: a refusal runs nothing and tells the model', async () => {
  for (const answer of [false, null, undefined]) {
    const sbx = recorder();
    const asked = [];
    const out = await tools.runToolCall(sbx, { code: "import os; os.system('rm -rf /')" },
      { approve: (code) => { asked.push(code); return answer; } });
    assert.deepEqual(asked, ["import os; os.system('rm -rf /')"]);
    assert.deepEqual(sbx.ran, []);
    assert.equal(out.isError, true);
    assert.equal(out.text, tools.REFUSED);
    assert.match(out.text, /The user refused to run this code/);
  }
});

test('approve: true runs the code as it is, a string runs the edit and says so', async () => {
  const sbx = recorder();
  let out = await tools.runToolCall(sbx, { code: 'x = 1' }, { approve: async () => true });
  assert.equal(out.isError, false);
  assert.doesNotMatch(out.text, /edited/);
  out = await tools.runToolCall(sbx, JSON.stringify({ code: 'x = 1' }), { approve: async () => 'y = 7\ny' });
  assert.ok(out.text.startsWith('[The user edited this code before it ran. What ran:]\ny = 7\ny\n[Its result:]\n'), out.text);
  out = await tools.runToolCall(sbx, { code: 'z' }, { approve: (code) => code });
  assert.doesNotMatch(out.text, /edited/);
  assert.deepEqual(sbx.ran, ['x = 1', 'y = 7\ny', 'z']);
});

test('approve: a throw or an odd answer refuses; model mistakes come first', async () => {
  const sbx = recorder();
  for (const [approve, want] of [
    [() => { throw new Error('the terminal closed'); }, /asking the user for approval failed: the terminal closed/],
    [async () => { throw new Error('gone'); }, /approval failed: gone/],
    [() => 1, /approve returned number/],
    [() => 'é'.repeat(tools.MAX_CODE_BYTES / 2 + 1), /is 1048578 bytes, at most 1048576/],
  ]) {
    const out = await tools.runToolCall(sbx, { code: 'x = 1' }, { approve });
    assert.equal(out.isError, true);
    assert.match(out.text, /^Tool error: not run: /);
    assert.match(out.text, want);
  }
  let asked = 0;
  const out = await tools.runToolCall(sbx, {}, { approve: () => { asked++; return true; } });
  assert.equal(out.isError, true);
  assert.equal(asked, 0);
  assert.deepEqual(sbx.ran, []);
});

test('approve: a refused cell never reaches the sandbox', needsDaemon, async () => {
  const sbx = await Sandbox.create({ socketPath: SOCKET });
  try {
    let out = await tools.runToolCall(sbx, { code: 'x = 1' }, { approve: () => false });
    assert.equal(out.text, tools.REFUSED);
    assert.equal((await sbx.info()).cells, 0);
    out = await tools.runToolCall(sbx, { code: 'x = 1' }, { approve: () => 'x = 5\nx' });
    assert.match(out.text, /Out\[1\]/);
    assert.match(out.text, /5/);
    assert.equal((await sbx.info()).cells, 1);
  } finally {
    await sbx.kill();
  }
});

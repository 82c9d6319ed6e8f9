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

// A complete agent loop: Claude (Anthropic's Messages API) answers a
// question by running Python in a cellvm sandbox.
//
//   ANTHROPIC_API_KEY=... node anthropic_agent.mjs "What is the 30th Fibonacci number?"
//
// Needs the cellvm daemon (CELLVM_SOCKET, else /run/cellvm/cellvm.sock) and
// the cellvm package (npm install ./clients/js, or a node_modules/cellvm link).
// ANTHROPIC_BASE_URL and ANTHROPIC_MODEL change the endpoint and the model.

import { Sandbox, tools } from 'cellvm';

const BASE = (process.env.ANTHROPIC_BASE_URL ?? 'https://api.anthropic.com').replace(/\/+$/, '');
const MODEL = process.env.ANTHROPIC_MODEL ?? 'claude-sonnet-4-5';
const MAX_TURNS = 20;

async function messages(body) {
  const resp = await fetch(`${BASE}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': process.env.ANTHROPIC_API_KEY ?? '', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  });
  if (!resp.ok) throw new Error(`Messages API: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

async function answer(question) {
  // One sandbox per conversation: variables persist from one call to the next.
  const sbx = await Sandbox.create({ memoryMiB: 1024 });
  try {
    const history = [{ role: 'user', content: question }];
    for (let turn = 0; turn < MAX_TURNS; turn++) {
      const resp = await messages({ model: MODEL, max_tokens: 4096, tools: [tools.anthropicTool()], messages: history });
      history.push({ role: 'assistant', content: resp.content });
      const calls = resp.content.filter((b) => b.type === 'tool_use');
      if (calls.length === 0) return resp.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      // Every call gets exactly one result, under its id; errors are
      // results the model reads and fixes.
      const results = [];
      for (const call of calls) {
        const out = call.name === tools.TOOL_NAME
          ? await tools.runToolCall(sbx, call.input)
          : tools.toolError(`there is no tool named ${JSON.stringify(call.name)}`);
        console.error(`[${call.name}] ${out.text.slice(0, 200)}`);
        results.push(tools.anthropicToolResult(out, call.id));
      }
      history.push({ role: 'user', content: results });
    }
    throw new Error(`no answer after ${MAX_TURNS} turns`);
  } finally {
    await sbx.kill();
  }
}

console.log(await answer(process.argv.slice(2).join(' ') || 'Make a small table of squares, chart it, and tell me the mean.'));

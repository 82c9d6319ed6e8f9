// A complete agent loop: a model behind an OpenAI-compatible Chat
// Completions endpoint answers a question by running Python in a cellvm
// sandbox.
//
//   OPENAI_API_KEY=... node openai_agent.mjs "What is the 30th Fibonacci number?"
//
// Needs the cellvm daemon (CELLVM_SOCKET, else /run/cellvm/cellvm.sock) and
// the cellvm package (npm install ./clients/js, or a node_modules/cellvm link).
// OPENAI_BASE_URL (e.g. http://localhost:8000/v1) and OPENAI_MODEL change
// the endpoint and the model.

import { Sandbox, tools } from 'cellvm';

const BASE = (process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1').replace(/\/+$/, '');
const MODEL = process.env.OPENAI_MODEL ?? 'gpt-4.1';
const MAX_TURNS = 20;

async function chat(body) {
  const headers = { 'content-type': 'application/json' };
  if (process.env.OPENAI_API_KEY) headers.authorization = `Bearer ${process.env.OPENAI_API_KEY}`;
  const resp = await fetch(`${BASE}/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
  if (!resp.ok) throw new Error(`Chat Completions: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

async function answer(question) {
  // One sandbox per conversation: variables persist from one call to the next.
  const sbx = await Sandbox.create({ memoryMiB: 1024 });
  try {
    const history = [{ role: 'user', content: question }];
    for (let turn = 0; turn < MAX_TURNS; turn++) {
      const msg = (await chat({ model: MODEL, messages: history, tools: [tools.openaiTool()] })).choices[0].message;
      history.push(msg);
      const calls = msg.tool_calls ?? [];
      if (calls.length === 0) return msg.content ?? '';
      // Tool messages answer every call by id; the figures follow in one
      // user message (a tool message carries only text).
      const results = [];
      for (const call of calls) {
        const fn = call.function;
        const output = fn.name === tools.TOOL_NAME
          ? await tools.runToolCall(sbx, fn.arguments)
          : tools.toolError(`there is no tool named ${JSON.stringify(fn.name)}`);
        console.error(`[${fn.name}] ${output.text.slice(0, 200)}`);
        results.push({ id: call.id, name: fn.name, output });
      }
      history.push(...tools.openaiToolMessages(results));
    }
    throw new Error(`no answer after ${MAX_TURNS} turns`);
  } finally {
    await sbx.kill();
  }
}

console.log(await answer(process.argv.slice(2).join(' ') || 'Make a small table of squares, chart it, and tell me the mean.'));

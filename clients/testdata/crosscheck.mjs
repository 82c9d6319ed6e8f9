// Reads {"cells": [{"id", "result"}], "facts": [{"network", "timeout_s"}]}
// on stdin and prints what the JS client makes of them (see crosscheck.py).
import { readFileSync } from 'node:fs';
import * as tools from '../js/src/tools.js';

const doc = JSON.parse(readFileSync(0, 'utf8'));
const cells = doc.cells.map((c) => {
  const out = tools.formatExecution(c.result);
  return {
    text: out.text,
    images: out.images.map((i) => [i.mime, Buffer.from(i.data).toString('base64')]),
    is_error: out.isError,
    anthropic: tools.anthropicToolResult(out, c.id),
    openai: tools.openaiToolMessages([{ id: c.id, name: 'run_python', output: out }]),
  };
});
const descriptions = doc.facts.map((f) => tools.description(f.network ?? [], f.timeout_s));
process.stdout.write(JSON.stringify({ cells, descriptions, default: tools.runPythonTool(), default_timeout_s: tools.DEFAULT_TIMEOUT_S }));

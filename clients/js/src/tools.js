// The run_python tool for language models, and the formatter of its
// results. The tool's name, description and JSON Schema are those of
// cellvm's Go agent package, read from run_python_tool.json, which
// `go generate ./clients` writes from it (a Go test fails when they
// drift); the formatter gives a model what the Go agent loop gives it,
// character for character (a Go test checks that too).

import { readFileSync } from 'node:fs';
import { Busy, CellvmError, Lost, NotFound, Timeout } from './errors.js';
import { Execution } from './models.js';

const DEF = JSON.parse(readFileSync(new URL('./run_python_tool.json', import.meta.url), 'utf8'));

export const TOOL_NAME = DEF.name;
export const INPUT_SCHEMA = DEF.input_schema;
/** The default time limit of a call, stated in the description (seconds). */
export const DEFAULT_TIMEOUT_S = DEF.default_timeout_s;
/** The most a model may ask for with timeout_s (seconds), as in Go. */
export const MAX_TIMEOUT_S = 600;
/** The most code a cell may carry (bytes of UTF-8), as the daemon allows. */
export const MAX_CODE_BYTES = 1 << 20;
/** What the model reads when approve refuses a cell (Go's agent.RefusedCode). */
export const REFUSED = DEF.refused;
// The formatter's bounds, as in Go's agent.FormatOptions defaults.
export const MAX_CHARS = 8000;
export const TRACEBACK_LINES = 20;
export const MAX_IMAGES = 4;
export const MAX_IMAGE_BYTES = 5 << 20;

/** The run_python description for this allowlist (empty: no network) and default timeout (0: not stated). */
export function description(network = [], timeoutS = DEFAULT_TIMEOUT_S) {
  const net = network && network.length > 0;
  let d = DEF.descriptions[(net ? 'network' : 'no_network') + (timeoutS ? '' : '_no_timeout')];
  if (net) d = d.replaceAll('${network}', network.join(', '));
  if (timeoutS) d = d.replaceAll('${timeout_s}', String(Math.trunc(timeoutS)));
  return d;
}

/** The tool as {name, description, input_schema}. */
export function runPythonTool({ network = [], timeoutS = DEFAULT_TIMEOUT_S } = {}) {
  return { name: TOOL_NAME, description: description(network, timeoutS), input_schema: structuredClone(INPUT_SCHEMA) };
}

/** The tool in Anthropic Messages' "tools" form. */
export const anthropicTool = runPythonTool;

/** The tool in OpenAI Chat Completions' "tools" form. */
export function openaiTool(opts) {
  const t = runPythonTool(opts);
  return { type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } };
}

const ANSI = new RegExp('\\x1b\\[[0-?]*[ -/]*[@-~]|\\x1b\\][^\\x07\\x1b]*(?:\\x07|\\x1b\\\\)|\\x1b[@-Z\\\\-_]', 'g');

/** Removes terminal escapes and resolves carriage returns as a terminal shows them. */
export function stripANSI(s) {
  if (s.includes('\x1b')) s = s.replace(ANSI, '').replaceAll('\x1b', '');
  if (!s.includes('\r')) return s;
  return s.replaceAll('\r\n', '\n').split('\n').map((line) => {
    const t = line.replace(/\r+$/, '');
    const j = t.lastIndexOf('\r');
    return j >= 0 ? line.slice(j + 1) : t;
  }).join('\n');
}

export const cutNote = (cut) => `\n... [${cut} characters cut from the middle] ...\n`;

/** Keeps the first and last parts of s (at most limit characters), stating how many were cut. */
export function clipMiddle(s, limit) {
  if (limit < 1 || s.length <= limit) return [s, 0];
  const chars = Array.from(s);
  if (chars.length <= limit) return [s, 0];
  const head = Math.floor((limit * 3) / 5);
  const tail = limit - head;
  const cut = chars.length - head - tail;
  return [chars.slice(0, head).join('') + cutNote(cut) + chars.slice(chars.length - tail).join(''), cut];
}

const decodedLen = (n) => Math.floor(n / 4) * 3;

function image(mime, data, have) {
  if (have >= MAX_IMAGES) return [null, `[a further ${mime} image was produced but not attached: at most ${MAX_IMAGES} images per call]`];
  if (decodedLen(data.length) > MAX_IMAGE_BYTES + 3) {
    return [null, `[a ${mime} image of about ${decodedLen(data.length)} bytes was produced but not attached: larger than ${MAX_IMAGE_BYTES} bytes; make the figure smaller]`];
  }
  const clean = data.trim().replace(/[\r\n]/g, '');
  if (clean.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(clean)) return [null, `[a ${mime} image was produced but its data is not valid base64]`];
  const raw = new Uint8Array(Buffer.from(clean, 'base64'));
  if (raw.length > MAX_IMAGE_BYTES) {
    return [null, `[a ${mime} image of ${raw.length} bytes was produced but not attached: larger than ${MAX_IMAGE_BYTES} bytes; make the figure smaller]`];
  }
  return [raw, ''];
}

function formatError(err) {
  const lines = [];
  for (const entry of err.traceback ?? []) lines.push(...stripANSI(String(entry)).replace(/\n+$/, '').split('\n'));
  const dropped = Math.max(lines.length - TRACEBACK_LINES, 0);
  const kept = lines.slice(dropped);
  let out = '';
  if (kept.length) {
    out += '[traceback]\n';
    if (dropped) out += `... [${dropped} earlier traceback lines cut] ...\n`;
    out += clipMiddle(kept.join('\n'), MAX_CHARS)[0] + '\n';
  }
  const value = clipMiddle(stripANSI(String(err.value ?? '')), Math.floor(MAX_CHARS / 4))[0];
  return out + `Error: ${stripANSI(String(err.name ?? ''))}: ${value}\n`;
}

function statusNote(r) {
  // The words come from state_kept and killed_by, not from status alone
  // (see agent.statusNote, which this mirrors).
  const killed = r.killed_by === 'oom' || r.killed_by === 'signal';
  if (r.state_kept && r.status !== 'lost' && !killed) {
    if (r.status === 'timeout' || r.killed_by === 'timeout') {
      return 'Note: the cell ran past its time limit and was interrupted. The interpreter survived: variables defined before the call are still there (and anything the cell assigned before the interrupt). Do less per call, or pass a larger timeout_s.';
    }
    return '';
  }
  if (r.killed_by === 'timeout' || r.status === 'timeout') {
    return 'Note: the cell ran past its time limit and did not stop when interrupted, so the interpreter was killed and restarted: variables are gone, and so are imports and functions. Re-run the setup code before continuing.';
  }
  if (r.killed_by === 'oom') {
    return 'Note: the cell ran out of memory, so the interpreter was killed and restarted: variables are gone, and so are imports and functions. Use less memory (smaller data, chunks) and re-run the setup code.';
  }
  if (r.killed_by === 'signal' || r.status === 'lost') {
    return 'Note: the interpreter was lost during this cell (it crashed, exited or was killed) and restarted: variables are gone, and so are imports and functions. Re-run the setup code before continuing.';
  }
  return 'Note: this cell ran in a fresh interpreter (the previous one had ended): variables are gone, and so are imports and functions from earlier cells. Re-run the setup code before continuing.';
}

/**
 * Turns an Execution (or the daemon's result object) into what a model reads.
 * @returns {{text: string, images: {mime: string, data: Uint8Array}[], isError: boolean}}
 */
export function formatExecution(execution) {
  const r = execution instanceof Execution ? execution.raw : execution;
  const parts = [];
  const sep = () => { if (parts.length) parts.push('\n'); };
  const section = (label, text, guestCut) => {
    text = stripANSI(text);
    if (!text && !guestCut) return;
    const [clipped] = clipMiddle(text, MAX_CHARS);
    sep();
    parts.push(`[${label}]\n${clipped}`);
    if (!clipped.endsWith('\n')) parts.push('\n');
    if (guestCut > 0) parts.push(`[the sandbox cut ${guestCut} bytes from the middle of ${label}]\n`);
  };
  const t = r.truncated ?? {};
  section('stdout', String(r.stdout ?? ''), Number(t.stdout_bytes ?? 0));
  section('stderr', String(r.stderr ?? ''), Number(t.stderr_bytes ?? 0));
  const images = [];
  (r.results ?? []).forEach((d, i) => {
    const data = d.data ?? {};
    let shown = false;
    for (const mime of ['image/png', 'image/jpeg']) {
      if (!(mime in data)) continue;
      let [raw, note] = image(mime, String(data[mime]), images.length);
      if (raw) {
        images.push({ mime, data: raw });
        note = `[image ${images.length}: ${mime}, ${raw.length} bytes, attached]`;
      }
      sep();
      parts.push(note + '\n');
      shown = true;
      break;
    }
    if ('image/svg+xml' in data && !shown) {
      parts.push(`[an SVG image of ${Buffer.byteLength(String(data['image/svg+xml']), 'utf8')} bytes was produced; it cannot be shown to you, use a PNG figure to see it]\n`);
      shown = true;
    }
    if (!('text/plain' in data) || (shown && !d.main)) return;
    section(d.main ? `Out[${Number(r.execution_count ?? 0)}]` : `display ${i + 1}`, String(data['text/plain']), 0);
  });
  let isError = false;
  if (r.error) {
    isError = true;
    sep();
    parts.push(formatError(r.error));
  }
  const note = statusNote(r);
  if (note) {
    isError = isError || r.status !== 'ok';
    sep();
    parts.push(note + '\n');
  }
  if (!parts.length) parts.push('(the cell ran and printed nothing; print what you need to see)\n');
  return { text: parts.join('').replace(/\n+$/, ''), images, isError };
}

export const toolError = (message) => ({ text: 'Tool error: ' + message, images: [], isError: true });

function sandboxError(e) {
  if (e instanceof Busy) return toolError(`the sandbox is busy (another call is still running, or it is being paused or resumed); wait for it and try again: ${e.message}`);
  if (e instanceof Lost) return toolError(`the sandbox's VM is gone; no more code can run in it and all state is lost: ${e.message}`);
  if (e instanceof NotFound) return toolError(`not found: ${e.message}`);
  if (e instanceof Timeout) return toolError(`the call was cancelled: ${e.message}`);
  return toolError(e.message);
}

/** Turns approve's answer into [code to run, edited, refusal]. */
function approval(code, answer) {
  if (answer === true) return [code, false, null];
  if (answer === false || answer === null || answer === undefined) {
    return [null, false, { text: REFUSED, images: [], isError: true }];
  }
  if (typeof answer === 'string') {
    const n = Buffer.byteLength(answer, 'utf8');
    if (n > MAX_CODE_BYTES) return [null, false, toolError(`not run: the user's edited code is ${n} bytes, at most ${MAX_CODE_BYTES}`)];
    return [answer, answer !== code, null];
  }
  return [null, false, toolError(`not run: approve returned ${typeof answer}, want true, false or the edited code`)];
}

/**
 * Runs one run_python call (arguments as an object or JSON text) in a
 * Sandbox. Never throws for what the model got wrong or the sandbox did:
 * those are tool errors the model can read.
 *
 * A human in the loop: opts.approve, if given, is called with the cell's
 * code before it runs (it may return a Promise), as Go's `cellvm chat
 * --confirm` asks at the terminal. true runs the code; false (or
 * null/undefined) refuses, and the model gets the refusal as the call's
 * result with nothing run; a string is the edited code, which runs instead
 * (the model is told what ran). A throw refuses too, saying why.
 */
export async function runToolCall(sbx, args, { approve } = {}) {
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args || '{}');
    } catch (e) {
      return toolError(`the arguments are not a JSON object: ${e.message}`);
    }
  }
  if (!args || typeof args !== 'object' || Array.isArray(args)) return toolError('the arguments are not a JSON object');
  if (typeof args.code !== 'string') return toolError('run_python needs "code", a string of Python source');
  const ts = args.timeout_s ?? 0;
  if (!Number.isInteger(ts)) return toolError("the arguments do not match the tool's schema: timeout_s is not an integer");
  if (ts < 0 || ts > MAX_TIMEOUT_S) return toolError(`timeout_s ${ts} out of range 1..${MAX_TIMEOUT_S}`);
  let code = args.code;
  let edited = false;
  if (approve) {
    let answer;
    try {
      answer = await approve(code);
    } catch (e) {
      return toolError(`not run: asking the user for approval failed: ${e?.message ?? e}`);
    }
    let refused;
    [code, edited, refused] = approval(code, answer);
    if (refused) return refused;
  }
  let out;
  try {
    out = formatExecution(await sbx.runCode(code, { timeoutMs: (ts || DEFAULT_TIMEOUT_S) * 1000 }));
  } catch (e) {
    if (e instanceof CellvmError) return sandboxError(e);
    throw e;
  }
  if (edited) {
    const [shown] = clipMiddle(code, MAX_CHARS);
    out.text = `[The user edited this code before it ran. What ran:]\n${shown}\n[Its result:]\n${out.text}`;
  }
  return out;
}

const b64 = (u8) => Buffer.from(u8).toString('base64');

/** A tool_result content block for Anthropic's Messages API; images ride inside it. */
export function anthropicToolResult(out, toolUseId) {
  const content = [{ type: 'text', text: out.text || '(no output)' }];
  for (const img of out.images) content.push({ type: 'image', source: { type: 'base64', media_type: img.mime, data: b64(img.data) } });
  const block = { type: 'tool_result', tool_use_id: toolUseId, content };
  if (out.isError) block.is_error = true;
  return block;
}

/**
 * The messages answering one assistant turn's tool calls in OpenAI's Chat
 * Completions: a "tool" message per {id, name, output}, in order, then one
 * user message with the images (tool messages carry only text).
 */
export function openaiToolMessages(results) {
  const msgs = [];
  const user = [];
  for (const { id, name, output } of results) {
    let text = output.text;
    if (output.isError && !text.startsWith('Tool error')) text = 'Error:\n' + text;
    if (output.images.length) text += `\n[${output.images.length} image(s) from this call follow in the next user message]`;
    msgs.push({ role: 'tool', tool_call_id: id, content: text });
    if (output.images.length) {
      user.push({ type: 'text', text: `Images produced by tool call ${id} (${name}):` });
      for (const img of output.images) user.push({ type: 'image_url', image_url: { url: `data:${img.mime};base64,${b64(img.data)}` } });
    }
  }
  if (user.length) msgs.push({ role: 'user', content: user });
  return msgs;
}

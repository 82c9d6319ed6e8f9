// cellvm's Node.js driver: runs JavaScript and TypeScript cells for the
// supervisor (guestinit/interp, PROTOCOL.md's Node section). Commands
// arrive on fd 3 and events leave on fd 4, one JSON object a line; the
// cells' output goes to fds 1 and 2 (process.stdout and process.stderr,
// synchronous for pipes on Linux), never through the protocol.
//
// It uses only Node 18's standard library: the guest image has Debian
// bookworm's nodejs 18.19.
'use strict';

const fs = require('fs');
const net = require('net');
const path = require('path');
const url = require('url');
const util = require('util');
const vm = require('vm');
const Module = require('module');

const MIN_NODE = 18;

// What the cells can replace (JSON, Buffer, Math.random) is taken now.
const jsonStringify = JSON.stringify;
const jsonParse = JSON.parse;
const BufferFrom = Buffer.from;
const inspect = util.inspect;
const isNativeError = util.types.isNativeError;
const isPromise = util.types.isPromise;
const writeSync = fs.writeSync;
const processOn = process.on.bind(process);

const MAX_TEXT = Math.max(4096, parseInt(process.env.CELLVM_MAX_TEXT || '', 10) || 0);
const TYPESCRIPT = process.env.CELLVM_TYPESCRIPT || '';
for (const k of ['CELLVM_MAX_TEXT', 'CELLVM_TYPESCRIPT']) delete process.env[k];

// --- the protocol pipes -----------------------------------------------

// fds 3 and 4 came without close-on-exec; Node has no fcntl, so they are
// opened again through /proc (libuv opens everything O_CLOEXEC) and the
// inherited ones closed: a process a cell spawns gets fds 0-2 only.
function reopen(fd, flags) {
  try {
    const nfd = fs.openSync('/proc/self/fd/' + fd, flags);
    fs.closeSync(fd);
    return nfd;
  } catch (e) {
    return fd;
  }
}

const ctlFd = reopen(parseInt(process.argv[2], 10), fs.constants.O_RDONLY);
const evFd = reopen(parseInt(process.argv[3], 10), fs.constants.O_WRONLY);

// send writes one frame, whole: JSON with non-ASCII escaped, so a frame
// is one line. Signals cannot split it: Node handles them between
// callbacks, and a blocking write of a pipe is retried until done.
function send(obj) {
  const line = jsonStringify(obj).replace(/[\u007f-\uffff]/g,
    (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')) + '\n';
  const buf = BufferFrom(line, 'utf8');
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(evFd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
      process.exit(1); // the supervisor is gone
    }
  }
}

const nodeMajor = parseInt(process.versions.node, 10);
if (nodeMajor < MIN_NODE) {
  send({ ev: 'unsupported', version: process.versions.node });
  process.exit(0);
}

// --- randomness -----------------------------------------------------

// Math.random is xorshift128+ seeded from /dev/urandom, and reseeded on
// "reseed": V8's own generator (and OpenSSL's, behind crypto) is state a
// VM fork copies, so two sandboxes restored from one snapshot would draw
// the same numbers. The kernel's device is reseeded by the agent.
let rngState = new BigUint64Array(2);

function reseed() {
  const b = Buffer.alloc(16);
  let fd = -1;
  try {
    fd = fs.openSync('/dev/urandom', 'r');
    let off = 0;
    while (off < 16) off += fs.readSync(fd, b, off, 16 - off, null);
  } finally {
    if (fd >= 0) fs.closeSync(fd);
  }
  rngState[0] = b.readBigUInt64LE(0) | 1n;
  rngState[1] = b.readBigUInt64LE(8);
}

const MASK = (1n << 64n) - 1n;
function random() {
  let s1 = rngState[0];
  const s0 = rngState[1];
  rngState[0] = s0;
  s1 ^= (s1 << 23n) & MASK;
  s1 ^= s1 >> 17n;
  s1 ^= s0;
  s1 ^= s0 >> 26n;
  rngState[1] = s1;
  return Number(((rngState[0] + rngState[1]) & MASK) >> 11n) / 9007199254740992;
}

reseed();
Object.defineProperty(Math, 'random', { value: random, writable: true, configurable: true });

// --- the cells' globals ------------------------------------------------

// Cells run in Node's main context, as in its REPL: every global, and
// objects of one realm only. require resolves from the working directory.
const cellModule = new Module('<cell>', null);
cellModule.filename = path.join(process.cwd(), '<cell>');
cellModule.paths = Module._nodeModulePaths(process.cwd());
globalThis.module = cellModule;
globalThis.exports = cellModule.exports;
globalThis.require = Module.createRequire(cellModule.filename);

// import() in a cell loads what the cell's require would find (a
// package in the working directory's node_modules, a relative path), or
// else what Node finds for the name.
async function importDynamic(spec) {
  let target = String(spec);
  if (!/^(?:node|file|data):/.test(target) && !Module.builtinModules.includes(target)) {
    try {
      target = url.pathToFileURL(globalThis.require.resolve(target)).href;
    } catch (e) {
      // left to import() to find, or to say it cannot
    }
  }
  return import(target);
}

// vm's own hook for import() needs --experimental-vm-modules; a cell's
// import( calls are rewritten to this global instead.
Object.defineProperty(globalThis, '__cellvmImport', { value: importDynamic });

// display(x) sends x as a rich result: a PNG Buffer or data: URL as
// image/png, {'text/html': s, ...} as that MIME bundle, anything else as
// text. display.html(s) is s as HTML.
function bundleOf(x) {
  if (Buffer.isBuffer(x) || x instanceof Uint8Array) {
    const b = BufferFrom(x.buffer, x.byteOffset, x.byteLength);
    if (b.length > 8 && b.readUInt32BE(0) === 0x89504e47) return { 'image/png': b.toString('base64') };
    if (b.length > 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return { 'image/jpeg': b.toString('base64') };
  }
  if (typeof x === 'string') {
    const m = /^data:(image\/(?:png|jpeg|gif|svg\+xml));base64,/.exec(x);
    if (m) return { [m[1]]: x.slice(m[0].length) };
    return { 'text/plain': clip(x) };
  }
  if (x && typeof x === 'object' && !Array.isArray(x)) {
    const keys = Object.keys(x);
    if (keys.length > 0 && keys.every((k) => /^[a-z]+\/[-+.\w]+$/.test(k))) {
      const data = {};
      for (const k of keys) {
        const v = x[k];
        data[k] = Buffer.isBuffer(v) ? v.toString('base64') : typeof v === 'string' ? v : jsonStringify(v);
      }
      return data;
    }
  }
  return { 'text/plain': textOf(x) };
}

function display(...xs) {
  for (const x of xs) send({ ev: 'result', main: false, data: bundleOf(x) });
}
display.html = (s) => send({ ev: 'result', main: false, data: { 'text/html': String(s) } });
globalThis.display = display;

function clip(s) {
  if (s.length <= MAX_TEXT) return s;
  const half = Math.floor(MAX_TEXT / 2);
  return s.slice(0, half) + '\n... (' + (s.length - 2 * half) + ' characters clipped) ...\n' + s.slice(-half);
}

function textOf(v) {
  try {
    return clip(inspect(v, { colors: false, depth: 4, maxArrayLength: 100, maxStringLength: MAX_TEXT }));
  } catch (e) {
    return '<value that cannot be shown: ' + String(e && e.message) + '>';
  }
}

// --- rewriting a cell --------------------------------------------------

// A cell runs as a vm.Script in the main context, whose completion value
// (that of the last expression statement) is the result, as in Node's
// REPL. Top-level let, const and class are rewritten to var first, so
// that they persist as globals and a cell can be run again without
// "Identifier 'x' has already been declared". A cell with top-level await
// runs in an async function instead: its last expression statement is
// returned, and its top-level declarations are copied to the globals when
// it ends. This needs a scanner of JavaScript's tokens (strings,
// templates, comments, regular expressions, brackets), not a parser.
const KEYWORDS_BEFORE_REGEX = new Set(['return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete', 'void',
  'throw', 'case', 'do', 'else', 'yield', 'await']);

function scan(src) {
  const toks = [];
  const stack = []; // open brackets; '${' for a template's substitution
  let i = 0;
  let nl = false;
  const n = src.length;
  const push = (type, start, end) => {
    toks.push({ type, value: src.slice(start, end), start, end, depth: stack.length, nl });
    nl = false;
  };
  const regexAllowed = () => {
    const t = toks[toks.length - 1];
    if (!t) return true;
    if (t.type === 'name') return KEYWORDS_BEFORE_REGEX.has(t.value);
    if (t.type === 'punct') return !/^[)\]}]$/.test(t.value) && t.value !== '++' && t.value !== '--';
    return false;
  };
  const template = (start) => { // i is after '`' or '}'; reads to '`' or '${'
    while (i < n) {
      const c = src[i];
      if (c === '\\') { i += 2; continue; }
      if (c === '`') { i++; push('tmpl', start, i); return; }
      if (c === '$' && src[i + 1] === '{') { i += 2; push('tmpl', start, i); stack.push('${'); return; }
      i++;
    }
    push('tmpl', start, n);
  };
  while (i < n) {
    const c = src[i];
    if (c === '\n' || c === '\r' || c === '\u2028' || c === '\u2029') { nl = true; i++; continue; }
    if (c === ' ' || c === '\t' || c === '\v' || c === '\f' || c === '\ufeff' || c === '\u00a0') { i++; continue; }
    const start = i;
    if (c === '/' && src[i + 1] === '/') { while (i < n && src[i] !== '\n') i++; continue; }
    if (c === '/' && src[i + 1] === '*') {
      const e = src.indexOf('*/', i + 2);
      const end = e < 0 ? n : e + 2;
      if (src.slice(i, end).includes('\n')) nl = true;
      i = end;
      continue;
    }
    if (c === '#' && i === 0 && src[1] === '!') { while (i < n && src[i] !== '\n') i++; continue; }
    if (c === '"' || c === "'") {
      i++;
      while (i < n && src[i] !== c && src[i] !== '\n') i += src[i] === '\\' ? 2 : 1;
      i++;
      push('str', start, Math.min(i, n));
      continue;
    }
    if (c === '`') { i++; template(start); continue; }
    if (c === '}' && stack[stack.length - 1] === '${') { stack.pop(); i++; template(start); continue; }
    if (/[A-Za-z_$\u0080-\uffff\\]/.test(c)) {
      while (i < n && /[\w$\u0080-\uffff\\]/.test(src[i])) i++;
      push('name', start, i);
      continue;
    }
    if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(src[i + 1] || ''))) {
      while (i < n && /[\w.]/.test(src[i])) i++;
      push('num', start, i);
      continue;
    }
    if (c === '/' && regexAllowed()) {
      i++;
      let cls = false;
      while (i < n && src[i] !== '\n') {
        const d = src[i];
        if (d === '\\') { i += 2; continue; }
        if (d === '[') cls = true;
        else if (d === ']') cls = false;
        else if (d === '/' && !cls) break;
        i++;
      }
      i++;
      while (i < n && /\w/.test(src[i])) i++;
      push('regex', start, Math.min(i, n));
      continue;
    }
    if (c === '(' || c === '[' || c === '{') { push('punct', i, i + 1); stack.push(c); i++; continue; }
    if (c === ')' || c === ']' || c === '}') { stack.pop(); i++; push('punct', start, i); continue; }
    const m = /^(?:>>>=|\.\.\.|===|!==|\*\*=|<<=|>>=|>>>|\?\?=|&&=|\|\|=|=>|==|!=|<=|>=|&&|\|\||\?\?|\?\.|\+\+|--|[-+*/%&|^]=|<<|>>|\*\*|.)/s
      .exec(src.slice(i, i + 4));
    i += m[0].length;
    push('punct', start, i);
  }
  return toks;
}

const DECL = new Set(['let', 'const', 'var']);
const NOT_EXPR_START = new Set(['let', 'const', 'var', 'class', 'function', 'async', 'if', 'for', 'while', 'do',
  'try', 'switch', 'return', 'throw', 'break', 'continue', 'import', 'export', 'else', 'catch', 'finally', 'case',
  'default', 'debugger', 'with']);

// statementStarts are the indexes of the tokens at the top level that
// begin a statement (or may: after a newline).
function statementStarts(toks) {
  const out = [];
  for (let j = 0; j < toks.length; j++) {
    const t = toks[j];
    if (t.depth !== 0 || (t.type === 'punct' && t.value === '}')) continue;
    const p = toks[j - 1];
    if (!p || (p.depth === 0 && p.type === 'punct' && (p.value === ';' || p.value === '}')) || (t.nl && p.depth === 0)) {
      out.push(j);
    }
  }
  return out;
}

// bindingNames adds the names a declaration binds, from toks[j] (after
// its keyword): the identifiers of its patterns, of each declarator.
function bindingNames(toks, j, names) {
  const is = (k, v) => toks[k] && toks[k].type === 'punct' && toks[k].value === v;
  // skipExpr passes an initializer: to a ',' or a closing bracket at depth d.
  const skipExpr = (k, d) => {
    while (k < toks.length && !(toks[k].depth === d && /^[,)\]};]$/.test(toks[k].value) && toks[k].type === 'punct')) k++;
    return k;
  };
  const pattern = (k) => {
    const t = toks[k];
    if (!t) return k;
    if (t.type === 'name') { names.add(t.value); return k + 1; }
    if (!is(k, '{') && !is(k, '[')) return k + 1;
    const d = t.depth;
    const obj = t.value === '{';
    k++;
    while (k < toks.length && !(toks[k].depth === d && toks[k].type === 'punct' && /^[}\]]$/.test(toks[k].value))) {
      if (is(k, ',')) { k++; continue; }
      if (is(k, '...')) k++;
      if (obj && is(k, '[')) { // a computed key: its value follows the ':'
        k = skipExpr(k + 1, d + 1) + 1;
        if (is(k, ':')) k = pattern(k + 1);
      } else if (obj && toks[k + 1] && is(k + 1, ':')) {
        k = pattern(k + 2);
      } else {
        k = pattern(k);
      }
      if (is(k, '=')) k = skipExpr(k + 1, d + 1);
      if (k < toks.length && toks[k].depth > d && !is(k, ',')) k = skipExpr(k, d + 1);
    }
    return k + 1;
  };
  let k = pattern(j);
  for (; k < toks.length; k++) {
    const t = toks[k];
    if (t.depth !== 0 || t.type !== 'punct') continue;
    if (t.value === ';') return;
    if (t.value === ',') k = pattern(k + 1) - 1;
  }
}

// rewrite applies the top-level declaration rewrite and says what the
// cell's last statement and top-level names are.
function rewrite(src) {
  const toks = scan(src);
  const starts = statementStarts(toks);
  const edits = []; // [pos, deleteCount, text]
  const names = new Set();
  let hasAwait = false;
  for (const t of toks) if (t.type === 'name' && t.value === 'await') hasAwait = true;
  for (let j = 0; j + 1 < toks.length; j++) {
    const t = toks[j];
    const prev = toks[j - 1];
    if (t.type === 'name' && t.value === 'import' && toks[j + 1].value === '(' && !(prev && prev.value === '.')) {
      edits.push([t.start, t.value.length, '__cellvmImport']);
    }
  }
  for (const j of starts) {
    const t = toks[j];
    const next = toks[j + 1];
    if (t.type !== 'name') continue;
    if (DECL.has(t.value) && next && (next.type === 'name' || next.value === '[' || next.value === '{')) {
      if (t.value !== 'var') edits.push([t.start, t.value.length, t.value === 'let' ? 'var' : 'var  ']);
      bindingNames(toks, j + 1, names);
    } else if (t.value === 'class' && next && next.type === 'name') {
      names.add(next.value);
      edits.push([t.start, 0, 'var ' + next.value + ' = ']);
      let k = j + 2;
      while (k < toks.length && !(toks[k].depth === 0 && toks[k].value === '{')) k++;
      let e = k + 1;
      while (e < toks.length && !(toks[e].depth === 0 && toks[e].value === '}')) e++;
      if (e < toks.length) edits.push([toks[e].end, 0, ';']);
    } else if (t.value === 'function' || (t.value === 'async' && next && next.value === 'function')) {
      let k = j + (t.value === 'async' ? 2 : 1);
      if (toks[k] && toks[k].value === '*') k++;
      if (toks[k] && toks[k].type === 'name') names.add(toks[k].value);
    }
  }
  const last = starts.length ? starts[starts.length - 1] : -1;
  const lt = toks[last];
  const ln = toks[last + 1];
  const lastIsDecl = last >= 0 && lt.type === 'name' && NOT_EXPR_START.has(lt.value) &&
    !(lt.value === 'import' && ln && (ln.value === '(' || ln.value === '.')) &&
    !(lt.value === 'async' && !(ln && ln.value === 'function'));
  const code = applyEdits(src, edits);
  return { code, toks: scan(code), names, hasAwait, lastIsDecl };
}

function applyEdits(src, edits) {
  let out = src;
  for (const [pos, del, text] of edits.slice().sort((a, b) => b[0] - a[0])) {
    out = out.slice(0, pos) + text + out.slice(pos + del);
  }
  return out;
}

const ENDS_EXPR = (t) => t.type !== 'punct' || /^(?:\)|\]|\}|\+\+|--)$/.test(t.value);

// asyncSource wraps a cell with top-level await in an async function that
// returns its last expression statement (if one is found that compiles)
// and copies its top-level declarations to the globals.
function asyncSource(r, filename) {
  const { code, toks, names } = r;
  const exportNames = [...names].filter((x) => /^[A-Za-z_$][\w$]*$/.test(x));
  const fin = exportNames.map((x) => `try{globalThis[${jsonStringify(x)}]=${x}}catch(e){}`).join('');
  const wrap = (body) => `(async () => {try {${body}\n} finally {${fin}}})()`;
  const starts = statementStarts(toks);
  let tries = 0;
  for (let s = starts.length - 1; s >= 0 && tries < 8; s--) {
    const j = starts[s];
    const t = toks[j];
    if (t.type === 'name' && NOT_EXPR_START.has(t.value)) break;
    if (t.type === 'punct' && !/^(?:\(|\[|!|~)$/.test(t.value)) {
      if (t.value === ';') continue;
      break;
    }
    const p = toks[j - 1];
    if (p && !(p.value === ';' || p.value === '}') && !ENDS_EXPR(p)) continue;
    let e = toks.length - 1;
    while (e > j && toks[e].value === ';' && toks[e].depth === 0) e--;
    let bad = false;
    for (let k = j; k <= e; k++) if (toks[k].depth === 0 && toks[k].value === ';') bad = true;
    if (bad) continue;
    tries++;
    const body = code.slice(0, t.start) + 'return (' + code.slice(t.start, toks[e].end) + '\n)' + code.slice(toks[e].end);
    const src = wrap(body);
    try {
      return { script: new vm.Script(src, { filename }), src };
    } catch (err) {
      // not an expression after all: try an earlier start
    }
  }
  const src = wrap(code);
  return { script: new vm.Script(src, { filename }), src };
}

// --- TypeScript ------------------------------------------------------

let ts = null;

class TypeScriptUnavailable extends Error {
  constructor(msg) { super(msg); this.name = 'TypeScriptUnavailable'; }
}

// transpile strips a TypeScript cell's types with TypeScript's own
// transpileModule (no type check: a type error does not stop a cell),
// loading the compiler on the first TypeScript cell.
function transpile(code) {
  if (!ts) {
    if (!TYPESCRIPT) throw new TypeScriptUnavailable('TypeScript cells need the typescript package; CELLVM_TYPESCRIPT is not set');
    try {
      ts = require(TYPESCRIPT);
    } catch (e) {
      throw new TypeScriptUnavailable(`TypeScript cells need the typescript package, and this image has none at ${TYPESCRIPT} (${String(e && e.code || e)}); JavaScript cells work`);
    }
  }
  const out = ts.transpileModule(code, {
    reportDiagnostics: false,
    compilerOptions: {
      module: ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      useDefineForClassFields: true,
      removeComments: false,
    },
  });
  return out.outputText.replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n');
}

// --- running a cell --------------------------------------------------

// cur is the running cell: interrupt() rejects its wait.
let cur = null;

processOn('SIGINT', () => {
  // A SIGINT while a cell's synchronous code runs is vm's (breakOnSigint);
  // this one came while the cell awaits, or while it was being compiled.
  if (cur && !cur.reporting) {
    cur.interrupted = true;
    if (cur.reject) cur.reject(new Interrupt());
  }
});

class Interrupt extends Error {
  constructor() { super('the cell was interrupted'); this.name = 'KeyboardInterrupt'; }
}

function errorFrame(e, filename) {
  if (e instanceof Interrupt || (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
    return { ev: 'error', name: 'KeyboardInterrupt', value: 'the cell was interrupted', traceback: [] };
  }
  if (isNativeError(e) || (e && typeof e === 'object' && typeof e.stack === 'string')) {
    let stack = String(e.stack || '').split('\n');
    // Frames of the driver say nothing about the cell.
    const cut = stack.findIndex((l) => /^\s+at /.test(l) && (l.includes(__filename) || /\(node:vm:/.test(l)));
    if (cut >= 0) stack = stack.slice(0, cut);

    let value = String(e.message === undefined ? '' : e.message);
    if (e instanceof SyntaxError && /^Cannot use import statement outside a module/.test(value)) {
      value += ' (a cell is a script, as in the REPL: use require() or await import())';
    }
    return {
      ev: 'error',
      name: clip(String(e.name || (e.constructor && e.constructor.name) || 'Error')),
      value: clip(value),
      traceback: stack.map(clip).slice(0, 200),
    };
  }
  return { ev: 'error', name: 'Uncaught', value: textOf(e), traceback: [] };
}

async function runCell(n, code, lang) {
  const filename = `<cell ${n}>`;
  const c = { n, interrupted: false, reporting: false, reject: null, errors: [] };
  cur = c;
  send({ ev: 'started', n });
  let err = null;
  let value;
  let hasValue = false;
  try {
    if (lang === 'typescript') code = transpile(code);
    const r = rewrite(code);
    let script;
    let isAsync = false;
    try {
      script = new vm.Script(r.code, { filename });
      // A cell that ends with a declaration has no value (as in Python),
      // not that of an earlier expression statement.
      if (r.lastIsDecl) script = new vm.Script(r.code + '\n;void 0', { filename });
    } catch (e) {
      if (!(e instanceof SyntaxError) || !r.hasAwait) throw e;
      try {
        ({ script } = asyncSource(r, filename));
        isAsync = true;
      } catch (e2) {
        throw e; // the cell's own SyntaxError says more
      }
    }
    if (c.interrupted) throw new Interrupt();
    const out = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (isAsync) {
      value = await new Promise((resolve, reject) => {
        c.reject = reject;
        if (c.interrupted) reject(new Interrupt());
        out.then(resolve, reject);
      });
    } else {
      value = out;
    }
    hasValue = value !== undefined;
  } catch (e) {
    err = e;
  }
  // Errors of callbacks and rejected promises the cell left are its own,
  // if they came before it ended.
  await new Promise((resolve) => setImmediate(resolve));
  c.reporting = true;
  if (!err && c.errors.length) err = c.errors[0];
  const interrupted = c.interrupted || (err && (err instanceof Interrupt || err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED'));
  if (err) {
    send(errorFrame(err, filename));
  } else if (hasValue) {
    send({ ev: 'result', main: true, data: { 'text/plain': textOf(value) } });
  }
  cur = null;
  send({ ev: 'done', status: err ? 'error' : 'ok', interrupted: !!interrupted });
}

function uncaught(e, what) {
  if (cur && !cur.reporting) {
    cur.errors.push(e);
    return;
  }
  try {
    process.stderr.write(`${what} (after its cell ended): ${e && e.stack ? e.stack : textOf(e)}\n`);
  } catch (_) {
    // nothing to say it on
  }
}
processOn('uncaughtException', (e) => uncaught(e, 'Uncaught exception'));
processOn('unhandledRejection', (e) => uncaught(e, 'Unhandled rejection'));

// --- commands --------------------------------------------------------

const queue = [];
let busy = false;

async function handle(line) {
  let cmd;
  try {
    cmd = jsonParse(line);
  } catch (e) {
    return; // garbage: skipped, as the supervisor does
  }
  if (!cmd || typeof cmd !== 'object') return;
  switch (cmd.op) {
    case 'exec':
      try {
        await runCell(cmd.n | 0, String(cmd.code || ''), cmd.lang === 'typescript' ? 'typescript' : 'javascript');
      } catch (e) {
        // The driver's own failure (a result that cannot be sent): the
        // cell still ends, so the supervisor is not left waiting.
        if (cur) {
          cur = null;
          send({ ev: 'error', name: 'DriverError', value: clip(String(e && e.stack || e)), traceback: [] });
          send({ ev: 'done', status: 'error', interrupted: false });
        }
      }
      break;
    case 'reap':
      send({ ev: 'reaped', n: 0 }); // Node reaps its own children
      break;
    case 'reseed':
      reseed();
      send({ ev: 'reseeded' });
      break;
    default:
  }
}

async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) await handle(queue.shift());
  busy = false;
}

let ctl;
try {
  ctl = new net.Socket({ fd: ctlFd, readable: true, writable: false });
} catch (e) {
  process.stderr.write(`cellvm driver: no command pipe on fd ${ctlFd}: ${e.message}\n`);
  process.exit(2);
}
let pending = '';
ctl.setEncoding('utf8');
ctl.on('data', (s) => {
  pending += s;
  let i;
  while ((i = pending.indexOf('\n')) >= 0) {
    queue.push(pending.slice(0, i));
    pending = pending.slice(i + 1);
  }
  pump();
});
ctl.on('end', () => process.exit(0));
ctl.on('error', () => process.exit(0));

send({ ev: 'ready', pid: process.pid, version: process.versions.node });

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

const { rewrite, asyncSource } = require(path.join(__dirname, 'cellvm_rewrite.js'));

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
    const cut = stack.findIndex((l) => /^\s+at /.test(l) && (l.includes(path.join(__dirname, 'cellvm_')) || /\(node:vm:/.test(l)));
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

// Sandbox: a cellvm sandbox (a microVM with a persistent Python
// interpreter) driven from Node.

import { Readable } from 'node:stream';
import { ConnectionLost, NotFound, ProtocolError, TooLarge } from './errors.js';
import { Execution, Result, checkpointInfo, commandResult, contextInfo, executionError, imageInfo, sandboxInfo, snapshotInfo, workspaceInfo } from './models.js';
import {
  Connection, MAX_EVENT_LINE_BYTES, answer, filesPath, imagePath, jsonCall, readBody, sandboxPath, snapshotPath, workspacePath,
} from './transport.js';
import { addCalls, connectPort, wantsProcess } from './procs.js';

/** A cell's time limit when runCode is given none; the daemon's default. */
export const DEFAULT_CELL_TIMEOUT_MS = 60_000;
/**
 * What a cell's call allows on top of the cell's own limit for the guest to
 * start its interpreter (a first cell, a cell after a restart or a lost
 * interpreter): the guest's agent waits up to three minutes for it, and
 * that wait is not the cell's.
 */
export const START_ALLOWANCE_MS = 180_000;
const DEFAULT_CREATE_TIMEOUT_MS = 180_000;
/** How long a pause or a snapshot may take: the daemon's own bound on writing a sandbox's memory to disk. */
const DEFAULT_SNAPSHOT_TIMEOUT_MS = 300_000;
/** How a sandbox without a snapshot starts: 'template' restores the daemon's template (booting when there is none), 'cold' boots. */
const START_VALUES = ['template', 'cold'];
const DEFAULT_FILE_TIMEOUT_MS = 300_000;
const DEFAULT_MAX_READ_BYTES = 1 << 30;

/** Symbol.asyncDispose where the runtime has it (Node >= 20.4), else the registered symbol. */
export const asyncDispose = Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose');

function conn(opts = {}) {
  return opts.connection ?? new Connection({ socketPath: opts.socketPath });
}

function positiveMs(v, what) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) throw new RangeError(`${what} must be a positive number of milliseconds, not ${v}`);
  return Math.ceil(v);
}

function networkField(network) {
  if (network === undefined || network === null) return undefined;
  const allow = Array.isArray(network) ? network : network.allow;
  if (!Array.isArray(allow) || !allow.every((e) => typeof e === 'string')) {
    throw new TypeError('network is a list of allowlist entries (strings) or {allow: [...]}');
  }
  return { allow: [...allow] };
}

const clip = (s) => (s.length > 64 ? `${s.slice(0, 64)}...` : s);

/** A snapshot id, checked before it is sent: "snap-" and 12 lowercase hex digits. */
function snapshotId(id) {
  if (typeof id !== 'string') throw new TypeError(`a snapshot id is a string, not ${id === null ? 'null' : typeof id}`);
  if (!/^snap-[0-9a-f]{12}$/.test(id)) {
    throw new RangeError(`${JSON.stringify(clip(id))} is not a snapshot id (snap- and 12 hex digits; Sandbox.listSnapshots() lists them)`);
  }
  return id;
}

/**
 * A workspace's or an image's name (what: 'a workspace name'), checked before it is sent: 1 to 64 of a-z, 0-9, '-',
 * '_' and '.', starting with a letter or digit (it names a file or a directory on the daemon's host).
 */
function hostName(name, what) {
  if (typeof name !== 'string') throw new TypeError(`${what} is a string, not ${name === null ? 'null' : typeof name}`);
  if (!/^[a-z0-9][a-z0-9._-]{0,63}$/.test(name)) {
    throw new RangeError(`${JSON.stringify(clip(name))} is not ${what} (1 to 64 of a-z, 0-9, '-', '_' and '.', starting with a letter or digit)`);
  }
  return name;
}

const workspaceName = (name) => hostName(name, 'a workspace name');
/** An image name ('default' is the daemon's own image). */
const imageName = (name) => hostName(name, 'an image name');

function startField(start) {
  if (start === undefined || start === null) return undefined;
  if (typeof start !== 'string') throw new TypeError(`start is a string ('template' or 'cold'), not ${typeof start}`);
  if (!START_VALUES.includes(start)) throw new RangeError(`start is 'template' or 'cold' (or unset: the daemon's choice), not ${JSON.stringify(clip(start))}`);
  return start;
}

/** A session's language and context as a request's fields; the daemon checks their values. */
function sessionBody(language, context) {
  const out = {};
  if (language !== undefined && language !== null) {
    if (typeof language !== 'string') throw new TypeError('language is a string: python, javascript (js), typescript (ts) or bash');
    if (language) out.language = language;
  }
  if (context !== undefined && context !== null) {
    if (typeof context !== 'string') throw new TypeError("context is a string, a session's name");
    if (context) out.context = context;
  }
  return out;
}

/** DELETE, resolving to false when there was nothing to delete. */
async function deleteCall(c, path, timeoutMs) {
  try {
    await jsonCall(c, 'DELETE', path, undefined, { want: [204], timeoutMs });
    return true;
  } catch (e) {
    if (e instanceof NotFound) return false;
    throw e;
  }
}

function envField(env) {
  if (env === undefined || env === null) return undefined;
  if (typeof env !== 'object' || !Object.values(env).every((v) => typeof v === 'string')) throw new TypeError('env is an object of strings');
  return { ...env };
}

function argvOf(cmd, cwd, envs) {
  let argv;
  if (typeof cmd === 'string') argv = ['sh', '-c', cmd];
  else if (Array.isArray(cmd) && cmd.length && cmd.every((a) => typeof a === 'string')) argv = [...cmd];
  else throw new TypeError('a command is a shell string or a non-empty array of strings (argv)');
  if (envs && Object.keys(envs).length) argv = ['env', ...Object.entries(envField(envs)).map(([k, v]) => `${k}=${v}`), ...argv];
  if (cwd !== undefined && cwd !== null) argv = ['sh', '-c', 'cd -- "$1" || exit 125; shift; exec "$@"', 'sh', cwd, ...argv];
  return argv;
}

/** Streams a cell: callbacks get events in order (awaited), the end's result is returned. */
async function streamCell(res, dispatch) {
  if (res.statusCode !== 200) return answer(res, [200]);
  const ctype = String(res.headers['content-type'] ?? '').split(';')[0].trim();
  if (ctype !== 'application/x-ndjson') return answer(res, [200]);
  let buf = Buffer.alloc(0);
  let events = 0;
  try {
    for await (const chunk of res) {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      let i;
      while ((i = buf.indexOf(10)) >= 0) {
        const line = buf.subarray(0, i).toString('utf8');
        buf = buf.subarray(i + 1);
        if (!line.trim()) continue;
        let ev;
        try {
          ev = JSON.parse(line);
        } catch (e) {
          throw new ProtocolError(`a cell event is not JSON: ${e.message}`);
        }
        if (!ev || typeof ev.type !== 'string') throw new ProtocolError('a cell event is not an object with a type');
        if (ev.type === 'end') {
          if (!ev.end || typeof ev.end.status !== 'string') throw new ProtocolError("the cell's result is not an object with a status");
          return ev.end;
        }
        events++;
        await dispatch(ev);
      }
      if (buf.length > MAX_EVENT_LINE_BYTES) throw new ProtocolError(`an event line is longer than ${MAX_EVENT_LINE_BYTES} bytes`);
    }
  } catch (e) {
    if (!(e instanceof Error) || e.code === 'ECONNRESET' || e.code === 'ERR_STREAM_PREMATURE_CLOSE' || e.message === 'aborted') {
      throw new ConnectionLost(`the connection broke while the cell ran, after ${events} event(s) (${e.message}); the cell may have run in part, so its variables may have changed`);
    }
    throw e;
  }
  throw new ConnectionLost(`the cell's event stream ended after ${events} event(s) without its end event; the cell may have run in part, so its variables may have changed`);
}

function dispatcher({ onStdout, onStderr, onResult, onError }) {
  return async (ev) => {
    if (ev.type === 'stdout' && onStdout) return onStdout(String(ev.text ?? ''));
    if (ev.type === 'stderr' && onStderr) return onStderr(String(ev.text ?? ''));
    if (ev.type === 'result' && onResult && ev.result) return onResult(new Result(ev.result));
    if (ev.type === 'error' && onError) {
      const e = executionError(ev.error);
      if (e) return onError(e);
    }
    return undefined;
  };
}

function uploadSource(data) {
  if (typeof data === 'string') data = Buffer.from(data, 'utf8');
  if (data instanceof ArrayBuffer) data = new Uint8Array(data);
  if (data instanceof Uint8Array) return { body: data, length: data.length };
  if (data instanceof Readable || (data && typeof data.pipe === 'function')) return { body: data, length: null };
  if (data && typeof data[Symbol.asyncIterator] === 'function') return { body: Readable.from(data), length: null };
  throw new TypeError('files.write takes a string, a Uint8Array, an ArrayBuffer or a readable stream');
}

/** E2B's template names that mean the daemon's own image. */
const DEFAULT_TEMPLATES = ['base', 'code-interpreter-v1', 'code-interpreter', 'default'];
/** The states a list may filter by. */
const STATES = ['starting', 'running', 'paused', 'lost', 'stopping'];
const LABEL_KEY = /^[A-Za-z0-9._\/:-]{1,128}$/;

/** A sandbox's labels (E2B's metadata), checked as the daemon checks them. */
function labelsField(v, what) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v) || !Object.values(v).every((x) => typeof x === 'string')) {
    throw new TypeError(`${what} is an object of string values`);
  }
  const keys = Object.keys(v);
  if (keys.length > 64) throw new TypeError(`${what} has ${keys.length} entries, at most 64`);
  for (const k of keys) {
    if (!LABEL_KEY.test(k)) throw new TypeError(`${what} key ${JSON.stringify(k.slice(0, 64))}: 1 to 128 of letters, digits and . _ - / :`);
    // eslint-disable-next-line no-control-regex
    if (Buffer.byteLength(v[k]) > 1024 || /[\u0000-\u001f\u007f]/.test(v[k])) {
      throw new TypeError(`${what} ${JSON.stringify(k.slice(0, 64))}'s value: at most 1024 bytes of text without control characters`);
    }
  }
  return { ...v };
}

/** The most checkpoints a sandbox keeps (the daemon's bound). */
const MAX_CHECKPOINT_KEEP = 32;

function count(v, what, high) {
  if (!Number.isInteger(v)) throw new TypeError(`${what} is an integer`);
  if (v < 1 || (high !== undefined && v > high)) throw new RangeError(`${what} ${v} is out of range 1..${high ?? ''}`);
  return v;
}

/** create's checkpoints: true (every cell) or { everyCell, keep }; null, undefined or false: off. */
function checkpointsField(v) {
  if (v === undefined || v === null || v === false) return null;
  if (v === true) return { every_cell: true };
  if (typeof v !== 'object' || Array.isArray(v)) throw new TypeError('checkpoints is true or { everyCell, keep }');
  const unknown = Object.keys(v).filter((k) => k !== 'everyCell' && k !== 'keep');
  if (unknown.length) throw new TypeError(`checkpoints has unknown keys ${unknown.join(', ')}; it takes everyCell and keep`);
  const out = {};
  if (v.everyCell !== undefined && v.everyCell !== null) {
    if (typeof v.everyCell !== 'boolean') throw new TypeError('checkpoints.everyCell is a boolean');
    out.every_cell = v.everyCell;
  }
  if (v.keep !== undefined && v.keep !== null) out.keep = count(v.keep, 'checkpoints.keep', MAX_CHECKPOINT_KEEP);
  return out;
}

/** create's checkpoint (a branch): { sandbox, n }, the sandbox an id or a Sandbox. */
function checkpointRef(v) {
  if (typeof v !== 'object' || Array.isArray(v)) throw new TypeError('checkpoint is { sandbox, n }');
  const id = typeof v.sandbox === 'object' && v.sandbox !== null ? v.sandbox.sandboxId : v.sandbox;
  if (typeof id !== 'string' || !id || id.length > 128) throw new TypeError('checkpoint.sandbox is a sandbox id');
  return { sandbox: id, n: count(v.n, 'checkpoint.n') };
}

function oneOf(a, b, names) {
  if (a !== undefined && a !== null && b !== undefined && b !== null) throw new TypeError(`give one of ${names}, not both`);
  return a ?? b;
}

/**
 * The create's fields that E2B names: timeoutMs is the sandbox's lifetime (ttl_s, rounded up to whole seconds),
 * template the image (E2B's 'base' and 'code-interpreter-v1' are the daemon's own), metadata the labels, envs the env.
 */
function createFields(opts) {
  const cfg = {};
  if (opts.timeoutMs !== undefined && opts.timeoutMs !== null) {
    if (!Number.isFinite(opts.timeoutMs) || !(opts.timeoutMs > 0)) throw new TypeError('timeoutMs is the sandbox\'s lifetime, a positive number of milliseconds');
    if (opts.ttlS !== undefined) throw new TypeError('give one of ttlS and timeoutMs (the lifetime), not both');
    cfg.ttl_s = Math.max(1, Math.ceil(opts.timeoutMs / 1000));
  }
  const labels = labelsField(oneOf(opts.metadata, opts.labels, 'metadata and labels'), 'metadata');
  if (labels && Object.keys(labels).length) cfg.labels = labels;
  if (opts.envs !== undefined && opts.envs !== null) {
    if (opts.env !== undefined && opts.env !== null) throw new TypeError('give one of env and envs, not both');
    opts.env = opts.envs;
  }
  if (opts.template !== undefined && opts.template !== null) {
    if (typeof opts.template !== 'string') throw new TypeError('template is a string');
    if (!DEFAULT_TEMPLATES.includes(opts.template)) {
      if (opts.image !== undefined && opts.image !== null) throw new TypeError('give one of image and template, not both');
      opts.image = opts.template;
    }
  }
  return cfg;
}

export class Sandbox {
  /** @private */
  constructor(connection, info) {
    this._conn = connection;
    this.sandboxId = info.sandboxId;
    this.created = info;
    const self = this;
    /** Programs run outside the interpreter. */
    this.commands = {
      /** Runs a command: a string goes to sh -c, an array is the argv. */
      /**
       * Plainly it resolves to the result once the command ends (a failing command is a result, stdin may be the
       * input). E2B's shape: with onStdout/onStderr, user or tag it runs as a process and rejects with
       * CommandExitError when the exit code is not 0; with background: true it resolves to a CommandHandle as soon
       * as the process runs; stdin: true keeps its input open for sendStdin; timeoutMs (0: none) kills it.
       */
      async run(cmd, opts = {}) {
        if (wantsProcess(opts)) return self.commands.start(cmd, { timeoutMs: DEFAULT_CELL_TIMEOUT_MS, ...opts });
        const { stdin, timeoutMs = DEFAULT_CELL_TIMEOUT_MS, cwd, envs, requestTimeoutMs } = opts;
        const payload = { argv: argvOf(cmd, cwd, envs) };
        if (typeof stdin === 'string') payload.stdin = stdin;
        else if (stdin instanceof Uint8Array) {
          const text = Buffer.from(stdin).toString('utf8');
          if (Buffer.from(text, 'utf8').equals(Buffer.from(stdin))) payload.stdin = text;
          else payload.stdin_base64 = Buffer.from(stdin).toString('base64');
        } else if (stdin !== undefined && stdin !== null) throw new TypeError('stdin is a string or a Uint8Array');
        const ms = positiveMs(timeoutMs, 'timeoutMs');
        if (ms !== undefined) payload.timeout_ms = ms;
        return jsonCall(self._conn, 'POST', sandboxPath(self.sandboxId, 'exec'), payload, {
          timeoutMs: requestTimeoutMs ?? (ms ?? DEFAULT_CELL_TIMEOUT_MS) + self._conn.timeoutMs,
        }).then(commandResult);
      },
    };
    /** The sandbox's files; relative paths are under /workspace. */
    this.files = {
      /** Writes a string (UTF-8), bytes or a stream; resolves to the bytes written. */
      async write(path, data, { timeoutMs = DEFAULT_FILE_TIMEOUT_MS } = {}) {
        const { body, length } = uploadSource(data);
        return self._conn.request({
          method: 'PUT', path: filesPath(self.sandboxId, path), body, length, timeoutMs,
          headers: { 'Content-Type': 'application/octet-stream', Expect: '100-continue' },
          handle: (res) => answer(res, [200]),
        }).then((v) => Number(v?.bytes ?? 0));
      },
      /** Resolves to the file's bytes (TooLarge beyond maxBytes). */
      async read(path, { maxBytes = DEFAULT_MAX_READ_BYTES, timeoutMs = DEFAULT_FILE_TIMEOUT_MS } = {}) {
        return self._conn.request({
          method: 'GET', path: filesPath(self.sandboxId, path), timeoutMs,
          handle: async (res) => {
            if (res.statusCode !== 200) return answer(res, [200]);
            let data;
            try {
              data = await readBody(res, maxBytes, `the file ${path}`);
            } catch (e) {
              if (e instanceof ConnectionLost) {
                throw new ConnectionLost(`the download of ${path} was cut off (${e.message}): the daemon failed during the transfer; nothing partial is returned`);
              }
              if (e instanceof ProtocolError) {
                throw new TooLarge(`${e.message}; pass a larger maxBytes to read it`);
              }
              throw e;
            }
            return new Uint8Array(data.buffer, data.byteOffset, data.length);
          },
        });
      },
    };
    /** The egress allowlist. */
    this.network = {
      /** Replaces the allowlist; an empty list closes egress. */
      async set(allow) {
        return jsonCall(self._conn, 'PUT', sandboxPath(self.sandboxId, 'network'), networkField(allow), { want: [204] }).then(() => undefined);
      },
    };
    addCalls(this);
  }

  get id() { return this.sandboxId; }

  /**
   * Connects to a TCP port a process in the sandbox listens on and resolves to the connected socket (a
   * net.Socket, a Duplex); CellvmError with status 502 and code port_closed when nothing listens there.
   */
  connectPort(port, opts) { return connectPort(this, port, opts); }

  /**
   * Creates a sandbox and resolves once it runs.
   * @param {import('./index.js').CreateOptions} [opts]
   */
  static async create(template, opts) {
    // E2B's form: create(template?, opts?).
    if (typeof template === 'string') opts = { ...(opts ?? {}), template };
    else opts = { ...(template ?? {}) };
    const c = conn(opts);
    const cfg = createFields(opts);
    for (const [k, wire] of [['vcpus', 'vcpus'], ['memoryMiB', 'memory_mib'], ['ttlS', 'ttl_s'], ['idleTimeoutS', 'idle_timeout_s']]) {
      if (opts[k] !== undefined) {
        if (!Number.isInteger(opts[k])) throw new TypeError(`${k} must be an integer`);
        cfg[wire] = opts[k];
      }
    }
    const net = networkField(opts.network);
    if (net) cfg.network = net;
    const env = envField(opts.env);
    if (env && Object.keys(env).length) cfg.env = env;
    const start = startField(opts.start);
    if (start) cfg.start = start;
    if (opts.snapshot !== undefined && opts.snapshot !== null) cfg.snapshot = snapshotId(opts.snapshot);
    if (opts.workspace !== undefined && opts.workspace !== null) cfg.workspace = workspaceName(opts.workspace);
    if (opts.image !== undefined && opts.image !== null) cfg.image = imageName(opts.image);
    const cc = checkpointsField(opts.checkpoints);
    if (cc) cfg.checkpoints = cc;
    if (opts.checkpoint !== undefined && opts.checkpoint !== null) cfg.checkpoint = checkpointRef(opts.checkpoint);
    const raw = await jsonCall(c, 'POST', '/v1/sandboxes', cfg, { want: [201], timeoutMs: (opts.requestTimeoutMs ?? DEFAULT_CREATE_TIMEOUT_MS) + c.timeoutMs });
    return new this(c, sandboxInfo(raw));
  }

  /**
   * The daemon's sandboxes (a tenant's own), oldest first, filtered: every label of metadata must match, and the
   * state must be one of state (a string or an array). E2B's { query: { metadata, state } } is taken too.
   */
  static async list(opts = {}) {
    const c = conn(opts);
    const q = opts.query ?? opts;
    const params = new URLSearchParams();
    const labels = labelsField(q.metadata, 'metadata');
    for (const k of Object.keys(labels ?? {}).sort()) params.append('label', `${k}=${labels[k]}`);
    if (q.state !== undefined && q.state !== null) {
      const states = typeof q.state === 'string' ? [q.state] : q.state;
      if (!Array.isArray(states) || !states.every((x) => STATES.includes(x))) {
        throw new TypeError(`state is one of ${STATES.join(', ')}, or an array of them`);
      }
      for (const st of states) params.append('state', st);
    }
    const qs = params.toString();
    const v = await jsonCall(c, 'GET', '/v1/sandboxes' + (qs ? '?' + qs : ''));
    return (v?.sandboxes ?? []).map(sandboxInfo);
  }

  /** The daemon's { version, commit, go } (GET /v1/version). */
  static async serverVersion(opts = {}) {
    const c = conn(opts);
    return jsonCall(c, 'GET', '/v1/version');
  }

  /**
   * E2B's setTimeout: the sandbox lives timeoutMs more from now, whatever its TTL said (whole seconds, rounded up;
   * at most the daemon's cap). Resolves to its info, whose config.ttl_s is then its whole lifetime.
   */
  async setTimeout(timeoutMs) {
    if (!Number.isFinite(timeoutMs) || !(timeoutMs > 0)) throw new TypeError('timeoutMs is a positive number of milliseconds');
    const raw = await jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'ttl'), { ttl_s: Math.max(1, Math.ceil(timeoutMs / 1000)) });
    return sandboxInfo(raw);
  }

  /** Takes up an existing sandbox by id (NotFound if there is none). */
  static async connect(id, opts = {}) {
    const c = conn(opts);
    return new this(c, sandboxInfo(await jsonCall(c, 'GET', sandboxPath(id))));
  }


  /** Every snapshot of the daemon, oldest first. */
  static async listSnapshots(opts = {}) {
    const c = conn(opts);
    const v = await jsonCall(c, 'GET', '/v1/snapshots');
    return (Array.isArray(v) ? v : []).filter((s) => s && typeof s === 'object').map(snapshotInfo);
  }

  /** Describes one snapshot (NotFound if there is none). */
  static async getSnapshot(id, opts = {}) {
    const path = snapshotPath(snapshotId(id));
    return snapshotInfo(await jsonCall(conn(opts), 'GET', path));
  }

  /** Deletes a snapshot (forks of it keep running); resolves to false when it was already gone. */
  static async deleteSnapshot(id, opts = {}) {
    const path = snapshotPath(snapshotId(id));
    return deleteCall(conn(opts), path);
  }

  /** Every workspace of the daemon, by name, with the sandbox that holds it. */
  static async listWorkspaces(opts = {}) {
    const v = await jsonCall(conn(opts), 'GET', '/v1/workspaces');
    return (Array.isArray(v) ? v : []).filter((w) => w && typeof w === 'object').map(workspaceInfo);
  }

  /** Deletes a workspace and its files (Busy while a sandbox holds it); resolves to false when it was already gone. */
  static async deleteWorkspace(name, opts = {}) {
    const path = workspacePath(workspaceName(name));
    return deleteCall(conn(opts), path);
  }

  /** Every root image of the daemon, the default first, with its manifest's Python and modules and how many sandboxes use it. */
  static async listImages(opts = {}) {
    const v = await jsonCall(conn(opts), 'GET', '/v1/images');
    return (Array.isArray(v) ? v : []).filter((i) => i && typeof i === 'object').map(imageInfo);
  }

  /** Deletes a built image (Busy while a sandbox or a snapshot uses it, Invalid for 'default'); resolves to false when it was already gone. */
  static async deleteImage(name, opts = {}) {
    const path = imagePath(imageName(name));
    return deleteCall(conn(opts), path);
  }

  /**
   * Runs a cell in one of the sandbox's sessions (state persists between calls). language is
   * 'python' (the default), 'javascript' ('js'), 'typescript' ('ts') or 'bash': each language has
   * its own session, started by its first cell; context names another session of the language
   * (createContext). timeoutMs is the cell's limit; the call as a whole may also take the
   * interpreter's start-up (START_ALLOWANCE_MS) unless requestTimeoutMs says
   * otherwise. Events go to the callbacks as they happen, awaited in order; a callback
   * that throws ends the call, which interrupts the cell.
   */
  async runCode(code, { language, context, timeoutMs = DEFAULT_CELL_TIMEOUT_MS, onStdout, onStderr, onResult, onError, requestTimeoutMs } = {}) {
    if (typeof code !== 'string') throw new TypeError('code is a string of source');
    const session = sessionBody(language, context);
    const ms = positiveMs(timeoutMs, 'timeoutMs');
    const payload = { code };
    if (ms !== undefined) payload.timeout_ms = ms;
    Object.assign(payload, session);
    const body = Buffer.from(JSON.stringify(payload));
    const dispatch = dispatcher({ onStdout, onStderr, onResult, onError });
    return this._conn.request({
      method: 'POST', path: sandboxPath(this.sandboxId, 'cells'), body, length: body.length,
      headers: { 'Content-Type': 'application/json', Accept: 'application/x-ndjson' },
      timeoutMs: requestTimeoutMs ?? (ms ?? DEFAULT_CELL_TIMEOUT_MS) + START_ALLOWANCE_MS + this._conn.timeoutMs,
      handle: (res) => streamCell(res, dispatch),
    }).then((raw) => new Execution(raw));
  }

  /** Interrupts the running cell (it ends with KeyboardInterrupt, variables kept). */
  interrupt() {
    return jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'interrupt'), undefined, { want: [204] }).then(() => undefined);
  }

  /**
   * Replaces a session's interpreter with a fresh one (and waits for it to start): its variables are
   * lost, other sessions keep theirs. Without options, Python's default session.
   */
  restart({ language, context } = {}) {
    const session = sessionBody(language, context);
    const body = Object.keys(session).length ? session : undefined;
    return jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'restart'), body, { want: [204], timeoutMs: START_ALLOWANCE_MS + this._conn.timeoutMs }).then(() => undefined);
  }

  /**
   * Creates a named session of language (a context, as E2B calls it) with its own variables, in cwd
   * (an absolute path in the sandbox; default the sandbox's directory); without name the daemon makes
   * one up. Run cells in it with runCode(code, { language, context: info.name }).
   */
  async createContext({ language = 'python', name, cwd } = {}) {
    const body = sessionBody(language, name);
    if (body.context !== undefined) { body.name = body.context; delete body.context; }
    if (cwd !== undefined) {
      if (typeof cwd !== 'string') throw new TypeError('cwd is a string');
      if (cwd) body.cwd = cwd;
    }
    return contextInfo(await jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'contexts'), body, { want: [200, 201] }));
  }

  /** Lists the sandbox's sessions: each language's default one once used, and the named ones. */
  async listContexts() {
    const v = await jsonCall(this._conn, 'GET', sandboxPath(this.sandboxId, 'contexts'));
    return (Array.isArray(v) ? v : []).filter((c) => c && typeof c === 'object').map(contextInfo);
  }

  /** Ends a named session and its program (its variables are lost); a default one cannot be removed (restart it). */
  async removeContext(name, { language = 'python' } = {}) {
    if (typeof name !== 'string' || !name) throw new TypeError("a context's name is a non-empty string");
    sessionBody(language, name);
    const path = sandboxPath(this.sandboxId, 'contexts', name) + '?' + new URLSearchParams({ language });
    await jsonCall(this._conn, 'DELETE', path, undefined, { want: [204] });
  }

  /**
   * Writes the sandbox to disk and ends its VM, whose memory goes back to the host; its state reads
   * 'paused'. resume(), or any cell, command or file call, brings it back with its variables and files.
   * Busy when it is already paused or a cell is running.
   */
  pause({ timeoutMs = DEFAULT_SNAPSHOT_TIMEOUT_MS } = {}) {
    return jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'pause'), undefined, { want: [204], timeoutMs: timeoutMs + this._conn.timeoutMs }).then(() => undefined);
  }

  /** Restores a paused sandbox (Busy when it is not paused). */
  resume({ timeoutMs = DEFAULT_CREATE_TIMEOUT_MS } = {}) {
    return jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'resume'), undefined, { want: [204], timeoutMs: timeoutMs + this._conn.timeoutMs }).then(() => undefined);
  }

  /**
   * Records a checkpoint of the whole machine now and resolves to its CheckpointInfo. Invalid for a sandbox
   * created without checkpoints; Busy while a cell runs.
   */
  checkpoint({ timeoutMs = DEFAULT_SNAPSHOT_TIMEOUT_MS } = {}) {
    return jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'checkpoints'), undefined, { want: [201], timeoutMs: timeoutMs + this._conn.timeoutMs }).then(checkpointInfo);
  }

  /** The sandbox's kept checkpoints, oldest first. */
  async checkpoints() {
    const v = await jsonCall(this._conn, 'GET', sandboxPath(this.sandboxId, 'checkpoints'));
    return (Array.isArray(v?.checkpoints) ? v.checkpoints : []).filter((c) => c && typeof c === 'object').map(checkpointInfo);
  }

  /**
   * Brings the sandbox back to checkpoint n (memory, variables, files, execution count) in the same sandbox, drops
   * the checkpoints after it, and resolves to its CheckpointInfo. NotFound when it is not kept. What the sandbox did
   * outside its VM (network calls) is not undone.
   */
  async restoreCheckpoint(n, { timeoutMs = DEFAULT_CREATE_TIMEOUT_MS } = {}) {
    const path = sandboxPath(this.sandboxId, 'checkpoints', String(count(n, 'a checkpoint\'s n')), 'restore');
    return checkpointInfo(await jsonCall(this._conn, 'POST', path, undefined, { want: [200], timeoutMs: timeoutMs + this._conn.timeoutMs }));
  }

  /**
   * Undoes the last cell: restores the checkpoint before the last one, drops the last, and resolves to the restored
   * CheckpointInfo. Repeated undos walk back; NotFound with fewer than two kept.
   */
  async undo({ timeoutMs = DEFAULT_CREATE_TIMEOUT_MS } = {}) {
    const path = sandboxPath(this.sandboxId, 'checkpoints', 'undo');
    return checkpointInfo(await jsonCall(this._conn, 'POST', path, undefined, { want: [200], timeoutMs: timeoutMs + this._conn.timeoutMs }));
  }

  /**
   * Saves the sandbox's machine (memory, variables, files) while it keeps running and resolves to its
   * SnapshotInfo; Sandbox.create({ snapshot: info.snapshotId }) forks it. Busy while a cell runs; Full
   * when the daemon's snapshot disk cap is reached.
   */
  snapshot({ timeoutMs = DEFAULT_SNAPSHOT_TIMEOUT_MS } = {}) {
    return jsonCall(this._conn, 'POST', sandboxPath(this.sandboxId, 'snapshot'), undefined, { want: [201], timeoutMs: timeoutMs + this._conn.timeoutMs }).then(snapshotInfo);
  }

  /** The sandbox's state, config and usage. */
  info() {
    return jsonCall(this._conn, 'GET', sandboxPath(this.sandboxId)).then(sandboxInfo);
  }

  /** Destroys the sandbox; resolves to false when it was already gone. */
  async kill({ timeoutMs = 60_000 } = {}) {
    return deleteCall(this._conn, sandboxPath(this.sandboxId), timeoutMs);
  }

  /** `await using sbx = await Sandbox.create()` deletes it at the end of the block. */
  [asyncDispose]() {
    return this.kill().then(() => undefined);
  }
}

// Background processes, a PTY, file operations and ports: the calls of
// sandbox.commands, sandbox.pty and sandbox.files beyond run/read/write, and
// sandbox.connectPort, shaped like E2B's where they borrow its names.

import { CellvmError, ConnectionLost, NotFound, ProtocolError } from './errors.js';
import { MAX_EVENT_LINE_BYTES, answer, jsonCall, sandboxPath } from './transport.js';

/** The longest a stream with no end of its own may run (setTimeout's limit, about 24 days). */
const FOREVER_MS = 2 ** 31 - 1;
/** The most of each of a process's streams a handle keeps (bytes). */
const MAX_KEPT_BYTES = 16 << 20;
const SIGNALS = ['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGHUP'];

/**
 * A command ended with a non-zero exit code (or could not start), as E2B's CommandExitError: exitCode, stdout,
 * stderr, error and the whole result. Thrown by the process calls (commands.run with background, callbacks, user or
 * tag, and handles' wait()); a plain commands.run resolves to the result instead.
 */
export class CommandExitError extends CellvmError {
  constructor(result) {
    let why = result.error || (result.signal ? `killed by ${result.signal}` : `exit code ${result.exitCode}`);
    if (result.timedOut) why += ' (its timeout passed)';
    super(`the command failed: ${why}`, { code: 'command_exit' });
    this.name = 'CommandExitError';
    this.result = result;
    this.exitCode = result.exitCode;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.error = result.error;
  }
}

/**
 * Reads an NDJSON answer line by line into onLine (awaited) until it returns { done: value }; a stopped stream
 * (stop.stopped set and the response destroyed) resolves to null.
 */
async function readLines(res, onLine, stop, what) {
  const ctype = String(res.headers['content-type'] ?? '').split(';')[0].trim();
  if (res.statusCode !== 200 || ctype !== 'application/x-ndjson') return answer(res, []);
  stop.res = res;
  let buf = Buffer.alloc(0);
  try {
    for await (const chunk of res) {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      let i;
      while ((i = buf.indexOf(10)) >= 0) {
        const line = buf.subarray(0, i).toString('utf8');
        buf = buf.subarray(i + 1);
        if (!line.trim()) continue;
        let obj;
        try {
          obj = JSON.parse(line);
        } catch (e) {
          throw new ProtocolError(`an event of ${what} is not JSON: ${e.message}`);
        }
        const r = await onLine(obj);
        if (r && 'done' in r) return r.done;
      }
      if (buf.length > MAX_EVENT_LINE_BYTES) throw new ProtocolError(`an event line is longer than ${MAX_EVENT_LINE_BYTES} bytes`);
    }
  } catch (e) {
    if (stop.stopped) return null;
    if (e instanceof CellvmError) throw e;
    throw new ConnectionLost(`${what} broke: ${e.message}`);
  }
  if (stop.stopped) return null;
  throw new ConnectionLost(`${what} ended without its last event`);
}

function streamCall(conn, method, path, payload, onLine, stop, timeoutMs, what) {
  const body = payload === undefined ? null : Buffer.from(JSON.stringify(payload));
  const headers = { Accept: 'application/x-ndjson' };
  if (body) headers['Content-Type'] = 'application/json';
  return conn.request({
    method, path, headers, body, length: body ? body.length : null, timeoutMs,
    handle: (res) => readLines(res, onLine, stop, what),
  }).catch((e) => {
    if (stop.stopped) return null;
    throw e;
  });
}

/**
 * A process started by commands.run(..., { background: true }), commands.connect or pty.create, as E2B's
 * CommandHandle: pid, stdout/stderr so far, wait() for its result (CommandExitError when it fails), kill(),
 * sendStdin() and disconnect() (stop following it; the process goes on).
 */
export class CommandHandle {
  /** @private */
  constructor(commands, { onStdout, onStderr, onData } = {}) {
    this._commands = commands;
    this._on = { stdout: onStdout, stderr: onStderr, pty: onData };
    this._out = { stdout: { dec: new TextDecoder('utf-8'), parts: [], kept: 0, cut: 0 }, stderr: { dec: new TextDecoder('utf-8'), parts: [], kept: 0, cut: 0 } };
    this.pid = undefined;
    this.exitCode = undefined;
    this._stop = { stopped: false, res: null };
    this._started = null;
  }

  get stdout() { return this._out.stdout.parts.join(''); }

  get stderr() { return this._out.stderr.parts.join(''); }

  /** @private */
  async _event(ev) {
    if (!ev || typeof ev.kind !== 'string') throw new ProtocolError('a process event is not an object with a kind');
    if (ev.kind === 'start') {
      this.pid = Number(ev.pid) || undefined;
      this._started?.();
      return undefined;
    }
    if (ev.kind === 'end') return { done: this._finish(ev.exit ?? {}) };
    const data = Buffer.from(String(ev.data ?? ''), 'base64');
    if (ev.kind === 'pty') {
      if (this._on.pty) await this._on.pty(new Uint8Array(data));
      return undefined;
    }
    const o = this._out[ev.kind];
    if (!o) return undefined;
    const text = o.dec.decode(data, { stream: true });
    if (o.kept + data.length <= MAX_KEPT_BYTES) {
      o.parts.push(text);
      o.kept += data.length;
    } else o.cut += data.length;
    if (text && this._on[ev.kind]) await this._on[ev.kind](text);
    return undefined;
  }

  /** @private */
  _finish(raw) {
    for (const o of Object.values(this._out)) o.parts.push(o.dec.decode());
    this.exitCode = Number(raw.exit_code ?? 0);
    this._result = {
      exitCode: this.exitCode, stdout: this.stdout, stderr: this.stderr, timedOut: Boolean(raw.timed_out),
      truncated: { stdoutBytes: this._out.stdout.cut, stderrBytes: this._out.stderr.cut }, durationMs: 0,
      error: raw.error || undefined, signal: raw.signal || undefined, raw,
    };
    return this._result;
  }

  /** @private */
  _checked(result) {
    if (result === null || result === undefined) throw new ConnectionLost(`process ${this.pid}: the stream was disconnected before it ended`);
    if (result.exitCode !== 0 || result.error) throw new CommandExitError(result);
    return result;
  }

  /** Waits for the end: its result, or CommandExitError when the exit code is not 0. */
  async wait() {
    return this._checked(await this._done);
  }

  /** Signals it (SIGKILL by default); false when it had already ended. */
  kill(signal = 'SIGKILL') { return this._commands.kill(this.pid, { signal }); }

  sendStdin(data, opts) { return this._commands.sendStdin(this.pid, data, opts); }

  /** Stops following the process; it goes on running. */
  async disconnect() {
    this._stop.stopped = true;
    this._stop.res?.destroy();
    await this._done?.catch(() => {});
  }
}

/** A watched directory: onEvent gets each { name, type } change; stop() ends the watch. */
export class WatchHandle {
  /** @private */
  constructor(onEvent) {
    this._onEvent = onEvent;
    this._stop = { stopped: false, res: null };
  }

  async stop() {
    this._stop.stopped = true;
    this._stop.res?.destroy();
    await this._done?.catch(() => {});
  }
}

function pidOf(pid) {
  if (!Number.isInteger(pid) || pid < 1) throw new TypeError(`a pid is a positive integer, not ${pid}`);
  return pid;
}

function ptySize(cols, rows) {
  for (const [n, v] of [['cols', cols], ['rows', rows]]) {
    if (!Number.isInteger(v) || v < 1 || v > 4096) throw new RangeError(`${n} is an integer in 1..4096, not ${v}`);
  }
  return { cols, rows };
}

function inputOf(data) {
  if (typeof data === 'string') return data ? { data } : {};
  if (data instanceof Uint8Array) {
    const b = Buffer.from(data);
    const text = b.toString('utf8');
    if (Buffer.from(text, 'utf8').equals(b)) return text ? { data: text } : {};
    return { data_base64: b.toString('base64') };
  }
  throw new TypeError('input is a string or a Uint8Array');
}

function processRequest(cmd, { cwd, envs, user, tag, timeoutMs, stdin, pty }) {
  let argv;
  if (typeof cmd === 'string') argv = ['sh', '-c', cmd];
  else if (Array.isArray(cmd) && cmd.length && cmd.every((a) => typeof a === 'string')) argv = [...cmd];
  else throw new TypeError('a command is a shell string or a non-empty array of strings (argv)');
  const body = { argv };
  if (cwd !== undefined && cwd !== null) body.cwd = cwd;
  if (envs && Object.keys(envs).length) {
    if (!Object.values(envs).every((v) => typeof v === 'string')) throw new TypeError('envs is an object of strings');
    body.env = { ...envs };
  }
  if (user !== undefined && user !== null) {
    if (user !== 'user' && user !== 'root') throw new TypeError(`user is 'user' or 'root', not ${JSON.stringify(user)}`);
    body.user = user;
  }
  if (tag !== undefined && tag !== null) body.tag = String(tag);
  if (pty) body.pty = pty;
  if (stdin === true) body.stdin = true;
  else if (stdin !== undefined && stdin !== null && stdin !== false) {
    throw new TypeError('with background, callbacks, user or tag, stdin is true (keep input open for sendStdin); input given as data goes with a plain commands.run');
  }
  if (timeoutMs) {
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) throw new TypeError('timeoutMs is a positive number of milliseconds');
    body.timeout_ms = Math.ceil(timeoutMs);
  }
  return body;
}

async function absentIsFalse(p) {
  try {
    await p;
    return true;
  } catch (e) {
    if (e instanceof NotFound) return false;
    throw e;
  }
}

/** Whether commands.run's options ask for a process (E2B's shape) rather than a plain exec. */
export function wantsProcess(opts = {}) {
  return Boolean(opts.background || opts.onStdout || opts.onStderr || opts.user || opts.tag || opts.stdin === true);
}

/** A path route (files, dir, stat, watch) of a guest path; a relative path is under /workspace. */
function guestRoute(id, route, guestPath) {
  if (typeof guestPath !== 'string' || !guestPath) throw new TypeError('a file path is a non-empty string');
  const segs = (guestPath.startsWith('/') ? guestPath : `/workspace/${guestPath}`).split('/').filter(Boolean);
  if (!segs.length) throw new RangeError(`${JSON.stringify(guestPath)} names the root directory`);
  return sandboxPath(id, route, ...segs);
}

/** Adds the process calls to sbx.commands, sbx.pty, and the file calls to sbx.files. */
export function addCalls(sbx) {
  const conn = () => sbx._conn;
  const cmds = sbx.commands;

  const follow = (h, method, path, payload, timeoutMs, attach) => {
    const started = new Promise((resolve) => { h._started = resolve; });
    h._done = streamCall(conn(), method, path, payload, (ev) => h._event(ev), h._stop, timeoutMs, "the process's stream");
    h._done.catch(() => {});
    if (attach) return Promise.resolve(h);
    return Promise.race([started, h._done]).then(() => (h.pid === undefined ? h._checked(h._result) : h));
  };

  cmds.start = (cmd, opts = {}) => {
    const payload = processRequest(cmd, opts);
    const h = new CommandHandle(cmds, opts);
    const path = sandboxPath(sbx.sandboxId, 'processes');
    const timeoutMs = opts.requestTimeoutMs ?? (payload.timeout_ms ? payload.timeout_ms + conn().timeoutMs : FOREVER_MS);
    if (!opts.background) {
      return streamCall(conn(), 'POST', path, payload, (ev) => h._event(ev), h._stop, timeoutMs, "the process's stream")
        .then((r) => h._checked(r));
    }
    return follow(h, 'POST', path, payload, timeoutMs, false);
  };
  /** Follows a running process (E2B's commands.connect): its backlog first, then what comes. */
  cmds.connect = async (pid, opts = {}) => {
    const h = new CommandHandle(cmds, opts);
    h.pid = pidOf(pid);
    return follow(h, 'GET', sandboxPath(sbx.sandboxId, 'processes', String(h.pid), 'attach'), undefined, opts.timeoutMs || FOREVER_MS, true);
  };
  /** The running processes, as E2B's ProcessInfo: pid, tag, cmd, args, envs (names), cwd, user, pty, startedAt. */
  cmds.list = async () => {
    const v = await jsonCall(conn(), 'GET', sandboxPath(sbx.sandboxId, 'processes'));
    return (v ?? []).map((p) => {
      const argv = (p.argv ?? []).map(String);
      return {
        pid: Number(p.pid), cmd: argv[0] ?? '', args: argv.slice(1), tag: p.tag || undefined, cwd: p.cwd || undefined,
        envs: p.env_names ?? [], user: p.user || undefined, pty: Boolean(p.pty), startedAt: p.started_at, raw: p,
      };
    });
  };
  /** Signals a process (SIGKILL by default): true when signalled, false when no such process runs. */
  cmds.kill = async (pid, { signal = 'SIGKILL' } = {}) => {
    if (!SIGNALS.includes(signal)) throw new TypeError(`signal is one of ${SIGNALS.join(', ')}, not ${signal}`);
    const path = sandboxPath(sbx.sandboxId, 'processes', String(pidOf(pid)), 'signal');
    return absentIsFalse(jsonCall(conn(), 'POST', path, { signal }, { want: [204] }));
  };
  /** Sends input to a process started with stdin: true (or a PTY); eof closes its input after it. */
  cmds.sendStdin = async (pid, data, { eof = false } = {}) => {
    const body = inputOf(data);
    if (eof) body.eof = true;
    await jsonCall(conn(), 'POST', sandboxPath(sbx.sandboxId, 'processes', String(pidOf(pid)), 'stdin'), body, { want: [204] });
  };
  cmds.closeStdin = (pid) => cmds.sendStdin(pid, '', { eof: true });

  sbx.pty = {
    /** Starts cmd (default bash) on a terminal of cols x rows; onData gets its output as bytes. */
    create({ cols = 80, rows = 24, onData, cmd, cwd, envs, user, timeoutMs } = {}) {
      return cmds.start(cmd ?? ['bash', '-i', '-l'], { background: true, onData, cwd, envs, user, timeoutMs, pty: ptySize(cols, rows) });
    },
    sendInput(pid, data) { return cmds.sendStdin(pid, data); },
    async resize(pid, { cols, rows }) {
      await jsonCall(conn(), 'POST', sandboxPath(sbx.sandboxId, 'processes', String(pidOf(pid)), 'resize'), ptySize(cols, rows), { want: [204] });
    },
    kill(pid) { return cmds.kill(pid); },
  };

  const q = (o) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(o)) if (v !== undefined && v !== null && v !== false) p.append(k, String(v));
    const s = p.toString();
    return s ? `?${s}` : '';
  };
  const entry = (e) => ({
    name: String(e.name ?? ''), path: String(e.path ?? ''), type: String(e.type ?? ''), size: Number(e.size ?? 0),
    mode: Number(e.mode ?? 0), permissions: [...'rwxrwxrwx'].map((c, i) => ((Number(e.mode ?? 0) >> (8 - i)) & 1 ? c : '-')).join(''),
    owner: e.owner ?? '', group: e.group ?? '', modifiedTime: e.mod_time ? new Date(e.mod_time) : undefined,
    symlinkTarget: e.symlink_target || undefined, raw: e,
  });
  const abs = (p) => {
    if (typeof p !== 'string' || !p) throw new TypeError('a file path is a non-empty string');
    return p.startsWith('/') ? p : `/workspace/${p}`;
  };
  const f = sbx.files;
  /** The entries of a directory, and of its subdirectories down to depth levels (1: its own). */
  f.list = async (path, { depth = 1, user } = {}) => {
    if (!Number.isInteger(depth) || depth < 1) throw new TypeError('depth is a positive integer');
    const v = await jsonCall(conn(), 'GET', guestRoute(sbx.sandboxId, 'dir', path) + q({ depth, user }));
    return (v?.entries ?? []).map(entry);
  };
  f.getInfo = async (path, { user } = {}) => entry(await jsonCall(conn(), 'GET', guestRoute(sbx.sandboxId, 'stat', path) + q({ user })));
  f.exists = (path, { user } = {}) => absentIsFalse(jsonCall(conn(), 'GET', guestRoute(sbx.sandboxId, 'stat', path) + q({ user })));
  /** Makes a directory and its parents: true when it made it, false when it was there. */
  f.makeDir = async (path, { user } = {}) => Boolean((await jsonCall(conn(), 'POST', guestRoute(sbx.sandboxId, 'dir', path) + q({ user })))?.created);
  f.rename = async (oldPath, newPath, { user } = {}) => {
    const body = { from: abs(oldPath), to: abs(newPath) };
    if (user) body.user = user;
    return entry(await jsonCall(conn(), 'POST', sandboxPath(sbx.sandboxId, 'move'), body));
  };
  f.remove = async (path, { user } = {}) => {
    await jsonCall(conn(), 'DELETE', guestRoute(sbx.sandboxId, 'files', path) + q({ user }), undefined, { want: [204] });
  };
  /** Watches a directory: resolves once the watch is set (later changes are seen); onEvent gets { name, type }. */
  f.watchDir = (path, onEvent, { recursive = false, user } = {}) => {
    const h = new WatchHandle(onEvent);
    let set;
    const started = new Promise((r) => { set = r; });
    h._done = streamCall(conn(), 'GET', guestRoute(sbx.sandboxId, 'watch', path) + q({ recursive, user }), undefined, async (obj) => {
      if (obj && 'watching' in obj) {
        set();
        return undefined;
      }
      if (onEvent) await onEvent({ name: String(obj?.name ?? ''), type: String(obj?.op ?? '') });
      return undefined;
    }, h._stop, FOREVER_MS, 'the watch');
    h._done.catch(() => {});
    return Promise.race([started, h._done]).then(() => h);
  };
}

/**
 * Connects to a TCP port a process in the sandbox listens on and resolves to the connected net.Socket (a
 * tls.TLSSocket to a remote daemon): what it writes reaches the port. Upstream-like CellvmError (502, code
 * port_closed) when nothing listens there.
 */
export function connectPort(sbx, port, { timeoutMs } = {}) {
  if (!Number.isInteger(port) || port < 1 || port > 65535) return Promise.reject(new RangeError(`port is an integer in 1..65535, not ${port}`));
  const c = sbx._conn;
  const { transport, options } = c.target();
  return new Promise((resolve, reject) => {
    const req = transport.request({
      ...options, method: 'GET', path: sandboxPath(sbx.sandboxId, 'ports', String(port)), agent: false, setHost: false,
      headers: { Host: 'cellvm', 'User-Agent': 'cellvm-js/0.1', Connection: 'Upgrade', Upgrade: 'tcp', ...c.headers() },
    });
    const timer = setTimeout(() => {
      req.destroy();
      reject(new CellvmError(`connecting to port ${port} of ${sbx.sandboxId} took longer than ${(timeoutMs ?? c.timeoutMs) / 1000} s`, { code: 'timeout' }));
    }, timeoutMs ?? c.timeoutMs);
    req.on('upgrade', (res, socket, head) => {
      clearTimeout(timer);
      if (head && head.length) socket.unshift(head);
      resolve(socket);
    });
    req.on('response', (res) => {
      answer(res, []).then(() => {}, (e) => { clearTimeout(timer); reject(e); });
    });
    req.on('error', (e) => { clearTimeout(timer); reject(e.code ? c.connectError(e) : e); });
    req.end();
  });
}

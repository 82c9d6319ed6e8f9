// A Runtime-style interpreter, on cellvm. A program written for that
// interface runs with only its import changed:
//
//   import { Sandbox } from 'cellvm/compat/withruntime';
//   const sbx = await Sandbox.create({ memoryMiB: 2048, network: { internet: false } });
//   const out = await sbx.interpreter.run(code, { timeoutMs: 30_000 });
//   const png = sbx.interpreter.result(out.results[0].refs['image/png']);
//
// interpreter.run resolves to { stdout, stderr, results: [{ data, refs }],
// error: { name, value, traceback } | null, status }: binary values such as
// PNG images are given by ref, never inline, and interpreter.result(ref)
// returns their bytes as a Uint8Array; the traceback is one string; a
// timeout is a status, not an exception. status follows the interface's
// contract, which cellvm's own status does not: 'timeout' means the cell
// was interrupted and the variables are still there; 'lost' means the
// interpreter was killed or died during the cell (a timeout whose interrupt
// was ignored, out of memory, a crash) and the variables are gone. It is
// derived from cellvm's state_kept and killed_by (stateKept and killedBy
// in the outcome too), never from cellvm's status alone: cellvm says
// 'timeout' for a killed interpreter as well. network: { internet: false } means
// no network device; { allow: [...] } passes a cellvm allowlist; cellvm has
// no open-internet mode, so { internet: true } is refused.

import { randomBytes } from 'node:crypto';
import { Sandbox as Native, asyncDispose } from '../sandbox.js';
import { BINARY_MIMES } from '../models.js';

/** What the refs of one sandbox may hold in all; the oldest go first. */
export const MAX_REF_BYTES = 256 << 20;

/**
 * The interface's status for a cellvm result: 'lost' whenever the
 * interpreter was killed or died during the cell (its variables are gone),
 * else cellvm's own. A result that does not say it kept the state counts as
 * not kept. A cell that ran in a fresh interpreter (the previous one ended
 * between cells) keeps its 'ok' or 'error', with stateKept false.
 */
export function runtimeStatus(ex) {
  const kept = ex.stateKept && ex.status !== 'lost';
  if (!kept && (ex.killedBy !== null || ex.status === 'timeout' || ex.status === 'lost')) return 'lost';
  return ex.status;
}

function networkOf(network) {
  if (network === undefined || network === null) return undefined;
  if (Array.isArray(network.allow)) return { allow: [...network.allow] };
  if (network.internet === false || Object.keys(network).length === 0) return undefined;
  throw new RangeError('cellvm has no open-internet mode: pass network: { allow: [...] } with the hosts, CIDRs or names the sandbox needs (private ranges stay shut even then)');
}

export class Interpreter {
  constructor(native) {
    this._native = native;
    this._refs = new Map();
    this._refBytes = 0;
  }

  /** Runs code; resolves to the outcome object (see the module). */
  async run(code, { timeoutMs = 30_000 } = {}) {
    return this._outcome(await this._native.runCode(code, { timeoutMs }));
  }

  _outcome(ex) {
    const results = ex.results.map((r) => {
      const data = {};
      const refs = {};
      for (const [mime, value] of Object.entries(r.data)) {
        if (BINARY_MIMES.has(mime)) refs[mime] = this._keep(new Uint8Array(Buffer.from(value, 'base64')));
        else data[mime] = value;
      }
      return { data, refs, main: r.main };
    });
    return {
      stdout: ex.logs.stdout.join(''),
      stderr: ex.logs.stderr.join(''),
      results,
      error: ex.error ? { name: ex.error.name, value: ex.error.value, traceback: ex.error.traceback } : null,
      status: runtimeStatus(ex),
      stateKept: ex.stateKept,
      killedBy: ex.killedBy,
      executionCount: ex.executionCount,
      durationMs: ex.durationMs,
    };
  }

  /** The bytes behind a ref from a result's refs. */
  result(ref) {
    const v = this._refs.get(ref);
    if (!v) throw new RangeError(`no result with ref ${JSON.stringify(ref)} (refs are kept per sandbox, at most ${MAX_REF_BYTES >> 20} MiB in all; older ones are dropped first)`);
    return v;
  }

  _keep(bytes) {
    const ref = 'ref_' + randomBytes(8).toString('hex');
    this._refs.set(ref, bytes);
    this._refBytes += bytes.length;
    for (const [k, v] of this._refs) {
      if (this._refBytes <= MAX_REF_BYTES || this._refs.size <= 1) break;
      this._refs.delete(k);
      this._refBytes -= v.length;
    }
    return ref;
  }
}

export class Sandbox {
  constructor(native) {
    this._native = native;
    this.id = native.sandboxId;
    this.interpreter = new Interpreter(native);
    this.files = {
      write: (path, data) => native.files.write(path, data),
      read: (path) => native.files.read(path),
    };
  }

  /** Creates a sandbox; close() (or await using) deletes it. */
  static async create({ memoryMiB, vcpus, network, env, timeoutMs = 180_000, socketPath } = {}) {
    return new Sandbox(await Native.create({ memoryMiB, vcpus, network: networkOf(network), env, requestTimeoutMs: timeoutMs, socketPath }));
  }

  static async connect(id, { socketPath } = {}) {
    return new Sandbox(await Native.connect(id, { socketPath }));
  }

  /** Runs a command (a string goes to sh -c): resolves to { stdout, stderr, exitCode, timedOut }. */
  async exec(cmd, { cwd, timeoutMs = 30_000 } = {}) {
    const r = await this._native.commands.run(cmd, { cwd, timeoutMs });
    return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, timedOut: r.timedOut };
  }

  /** Deletes the sandbox. */
  close() {
    return this._native.kill().then(() => undefined);
  }

  [asyncDispose]() {
    return this.close();
  }
}

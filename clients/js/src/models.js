// What the API answers with, as objects shaped like E2B's JavaScript SDK.

/** MIME types whose values are base64 text on the wire. */
export const BINARY_MIMES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'application/pdf']);

function b64(v) {
  return typeof v === 'string' ? new Uint8Array(Buffer.from(v, 'base64')) : undefined;
}

/** One rich output of a cell: a Jupyter MIME bundle. */
export class Result {
  constructor(raw) {
    this.raw = raw;
    this.main = Boolean(raw?.main);
    this.data = {};
    for (const [k, v] of Object.entries(raw?.data ?? {})) if (typeof v === 'string') this.data[k] = v;
  }
  get isMainResult() { return this.main; }
  get text() { return this.data['text/plain']; }
  get html() { return this.data['text/html']; }
  get markdown() { return this.data['text/markdown']; }
  get latex() { return this.data['text/latex']; }
  get svg() { return this.data['image/svg+xml']; }
  /** The PNG as base64 text, as E2B's SDK gives it (pngBytes decodes it). */
  get png() { return this.data['image/png']; }
  get jpeg() { return this.data['image/jpeg']; }
  /** The PNG's bytes. */
  get pngBytes() { return b64(this.data['image/png']); }
  get jpegBytes() { return b64(this.data['image/jpeg']); }
  /** application/json, parsed (undefined when absent or not JSON). */
  get json() {
    const v = this.data['application/json'];
    if (v === undefined) return undefined;
    try { return JSON.parse(v); } catch { return undefined; }
  }
  formats() { return Object.keys(this.data); }
}

/** A traceback's entries as one string, one entry per line. */
export function joinTraceback(lines) {
  return (lines ?? []).map((l) => String(l).replace(/\n+$/, '')).join('\n');
}

export function executionError(raw) {
  if (!raw || typeof raw !== 'object') return null;
  const lines = Array.isArray(raw.traceback) ? raw.traceback.filter((x) => typeof x === 'string') : [];
  return { name: String(raw.name ?? ''), value: String(raw.value ?? ''), traceback: joinTraceback(lines), tracebackLines: lines };
}

const truncated = (t) => ({ stdoutBytes: Number(t?.stdout_bytes ?? 0), stderrBytes: Number(t?.stderr_bytes ?? 0) });

/** text cut after each newline (the pieces keep theirs). */
export function lines(text) {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

/** The outcome of one cell. */
export class Execution {
  constructor(raw) {
    this.raw = raw;
    this.status = String(raw.status ?? '');
    this.executionCount = Number(raw.execution_count ?? 0);
    // Lists of lines, each with its newline, as E2B's SDK gives them: join('') is the text.
    this.logs = { stdout: lines(String(raw.stdout ?? '')), stderr: lines(String(raw.stderr ?? '')) };
    this.results = (raw.results ?? []).filter((r) => r && typeof r === 'object').map((r) => new Result(r));
    this.error = executionError(raw.error);
    this.stateKept = Boolean(raw.state_kept);
    this.killedBy = typeof raw.killed_by === 'string' ? raw.killed_by : null;
    this.truncated = truncated(raw.truncated);
    this.durationMs = Number(raw.duration_ms ?? 0);
    // The checkpoint recorded after the cell (every-cell checkpoints), or why none was.
    this.checkpoint = checkpointOf(raw);
    this.checkpointError = textOrNull(raw.checkpoint_error);
  }
  get mainResult() { return this.results.find((r) => r.main); }
  /** The text of the value of the cell's last expression, if any. */
  get text() { return this.mainResult?.text; }
}

export function commandResult(raw) {
  return {
    exitCode: Number(raw.exit_code ?? 0), stdout: String(raw.stdout ?? ''), stderr: String(raw.stderr ?? ''),
    timedOut: Boolean(raw.timed_out), truncated: truncated(raw.truncated), durationMs: Number(raw.duration_ms ?? 0),
    checkpoint: checkpointOf(raw), checkpointError: textOrNull(raw.checkpoint_error), raw,
  };
}

const checkpointOf = (raw) => (Number.isInteger(raw.checkpoint) && raw.checkpoint > 0 ? raw.checkpoint : null);

/** One kept checkpoint of a sandbox created with checkpoints. */
export function checkpointInfo(raw) {
  return {
    n: Number(raw.n ?? 0), kind: String(raw.kind ?? ''), executionCount: Number(raw.execution_count ?? 0),
    codeSha256: String(raw.code_sha256 ?? ''), createdAt: raw.created_at, sizeBytes: Number(raw.size_bytes ?? 0),
    depth: Number(raw.depth ?? 0), pauseMs: Number(raw.pause_ms ?? 0), raw,
  };
}

export function sandboxInfo(raw) {
  return {
    sandboxId: String(raw.id ?? ''), state: String(raw.state ?? ''), config: raw.config ?? {}, createdAt: raw.created_at,
    uptimeS: Number(raw.uptime_s ?? 0), cells: Number(raw.cells ?? 0), cellRunning: Boolean(raw.cell_running),
    usage: raw.usage ?? {}, network: raw.network ?? {},
    startedFrom: typeof raw.started_from === 'string' && raw.started_from ? raw.started_from : null,
    metadata: raw.config?.labels && typeof raw.config.labels === 'object' ? { ...raw.config.labels } : {}, raw,
  };
}

export function snapshotInfo(raw) {
  return {
    snapshotId: String(raw.id ?? ''), sandboxId: String(raw.sandbox_id ?? ''), createdAt: raw.created_at,
    sizeBytes: Number(raw.size_bytes ?? 0), vcpus: Number(raw.vcpus ?? 0), memoryMiB: Number(raw.memory_mib ?? 0), raw,
  };
}

/** One of a sandbox's sessions: a language's default one ('default') or a named one (a context). */
export function contextInfo(raw) {
  return {
    language: String(raw.language ?? ''), name: String(raw.name ?? ''), cwd: String(raw.cwd ?? ''),
    running: Boolean(raw.running), raw,
  };
}

export function workspaceInfo(raw) {
  return {
    name: String(raw.name ?? ''), sizeBytes: Number(raw.size_bytes ?? 0), diskBytes: Number(raw.disk_bytes ?? 0),
    createdAt: raw.created_at, sandboxId: typeof raw.sandbox === 'string' && raw.sandbox ? raw.sandbox : null, raw,
  };
}

const strings = (v) => (Array.isArray(v) ? v.filter((x) => typeof x === 'string') : []);
const textOrNull = (v) => (typeof v === 'string' && v ? v : null);

export function imageInfo(raw) {
  return {
    name: String(raw.name ?? ''), sizeBytes: Number(raw.size_bytes ?? 0), builtAt: raw.built_at,
    python: textOrNull(raw.python), modules: strings(raw.modules), sandboxes: Number(raw.sandboxes ?? 0),
    key: textOrNull(raw.key), apt: strings(raw.apt), buildSeconds: Number(raw.build_seconds ?? 0), raw,
  };
}

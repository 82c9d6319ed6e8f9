/** One rich output of a cell: a Jupyter MIME bundle. */
export class Result {
  readonly raw: unknown;
  /** The value of the cell's last expression (else a display or a figure). */
  readonly main: boolean;
  readonly isMainResult: boolean;
  /** MIME type -> value as sent (binary types as base64). */
  readonly data: Record<string, string>;
  readonly text?: string;
  readonly html?: string;
  readonly markdown?: string;
  readonly latex?: string;
  readonly svg?: string;
  /** Base64 text, as E2B's SDK gives it. */
  readonly png?: string;
  readonly jpeg?: string;
  readonly pngBytes?: Uint8Array;
  readonly jpegBytes?: Uint8Array;
  readonly json?: unknown;
  formats(): string[];
}

export interface ExecutionError {
  name: string;
  value: string;
  /** The traceback as one string. */
  traceback: string;
  tracebackLines: string[];
}

export interface Truncated {
  stdoutBytes: number;
  stderrBytes: number;
}

/** The outcome of one cell. */
export class Execution {
  readonly raw: Record<string, unknown>;
  readonly status: 'ok' | 'error' | 'timeout' | 'lost';
  readonly executionCount: number;
  /** Lines, each with its newline, as E2B's SDK gives them. */
  readonly logs: { stdout: string[]; stderr: string[] };
  readonly results: Result[];
  readonly error: ExecutionError | null;
  /** Whether the interpreter's variables survived (an interrupted timeout keeps them). */
  readonly stateKept: boolean;
  readonly killedBy: 'timeout' | 'oom' | 'signal' | null;
  readonly truncated: Truncated;
  readonly durationMs: number;
  /** The checkpoint recorded after the cell (a sandbox with every-cell checkpoints), else null. */
  readonly checkpoint: number | null;
  /** Why no checkpoint was recorded after the cell (the sandbox runs on), else null. */
  readonly checkpointError: string | null;
  readonly mainResult?: Result;
  /** The text of the value of the cell's last expression. */
  readonly text?: string;
}

export interface CommandResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: Truncated;
  durationMs: number;
  /** Execution's checkpoint and checkpointError. */
  checkpoint: number | null;
  checkpointError: string | null;
  raw: Record<string, unknown>;
}

/** One kept checkpoint of a sandbox created with checkpoints. */
export interface CheckpointInfo {
  /** Numbered from 1 in the order recorded; a restore to n drops those after it. */
  n: number;
  kind: 'cell' | 'exec' | 'manual';
  executionCount: number;
  /** Hex SHA-256 of the cell's code (an exec's argv joined by NULs); '' for a manual one. */
  codeSha256: string;
  createdAt: string;
  sizeBytes: number;
  /** The memory files a restore of it composes. */
  depth: number;
  pauseMs: number;
  raw: Record<string, unknown>;
}

export interface SandboxInfo {
  sandboxId: string;
  state: string;
  config: Record<string, unknown>;
  createdAt: string;
  uptimeS: number;
  cells: number;
  cellRunning: boolean;
  usage: Record<string, unknown>;
  network: Record<string, unknown>;
  /** How its VM started (null when the daemon does not know, as for a sandbox taken over from an earlier daemon). */
  startedFrom: 'template' | 'boot' | 'snapshot' | null;
  /** Its labels (E2B's metadata), as given at its creation. */
  metadata: Record<string, string>;
  raw: Record<string, unknown>;
}

/**
 * One of a sandbox's sessions: each language's default one (name 'default', listed once used) and
 * named ones (contexts) with their own variables and working directory. JavaScript and TypeScript
 * share their sessions, listed as 'javascript'.
 */
export interface ContextInfo {
  language: string;
  name: string;
  /** Its working directory ('' the sandbox's). */
  cwd: string;
  /** Its program runs now. */
  running: boolean;
  raw: Record<string, unknown>;
}

/** A snapshot of a sandbox's machine (memory, variables, files); its forks have its vcpus and memoryMiB. */
export interface SnapshotInfo {
  snapshotId: string;
  sandboxId: string;
  createdAt: string;
  sizeBytes: number;
  vcpus: number;
  memoryMiB: number;
  raw: Record<string, unknown>;
}

/** A workspace: a named volume at /workspace that outlives the sandboxes that use it. */
export interface WorkspaceInfo {
  name: string;
  /** The most it can hold. */
  sizeBytes: number;
  /** What it takes on the host's disk now. */
  diskBytes: number;
  createdAt: string;
  /** The sandbox that holds it, null when none does. */
  sandboxId: string | null;
  raw: Record<string, unknown>;
}

/** A root image sandboxes can boot (Sandbox.create({ image })): 'default' is the daemon's own, the others were built with `cellvm image build`. */
export interface ImageInfo {
  name: string;
  sizeBytes: number;
  builtAt: string;
  /** From the image's manifest: the interpreter's version (null when it has none) and the featured modules ('pandas 1.5.3'). */
  python: string | null;
  modules: string[];
  /** How many sandboxes use it now. */
  sandboxes: number;
  /** From its build (null, [] and 0 for the default image). */
  key: string | null;
  apt: string[];
  buildSeconds: number;
  raw: Record<string, unknown>;
}

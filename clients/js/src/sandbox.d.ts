import { CellvmError } from './errors.js';
import { Connection } from './transport.js';
import { CheckpointInfo, CommandResult, ContextInfo, Execution, ExecutionError, ImageInfo, Result, SandboxInfo, SnapshotInfo, WorkspaceInfo } from './models.js';

export const DEFAULT_CELL_TIMEOUT_MS: number;
/** Allowed on top of a cell's limit for the guest to start its interpreter. */
export const START_ALLOWANCE_MS: number;
export const asyncDispose: symbol;

export interface ConnectOptions {
  socketPath?: string;
  connection?: Connection;
}

export interface CreateOptions extends ConnectOptions {
  vcpus?: number;
  memoryMiB?: number;
  /** No network device at all unless given: an allowlist, or { allow: [...] }. */
  network?: string[] | { allow: string[] };
  /** Reaches the interpreter and commands. */
  env?: Record<string, string>;
  /**
   * Seconds from creation until the sandbox is deleted, and without a call until it is: left out, the daemon's
   * defaults (serve --default-ttl, 1 h; --default-idle-timeout, 15 min); 0, none (Invalid, naming the cap, above a
   * daemon's --max-ttl or 0 under one).
   */
  ttlS?: number;
  idleTimeoutS?: number;
  /** 'template' restores the daemon's prepared template (the default where there is one), 'cold' boots. */
  start?: 'template' | 'cold';
  /** Forks this snapshot (an id from sandbox.snapshot()): its variables and files, its vCPUs and memory. */
  snapshot?: string;
  /**
   * Time travel: true (or { everyCell: true, keep: 20 }) records a checkpoint of the whole machine after each cell
   * and command (the result's checkpoint), which undo() and restoreCheckpoint(n) go back to; without everyCell only
   * checkpoint() records one. keep is 1 to 32 (default 20). Not with workspace.
   */
  checkpoints?: boolean | { everyCell?: boolean; keep?: number };
  /** Branches a new sandbox from a kept checkpoint of another, as snapshot forks a snapshot. */
  checkpoint?: { sandbox: string | { sandboxId: string }; n: number };
  /**
   * Mounts this workspace at /workspace: made empty on first use, kept when the sandbox is deleted, held by one
   * sandbox at a time (Busy when another holds it); not with snapshot. 1 to 64 of a-z, 0-9, '-', '_', '.'.
   */
  workspace?: string;
  /**
   * Boots this root image (Sandbox.listImages(); 'default', or none, is the daemon's own; Invalid, naming the images,
   * when there is no such image). A fork has its snapshot's. 1 to 64 of a-z, 0-9, '-', '_', '.'.
   */
  image?: string;
  /**
   * E2B's meaning: the sandbox's lifetime from its creation (sent as ttl_s, whole seconds rounded up; give one of
   * timeoutMs and ttlS). Until this release it was the boot wait, now requestTimeoutMs.
   */
  timeoutMs?: number;
  /** How long the boot may take (default 180 s). */
  requestTimeoutMs?: number;
  /** E2B's template: its 'base' and 'code-interpreter-v1' are the daemon's own image, any other name an image. */
  template?: string;
  /** Labels (E2B's metadata): Sandbox.list({ metadata }) finds the sandbox by them. */
  metadata?: Record<string, string>;
  /** E2B's name for env. */
  envs?: Record<string, string>;
}

export interface ListOptions extends ConnectOptions {
  /** Every label given must match. */
  metadata?: Record<string, string>;
  /** Any of these states. */
  state?: SandboxState | SandboxState[];
  /** E2B's form of the same filters. */
  query?: { metadata?: Record<string, string>; state?: SandboxState | SandboxState[] };
}

export type SandboxState = 'starting' | 'running' | 'paused' | 'lost' | 'stopping';

export interface RunCodeOptions {
  /** 'python' (the default), 'javascript' ('js'), 'typescript' ('ts') or 'bash': each has its own session. */
  language?: string;
  /** A named session of the language (createContext); default its default session. */
  context?: string;
  /** The cell's time limit (default 60 s). */
  timeoutMs?: number;
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  onResult?: (result: Result) => unknown;
  onError?: (error: ExecutionError) => unknown;
  /** Bounds the whole call (default: the cell's limit, START_ALLOWANCE_MS and the connection's timeout). */
  requestTimeoutMs?: number;
}

export class Sandbox {
  static create(opts?: CreateOptions): Promise<Sandbox>;
  /** E2B's form: the template first. */
  static create(template: string, opts?: CreateOptions): Promise<Sandbox>;
  static connect(id: string, opts?: ConnectOptions): Promise<Sandbox>;
  static list(opts?: ListOptions): Promise<SandboxInfo[]>;
  /** The daemon's version (GET /v1/version). */
  static serverVersion(opts?: ConnectOptions): Promise<{ version: string; commit: string; go: string }>;
  /** Every snapshot of the daemon, oldest first. */
  static listSnapshots(opts?: ConnectOptions): Promise<SnapshotInfo[]>;
  /** Describes one snapshot (NotFound if there is none). */
  static getSnapshot(id: string, opts?: ConnectOptions): Promise<SnapshotInfo>;
  /** Deletes a snapshot; false when it was already gone. */
  static deleteSnapshot(id: string, opts?: ConnectOptions): Promise<boolean>;
  /** Every workspace of the daemon, by name, with the sandbox that holds it. */
  static listWorkspaces(opts?: ConnectOptions): Promise<WorkspaceInfo[]>;
  /** Deletes a workspace (Busy while a sandbox holds it); false when it was already gone. */
  static deleteWorkspace(name: string, opts?: ConnectOptions): Promise<boolean>;
  /** Every root image of the daemon, the default first. */
  static listImages(opts?: ConnectOptions): Promise<ImageInfo[]>;
  /** Deletes a built image (Busy while a sandbox or a snapshot uses it, Invalid for 'default'); false when it was already gone. */
  static deleteImage(name: string, opts?: ConnectOptions): Promise<boolean>;
  readonly sandboxId: string;
  readonly id: string;
  readonly created: SandboxInfo;
  readonly commands: {
    /** A plain run (no background, callbacks, user, tag or stdin: true): a failing command is a result. */
    run(cmd: string | string[], opts?: { stdin?: string | Uint8Array; timeoutMs?: number; cwd?: string; envs?: Record<string, string>; requestTimeoutMs?: number }): Promise<CommandResult>;
    /** E2B's shape, in the foreground: rejects with CommandExitError when the exit code is not 0. */
    run(cmd: string | string[], opts: CommandStartOptions & { background?: false }): Promise<ProcessResult>;
    /** E2B's shape, in the background: resolves once the process runs. */
    run(cmd: string | string[], opts: CommandStartOptions & { background: true }): Promise<CommandHandle>;
    /** Follows a running process: its backlog first, then what comes (wait() rejects with NotFound for no such pid). */
    connect(pid: number, opts?: { onStdout?: (text: string) => unknown; onStderr?: (text: string) => unknown; onData?: (data: Uint8Array) => unknown; timeoutMs?: number }): Promise<CommandHandle>;
    list(): Promise<ProcessInfo[]>;
    /** Signals a process (SIGKILL by default): true when signalled, false when no such process runs. */
    kill(pid: number, opts?: { signal?: 'SIGKILL' | 'SIGTERM' | 'SIGINT' | 'SIGHUP' }): Promise<boolean>;
    /** Input to a process started with stdin: true (or a PTY); eof closes its input after it. */
    sendStdin(pid: number, data: string | Uint8Array, opts?: { eof?: boolean }): Promise<void>;
    closeStdin(pid: number): Promise<void>;
  };
  /** Processes on a terminal, as E2B's sandbox.pty. */
  readonly pty: {
    /** Starts cmd (default bash -i -l) on a terminal; onData gets its output. */
    create(opts?: { cols?: number; rows?: number; onData?: (data: Uint8Array) => unknown; cmd?: string | string[]; cwd?: string; envs?: Record<string, string>; user?: 'user' | 'root'; timeoutMs?: number }): Promise<CommandHandle>;
    sendInput(pid: number, data: string | Uint8Array): Promise<void>;
    resize(pid: number, size: { cols: number; rows: number }): Promise<void>;
    kill(pid: number): Promise<boolean>;
  };
  /** The sandbox's files; relative paths are under /workspace. */
  readonly files: {
    write(path: string, data: string | Uint8Array | ArrayBuffer | NodeJS.ReadableStream | AsyncIterable<Uint8Array>, opts?: { timeoutMs?: number }): Promise<number>;
    read(path: string, opts?: { maxBytes?: number; timeoutMs?: number }): Promise<Uint8Array>;
    /** A directory's entries, and its subdirectories' down to depth levels (1: its own). */
    list(path: string, opts?: { depth?: number; user?: 'user' | 'root' }): Promise<EntryInfo[]>;
    getInfo(path: string, opts?: { user?: 'user' | 'root' }): Promise<EntryInfo>;
    exists(path: string, opts?: { user?: 'user' | 'root' }): Promise<boolean>;
    /** Makes a directory and its parents: true when it made it, false when it was there. */
    makeDir(path: string, opts?: { user?: 'user' | 'root' }): Promise<boolean>;
    rename(oldPath: string, newPath: string, opts?: { user?: 'user' | 'root' }): Promise<EntryInfo>;
    /** Removes a file, or a directory with all it holds. */
    remove(path: string, opts?: { user?: 'user' | 'root' }): Promise<void>;
    /** Resolves once the watch is set, so later changes are seen. */
    watchDir(path: string, onEvent: (e: FilesystemEvent) => unknown, opts?: { recursive?: boolean; user?: 'user' | 'root' }): Promise<WatchHandle>;
  };
  /** A connected socket to a TCP port a process in the sandbox listens on (502 port_closed when none). */
  connectPort(port: number, opts?: { timeoutMs?: number }): Promise<import('node:net').Socket>;
  readonly network: { set(allow: string[]): Promise<void> };
  runCode(code: string, opts?: RunCodeOptions): Promise<Execution>;
  interrupt(): Promise<void>;
  /** A fresh interpreter for one session (default Python's default one); the others keep their variables. */
  restart(opts?: { language?: string; context?: string }): Promise<void>;
  /** Creates a named session (context) of a language with its own variables and working directory. */
  createContext(opts?: { language?: string; name?: string; cwd?: string }): Promise<ContextInfo>;
  /** The sandbox's sessions: each language's default one once used, and the named ones. */
  listContexts(): Promise<ContextInfo[]>;
  /** Ends a named session; its variables are lost. */
  removeContext(name: string, opts?: { language?: string }): Promise<void>;
  /** Writes the sandbox to disk and ends its VM; a resume, or any cell, command or file call, brings it back. */
  pause(opts?: { timeoutMs?: number }): Promise<void>;
  resume(opts?: { timeoutMs?: number }): Promise<void>;
  /** Records a checkpoint now (a sandbox created with checkpoints). */
  checkpoint(opts?: { timeoutMs?: number }): Promise<CheckpointInfo>;
  /** The kept checkpoints, oldest first. */
  checkpoints(): Promise<CheckpointInfo[]>;
  /** Brings the sandbox back to checkpoint n, in the same sandbox, and drops those after it. Network calls are not undone. */
  restoreCheckpoint(n: number, opts?: { timeoutMs?: number }): Promise<CheckpointInfo>;
  /** Undoes the last cell: restores the checkpoint before the last one and drops the last. */
  undo(opts?: { timeoutMs?: number }): Promise<CheckpointInfo>;
  /** Saves the sandbox's machine while it keeps running; Sandbox.create({ snapshot }) forks it. */
  snapshot(opts?: { timeoutMs?: number }): Promise<SnapshotInfo>;
  info(): Promise<SandboxInfo>;
  /** E2B's setTimeout: timeoutMs more to live, counted from now. */
  setTimeout(timeoutMs: number): Promise<SandboxInfo>;
  kill(opts?: { timeoutMs?: number }): Promise<boolean>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface CommandStartOptions {
  background?: boolean;
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  cwd?: string;
  envs?: Record<string, string>;
  user?: 'user' | 'root';
  tag?: string;
  /** true keeps the process's input open for sendStdin. */
  stdin?: boolean;
  /** Kills the process when it passes (default 60 s; 0: none). */
  timeoutMs?: number;
  requestTimeoutMs?: number;
}

/** How a process ended (E2B's CommandResult). */
export interface ProcessResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: { stdoutBytes: number; stderrBytes: number };
  durationMs: number;
  /** It could not start: why. */
  error?: string;
  /** The signal that ended it. */
  signal?: string;
  raw: Record<string, unknown>;
}

export class CommandExitError extends CellvmError {
  readonly result: ProcessResult;
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly error?: string;
}

export class CommandHandle {
  readonly pid: number;
  readonly stdout: string;
  readonly stderr: string;
  /** Set once it has ended. */
  readonly exitCode?: number;
  /** Its result, or CommandExitError when the exit code is not 0. */
  wait(): Promise<ProcessResult>;
  kill(signal?: 'SIGKILL' | 'SIGTERM' | 'SIGINT' | 'SIGHUP'): Promise<boolean>;
  sendStdin(data: string | Uint8Array, opts?: { eof?: boolean }): Promise<void>;
  /** Stops following it; the process goes on. */
  disconnect(): Promise<void>;
}

export class WatchHandle {
  stop(): Promise<void>;
}

export interface ProcessInfo {
  pid: number;
  cmd: string;
  args: string[];
  tag?: string;
  cwd?: string;
  /** The names of its own variables (values are write-only). */
  envs: string[];
  user?: string;
  pty: boolean;
  startedAt: string;
  raw: Record<string, unknown>;
}

export interface EntryInfo {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | string;
  size: number;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modifiedTime?: Date;
  symlinkTarget?: string;
  raw: Record<string, unknown>;
}

export interface FilesystemEvent {
  name: string;
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod' | string;
}

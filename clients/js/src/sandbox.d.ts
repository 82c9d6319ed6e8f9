import { Connection } from './transport.js';
import { CommandResult, Execution, ExecutionError, Result, SandboxInfo } from './models.js';

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
  ttlS?: number;
  idleTimeoutS?: number;
  /** How long the boot may take. */
  timeoutMs?: number;
}

export interface RunCodeOptions {
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
  static connect(id: string, opts?: ConnectOptions): Promise<Sandbox>;
  static list(opts?: ConnectOptions): Promise<SandboxInfo[]>;
  readonly sandboxId: string;
  readonly id: string;
  readonly created: SandboxInfo;
  readonly commands: {
    run(cmd: string | string[], opts?: { stdin?: string | Uint8Array; timeoutMs?: number; cwd?: string; envs?: Record<string, string>; requestTimeoutMs?: number }): Promise<CommandResult>;
  };
  readonly files: {
    write(path: string, data: string | Uint8Array | ArrayBuffer | NodeJS.ReadableStream | AsyncIterable<Uint8Array>, opts?: { timeoutMs?: number }): Promise<number>;
    read(path: string, opts?: { maxBytes?: number; timeoutMs?: number }): Promise<Uint8Array>;
  };
  readonly network: { set(allow: string[]): Promise<void> };
  runCode(code: string, opts?: RunCodeOptions): Promise<Execution>;
  interrupt(): Promise<void>;
  restart(): Promise<void>;
  info(): Promise<SandboxInfo>;
  kill(opts?: { timeoutMs?: number }): Promise<boolean>;
  [Symbol.asyncDispose](): Promise<void>;
}

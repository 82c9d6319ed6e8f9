export const MAX_REF_BYTES: number;

export interface RunOutcome {
  stdout: string;
  stderr: string;
  /** Binary values (PNG, ...) are in refs, fetched with interpreter.result(ref); the rest in data. */
  results: { data: Record<string, string>; refs: Record<string, string>; main: boolean }[];
  error: { name: string; value: string; traceback: string } | null;
  /** 'timeout': interrupted, variables kept; 'lost': the interpreter was killed or died, variables gone. */
  status: 'ok' | 'error' | 'timeout' | 'lost';
  stateKept: boolean;
  killedBy: 'timeout' | 'oom' | 'signal' | null;
  executionCount: number;
  durationMs: number;
}

/** The interface's status for a cellvm Execution (from stateKept and killedBy). */
export function runtimeStatus(ex: { status: string; stateKept: boolean; killedBy: string | null }): RunOutcome['status'];

export class Interpreter {
  run(code: string, opts?: { timeoutMs?: number }): Promise<RunOutcome>;
  result(ref: string): Uint8Array;
}

export class Sandbox {
  static create(opts?: {
    memoryMiB?: number;
    vcpus?: number;
    network?: { internet: false } | { allow: string[] };
    env?: Record<string, string>;
    timeoutMs?: number;
    socketPath?: string;
  }): Promise<Sandbox>;
  static connect(id: string, opts?: { socketPath?: string }): Promise<Sandbox>;
  readonly id: string;
  readonly interpreter: Interpreter;
  readonly files: { write(path: string, data: string | Uint8Array): Promise<number>; read(path: string): Promise<Uint8Array> };
  exec(cmd: string | string[], opts?: { cwd?: string; timeoutMs?: number }): Promise<{ stdout: string; stderr: string; exitCode: number; timedOut: boolean }>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

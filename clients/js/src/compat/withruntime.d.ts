export const MAX_REF_BYTES: number;

export interface RunOutcome {
  stdout: string;
  stderr: string;
  /** Binary values (PNG, ...) are in refs, fetched with interpreter.result(ref); the rest in data. */
  results: { data: Record<string, string>; refs: Record<string, string>; main: boolean }[];
  error: { name: string; value: string; traceback: string } | null;
  status: 'ok' | 'error' | 'timeout' | 'lost';
  stateKept: boolean;
  executionCount: number;
  durationMs: number;
}

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

export const DEFAULT_SOCKET: string;
export const SOCKET_ENV: string;
export const DEFAULT_TIMEOUT_MS: number;
/** How to reach a cellvm daemon. */
export class Connection {
  /** socketPath defaults to $CELLVM_SOCKET, then /run/cellvm/cellvm.sock; timeoutMs bounds calls with no timeout of their own. */
  constructor(opts?: { socketPath?: string; timeoutMs?: number });
  readonly socketPath: string;
  readonly timeoutMs: number;
  headers(): Record<string, string>;
}

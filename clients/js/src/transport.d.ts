export const DEFAULT_SOCKET: string;
export const SOCKET_ENV: string;
export const URL_ENV: string;
export const TOKEN_ENV: string;
export const TOKEN_FILE_ENV: string;
export const CA_ENV: string;
export const DEFAULT_TIMEOUT_MS: number;
/** How to reach a cellvm daemon. */
export class Connection {
  /**
   * socketPath defaults to $CELLVM_SOCKET, then /run/cellvm/cellvm.sock. url (https://HOST:PORT, default
   * $CELLVM_URL) reaches a daemon's TLS listener instead, with token (default $CELLVM_TOKEN or the first token of
   * $CELLVM_TOKEN_FILE) and caFile (default $CELLVM_TLS_CA). timeoutMs bounds calls with no timeout of their own.
   */
  constructor(opts?: { socketPath?: string; url?: string; token?: string; caFile?: string; timeoutMs?: number });
  readonly socketPath?: string;
  readonly url?: string;
  readonly timeoutMs: number;
  headers(): Record<string, string>;
}

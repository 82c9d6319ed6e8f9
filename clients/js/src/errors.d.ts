export class CellvmError extends Error {
  /** The API's error code ("not_found", "busy", ...) or the client's own ("connect", "timeout", "connection_lost", "protocol"). */
  code: string;
  /** The HTTP status, when the daemon answered. */
  status?: number;
  constructor(message: string, opts?: { status?: number; code?: string });
}
export class Invalid extends CellvmError {}
export class Unauthorized extends CellvmError {}
export class Forbidden extends CellvmError {}
export class NotFound extends CellvmError {}
export class Busy extends CellvmError {}
export class Lost extends CellvmError {}
export class TooLarge extends CellvmError {}
export class Internal extends CellvmError {}
export class NotSupported extends CellvmError {}
export class Full extends CellvmError {
  /** Seconds to wait before retrying, from Retry-After. */
  retryAfter?: number;
}
export class ConnectError extends CellvmError {}
export class ConnectionLost extends CellvmError {}
export class Timeout extends CellvmError {}
export class ProtocolError extends CellvmError {}
export function fromResponse(status: number, body: Uint8Array, retryAfter?: string): CellvmError;

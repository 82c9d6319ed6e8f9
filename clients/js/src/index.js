// cellvm: run Python written by a language model in a KVM microVM.
// The client of the cellvm daemon (`cellvm serve`), reached over its Unix
// socket: $CELLVM_SOCKET, else /run/cellvm/cellvm.sock. No dependencies.

export { Sandbox, asyncDispose, DEFAULT_CELL_TIMEOUT_MS, START_ALLOWANCE_MS } from './sandbox.js';
export { Connection, DEFAULT_SOCKET } from './transport.js';
export { CommandExitError, CommandHandle, WatchHandle } from './procs.js';
export { Execution, Result } from './models.js';
export {
  CellvmError, Invalid, Unauthorized, Forbidden, NotFound, Busy, Lost, TooLarge, Internal, NotSupported, Full,
  ConnectError, ConnectionLost, Timeout, ProtocolError,
} from './errors.js';
export * as tools from './tools.js';

export {
  Sandbox, asyncDispose, DEFAULT_CELL_TIMEOUT_MS, START_ALLOWANCE_MS, CreateOptions, ConnectOptions, ListOptions, SandboxState, RunCodeOptions,
  CommandStartOptions, ProcessResult, CommandExitError, CommandHandle, WatchHandle, ProcessInfo, EntryInfo, FilesystemEvent,
} from './sandbox.js';
export { Connection, DEFAULT_SOCKET } from './transport.js';
export { Execution, Result, ExecutionError, CommandResult, ContextInfo, SandboxInfo, SnapshotInfo, CheckpointInfo, Truncated, WorkspaceInfo, ImageInfo } from './models.js';
export {
  CellvmError, Invalid, Unauthorized, Forbidden, NotFound, Busy, Lost, TooLarge, Internal, NotSupported, Full,
  ConnectError, ConnectionLost, Timeout, ProtocolError,
} from './errors.js';
export * as tools from './tools.js';

"""cellvm: run Python written by a language model in a KVM microVM.

This package is the client of the cellvm daemon (``cellvm serve``), which
it reaches over its Unix socket: ``$CELLVM_SOCKET``, else
``/run/cellvm/cellvm.sock``. Standard library only, Python 3.9 or later.

::

    from cellvm import Sandbox

    with Sandbox.create() as sbx:
        sbx.run_code("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
        ex = sbx.run_code("df.x.mean()", on_stdout=print)
        print(ex.text)  # 2.0

:class:`Sandbox` blocks, :class:`AsyncSandbox` is the same with asyncio.
``cellvm.tools`` offers the run_python tool to a model and formats results
for Anthropic's and OpenAI's APIs; ``cellvm.compat.boxlite`` and
``cellvm.compat.withruntime`` run programs written for BoxLite's CodeBox
and for a Runtime-style interpreter with only their import changed.
"""

from .aio import AsyncSandbox
from ._transport import DEFAULT_SOCKET, Connection
from .errors import (
    Busy, CellvmError, ConnectError, ConnectionLost, Forbidden, Full, Internal, Invalid, Lost, NotFound, Unauthorized,
    NotSupported, ProtocolError, Timeout, TooLarge, Upstream, BuildFailed,
)
from .models import (
    CheckpointInfo, CommandResult, ContextInfo, EntryInfo, Execution, ExecutionError, FilesystemEvent, ImageInfo, ProcessInfo, Logs, Result, SandboxInfo, SnapshotInfo, Truncated,
    WorkspaceInfo,
)
from .sandbox import Sandbox
from ._procs import CommandExitError, CommandHandle, WatchHandle

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "AsyncSandbox", "Connection", "DEFAULT_SOCKET",
    "Execution", "ContextInfo", "Result", "Logs", "ExecutionError", "Truncated", "CommandResult", "SandboxInfo", "SnapshotInfo",
    "CheckpointInfo", "WorkspaceInfo", "ImageInfo", "ProcessInfo", "EntryInfo", "FilesystemEvent", "CommandHandle", "WatchHandle",
    "CommandExitError",
    "CellvmError", "Invalid", "Unauthorized", "Forbidden", "NotFound", "Busy", "Lost", "TooLarge", "Internal", "NotSupported",
    "Full", "ConnectError", "ConnectionLost", "Timeout", "ProtocolError", "Upstream", "BuildFailed",
]

"""What the API answers with, as Python objects shaped like E2B's.

A cell's outcome is an :class:`Execution`: its rich results (each a
:class:`Result`, a Jupyter MIME bundle), its logs, its error, and how it
ended (status, whether variables survived a timeout). A command's is a
:class:`CommandResult`. ``.raw`` keeps the daemon's JSON as it came.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

# Jupyter's MIME types for the attributes of a Result.
MIME_TEXT = "text/plain"
MIME_HTML = "text/html"
MIME_MARKDOWN = "text/markdown"
MIME_LATEX = "text/latex"
MIME_SVG = "image/svg+xml"
MIME_PNG = "image/png"
MIME_JPEG = "image/jpeg"
MIME_JSON = "application/json"

#: MIME types whose values are base64 text on the wire.
BINARY_MIMES = frozenset({MIME_PNG, MIME_JPEG, "image/gif", "image/webp", "application/pdf"})


def _b64(value: Optional[str]) -> Optional[bytes]:
    if value is None:
        return None
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


class Result:
    """One rich output of a cell (the value of its last expression when
    ``main`` is true, else a display or a figure).

    ``data`` is the MIME bundle as sent (binary types as base64 text);
    ``png`` and ``jpeg`` are that base64 text, as in E2B's SDK, and
    ``png_bytes`` and ``jpeg_bytes`` the decoded bytes.
    """

    def __init__(self, raw: Dict[str, Any]):
        data = raw.get("data") if isinstance(raw, dict) else None
        self.raw = raw
        self.main: bool = bool(raw.get("main")) if isinstance(raw, dict) else False
        self.data: Dict[str, str] = {k: v for k, v in (data or {}).items() if isinstance(k, str) and isinstance(v, str)}

    @property
    def is_main_result(self) -> bool:
        """E2B's name for :attr:`main`."""
        return self.main

    @property
    def text(self) -> Optional[str]:
        return self.data.get(MIME_TEXT)

    @property
    def html(self) -> Optional[str]:
        return self.data.get(MIME_HTML)

    @property
    def markdown(self) -> Optional[str]:
        return self.data.get(MIME_MARKDOWN)

    @property
    def latex(self) -> Optional[str]:
        return self.data.get(MIME_LATEX)

    @property
    def svg(self) -> Optional[str]:
        return self.data.get(MIME_SVG)

    @property
    def png(self) -> Optional[str]:
        """The PNG as base64 text, as E2B's SDK gives it (:attr:`png_bytes`
        decodes it)."""
        return self.data.get(MIME_PNG)

    @property
    def jpeg(self) -> Optional[str]:
        """The JPEG as base64 text (:attr:`jpeg_bytes` decodes it)."""
        return self.data.get(MIME_JPEG)

    @property
    def png_bytes(self) -> Optional[bytes]:
        return _b64(self.data.get(MIME_PNG))

    @property
    def jpeg_bytes(self) -> Optional[bytes]:
        return _b64(self.data.get(MIME_JPEG))

    @property
    def json(self) -> Any:
        """application/json, decoded (None when absent or not JSON)."""
        v = self.data.get(MIME_JSON)
        if v is None:
            return None
        try:
            return json.loads(v)
        except ValueError:
            return None

    def formats(self) -> List[str]:
        """The MIME types present."""
        return list(self.data)

    def __repr__(self) -> str:
        return f"Result(main={self.main}, formats={self.formats()})"


@dataclass
class Logs:
    """A cell's standard output and error as lists of lines (each with its
    newline), as E2B's SDK gives them: ``"".join(logs.stdout)`` is the
    text, clipped from the middle by the daemon when long (see
    ``Execution.truncated``)."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)

    @classmethod
    def of(cls, stdout: str, stderr: str) -> "Logs":
        return cls(stdout=stdout.splitlines(keepends=True), stderr=stderr.splitlines(keepends=True))


@dataclass
class ExecutionError:
    """The exception a cell raised, or the sandbox's account of why it
    could not finish (TimeoutError, InterpreterLost, OutOfMemory).
    ``traceback`` is one string; ``traceback_lines`` the entries."""

    name: str
    value: str
    traceback: str
    traceback_lines: List[str] = field(default_factory=list)

    @classmethod
    def from_raw(cls, raw: Any) -> Optional["ExecutionError"]:
        if not isinstance(raw, dict):
            return None
        lines = [str(x) for x in (raw.get("traceback") or []) if isinstance(x, str)]
        return cls(name=str(raw.get("name", "")), value=str(raw.get("value", "")),
                   traceback=join_traceback(lines), traceback_lines=lines)


def join_traceback(lines: List[str]) -> str:
    """A traceback's entries as one string, one entry per line."""
    return "\n".join(x.rstrip("\n") for x in lines)


@dataclass
class Truncated:
    """Bytes the daemon cut from the middle of each stream."""

    stdout_bytes: int = 0
    stderr_bytes: int = 0


class Execution:
    """The outcome of one cell.

    ``status`` is "ok", "error", "timeout" or "lost"; ``state_kept`` says
    whether the interpreter's variables survived (a timeout that was
    interrupted keeps them); ``killed_by`` is None, "timeout", "oom" or
    "signal".
    """

    def __init__(self, raw: Dict[str, Any]):
        self.raw = raw
        self.status: str = str(raw.get("status", ""))
        self.execution_count: int = int(raw.get("execution_count") or 0)
        self.logs = Logs.of(str(raw.get("stdout") or ""), str(raw.get("stderr") or ""))
        self.results: List[Result] = [Result(r) for r in (raw.get("results") or []) if isinstance(r, dict)]
        self.error: Optional[ExecutionError] = ExecutionError.from_raw(raw.get("error"))
        self.state_kept: bool = bool(raw.get("state_kept"))
        self.killed_by: Optional[str] = raw.get("killed_by") if isinstance(raw.get("killed_by"), str) else None
        t = raw.get("truncated") if isinstance(raw.get("truncated"), dict) else {}
        self.truncated = Truncated(stdout_bytes=int(t.get("stdout_bytes") or 0), stderr_bytes=int(t.get("stderr_bytes") or 0))
        self.duration_ms: int = int(raw.get("duration_ms") or 0)
        #: The checkpoint recorded after the cell (a sandbox created with
        #: every-cell checkpoints), else None; ``checkpoint_error`` says why
        #: none was (the sandbox runs on).
        self.checkpoint: Optional[int] = _checkpoint(raw)
        self.checkpoint_error: Optional[str] = _checkpoint_error(raw)

    @property
    def main_result(self) -> Optional[Result]:
        for r in self.results:
            if r.main:
                return r
        return None

    @property
    def text(self) -> Optional[str]:
        """The text of the value of the cell's last expression, if any."""
        m = self.main_result
        return m.text if m else None

    def __repr__(self) -> str:
        return (f"Execution(status={self.status!r}, execution_count={self.execution_count}, "
                f"results={self.results!r}, error={self.error.name if self.error else None!r})")


@dataclass
class CommandResult:
    """The outcome of one command (``commands.run``)."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: Truncated
    duration_ms: int
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)
    #: What went wrong outside the command (it could not start), as E2B's
    #: ``error``; None when it ran.
    error: Optional[str] = None
    #: The signal that ended it ("SIGKILL"), if one did.
    signal: Optional[str] = None
    #: Execution's checkpoint and checkpoint_error.
    checkpoint: Optional[int] = None
    checkpoint_error: Optional[str] = None

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "CommandResult":
        t = raw.get("truncated") if isinstance(raw.get("truncated"), dict) else {}
        return cls(exit_code=int(raw.get("exit_code", 0)), stdout=str(raw.get("stdout") or ""),
                   stderr=str(raw.get("stderr") or ""), timed_out=bool(raw.get("timed_out")),
                   truncated=Truncated(int(t.get("stdout_bytes") or 0), int(t.get("stderr_bytes") or 0)),
                   duration_ms=int(raw.get("duration_ms") or 0), raw=raw,
                   checkpoint=_checkpoint(raw), checkpoint_error=_checkpoint_error(raw))


def _checkpoint(raw: Dict[str, Any]) -> Optional[int]:
    n = raw.get("checkpoint")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _checkpoint_error(raw: Dict[str, Any]) -> Optional[str]:
    e = raw.get("checkpoint_error")
    return e if isinstance(e, str) and e else None


@dataclass
class CheckpointInfo:
    """One kept checkpoint of a sandbox (created with ``checkpoints=...``):
    its number ``n`` (from 1, in the order recorded), what recorded it
    (``kind`` "cell", "exec" or "manual"), the execution count then, the
    hex SHA-256 of the cell's code ("" for a manual one), its own size on
    disk, the memory files a restore of it composes (``depth``) and how
    long the guest was paused for it."""

    n: int
    kind: str
    execution_count: int
    code_sha256: str
    created_at: str
    size_bytes: int
    depth: int
    pause_ms: int
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "CheckpointInfo":
        return cls(n=int(raw.get("n") or 0), kind=str(raw.get("kind") or ""),
                   execution_count=int(raw.get("execution_count") or 0), code_sha256=str(raw.get("code_sha256") or ""),
                   created_at=str(raw.get("created_at") or ""), size_bytes=int(raw.get("size_bytes") or 0),
                   depth=int(raw.get("depth") or 0), pause_ms=int(raw.get("pause_ms") or 0), raw=raw)


@dataclass
class SandboxInfo:
    """A sandbox as the daemon describes it."""

    sandbox_id: str
    state: str
    config: Dict[str, Any]
    created_at: str
    uptime_s: float
    cells: int
    cell_running: bool
    usage: Dict[str, Any]
    network: Dict[str, Any]
    #: How its VM started: "template", "boot" or "snapshot" (a fork); None
    #: when the daemon does not know (a sandbox taken over from an earlier
    #: daemon).
    started_from: Optional[str] = None
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "SandboxInfo":
        started = raw.get("started_from")
        return cls(sandbox_id=str(raw.get("id", "")), state=str(raw.get("state", "")),
                   config=dict(raw.get("config") or {}), created_at=str(raw.get("created_at", "")),
                   uptime_s=float(raw.get("uptime_s") or 0), cells=int(raw.get("cells") or 0),
                   cell_running=bool(raw.get("cell_running")), usage=dict(raw.get("usage") or {}),
                   network=dict(raw.get("network") or {}),
                   started_from=started if isinstance(started, str) and started else None, raw=raw)

    @property
    def metadata(self) -> Dict[str, str]:
        """Its labels (E2B's metadata), as given at its creation."""
        labels = self.config.get("labels")
        return dict(labels) if isinstance(labels, dict) else {}

    @property
    def labels(self) -> Dict[str, str]:
        return self.metadata


@dataclass
class SnapshotInfo:
    """A snapshot of a sandbox's machine (memory, variables, files), as the
    daemon describes it. Its forks have its ``vcpus`` and ``memory_mib``."""

    snapshot_id: str
    sandbox_id: str
    created_at: str
    size_bytes: int
    vcpus: int
    memory_mib: int
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def id(self) -> str:
        return self.snapshot_id

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "SnapshotInfo":
        return cls(snapshot_id=str(raw.get("id", "")), sandbox_id=str(raw.get("sandbox_id", "")),
                   created_at=str(raw.get("created_at", "")), size_bytes=int(raw.get("size_bytes") or 0),
                   vcpus=int(raw.get("vcpus") or 0), memory_mib=int(raw.get("memory_mib") or 0), raw=raw)


@dataclass
class ContextInfo:
    """One of a sandbox's sessions: each language's default one (``name``
    "default", listed once used) and named ones (contexts) with their own
    variables and working directory. JavaScript and TypeScript share their
    sessions, listed as "javascript"."""

    language: str
    name: str
    cwd: str = ""
    running: bool = False
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "ContextInfo":
        return cls(language=str(raw.get("language", "")), name=str(raw.get("name", "")),
                   cwd=str(raw.get("cwd") or ""), running=bool(raw.get("running")), raw=raw)


@dataclass
class WorkspaceInfo:
    """A workspace, a named volume at /workspace that outlives the sandboxes
    that use it, as the daemon describes it. ``size_bytes`` is the most it
    can hold, ``disk_bytes`` what it takes on the host's disk now;
    ``sandbox_id`` is the sandbox that holds it (None when none does)."""

    name: str
    size_bytes: int
    disk_bytes: int
    created_at: str
    sandbox_id: Optional[str] = None
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "WorkspaceInfo":
        holder = raw.get("sandbox")
        return cls(name=str(raw.get("name", "")), size_bytes=int(raw.get("size_bytes") or 0),
                   disk_bytes=int(raw.get("disk_bytes") or 0), created_at=str(raw.get("created_at", "")),
                   sandbox_id=holder if isinstance(holder, str) and holder else None, raw=raw)


@dataclass
class ImageInfo:
    """A root image sandboxes can boot (``Sandbox.create(image=name)``), as
    the daemon describes it: "default" is the daemon's own, the others
    were built with ``cellvm image build``. ``python`` and ``modules``
    ("pandas 1.5.3", ...) are from the image's manifest (None and [] when
    it has none); ``sandboxes`` counts the sandboxes that use it now;
    ``key``, ``apt`` and ``build_seconds`` are from its build (None, []
    and 0.0 for the default image)."""

    name: str
    size_bytes: int
    built_at: str
    python: Optional[str] = None
    modules: List[str] = field(default_factory=list)
    sandboxes: int = 0
    key: Optional[str] = None
    apt: List[str] = field(default_factory=list)
    build_seconds: float = 0.0
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)
    #: How it was made ("build", "pull", "import"; None for the default),
    #: the reference pulled, the OCI manifest's digest, and a build's base.
    source: Optional[str] = None
    ref: Optional[str] = None
    digest: Optional[str] = None
    base: Optional[str] = None

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "ImageInfo":
        def text(k: str) -> Optional[str]:
            v = raw.get(k)
            return v if isinstance(v, str) and v else None

        def texts(k: str) -> List[str]:
            v = raw.get(k)
            return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []

        return cls(name=str(raw.get("name", "")), size_bytes=int(raw.get("size_bytes") or 0),
                   built_at=str(raw.get("built_at", "")), python=text("python"), modules=texts("modules"),
                   sandboxes=int(raw.get("sandboxes") or 0), key=text("key"), apt=texts("apt"),
                   build_seconds=float(raw.get("build_seconds") or 0), raw=raw,
                   source=text("source"), ref=text("ref"), digest=text("digest"), base=text("base"))


@dataclass
class ProcessInfo:
    """A running process (``commands.list()``), as E2B's ProcessInfo:
    ``pid``, ``tag``, ``cmd`` and ``args`` (argv[0] and the rest),
    ``cwd``, ``envs`` (the names of its own variables: values are
    write-only), ``user``, ``pty`` and ``started_at``."""

    pid: int
    cmd: str
    args: List[str]
    tag: Optional[str] = None
    cwd: Optional[str] = None
    envs: List[str] = field(default_factory=list)
    user: Optional[str] = None
    pty: bool = False
    started_at: str = ""
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "ProcessInfo":
        argv = [str(a) for a in raw.get("argv") or []]
        return cls(pid=int(raw.get("pid") or 0), cmd=argv[0] if argv else "", args=argv[1:],
                   tag=raw.get("tag") or None, cwd=raw.get("cwd") or None,
                   envs=[str(e) for e in raw.get("env_names") or []], user=raw.get("user") or None,
                   pty=bool(raw.get("pty")), started_at=str(raw.get("started_at") or ""), raw=raw)


@dataclass
class EntryInfo:
    """A file or directory (``files.list``, ``files.get_info``), as E2B's
    EntryInfo: ``name``, ``path``, ``type`` ("file", "dir" or "symlink"),
    ``size``, ``mode`` (permission bits), ``permissions`` ("rwxr-xr-x"),
    ``owner``, ``group``, ``modified_time`` (RFC 3339) and
    ``symlink_target``."""

    name: str
    path: str
    type: str
    size: int
    mode: int
    owner: str = ""
    group: str = ""
    modified_time: str = ""
    symlink_target: Optional[str] = None
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def permissions(self) -> str:
        return "".join(c if self.mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))

    @classmethod
    def from_raw(cls, raw: Dict[str, Any]) -> "EntryInfo":
        return cls(name=str(raw.get("name") or ""), path=str(raw.get("path") or ""), type=str(raw.get("type") or ""),
                   size=int(raw.get("size") or 0), mode=int(raw.get("mode") or 0), owner=str(raw.get("owner") or ""),
                   group=str(raw.get("group") or ""), modified_time=str(raw.get("mod_time") or ""),
                   symlink_target=raw.get("symlink_target") or None, raw=raw)


@dataclass
class FilesystemEvent:
    """One change in a watched directory: ``name`` relative to it, and
    ``type``: "create", "write", "remove", "rename" or "chmod"."""

    name: str
    type: str

"""The calls of a sandbox, written once for Sandbox and AsyncSandbox.

Every call builds a plan (an exchange, its timeout, and how to turn the
answer into a Python object) and hands it to ``_do``: Sandbox runs it and
returns the value, AsyncSandbox returns an awaitable. So each call is
defined once and the two classes cannot drift apart.
"""

from __future__ import annotations

import io
import math
import os
import re
import stat
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _exchange as ex
from . import _procs
from ._procs import CommandHandle, WatchHandle
from ._transport import Connection
from .errors import NotFound
from .models import (
    CheckpointInfo, CommandResult, ContextInfo, Execution, ExecutionError, ImageInfo, Result, SandboxInfo, SnapshotInfo, WorkspaceInfo,
)

def _session_args(language: Any, context: Any) -> None:
    """Checks the types of a session's language and context (the daemon
    checks their values, naming the languages the sandbox's image has)."""
    if language is not None and not isinstance(language, str):
        raise TypeError("language is a str: python, javascript (js), typescript (ts) or bash")
    if context is not None and not isinstance(context, str):
        raise TypeError("context is a str, a session's name")


#: A cell's time limit when run_code is given none (seconds); the same as
#: the daemon's default.
DEFAULT_CELL_TIMEOUT_S = 60.0
#: What a cell's call allows on top of the cell's own limit for the guest
#: to start its interpreter (a first cell, a cell after a restart or a
#: lost interpreter): the guest's agent waits up to three minutes for it
#: (a loaded or nested host is slow), and that wait is not the cell's.
START_ALLOWANCE_S = 180.0
#: How long a create may take to boot the sandbox (seconds).
DEFAULT_CREATE_TIMEOUT_S = 180.0
#: How long a pause or a snapshot may take (seconds): the daemon's own
#: bound on writing a sandbox's memory to disk.
DEFAULT_SNAPSHOT_TIMEOUT_S = 300.0
#: How a sandbox without a snapshot starts: "template" restores the
#: daemon's prepared template (booting when there is none), "cold" boots.
START_VALUES = ("template", "cold")
#: How long a file transfer may take (seconds).
DEFAULT_FILE_TIMEOUT_S = 300.0
#: The most files.read keeps in memory.
DEFAULT_MAX_READ_BYTES = 1 << 30

Callback = Optional[Callable[[Any], Any]]


class Plan:
    """An exchange, its timeout, and what turns its answer into a value."""

    __slots__ = ("exchange", "timeout", "convert")

    def __init__(self, exchange: ex.Exchange, timeout: float, convert: Callable[[Any], Any] = lambda v: v):
        self.exchange, self.timeout, self.convert = exchange, timeout, convert

    def run(self, conn: Connection) -> Any:
        """Runs the plan with blocking I/O and returns its value."""
        return self.convert(conn.run(self.exchange, self.timeout))

    async def arun(self, conn: Connection) -> Any:
        """Runs the plan with asyncio and returns its value."""
        return self.convert(await conn.arun(self.exchange, self.timeout))


def _ms(seconds: Optional[float], what: str) -> Optional[int]:
    if seconds is None:
        return None
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"{what} must be a positive number of seconds, not {seconds!r}")
    return max(1, math.ceil(seconds * 1000))


def _network(network: Any) -> Optional[Dict[str, List[str]]]:
    """The create's network field: None (no network device), a list of
    allowlist entries, or {"allow": [...]}."""
    if network is None:
        return None
    if isinstance(network, dict):
        if set(network) != {"allow"}:
            raise ValueError(f"network takes only 'allow' (a list of hosts, CIDRs and names), not {sorted(network)}")
        network = network["allow"]
    if isinstance(network, str) or not isinstance(network, (list, tuple)) or not all(isinstance(e, str) for e in network):
        raise TypeError("network is a list of allowlist entries (strings) or {'allow': [...]}")
    return {"allow": list(network)}


def _env(env: Any) -> Optional[Dict[str, str]]:
    if env is None:
        return None
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TypeError("env is a dict of str to str")
    return dict(env)


_SNAPSHOT_ID = re.compile(r"snap-[0-9a-f]{12}")


def snapshot_id(value: Any) -> str:
    """A snapshot id as given, checked before it is sent: "snap-" and 12
    lowercase hex digits (Sandbox.list_snapshots() lists them)."""
    if not isinstance(value, str):
        raise TypeError(f"a snapshot id is a str, not {type(value).__name__}")
    if not _SNAPSHOT_ID.fullmatch(value):
        shown = value if len(value) <= 64 else value[:64] + "..."
        raise ValueError(f"{shown!r} is not a snapshot id (snap- and 12 hex digits; Sandbox.list_snapshots() lists them)")
    return value


#: A workspace's or an image's name, as the daemon takes it (it names a
#: file or a directory on the host).
_HOST_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def _host_name(value: Any, what: str) -> str:
    """value checked before it is sent as what ("a workspace name"): 1 to
    64 of a-z, 0-9, '-', '_' and '.', starting with a letter or digit."""
    if not isinstance(value, str):
        raise TypeError(f"{what} is a str, not {type(value).__name__}")
    if not _HOST_NAME.fullmatch(value):
        shown = value if len(value) <= 64 else value[:64] + "..."
        raise ValueError(f"{shown!r} is not {what} (1 to 64 of a-z, 0-9, '-', '_' and '.', "
                         "starting with a letter or digit)")
    return value


def workspace_name(value: Any) -> str:
    """A workspace name as given, checked before it is sent."""
    return _host_name(value, "a workspace name")


def image_name(value: Any) -> str:
    """An image name as given, checked before it is sent ("default" is
    the daemon's own image)."""
    return _host_name(value, "an image name")


def _start(start: Any) -> Optional[str]:
    if start is None:
        return None
    if not isinstance(start, str):
        raise TypeError(f"start is a str ('template' or 'cold'), not {type(start).__name__}")
    if start not in START_VALUES:
        shown = start if len(start) <= 64 else start[:64] + "..."
        raise ValueError(f"start is 'template' or 'cold' (or None: the daemon's choice), not {shown!r}")
    return start


#: E2B's template names that mean the daemon's own image.
DEFAULT_TEMPLATES = ("base", "code-interpreter-v1", "code-interpreter", "default")

#: Bounds on labels (the daemon's: sandbox/labels.go).
MAX_LABELS, MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES = 64, 128, 1024
_LABEL_KEY = re.compile(r"[A-Za-z0-9._/:-]+")


def labels_arg(labels: Any, what: str = "metadata") -> Optional[Dict[str, str]]:
    """A sandbox's labels (E2B's metadata), checked as the daemon checks
    them so a bad one fails before anything is sent."""
    if labels is None:
        return None
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise TypeError(f"{what} is a dict of str to str")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{what} has {len(labels)} entries, at most {MAX_LABELS}")
    for k, v in labels.items():
        if not _LABEL_KEY.fullmatch(k) or len(k.encode()) > MAX_LABEL_KEY_BYTES:
            raise ValueError(f"{what} key {k[:64]!r}: 1 to {MAX_LABEL_KEY_BYTES} bytes of letters, digits and . _ - / :")
        if len(v.encode()) > MAX_LABEL_VALUE_BYTES or any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
            raise ValueError(f"{what} {k[:64]!r}'s value: at most {MAX_LABEL_VALUE_BYTES} bytes of text without control characters")
    return dict(labels)


def _one_of(a: Any, b: Any, names: str) -> Any:
    if a is not None and b is not None:
        raise ValueError(f"give one of {names}, not both")
    return a if a is not None else b


def create_plan(conn: Connection, *, vcpus: Optional[int], memory_mib: Optional[int], network: Any,
                env: Any, ttl_s: Optional[int], idle_timeout_s: Optional[int], boot_timeout: float,
                start: Optional[str] = None, snapshot: Optional[str] = None,
                workspace: Optional[str] = None, image: Optional[str] = None,
                template: Optional[str] = None, metadata: Optional[Dict[str, str]] = None,
                labels: Optional[Dict[str, str]] = None, envs: Optional[Dict[str, str]] = None,
                timeout: Optional[int] = None, checkpoints: Any = None, checkpoint: Any = None) -> Plan:
    """POST /v1/sandboxes. E2B's names take E2B's meanings: ``timeout`` is
    the lifetime in seconds (``ttl_s``), ``template`` the image (its
    "base" and "code-interpreter-v1" are the daemon's own), ``metadata``
    the labels, ``envs`` the env; ``boot_timeout`` bounds the call."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
                                or math.isinf(timeout)):
        raise ValueError(f"timeout is the sandbox's lifetime, a positive number of seconds, not {timeout!r}")
    ttl_s = _one_of(ttl_s, None if timeout is None else max(1, math.ceil(timeout)), "ttl_s and timeout (the lifetime)")
    env = _one_of(env, envs, "env and envs")
    labels = labels_arg(_one_of(labels, metadata, "labels and metadata"))
    if template is not None:
        if not isinstance(template, str):
            raise TypeError(f"template is a str, not {type(template).__name__}")
        image = _one_of(image, None if template in DEFAULT_TEMPLATES else template, "image and template")
    cfg: Dict[str, Any] = {}
    for name, v in (("vcpus", vcpus), ("memory_mib", memory_mib), ("ttl_s", ttl_s), ("idle_timeout_s", idle_timeout_s)):
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
            cfg[name] = v
    net = _network(network)
    if net is not None:
        cfg["network"] = net
    e = _env(env)
    if e:
        cfg["env"] = e
    st = _start(start)
    if st is not None:
        cfg["start"] = st
    if snapshot is not None:
        cfg["snapshot"] = snapshot_id(snapshot)
    if workspace is not None:
        cfg["workspace"] = workspace_name(workspace)
    if image is not None:
        cfg["image"] = image_name(image)
    if labels:
        cfg["labels"] = labels
    cc = checkpoints_arg(checkpoints)
    if cc is not None:
        cfg["checkpoints"] = cc
    if checkpoint is not None:
        cfg["checkpoint"] = checkpoint_ref(checkpoint)
    return Plan(ex.json_call("POST", ex.sandboxes_path(), cfg, want=(201,)), boot_timeout + conn.timeout, SandboxInfo.from_raw)


#: Bounds of a sandbox's checkpoints (the daemon's: sandbox/checkpoints.go).
MAX_CHECKPOINT_KEEP = 32


def _count(v: Any, what: str, low: int = 1, high: Optional[int] = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} is an int, not {type(v).__name__}")
    if v < low or (high is not None and v > high):
        raise ValueError(f"{what} {v} is out of range {low}..{high if high is not None else ''}")
    return v


def checkpoints_arg(value: Any) -> Optional[Dict[str, Any]]:
    """``create(checkpoints=...)``: None (off), True (every cell, the
    daemon's keep) or {"every_cell": bool, "keep": n}."""
    if value is None or value is False:
        return None
    if value is True:
        return {"every_cell": True}
    if not isinstance(value, dict):
        raise TypeError(f"checkpoints is True or a dict {{'every_cell': bool, 'keep': n}}, not {type(value).__name__}")
    unknown = set(value) - {"every_cell", "keep"}
    if unknown:
        raise ValueError(f"checkpoints has unknown keys {sorted(unknown)}; it takes every_cell and keep")
    out: Dict[str, Any] = {}
    if value.get("every_cell") is not None:
        if not isinstance(value["every_cell"], bool):
            raise TypeError("checkpoints' every_cell is a bool")
        out["every_cell"] = value["every_cell"]
    if value.get("keep") is not None:
        out["keep"] = _count(value["keep"], "checkpoints' keep", 1, MAX_CHECKPOINT_KEEP)
    return out


def checkpoint_ref(value: Any) -> Dict[str, Any]:
    """``create(checkpoint=...)``: {"sandbox": id, "n": n}, or a
    (sandbox, n) pair, the sandbox an id or a Sandbox."""
    if isinstance(value, dict):
        sbx, n = value.get("sandbox"), value.get("n")
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        sbx, n = value
    else:
        raise TypeError("checkpoint is {'sandbox': id, 'n': n} or a (sandbox, n) pair")
    sbx = getattr(sbx, "sandbox_id", sbx)
    if not isinstance(sbx, str) or not sbx or len(sbx) > 128:
        raise ValueError("checkpoint's sandbox is a sandbox id")
    return {"sandbox": sbx, "n": _count(n, "checkpoint's n")}


def info_plan(conn: Connection, sandbox_id: str) -> Plan:
    return Plan(ex.json_call("GET", ex.sandbox_path(sandbox_id)), conn.timeout, SandboxInfo.from_raw)


#: The states a list may filter by.
STATES = ("starting", "running", "paused", "lost", "stopping")


def list_plan(conn: Connection, *, metadata: Optional[Dict[str, str]] = None, state: Any = None,
              labels: Optional[Dict[str, str]] = None) -> Plan:
    """GET /v1/sandboxes, filtered: every label in ``metadata`` (or
    ``labels``) must match, and the state must be one of ``state`` (a str
    or a list of them)."""
    query: List[Any] = [("label", f"{k}={v}") for k, v in sorted((labels_arg(_one_of(labels, metadata, "labels and metadata")) or {}).items())]
    if state is not None:
        states = [state] if isinstance(state, str) else state
        if not isinstance(states, (list, tuple)) or not all(isinstance(x, str) and x in STATES for x in states):
            raise ValueError(f"state is one of {', '.join(STATES)}, or a list of them, not {state!r}")
        query += [("state", x) for x in states]
    path = ex.sandboxes_path()
    if query:
        path += "?" + urllib.parse.urlencode(query)
    return Plan(ex.json_call("GET", path), conn.timeout,
                lambda v: [SandboxInfo.from_raw(s) for s in (v or {}).get("sandboxes") or []])


def version_plan(conn: Connection) -> Plan:
    """GET /v1/version: the daemon's {"version", "commit", "go"}."""
    return Plan(ex.json_call("GET", "/v1/version"), conn.timeout, lambda v: dict(v or {}))


def list_snapshots_plan(conn: Connection) -> Plan:
    return Plan(ex.json_call("GET", ex.snapshots_path()), conn.timeout,
                lambda v: [SnapshotInfo.from_raw(s) for s in v or [] if isinstance(s, dict)])


def get_snapshot_plan(conn: Connection, snap_id: str) -> Plan:
    return Plan(ex.json_call("GET", ex.snapshot_path(snapshot_id(snap_id))), conn.timeout, SnapshotInfo.from_raw)


def delete_snapshot_plan(conn: Connection, snap_id: str) -> Plan:
    return Plan(_delete(ex.snapshot_path(snapshot_id(snap_id))), conn.timeout)


def list_workspaces_plan(conn: Connection) -> Plan:
    return Plan(ex.json_call("GET", ex.workspaces_path()), conn.timeout,
                lambda v: [WorkspaceInfo.from_raw(w) for w in v or [] if isinstance(w, dict)])


def delete_workspace_plan(conn: Connection, name: str) -> Plan:
    return Plan(_delete(ex.workspace_path(workspace_name(name))), conn.timeout)


def list_images_plan(conn: Connection) -> Plan:
    return Plan(ex.json_call("GET", ex.images_path()), conn.timeout,
                lambda v: [ImageInfo.from_raw(i) for i in v or [] if isinstance(i, dict)])


#: A make's deadline when create_image gives none (the daemon's default).
DEFAULT_IMAGE_TIMEOUT_S = 1800


def create_image_plan(conn: Connection, name: str, *, pull: Optional[str] = None, recipe: Optional[Dict[str, Any]] = None,
                      replace: bool = False, platform: Optional[str] = None, insecure: bool = False,
                      registry_token: Optional[str] = None, timeout_s: Optional[int] = None) -> Plan:
    """POST /v1/images as JSON: a pull, or a recipe whose steps need no
    files (imports and builds with files go through ``cellvm image``)."""
    body: Dict[str, Any] = {"name": image_name(name)}
    if (pull is None) == (recipe is None):
        raise ValueError("create_image takes exactly one of pull (an OCI reference) and recipe "
                         "({'base': ..., 'steps': [...]}); imports and builds with files go through 'cellvm image'")
    if pull is not None:
        if not isinstance(pull, str) or not pull or len(pull) > 512:
            raise ValueError("pull is an OCI reference (registry/repo:tag or @sha256:...)")
        body["pull"] = pull
    if recipe is not None:
        if not isinstance(recipe, dict) or not isinstance(recipe.get("steps"), list):
            raise TypeError("recipe is a dict with 'steps' (a list of steps) and optionally 'base'")
        body["recipe"] = recipe
    if replace:
        body["replace"] = True
    if platform is not None:
        body["platform"] = platform
    if insecure:
        body["insecure"] = True
    if registry_token is not None:
        body["registry_token"] = registry_token
    if timeout_s is not None:
        if not isinstance(timeout_s, int) or isinstance(timeout_s, bool) or timeout_s <= 0:
            raise ValueError("timeout_s is a positive int")
        body["timeout_s"] = timeout_s
    wait = (timeout_s or DEFAULT_IMAGE_TIMEOUT_S) + conn.timeout
    return Plan(ex.json_call("POST", ex.images_path(), body, want=(201,)), wait, ImageInfo.from_raw)


def delete_image_plan(conn: Connection, name: str) -> Plan:
    return Plan(_delete(ex.image_path(image_name(name))), conn.timeout)


def _kill(sandbox_id: str) -> ex.Exchange:
    return _delete(ex.sandbox_path(sandbox_id))


def _delete(path: str) -> ex.Exchange:
    """DELETE, answering False when there was nothing to delete."""
    try:
        yield from ex.json_call("DELETE", path, want=(204,))
    except NotFound:
        return False
    return True


def _dispatcher(on_stdout: Callback, on_stderr: Callback, on_result: Callback, on_error: Callback) -> Callable[[dict], Any]:
    def dispatch(event: dict) -> Any:
        t = event["type"]
        if t == "stdout" and on_stdout:
            return on_stdout(str(event.get("text", "")))
        if t == "stderr" and on_stderr:
            return on_stderr(str(event.get("text", "")))
        if t == "result" and on_result and isinstance(event.get("result"), dict):
            return on_result(Result(event["result"]))
        if t == "error" and on_error:
            err = ExecutionError.from_raw(event.get("error"))
            if err is not None:
                return on_error(err)
        return None
    return dispatch


def _source(data: Any):
    """bytes, str (as UTF-8) or a binary file object, and its length when
    it is known (a regular file, a BytesIO); None means chunked."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), len(data)
    if not hasattr(data, "read"):
        raise TypeError(f"files.write takes bytes, str or a binary file object, not {type(data).__name__}")
    try:
        if isinstance(data, io.BytesIO):
            return data, len(data.getbuffer()) - data.tell()
        st = os.fstat(data.fileno())
        if stat.S_ISREG(st.st_mode):
            return data, st.st_size - data.tell()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    return data, None


def _argv(cmd: Union[str, Sequence[str]], cwd: Optional[str], envs: Optional[Dict[str, str]]) -> List[str]:
    if isinstance(cmd, str):
        argv = ["sh", "-c", cmd]
    elif isinstance(cmd, (list, tuple)) and cmd and all(isinstance(a, str) for a in cmd):
        argv = list(cmd)
    else:
        raise TypeError("a command is a shell string or a non-empty list of strings (argv)")
    if envs:
        e = _env(envs) or {}
        argv = ["env"] + [f"{k}={v}" for k, v in e.items()] + argv
    if cwd is not None:
        argv = ["sh", "-c", 'cd -- "$1" || exit 125; shift; exec "$@"', "sh", cwd] + argv
    return argv


class Commands:
    """``sbx.commands``: programs run in the sandbox outside the interpreter."""

    def __init__(self, sbx: "SandboxCalls"):
        self._sbx = sbx

    def run(self, cmd: Union[str, Sequence[str]], *, stdin: Union[str, bytes, bool, None] = None,
            timeout: Optional[float] = DEFAULT_CELL_TIMEOUT_S, cwd: Optional[str] = None,
            envs: Optional[Dict[str, str]] = None, request_timeout: Optional[float] = None,
            background: bool = False, on_stdout: Callback = None, on_stderr: Callback = None,
            user: Optional[str] = None, tag: Optional[str] = None):
        """Runs a command: a string goes to ``sh -c``, a list is the argv.

        Plainly (no ``background``, callbacks, ``user`` or ``tag``) it
        returns a :class:`CommandResult` once the command ends; a failing
        or timed-out command is a result (exit_code, timed_out), not an
        error, and ``stdin`` may be the input (str or bytes).

        E2B's shape: with ``on_stdout``/``on_stderr`` (each gets text as it
        comes), ``user`` ("user" or "root") or ``tag``, it runs as a
        process and raises :class:`~cellvm.CommandExitError` when the exit
        code is not 0. With ``background=True`` it returns a
        :class:`~cellvm.CommandHandle` as soon as the process runs (its
        ``wait()`` gives the result); ``stdin=True`` keeps its input open
        for ``send_stdin``. ``timeout`` (seconds; 0 or None: none) kills
        the process when it passes."""
        if background or on_stdout is not None or on_stderr is not None or user is not None or tag is not None \
                or stdin is True:
            return self._start(cmd, background=background, on_stdout=on_stdout, on_stderr=on_stderr, cwd=cwd,
                               envs=envs, user=user, tag=tag, timeout=timeout, stdin=stdin, request_timeout=request_timeout)
        payload: Dict[str, Any] = {"argv": _argv(cmd, cwd, envs)}
        if isinstance(stdin, str):
            payload["stdin"] = stdin
        elif isinstance(stdin, (bytes, bytearray)):
            try:
                payload["stdin"] = bytes(stdin).decode("utf-8")
            except UnicodeDecodeError:
                import base64
                payload["stdin_base64"] = base64.b64encode(bytes(stdin)).decode("ascii")
        elif stdin is not None:
            raise TypeError("stdin is str or bytes")
        ms = _ms(timeout, "timeout")
        if ms is not None:
            payload["timeout_ms"] = ms
        limit = request_timeout or (timeout or DEFAULT_CELL_TIMEOUT_S) + self._sbx._conn.timeout
        return self._sbx._do(Plan(ex.json_call("POST", ex.sandbox_path(self._sbx.sandbox_id, "exec"), payload),
                                  limit, CommandResult.from_raw))


    def _start(self, cmd: Union[str, Sequence[str]], *, background: bool, on_stdout: Callback, on_stderr: Callback,
               cwd: Optional[str], envs: Optional[Dict[str, str]], user: Optional[str], tag: Optional[str],
               timeout: Optional[float], stdin: Any, request_timeout: Optional[float], pty: Optional[Dict[str, int]] = None,
               on_data: Callback = None):
        payload = _process_request(cmd, cwd=cwd, envs=envs, user=user, tag=tag, timeout=timeout, stdin=stdin, pty=pty)
        h = CommandHandle(self, on_stdout, on_stderr, on_data)
        path = ex.sandbox_path(self._sbx.sandbox_id, "processes")
        limit = request_timeout or (payload.get("timeout_ms", 0) / 1000 + self._sbx._conn.timeout
                                    if payload.get("timeout_ms") else _procs.FOREVER_S)
        exchange_of = lambda stopped: _procs.ndjson_stream("POST", path, payload, h._event, stopped, "the process's stream")
        if not background:
            return self._sbx._do(Plan(exchange_of(None), limit, h._checked))
        return self._follow(h, exchange_of, limit)

    def _follow(self, h: CommandHandle, exchange_of: Any, limit: float):
        """Runs the stream on a runner and gives the handle once the
        process runs (CommandExitError when it could not start)."""
        h.attach_runner(self._sbx._runner(exchange_of, limit))

        def ready():
            if h.pid is None:
                return h._checked(h._result)
            return h
        return h._runner.when_started(ready)

    def connect(self, pid: int, *, on_stdout: Callback = None, on_stderr: Callback = None, on_data: Callback = None,
                timeout: Optional[float] = None):
        """Follows a running process (E2B's ``commands.connect``): its
        output kept so far (the backlog) first, then what comes. Returns a
        :class:`~cellvm.CommandHandle`; NotFound when no such process runs."""
        h = CommandHandle(self, on_stdout, on_stderr, on_data)
        h.pid = _pid(pid)
        path = ex.sandbox_path(self._sbx.sandbox_id, "processes", str(h.pid), "attach")
        exchange_of = lambda stopped: _procs.ndjson_stream("GET", path, None, h._event, stopped, "the process's stream")
        h.attach_runner(self._sbx._runner(exchange_of, timeout or _procs.FOREVER_S))
        # An attach has no start event: the handle is ready at once, and
        # an unknown pid shows in wait().
        h._runner.started()
        return h._runner.when_started(lambda: h)

    def list(self):
        """The sandbox's running processes (:class:`~cellvm.ProcessInfo`)."""
        return self._sbx._do(Plan(ex.json_call("GET", ex.sandbox_path(self._sbx.sandbox_id, "processes")),
                                  self._sbx._conn.timeout, lambda v: [_procs.process_info(p) for p in v or []]))

    def kill(self, pid: int, *, signal: str = "SIGKILL"):
        """Signals a process: SIGKILL (the default), SIGTERM, SIGINT or
        SIGHUP. True when it was signalled, False when no such process runs."""
        if signal not in ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"):
            raise ValueError(f"signal is SIGKILL, SIGTERM, SIGINT or SIGHUP, not {signal!r}")
        path = ex.sandbox_path(self._sbx.sandbox_id, "processes", str(_pid(pid)), "signal")
        return self._sbx._do(Plan(_absent_is_false(ex.json_call("POST", path, {"signal": signal}, want=(204,))),
                                  self._sbx._conn.timeout))

    def send_stdin(self, pid: int, data: Union[str, bytes], *, eof: bool = False):
        """Sends input to a process started with ``stdin=True`` (or a
        PTY); ``eof=True`` closes its input after it."""
        body = _input(data)
        if eof:
            body["eof"] = True
        path = ex.sandbox_path(self._sbx.sandbox_id, "processes", str(_pid(pid)), "stdin")
        return self._sbx._do(Plan(ex.json_call("POST", path, body, want=(204,)), self._sbx._conn.timeout, lambda v: None))

    def close_stdin(self, pid: int):
        """Closes a process's input (it reads end of file)."""
        return self.send_stdin(pid, b"", eof=True)


class Pty:
    """``sbx.pty``: processes on a terminal, as E2B's ``sandbox.pty``."""

    def __init__(self, commands: Commands):
        self._commands = commands

    def create(self, *, cols: int = 80, rows: int = 24, on_data: Callback = None, cmd: Union[str, Sequence[str], None] = None,
               cwd: Optional[str] = None, envs: Optional[Dict[str, str]] = None, user: Optional[str] = None,
               timeout: Optional[float] = None):
        """Starts ``cmd`` (default: bash, a login shell's way) on a
        terminal of cols x rows and returns its
        :class:`~cellvm.CommandHandle`; ``on_data`` gets the terminal's
        output as bytes."""
        return self._commands._start(cmd if cmd is not None else ["bash", "-i", "-l"], background=True, on_stdout=None,
                                     on_stderr=None, cwd=cwd, envs=envs, user=user, tag=None, timeout=timeout,
                                     stdin=None, request_timeout=None, pty=_pty_size(cols, rows), on_data=on_data)

    def send_stdin(self, pid: int, data: Union[str, bytes]):
        """Types data on the terminal."""
        return self._commands.send_stdin(pid, data)

    def resize(self, pid: int, *, cols: int, rows: int):
        """Resizes the terminal."""
        sbx = self._commands._sbx
        path = ex.sandbox_path(sbx.sandbox_id, "processes", str(_pid(pid)), "resize")
        return sbx._do(Plan(ex.json_call("POST", path, _pty_size(cols, rows), want=(204,)), sbx._conn.timeout, lambda v: None))

    def kill(self, pid: int):
        return self._commands.kill(pid)


def _pid(pid: Any) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise ValueError(f"a pid is a positive int, not {pid!r}")
    return pid


def _pty_size(cols: Any, rows: Any) -> Dict[str, int]:
    for name, v in (("cols", cols), ("rows", rows)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
            raise ValueError(f"{name} is an int in 1..4096, not {v!r}")
    return {"cols": cols, "rows": rows}


def _input(data: Any) -> Dict[str, Any]:
    if isinstance(data, str):
        return {"data": data} if data else {}
    if isinstance(data, (bytes, bytearray, memoryview)):
        b = bytes(data)
        try:
            return {"data": b.decode("utf-8")} if b else {}
        except UnicodeDecodeError:
            import base64
            return {"data_base64": base64.b64encode(b).decode("ascii")}
    raise TypeError(f"input is str or bytes, not {type(data).__name__}")


def _process_request(cmd: Any, *, cwd: Optional[str], envs: Any, user: Optional[str], tag: Optional[str],
                     timeout: Optional[float], stdin: Any, pty: Optional[Dict[str, int]]) -> Dict[str, Any]:
    """The body of POST .../processes (the daemon's ProcessStartRequest)."""
    if isinstance(cmd, str):
        argv = ["sh", "-c", cmd]
    elif isinstance(cmd, (list, tuple)) and cmd and all(isinstance(a, str) for a in cmd):
        argv = list(cmd)
    else:
        raise TypeError("a command is a shell string or a non-empty list of strings (argv)")
    body: Dict[str, Any] = {"argv": argv}
    if cwd is not None:
        body["cwd"] = cwd
    e = _env(envs)
    if e:
        body["env"] = e
    if user is not None:
        if user not in ("user", "root"):
            raise ValueError(f"user is 'user' or 'root', not {user!r}")
        body["user"] = user
    if tag is not None:
        body["tag"] = str(tag)
    if pty is not None:
        body["pty"] = pty
    if stdin is True:
        body["stdin"] = True
    elif stdin not in (None, False):
        raise TypeError("with background, callbacks, user or tag, stdin is True (keep input open for send_stdin) "
                        "or None; input given as data goes with a plain commands.run")
    if timeout:
        body["timeout_ms"] = _ms(timeout, "timeout")
    return body


def _absent_is_false(exchange: ex.Exchange) -> ex.Exchange:
    try:
        yield from exchange
    except NotFound:
        return False
    return True


class Files:
    """``sbx.files``: the sandbox's files. Relative paths are under
    /workspace, where cells and commands run."""

    def __init__(self, sbx: "SandboxCalls"):
        self._sbx = sbx

    def write(self, path: str, data: Any, *, timeout: float = DEFAULT_FILE_TIMEOUT_S):
        """Writes bytes, str (as UTF-8) or a binary file object to path,
        creating parent directories; returns the number of bytes written."""
        source, length = _source(data)
        return self._sbx._do(Plan(ex.upload(self._sbx.sandbox_id, path, source, length), timeout,
                                  lambda v: int((v or {}).get("bytes", 0))))

    def read(self, path: str, *, max_bytes: int = DEFAULT_MAX_READ_BYTES, timeout: float = DEFAULT_FILE_TIMEOUT_S):
        """Returns the file's bytes (TooLarge beyond max_bytes)."""
        return self._sbx._do(Plan(ex.download(self._sbx.sandbox_id, path, max_bytes), timeout))

    def _query(self, **kw: Any) -> str:
        q = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in kw.items() if v is not None]
        return "?" + urllib.parse.urlencode(q) if q else ""

    def list(self, path: str, *, depth: int = 1, user: Optional[str] = None):
        """The entries of a directory (:class:`~cellvm.EntryInfo`), and of
        its subdirectories down to ``depth`` levels (1: its own)."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth is a positive int, not {depth!r}")
        target = ex.guest_route(self._sbx.sandbox_id, "dir", path) + self._query(depth=depth, user=user)
        return self._sbx._do(Plan(ex.json_call("GET", target), self._sbx._conn.timeout,
                                  lambda v: [_procs.entry(e) for e in (v or {}).get("entries") or []]))

    def get_info(self, path: str, *, user: Optional[str] = None):
        """What path is (:class:`~cellvm.EntryInfo`); NotFound when nothing is there."""
        target = ex.guest_route(self._sbx.sandbox_id, "stat", path) + self._query(user=user)
        return self._sbx._do(Plan(ex.json_call("GET", target), self._sbx._conn.timeout, _procs.entry))

    def exists(self, path: str, *, user: Optional[str] = None):
        """Whether anything is at path."""
        target = ex.guest_route(self._sbx.sandbox_id, "stat", path) + self._query(user=user)
        return self._sbx._do(Plan(_absent_is_false(ex.json_call("GET", target)), self._sbx._conn.timeout))

    def make_dir(self, path: str, *, user: Optional[str] = None):
        """Makes a directory and its parents: True when it made it, False
        when it was already there."""
        target = ex.guest_route(self._sbx.sandbox_id, "dir", path) + self._query(user=user)
        return self._sbx._do(Plan(ex.json_call("POST", target), self._sbx._conn.timeout,
                                  lambda v: bool((v or {}).get("created"))))

    def rename(self, old_path: str, new_path: str, *, user: Optional[str] = None):
        """Moves old_path to new_path and returns what is there now (:class:`~cellvm.EntryInfo`)."""
        body: Dict[str, Any] = {"from": _guest_abs(old_path), "to": _guest_abs(new_path)}
        if user is not None:
            body["user"] = user
        return self._sbx._do(Plan(ex.json_call("POST", ex.sandbox_path(self._sbx.sandbox_id, "move"), body),
                                  self._sbx._conn.timeout, _procs.entry))

    def remove(self, path: str, *, user: Optional[str] = None):
        """Removes a file or a directory with all it holds."""
        target = ex.files_path(self._sbx.sandbox_id, path) + self._query(user=user)
        return self._sbx._do(Plan(ex.json_call("DELETE", target, want=(204,)), self._sbx._conn.timeout, lambda v: None))

    def watch_dir(self, path: str, on_event: Callback = None, *, recursive: bool = False, user: Optional[str] = None):
        """Watches a directory: ``on_event`` gets each
        :class:`~cellvm.FilesystemEvent` (and ``get_new_events()`` of the
        :class:`~cellvm.WatchHandle` returns them); returns once the watch
        is set, so later changes are seen. ``stop()`` ends it."""
        target = ex.guest_route(self._sbx.sandbox_id, "watch", path) + self._query(recursive=recursive or None, user=user)
        h = WatchHandle(on_event)
        exchange_of = lambda stopped: _procs.ndjson_stream("GET", target, None, h._line, stopped, "the watch")
        h.attach_runner(self._sbx._runner(exchange_of, _procs.FOREVER_S))
        return h._runner.when_started(lambda: h)


def _guest_abs(path: str) -> str:
    if not isinstance(path, str) or not path:
        raise ValueError("a file path is a non-empty string")
    return path if path.startswith("/") else "/workspace/" + path


class Network:
    """``sbx.network``: the sandbox's egress allowlist."""

    def __init__(self, sbx: "SandboxCalls"):
        self._sbx = sbx

    def set(self, allow: Sequence[str]):
        """Replaces the allowlist (addresses, CIDRs, names such as
        "pypi.org" or "*.github.com", optional ports). An empty list
        closes egress."""
        body = _network(list(allow) if not isinstance(allow, dict) else allow)
        return self._sbx._do(Plan(ex.json_call("PUT", ex.sandbox_path(self._sbx.sandbox_id, "network"), body, want=(204,)),
                                  self._sbx._conn.timeout, lambda v: None))


class SandboxCalls:
    """What Sandbox and AsyncSandbox share: every call on one sandbox."""

    _conn: Connection

    def __init__(self, conn: Connection, info: SandboxInfo):
        self._conn = conn
        self.sandbox_id = info.sandbox_id
        self.created = info
        self.commands = Commands(self)
        self.pty = Pty(self.commands)
        self.files = Files(self)
        self.network = Network(self)

    @property
    def id(self) -> str:
        return self.sandbox_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sandbox_id!r})"

    def _do(self, plan: Plan) -> Any:  # overridden
        raise NotImplementedError

    def _runner(self, exchange_of: Any, timeout: float) -> Any:  # overridden
        raise NotImplementedError

    def run_code(self, code: str, *, language: Optional[str] = None, context: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_CELL_TIMEOUT_S,
                 on_stdout: Callback = None, on_stderr: Callback = None, on_result: Callback = None,
                 on_error: Callback = None, request_timeout: Optional[float] = None):
        """Runs a cell in one of the sandbox's sessions (state persists
        between calls) and returns an :class:`~cellvm.models.Execution`.
        ``language`` is "python" (the default), "javascript" ("js"),
        "typescript" ("ts") or "bash"; each language has its own session,
        started by its first cell, and ``context`` names another session of
        the language (see :meth:`create_context`). ``timeout``
        is the cell's limit (seconds); the call as a whole may also take the
        interpreter's start-up (``START_ALLOWANCE_S``), unless
        ``request_timeout`` says otherwise. Events go
        to the callbacks as they happen: on_stdout/on_stderr get text,
        on_result a :class:`~cellvm.models.Result`, on_error an
        :class:`~cellvm.models.ExecutionError`. A callback that raises
        ends the call, which interrupts the cell."""
        if not isinstance(code, str):
            raise TypeError("code is a str of source")
        _session_args(language, context)
        ms = _ms(timeout, "timeout")
        limit = request_timeout or (timeout or DEFAULT_CELL_TIMEOUT_S) + START_ALLOWANCE_S + self._conn.timeout
        return self._do(Plan(ex.run_cell(self.sandbox_id, code, ms, _dispatcher(on_stdout, on_stderr, on_result, on_error),
                                         language=language, context=context),
                             limit, Execution))

    def interrupt(self):
        """Interrupts the running cell (it ends with KeyboardInterrupt, variables kept)."""
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "interrupt"), want=(204,)),
                             self._conn.timeout, lambda v: None))

    def restart(self, *, language: Optional[str] = None, context: Optional[str] = None):
        """Replaces a session's interpreter with a fresh one (and waits for
        it to start): its variables are lost, other sessions keep theirs.
        Without arguments, Python's default session."""
        _session_args(language, context)
        body = {k: v for k, v in (("language", language), ("context", context)) if v} or None
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "restart"), body, want=(204,)),
                             START_ALLOWANCE_S + self._conn.timeout, lambda v: None))

    def create_context(self, language: str = "python", *, name: Optional[str] = None, cwd: Optional[str] = None):
        """Creates a named session of ``language`` (a context, as E2B calls
        it) with its own variables, in ``cwd`` (an absolute path in the
        sandbox; default the sandbox's directory), and returns its
        :class:`~cellvm.models.ContextInfo`; without ``name`` the daemon
        makes one up. Run cells in it with ``run_code(...,
        language=..., context=info.name)``; its program starts with its
        first cell."""
        _session_args(language, name)
        if cwd is not None and not isinstance(cwd, str):
            raise TypeError("cwd is a str")
        body = {k: v for k, v in (("language", language), ("name", name), ("cwd", cwd)) if v}
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "contexts"), body, want=(200, 201)),
                             self._conn.timeout, ContextInfo.from_raw))

    def list_contexts(self):
        """Lists the sandbox's sessions (:class:`~cellvm.models.ContextInfo`):
        each language's default one once used, and the named ones."""
        return self._do(Plan(ex.json_call("GET", ex.sandbox_path(self.sandbox_id, "contexts")), self._conn.timeout,
                             lambda v: [ContextInfo.from_raw(c) for c in v or [] if isinstance(c, dict)]))

    def remove_context(self, name: str, *, language: str = "python"):
        """Ends a named session and its program (its variables are lost).
        A language's default session cannot be removed: restart it."""
        _session_args(language, name)
        if not name:
            raise ValueError("a context's name is a non-empty str")
        path = ex.sandbox_path(self.sandbox_id, "contexts", name) + "?" + urllib.parse.urlencode({"language": language})
        return self._do(Plan(ex.json_call("DELETE", path, want=(204,)), self._conn.timeout, lambda v: None))

    def pause(self, *, timeout: float = DEFAULT_SNAPSHOT_TIMEOUT_S):
        """Writes the sandbox to disk and ends its VM, whose memory goes back
        to the host; its state reads "paused". :meth:`resume`, or any cell,
        command or file call, brings it back with its variables and files.
        Busy when it is already paused or a cell is running."""
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "pause"), want=(204,)),
                             timeout + self._conn.timeout, lambda v: None))

    def resume(self, *, timeout: float = DEFAULT_CREATE_TIMEOUT_S):
        """Restores a paused sandbox (Busy when it is not paused)."""
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "resume"), want=(204,)),
                             timeout + self._conn.timeout, lambda v: None))

    def snapshot(self, *, timeout: float = DEFAULT_SNAPSHOT_TIMEOUT_S):
        """Saves the sandbox's machine (memory, variables, files) while it
        keeps running, and returns the :class:`SnapshotInfo`;
        ``create(snapshot=info.snapshot_id)`` forks it. Busy while a cell
        runs; Full when the daemon's snapshot disk cap is reached."""
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "snapshot"), want=(201,)),
                             timeout + self._conn.timeout, SnapshotInfo.from_raw))

    def checkpoint(self, *, timeout: float = DEFAULT_SNAPSHOT_TIMEOUT_S):
        """Records a checkpoint of the whole machine now and returns its
        :class:`CheckpointInfo`. Invalid for a sandbox created without
        ``checkpoints=``; Busy while a cell runs."""
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "checkpoints"), want=(201,)),
                             timeout + self._conn.timeout, CheckpointInfo.from_raw))

    def checkpoints(self):
        """The sandbox's kept checkpoints (:class:`CheckpointInfo`), oldest first."""
        return self._do(Plan(ex.json_call("GET", ex.sandbox_path(self.sandbox_id, "checkpoints")), self._conn.timeout,
                             lambda v: [CheckpointInfo.from_raw(c) for c in (v or {}).get("checkpoints") or []
                                        if isinstance(c, dict)]))

    def restore_checkpoint(self, n: int, *, timeout: float = DEFAULT_CREATE_TIMEOUT_S):
        """Brings the sandbox back to checkpoint ``n`` (its memory,
        variables, files and execution count), in the same sandbox, drops
        the checkpoints after it and returns its :class:`CheckpointInfo`.
        NotFound when it is not kept. What the sandbox did outside its VM
        (network calls) is not undone."""
        path = ex.sandbox_path(self.sandbox_id, "checkpoints", str(_count(n, "a checkpoint's n")), "restore")
        return self._do(Plan(ex.json_call("POST", path, want=(200,)), timeout + self._conn.timeout, CheckpointInfo.from_raw))

    def undo(self, *, timeout: float = DEFAULT_CREATE_TIMEOUT_S):
        """Undoes the last cell: restores the checkpoint before the last
        one (with every-cell checkpoints, the state before the last cell or
        command), drops the last and returns the restored
        :class:`CheckpointInfo`. Repeated undos walk back; NotFound with
        fewer than two kept."""
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "checkpoints", "undo"), want=(200,)),
                             timeout + self._conn.timeout, CheckpointInfo.from_raw))

    def set_timeout(self, timeout: float):
        """E2B's setTimeout: the sandbox lives ``timeout`` more seconds from
        now, whatever its TTL said (at most the daemon's cap); returns its
        :class:`SandboxInfo`, whose ``ttl_s`` is then its whole lifetime."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 or math.isinf(timeout):
            raise ValueError(f"timeout is a positive number of seconds, not {timeout!r}")
        body = {"ttl_s": max(1, math.ceil(timeout))}
        return self._do(Plan(ex.json_call("POST", ex.sandbox_path(self.sandbox_id, "ttl"), body), self._conn.timeout,
                             SandboxInfo.from_raw))

    def info(self):
        """The sandbox's state, config and usage (:class:`SandboxInfo`)."""
        return self._do(info_plan(self._conn, self.sandbox_id))

    def kill(self, *, timeout: float = 60.0):
        """Destroys the sandbox (VM, network, files). Returns False when it was already gone."""
        return self._do(Plan(_kill(self.sandbox_id), timeout))

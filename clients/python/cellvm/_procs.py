"""Background processes, file operations and ports: the exchanges and the
handles, written once for Sandbox and AsyncSandbox.

A stream that outlives the call that opened it (a background process, a
watched directory) runs on a thread under :class:`~cellvm.Sandbox` and on
an asyncio task under :class:`~cellvm.AsyncSandbox` (a *runner*); its
handle works the same over either.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import json
import threading
from typing import Any, Callable, Dict, List, Optional

from . import _exchange as ex
from ._http import END, ResponseParser
from .errors import CellvmError, ConnectionLost, ProtocolError
from .models import CommandResult, EntryInfo, FilesystemEvent, ProcessInfo, Truncated

#: How often a stream that can be stopped looks whether it was (seconds).
STOP_POLL_S = 0.2
#: The most of each of a process's streams a handle keeps (bytes); more is
#: counted in the result's ``truncated``.
MAX_KEPT_BYTES = 16 << 20
#: How long a stream with no end of its own may run (seconds): ten years.
FOREVER_S = 10 * 365 * 86400.0

_STOPPED = object()


class CommandExitError(CellvmError):
    """A command ended with a non-zero exit code (or could not start), as
    E2B's ``CommandExitError``: ``exit_code``, ``stdout``, ``stderr``,
    ``error`` and the whole :class:`~cellvm.models.CommandResult` as
    ``result``. Raised by the process calls (``commands.run`` with
    ``background``, callbacks, ``user`` or ``tag``, and handles' ``wait``);
    a plain ``commands.run`` returns the result instead."""

    code = "command_exit"

    def __init__(self, result: CommandResult):
        self.result = result
        self.exit_code, self.stdout, self.stderr, self.error = result.exit_code, result.stdout, result.stderr, result.error
        why = result.error or (f"killed by {result.signal}" if result.signal else f"exit code {result.exit_code}")
        if result.timed_out:
            why += " (its timeout passed)"
        super().__init__(f"the command failed: {why}")


# -- exchanges -----------------------------------------------------------


def ndjson_stream(method: str, path: str, payload: Any, on_line: Callable[[Any], Any],
                  stopped: Optional[Callable[[], bool]], what: str) -> ex.Exchange:
    """One request answered with NDJSON. ``on_line`` gets each decoded line
    and returns None (nothing to do), ``("call", fn, *args)`` (a user
    callback) or ``("done", value)`` (the stream's value). ``stopped``,
    when given, is polled: once it is true the exchange returns None and
    the connection closes (the daemon's side goes on)."""
    body = None if payload is None else json.dumps(payload).encode("utf-8")
    headers = [("Accept", "application/x-ndjson")]
    if body is not None:
        headers.append(("Content-Type", "application/json"))
    yield ex.SendHead(method, path, headers, None if body is None else len(body))
    if body:
        yield ex.Send(body)
    parser = ResponseParser(method)
    head = yield from ex._read_head(parser)
    ctype = (head.header("content-type") or "").split(";")[0].strip()
    if head.status != 200 or ctype != "application/x-ndjson":
        return (yield from ex._answer(parser, head, ()))  # raises the daemon's error
    buf = bytearray()
    while True:
        if stopped is not None and stopped():
            return None
        ev = parser.next_event()
        if ev is None:
            data = yield ex.Recv(within=STOP_POLL_S if stopped is not None else None)
            if data is not None:
                parser.feed(data)
            continue
        if ev is END:
            raise ConnectionLost(f"{what} ended without its last event")
        buf += ev  # type: ignore[operator]
        while True:
            i = buf.find(b"\n")
            if i < 0:
                if len(buf) > ex.MAX_EVENT_LINE_BYTES:
                    raise ProtocolError(f"an event line is longer than {ex.MAX_EVENT_LINE_BYTES} bytes")
                break
            line = bytes(buf[:i])
            del buf[:i + 1]
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ProtocolError(f"an event of {what} is not JSON: {e}") from None
            step = on_line(obj)
            if step is None:
                continue
            if step[0] == "done":
                return step[1]
            yield ex.Call(*step[1:])


# -- runners ---------------------------------------------------------------


class ThreadRunner:
    """Runs an exchange on a daemon thread (Sandbox)."""

    def __init__(self, conn: Any, exchange_of: Callable[[Callable[[], bool]], ex.Exchange], timeout: float):
        self._stop = threading.Event()
        self._started = threading.Event()
        self._done = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None
        exchange = exchange_of(self._stop.is_set)
        self._thread = threading.Thread(target=self._run, args=(conn, exchange, timeout), daemon=True,
                                        name="cellvm-stream")
        self._thread.start()

    def _run(self, conn: Any, exchange: ex.Exchange, timeout: float) -> None:
        try:
            self.value = conn.run(exchange, timeout)
        except BaseException as e:  # handed to whoever waits
            self.error = e
        finally:
            self._done.set()
            self._started.set()

    def started(self) -> None:
        """Called from the stream when its first event came."""
        self._started.set()

    def when_started(self, then: Callable[[], Any]) -> Any:
        self._started.wait()
        if self._done.is_set() and self.error is not None:
            raise self.error
        return then()

    def wait(self, timeout: Optional[float] = None) -> Any:
        if not self._done.wait(timeout):
            from .errors import Timeout
            raise Timeout(f"the stream did not end within {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.value

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._done.wait(STOP_POLL_S * 10)

    def then(self, value: Any, fn: Callable[[Any], Any]) -> Any:
        return fn(value)


class TaskRunner:
    """Runs an exchange on an asyncio task (AsyncSandbox)."""

    def __init__(self, conn: Any, exchange_of: Callable[[Callable[[], bool]], ex.Exchange], timeout: float):
        self._started = asyncio.Event()
        self._task = asyncio.ensure_future(conn.arun(exchange_of(lambda: False), timeout))
        self._task.add_done_callback(lambda t: self._started.set())

    def started(self) -> None:
        self._started.set()

    async def when_started(self, then: Callable[[], Any]) -> Any:
        await self._started.wait()
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            raise self._task.exception()  # type: ignore[misc]
        return then()

    async def wait(self, timeout: Optional[float] = None) -> Any:
        if timeout is None:
            return await asyncio.shield(self._task)
        try:
            return await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except asyncio.TimeoutError:
            from .errors import Timeout
            raise Timeout(f"the stream did not end within {timeout:g} s") from None

    async def stop(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass

    async def then(self, value: Any, fn: Callable[[Any], Any]) -> Any:
        return fn(await value)


# -- processes -------------------------------------------------------------


class _Output:
    """One stream of a process: decoded text, kept up to MAX_KEPT_BYTES."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self.parts: List[str] = []
        self.kept = 0
        self.cut = 0

    def add(self, data: bytes, final: bool = False) -> str:
        text = self._dec.decode(data, final)
        if self.kept + len(data) <= MAX_KEPT_BYTES:
            self.parts.append(text)
            self.kept += len(data)
        else:
            self.cut += len(data)
        return text

    def text(self) -> str:
        return "".join(self.parts)


class _Streamed:
    """A handle whose stream runs on a runner made after the handle: the
    runner's thread may see the stream's first event (its start, or the
    watch being set) before the runner is handed to the handle, so the
    start is remembered and passed on by attach_runner."""

    _runner: Any = None
    _start_seen = False

    def _mark_started(self) -> None:
        self._start_seen = True
        runner = self._runner
        if runner is not None:
            runner.started()

    def attach_runner(self, runner: Any) -> Any:
        self._runner = runner
        if self._start_seen:
            runner.started()
        return runner


class CommandHandle(_Streamed):
    """A process started by ``commands.run(..., background=True)``,
    ``commands.connect`` or ``pty.create``, as E2B's ``CommandHandle``:
    ``pid``, ``stdout``/``stderr`` so far, ``wait()`` for its
    :class:`~cellvm.models.CommandResult` (CommandExitError when it
    fails), ``kill()``, ``send_stdin()`` and ``disconnect()`` (stop
    following it; the process goes on). Under AsyncSandbox, ``wait``,
    ``kill``, ``send_stdin`` and ``disconnect`` are awaitables."""

    def __init__(self, commands: Any, on_stdout: Any = None, on_stderr: Any = None, on_pty: Any = None):
        self._commands = commands
        self._on = {"stdout": on_stdout, "stderr": on_stderr, "pty": on_pty}
        self._out = {"stdout": _Output(), "stderr": _Output()}
        self.pid: Optional[int] = None
        self._runner: Any = None
        self._result: Optional[CommandResult] = None

    def __repr__(self) -> str:
        return f"CommandHandle(pid={self.pid!r})"

    @property
    def stdout(self) -> str:
        return self._out["stdout"].text()

    @property
    def stderr(self) -> str:
        return self._out["stderr"].text()

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once it has ended (None while it runs)."""
        return None if self._result is None else self._result.exit_code

    def _event(self, ev: Any) -> Any:
        """The stream's on_line: each process event."""
        if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str):
            raise ProtocolError("a process event is not an object with a kind")
        kind = ev["kind"]
        if kind == "start":
            self.pid = int(ev.get("pid") or 0) or None
            self._mark_started()
            return None
        if kind == "end":
            return ("done", self._finish(ev.get("exit") or {}))
        data = base64.b64decode(ev.get("data") or "")
        if kind == "pty":
            fn = self._on["pty"]
            return None if fn is None else ("call", fn, data)
        if kind in self._out:
            text = self._out[kind].add(data)
            fn = self._on[kind]
            return None if fn is None or not text else ("call", fn, text)
        return None

    def _finish(self, raw: Dict[str, Any]) -> CommandResult:
        for o in self._out.values():
            o.add(b"", final=True)
        self._result = CommandResult(
            exit_code=int(raw.get("exit_code", 0)), stdout=self.stdout, stderr=self.stderr,
            timed_out=bool(raw.get("timed_out")), truncated=Truncated(self._out["stdout"].cut, self._out["stderr"].cut),
            duration_ms=0, raw=raw, error=raw.get("error") or None, signal=raw.get("signal") or None)
        return self._result

    def _checked(self, result: Any) -> CommandResult:
        if result is None:
            raise ConnectionLost(f"process {self.pid}: the stream was disconnected before it ended")
        if result.exit_code != 0 or result.error:
            raise CommandExitError(result)
        return result

    def wait(self, timeout: Optional[float] = None):
        """Waits for the end: its CommandResult, or CommandExitError when
        the exit code is not 0."""
        return self._runner.then(self._runner.wait(timeout), self._checked)

    def kill(self, signal: str = "SIGKILL"):
        """Signals it (SIGKILL by default); False when it had already ended."""
        return self._commands.kill(self.pid, signal=signal)

    def send_stdin(self, data: Any, *, eof: bool = False):
        return self._commands.send_stdin(self.pid, data, eof=eof)

    def disconnect(self):
        """Stops following the process; it goes on running."""
        return self._runner.stop()


# -- files -------------------------------------------------------------------


class WatchHandle(_Streamed):
    """A watched directory (``files.watch_dir``): ``on_event`` gets each
    :class:`~cellvm.models.FilesystemEvent` as it comes, and
    ``get_new_events()`` returns those seen since its last call.
    ``stop()`` ends the watch (awaitable under AsyncSandbox)."""

    def __init__(self, on_event: Any):
        self._on_event = on_event
        self._events: List[FilesystemEvent] = []
        self._lock = threading.Lock()
        self._runner: Any = None

    def _line(self, obj: Any) -> Any:
        if not isinstance(obj, dict):
            raise ProtocolError("a watch event is not an object")
        if "watching" in obj:
            self._mark_started()
            return None
        e = FilesystemEvent(name=str(obj.get("name", "")), type=str(obj.get("op", "")))
        with self._lock:
            self._events.append(e)
            if len(self._events) > 10000:
                del self._events[:-10000]
        return None if self._on_event is None else ("call", self._on_event, e)

    def get_new_events(self) -> List[FilesystemEvent]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def stop(self):
        return self._runner.stop()


def entry(raw: Any) -> EntryInfo:
    if not isinstance(raw, dict):
        raise ProtocolError("a file entry is not an object")
    return EntryInfo.from_raw(raw)


def process_info(raw: Any) -> ProcessInfo:
    if not isinstance(raw, dict):
        raise ProtocolError("a process is not an object")
    return ProcessInfo.from_raw(raw)


# -- ports -------------------------------------------------------------------


def port_request(sandbox_id: str, port: Any, headers: List[Any]) -> bytes:
    """The request that upgrades a connection to a sandbox's TCP port."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port is an int in 1..65535, not {port!r}")
    lines = [f"GET {ex.sandbox_path(sandbox_id, 'ports', str(port))} HTTP/1.1", "Host: cellvm",
             "User-Agent: cellvm-python/0.1", "Connection: Upgrade, close", "Upgrade: tcp"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def port_status(head: bytes) -> int:
    line = head.split(b"\r\n", 1)[0].split()
    if len(line) < 2 or not line[0].startswith(b"HTTP/") or not line[1].isdigit():
        raise ProtocolError("the daemon's answer to a port connection is not HTTP")
    return int(line[1])


def port_error(head: bytes, rest: bytes) -> CellvmError:
    """The daemon's refusal of a port connection as its error."""
    from .errors import from_response
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    if b"chunked" in headers.get(b"transfer-encoding", b""):
        out, data = b"", rest
        while data:
            size_line, _, data = data.partition(b"\r\n")
            n = int(size_line.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, data = out + data[:n], data[n + 2:]
        rest = out
    elif b"content-length" in headers:
        rest = rest[:int(headers[b"content-length"])]
    return from_response(port_status(head), rest)

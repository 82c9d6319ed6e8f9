"""Where the daemon is, and the two drivers that run an exchange over it.

Today the daemon is reached over its Unix socket (HTTP/1.1, one connection
per call, closed after it). The socket is found in this order: the path
given to :class:`Connection`, ``$CELLVM_SOCKET``, ``/run/cellvm/cellvm.sock``.
A remote daemon (a URL with TLS and a bearer token) plugs in here: its
``_open`` methods and :meth:`Connection.headers`; the exchanges above do
not change.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import socket
import time
from typing import Any, List, Optional, Tuple

from ._exchange import Call, Exchange, Recv, Send, SendHead
from ._http import build_request
from .errors import ConnectError, ConnectionLost, Timeout

DEFAULT_SOCKET = "/run/cellvm/cellvm.sock"
SOCKET_ENV = "CELLVM_SOCKET"

#: The timeout of calls that have no timeout of their own (seconds).
DEFAULT_TIMEOUT_S = 30.0

_RECV_BYTES = 256 << 10


class Connection:
    """How to reach a cellvm daemon.

    ``socket_path`` defaults to ``$CELLVM_SOCKET``, then
    ``/run/cellvm/cellvm.sock``. ``timeout`` bounds calls that have no
    timeout of their own (info, interrupt, network, ...); calls that do
    (cells, commands, create, files) take theirs on top of it.
    """

    def __init__(self, socket_path: Optional[str] = None, *, timeout: float = DEFAULT_TIMEOUT_S):
        path = socket_path or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET
        if "\x00" in path:
            raise ValueError("the socket path contains a NUL byte")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.socket_path = path
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"Connection(socket_path={self.socket_path!r})"

    def headers(self) -> List[Tuple[str, str]]:
        """Headers sent with every request (a remote daemon's token will go here)."""
        return []

    def _connect_error(self, e: OSError) -> ConnectError:
        p = self.socket_path
        hint = f"start one with 'cellvm serve' or set {SOCKET_ENV}"
        if isinstance(e, FileNotFoundError):
            return ConnectError(f"no cellvm daemon at {p}: the socket does not exist ({hint})")
        if isinstance(e, ConnectionRefusedError):
            return ConnectError(f"no cellvm daemon listens at {p}: the socket is stale ({hint})")
        if isinstance(e, PermissionError):
            return ConnectError(f"cannot connect to the cellvm daemon at {p}: permission denied "
                                "(the socket belongs to the daemon's user; run as that user or root)")
        if e.errno == errno.ENAMETOOLONG or isinstance(e, OSError) and "too long" in str(e):
            return ConnectError(f"the socket path {p} is too long for a Unix socket (at most 107 bytes)")
        return ConnectError(f"cannot connect to the cellvm daemon at {p}: {e}")

    # -- the blocking driver ------------------------------------------------

    def _open(self, timeout: float) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.socket_path)
        except socket.timeout:
            s.close()
            raise Timeout(f"connecting to the cellvm daemon at {self.socket_path} took longer than {timeout:g} s") from None
        except OSError as e:
            s.close()
            raise self._connect_error(e) from None
        return s

    def run(self, ex: Exchange, timeout: float) -> Any:
        """Runs an exchange over a fresh connection within timeout seconds."""
        steps = _Steps(self, ex, timeout, time.monotonic)
        sock = self._open(timeout)
        try:
            value: Any = None
            while True:
                op = steps.next(value)
                if op is _DONE:
                    return steps.result
                if isinstance(op, Send):
                    sock.settimeout(steps.left())
                    try:
                        sock.sendall(op.data)
                        value = True
                    except socket.timeout:
                        raise steps.timed_out() from None
                    except (BrokenPipeError, ConnectionResetError):
                        value = False
                elif isinstance(op, Recv):
                    sock.settimeout(steps.wait(op))
                    try:
                        value = sock.recv(_RECV_BYTES)
                    except socket.timeout:
                        value = steps.waited(op)
                    except ConnectionResetError:
                        value = b""
                    except OSError as e:
                        raise ConnectionLost(f"{steps.what}: reading from the daemon: {e}") from None
                else:
                    value = op.fn(*op.args)
        finally:
            ex.close()
            sock.close()

    # -- the asyncio driver -------------------------------------------------

    async def _aopen(self, timeout: float) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.wait_for(asyncio.open_unix_connection(self.socket_path, limit=_RECV_BYTES), timeout)
        except asyncio.TimeoutError:
            raise Timeout(f"connecting to the cellvm daemon at {self.socket_path} took longer than {timeout:g} s") from None
        except OSError as e:
            raise self._connect_error(e) from None

    async def arun(self, ex: Exchange, timeout: float) -> Any:
        """Runs an exchange with asyncio streams within timeout seconds.
        Cancelling the task closes the connection (which interrupts a cell)."""
        steps = _Steps(self, ex, timeout, asyncio.get_running_loop().time)
        reader, writer = await self._aopen(timeout)
        try:
            value: Any = None
            while True:
                op = steps.next(value)
                if op is _DONE:
                    return steps.result
                if isinstance(op, Send):
                    try:
                        writer.write(op.data)
                        await asyncio.wait_for(writer.drain(), steps.left())
                        value = True
                    except asyncio.TimeoutError:
                        raise steps.timed_out() from None
                    except (BrokenPipeError, ConnectionResetError):
                        value = False
                elif isinstance(op, Recv):
                    try:
                        value = await asyncio.wait_for(reader.read(_RECV_BYTES), steps.wait(op))
                    except asyncio.TimeoutError:
                        value = steps.waited(op)
                    except ConnectionResetError:
                        value = b""
                    except OSError as e:
                        raise ConnectionLost(f"{steps.what}: reading from the daemon: {e}") from None
                else:
                    value = op.fn(*op.args)
                    if inspect.isawaitable(value):
                        value = await value
        finally:
            ex.close()
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


_DONE = object()


class _Steps:
    """What both drivers do between I/O: step the exchange, turn a request
    head into bytes (with the connection's headers), keep the deadline."""

    def __init__(self, conn: Connection, ex: Exchange, timeout: float, clock):
        self.conn, self.ex, self.timeout, self.clock = conn, ex, timeout, clock
        self.deadline = clock() + timeout
        self.what = "the call"
        self.result: Any = None

    def next(self, value: Any) -> Any:
        """The exchange's next step (Send, Recv or Call), or _DONE with the
        outcome in .result."""
        try:
            op = self.ex.send(value)
        except StopIteration as stop:
            self.result = stop.value
            return _DONE
        if isinstance(op, SendHead):
            self.what = f"{op.method} {op.target.split('?')[0]}"
            op = Send(build_request(op.method, op.target, op.headers + self.conn.headers(), op.body_length))
        if not isinstance(op, (Send, Recv, Call)):
            raise TypeError(f"unknown exchange step {op!r}")
        if not isinstance(op, Call) and self.left() <= 0:
            raise self.timed_out()
        return op

    def left(self) -> float:
        return self.deadline - self.clock()

    def wait(self, op: Recv) -> float:
        """How long a receive may wait."""
        return self.left() if op.within is None else min(self.left(), op.within)

    def waited(self, op: Recv) -> None:
        """A receive's wait passed: None for a bounded wait within the
        deadline, else the call has timed out."""
        if op.within is None or self.left() <= 0:
            raise self.timed_out()
        return None

    def timed_out(self) -> Timeout:
        return _timeout(self.what, self.timeout)


def _timeout(what: str, timeout: float) -> Timeout:
    return Timeout(f"{what}: no complete answer from the daemon within {timeout:g} s")

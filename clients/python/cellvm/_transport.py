"""Where the daemon is, and the two drivers that run an exchange over it.

The daemon is reached over its Unix socket, or, when a URL is given, over
TLS to ``cellvm serve --listen`` with a bearer token (HTTP/1.1, one
connection per call, closed after it). In this order: the socket path or
the URL given to :class:`Connection`, ``$CELLVM_URL``, ``$CELLVM_SOCKET``,
``/run/cellvm/cellvm.sock``. The token is the one given, else
``$CELLVM_TOKEN``, else the first token line of ``$CELLVM_TOKEN_FILE``; the
certificate to trust is ``ca_file``, else ``$CELLVM_TLS_CA``, else the
system's. The exchanges above do not change with the transport.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import socket
import ssl
import time
from typing import Any, List, Optional, Tuple
from urllib.parse import urlsplit

from ._exchange import Call, Exchange, Recv, Send, SendHead
from ._http import build_request
from .errors import ConnectError, ConnectionLost, Timeout

DEFAULT_SOCKET = "/run/cellvm/cellvm.sock"
SOCKET_ENV = "CELLVM_SOCKET"
URL_ENV = "CELLVM_URL"
TOKEN_ENV = "CELLVM_TOKEN"
TOKEN_FILE_ENV = "CELLVM_TOKEN_FILE"
CA_ENV = "CELLVM_TLS_CA"

#: The timeout of calls that have no timeout of their own (seconds).
DEFAULT_TIMEOUT_S = 30.0

_RECV_BYTES = 256 << 10


class Connection:
    """How to reach a cellvm daemon.

    ``socket_path`` defaults to ``$CELLVM_SOCKET``, then
    ``/run/cellvm/cellvm.sock``. ``url`` (``https://HOST:PORT``, default
    ``$CELLVM_URL``) reaches a daemon's TLS listener instead, with ``token``
    (default ``$CELLVM_TOKEN`` or ``$CELLVM_TOKEN_FILE``) and ``ca_file``
    (default ``$CELLVM_TLS_CA``). ``timeout`` bounds calls that have no
    timeout of their own (info, interrupt, network, ...); calls that do
    (cells, commands, create, files) take theirs on top of it.
    """

    def __init__(self, socket_path: Optional[str] = None, *, url: Optional[str] = None,
                 token: Optional[str] = None, ca_file: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT_S):
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if socket_path and url:
            raise ValueError("give socket_path or url, not both")
        self.timeout = float(timeout)
        self.url: Optional[str] = None
        self.socket_path: Optional[str] = None
        self._token = ""
        if not socket_path:
            url = url or os.environ.get(URL_ENV) or None
        if url:
            self._remote(url, token, ca_file)
            return
        path = socket_path or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET
        if "\x00" in path:
            raise ValueError("the socket path contains a NUL byte")
        self.socket_path = path

    def _remote(self, url: str, token: Optional[str], ca_file: Optional[str]) -> None:
        u = urlsplit(url)
        if u.scheme != "https":
            raise ValueError(f"daemon URL {url!r}: want https://HOST:PORT (plain http would send the token in clear)")
        if not u.hostname or u.path not in ("", "/") or u.query or u.username:
            raise ValueError(f"daemon URL {url!r}: want https://HOST:PORT, with no path, query or user")
        self.url = f"https://{u.netloc}"
        self._host, self._port = u.hostname, u.port or 443
        if token is None:
            token = os.environ.get(TOKEN_ENV) or _token_from_file(os.environ.get(TOKEN_FILE_ENV))
        if any(c in token for c in "\r\n\x00"):
            raise ValueError("the token contains a line break or NUL")
        self._token = token
        self._ssl = ssl.create_default_context(cafile=ca_file or os.environ.get(CA_ENV) or None)

    def __repr__(self) -> str:
        # The token is never shown.
        if self.url:
            return f"Connection(url={self.url!r})"
        return f"Connection(socket_path={self.socket_path!r})"

    def headers(self) -> List[Tuple[str, str]]:
        """Headers sent with every request: the bearer token of a remote daemon."""
        if self._token:
            return [("Authorization", "Bearer " + self._token)]
        return []

    def _where(self) -> str:
        return self.url or self.socket_path or ""

    def _connect_error(self, e: OSError) -> ConnectError:
        if self.url:
            if isinstance(e, ssl.SSLCertVerificationError):
                return ConnectError(f"the cellvm daemon at {self.url} has a certificate this client does not trust "
                                    f"({e.verify_message}); pass ca_file= or set {CA_ENV}")
            return ConnectError(f"cannot connect to the cellvm daemon at {self.url}: {e}")
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
        if self.url:
            return self._open_tls(timeout)
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

    def _open_tls(self, timeout: float) -> socket.socket:
        try:
            raw = socket.create_connection((self._host, self._port), timeout=timeout)
        except socket.timeout:
            raise Timeout(f"connecting to the cellvm daemon at {self.url} took longer than {timeout:g} s") from None
        except OSError as e:
            raise self._connect_error(e) from None
        try:
            return self._ssl.wrap_socket(raw, server_hostname=self._host)
        except socket.timeout:
            raw.close()
            raise Timeout(f"the TLS handshake with {self.url} took longer than {timeout:g} s") from None
        except OSError as e:
            raw.close()
            raise self._connect_error(e) from None

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
        if self.url:
            opening = asyncio.open_connection(self._host, self._port, ssl=self._ssl, server_hostname=self._host,
                                              limit=_RECV_BYTES)
        else:
            opening = asyncio.open_unix_connection(self.socket_path, limit=_RECV_BYTES)
        try:
            return await asyncio.wait_for(opening, timeout)
        except asyncio.TimeoutError:
            raise Timeout(f"connecting to the cellvm daemon at {self._where()} took longer than {timeout:g} s") from None
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


def _token_from_file(path: Optional[str]) -> str:
    """The first token line of a token file (blank lines and # comments
    skipped, as the daemon reads it); "" without a file."""
    if not path:
        return ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                return line
    raise ValueError(f"token file {path} holds no token")

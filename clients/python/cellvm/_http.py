"""HTTP/1.1 framing without I/O, shared by the blocking and the asyncio clients.

The parser is fed the bytes that arrive and hands out what they make: the
response head, pieces of the body, its end. It bounds everything it holds
(the head, a chunk-size line), so a misbehaving peer cannot make the client
buffer without limit; the callers bound the bodies they keep.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from .errors import ConnectionLost, ProtocolError

MAX_HEAD_BYTES = 64 << 10
MAX_LINE_BYTES = 4096

USER_AGENT = "cellvm-python/0.1"


class Head:
    """A response's status line and headers (names lower-cased)."""

    __slots__ = ("status", "reason", "headers")

    def __init__(self, status: int, reason: str, headers: Dict[str, str]):
        self.status = status
        self.reason = reason
        self.headers = headers

    def header(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.headers.get(name.lower(), default)


class _End:
    __repr__ = lambda self: "END"  # noqa: E731


END = _End()
"""The event that ends a response body."""


def build_request(method: str, target: str, headers: List[Tuple[str, str]], body_length: Optional[int]) -> bytes:
    """The request line and headers. ``body_length`` None means no body;
    -1 means a chunked body follows (see :func:`chunk`)."""
    lines = [f"{method} {target} HTTP/1.1", "Host: cellvm", f"User-Agent: {USER_AGENT}", "Connection: close"]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    if body_length is not None:
        if body_length < 0:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked request body; ``b""`` gives the last chunk."""
    if not data:
        return b"0\r\n\r\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class ResponseParser:
    """Reads one HTTP/1.1 response. Call :meth:`feed` with the bytes that
    arrive (``b""`` at the end of the stream), and :meth:`next_event` until
    it returns None (more bytes needed). Events: a :class:`Head` (interim
    1xx heads come first, then the final one), ``bytes`` of the body, then
    :data:`END`.
    """

    def __init__(self, method: str = "GET"):
        self._method = method
        self._buf = bytearray()
        self._eof = False
        self._state = "head"
        self._left = 0  # bytes left in the body or the current chunk

    def feed(self, data: bytes) -> None:
        if not data:
            self._eof = True
        else:
            self._buf += data

    def next_event(self) -> Union[Head, bytes, _End, None]:
        st = self._state
        if st == "head":
            return self._head()
        if st == "length":
            return self._take_body()
        if st == "chunk_size":
            return self._chunk_size()
        if st == "chunk_data":
            return self._take_body(after="chunk_crlf")
        if st == "chunk_crlf":
            line = self._line()
            if line is None:
                return None
            if line:
                raise ProtocolError("a chunk is not followed by CRLF")
            self._state = "chunk_size"
            return self._chunk_size()
        if st == "trailers":
            line = self._line()
            while line:
                line = self._line()
            if line is None:
                return None
            self._state = "done"
            return END
        if st == "empty":
            self._state = "done"
            return END
        if st == "until_eof":
            if self._buf:
                data = bytes(self._buf)
                self._buf.clear()
                return data
            if self._eof:
                self._state = "done"
                return END
            return None
        return None  # done

    def _line(self) -> Optional[bytes]:
        i = self._buf.find(b"\r\n")
        if i < 0:
            if len(self._buf) > MAX_LINE_BYTES:
                raise ProtocolError(f"a line of the response is longer than {MAX_LINE_BYTES} bytes")
            if self._eof:
                raise ConnectionLost("the connection ended in the middle of the response")
            return None
        line = bytes(self._buf[:i])
        del self._buf[:i + 2]
        return line

    def _head(self) -> Optional[Head]:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise ProtocolError(f"the response head is larger than {MAX_HEAD_BYTES} bytes")
            if self._eof:
                if self._buf:
                    raise ConnectionLost("the connection ended in the middle of the response head")
                raise ConnectionLost("the daemon closed the connection without answering")
            return None
        raw = bytes(self._buf[:end]).decode("latin-1")
        del self._buf[:end + 4]
        lines = raw.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:100]!r}")
        status = int(parts[1])
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ProtocolError(f"malformed header line: {line[:100]!r}")
            name = name.lower()
            value = value.strip()
            headers[name] = headers[name] + ", " + value if name in headers else value
        head = Head(status, parts[2] if len(parts) > 2 else "", headers)
        if 100 <= status < 200:
            return head  # interim: the final head follows
        self._choose_body(head)
        return head

    def _choose_body(self, head: Head) -> None:
        if self._method == "HEAD" or head.status in (204, 304):
            self._state = "empty"
            return
        te = head.header("transfer-encoding")
        if te is not None:
            if te.lower() != "chunked":
                raise ProtocolError(f"unsupported transfer-encoding {te!r}")
            self._state = "chunk_size"
            return
        cl = head.header("content-length")
        if cl is not None:
            if not cl.isdigit():
                raise ProtocolError(f"bad content-length {cl!r}")
            self._left = int(cl)
            self._state = "length"
            return
        self._state = "until_eof"

    def _take_body(self, after: str = "done") -> Union[bytes, _End, None]:
        if self._left == 0:
            self._state = after
            if after == "done":
                return END
            return self.next_event()
        if not self._buf:
            if self._eof:
                raise ConnectionLost(f"the connection ended with {self._left} bytes of the body still to come")
            return None
        n = min(self._left, len(self._buf))
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self._left -= n
        return data

    def _chunk_size(self) -> Union[bytes, _End, None]:
        line = self._line()
        if line is None:
            return None
        size = line.split(b";", 1)[0].strip()
        try:
            n = int(size, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size[:32]!r}") from None
        if n == 0:
            self._state = "trailers"
            return self.next_event()
        self._left = n
        self._state = "chunk_data"
        return self.next_event()

    def body_done(self) -> bool:
        return self._state == "done"


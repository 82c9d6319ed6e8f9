"""The API's exchanges, written once for the blocking and the asyncio client.

Each exchange is a generator that yields what it needs done (send these
bytes, give me what arrives, call this callback) and gets the outcome back;
a driver (``_transport``) does the I/O with a socket or with asyncio
streams. So the HTTP and NDJSON handling, the bounds and the error mapping
exist once, and both clients behave the same byte for byte.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO, Callable, Generator, List, Optional, Tuple, Union
from urllib.parse import quote

from ._http import END, Head, ResponseParser, chunk
from .errors import ConnectionLost, ProtocolError, from_response

#: Bounds on what the client keeps of an answer: a JSON body, and one
#: NDJSON event line (an end event repeats the clipped output and every
#: rich result; a PNG can be several MiB).
MAX_JSON_BYTES = 64 << 20
MAX_EVENT_LINE_BYTES = 64 << 20

#: Upload bodies go in pieces of this size.
UPLOAD_PIECE_BYTES = 256 << 10

#: How long an upload waits for the daemon's go-ahead (or refusal) before
#: it sends the body anyway, as curl and Go's client do.
EXPECT_CONTINUE_S = 2.0


class SendHead:
    """Send a request line and headers (the driver adds the connection's own)."""

    __slots__ = ("method", "target", "headers", "body_length")

    def __init__(self, method: str, target: str, headers: List[Tuple[str, str]], body_length: Optional[int]):
        self.method, self.target, self.headers, self.body_length = method, target, headers, body_length


class Send:
    """Send bytes. The outcome is False when the daemon already closed its side."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class Recv:
    """Receive what arrives (``b""`` at the end of the stream). With
    ``within`` the wait is at most that long and the outcome is None when
    nothing came."""

    __slots__ = ("within",)

    def __init__(self, within: Optional[float] = None):
        self.within = within


class Call:
    """Call a user callback (awaited when it returns an awaitable)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any], *args: Any):
        self.fn, self.args = fn, args


Exchange = Generator[Union[SendHead, Send, Recv, Call], Any, Any]


def sandboxes_path() -> str:
    return "/v1/sandboxes"


def sandbox_path(sandbox_id: str, *rest: str) -> str:
    """The path of a sandbox's route, each segment escaped."""
    if not isinstance(sandbox_id, str) or not sandbox_id:
        raise ValueError("a sandbox id is a non-empty string")
    return "/".join([sandboxes_path(), quote(sandbox_id, safe="")] + [quote(r, safe="") for r in rest])


def snapshots_path() -> str:
    return "/v1/snapshots"


def snapshot_path(snapshot_id: str) -> str:
    """The path of a snapshot (the id is checked by the caller)."""
    return snapshots_path() + "/" + quote(snapshot_id, safe="")


def workspaces_path() -> str:
    return "/v1/workspaces"


def workspace_path(name: str) -> str:
    """The path of a workspace (the name is checked by the caller)."""
    return workspaces_path() + "/" + quote(name, safe="")


def images_path() -> str:
    return "/v1/images"


def image_path(name: str) -> str:
    """The path of an image (the name is checked by the caller)."""
    return images_path() + "/" + quote(name, safe="")


def files_path(sandbox_id: str, guest_path: str) -> str:
    """The files route of a guest path. A relative path is taken as
    relative to /workspace, where cells and commands run."""
    return guest_route(sandbox_id, "files", guest_path)


def guest_route(sandbox_id: str, route: str, guest_path: str) -> str:
    """A path route (files, dir, stat, watch) of a guest path; a relative
    path is under /workspace."""
    if not isinstance(guest_path, str) or not guest_path:
        raise ValueError("a file path is a non-empty string")
    if not guest_path.startswith("/"):
        guest_path = "/workspace/" + guest_path
    segments = [s for s in guest_path.split("/") if s]
    if not segments:
        raise ValueError(f"{guest_path!r} names the root directory, not a file")
    return sandbox_path(sandbox_id, route, *segments)


def _read_head(parser: ResponseParser) -> Generator[Any, Any, Head]:
    while True:
        ev = parser.next_event()
        if ev is None:
            parser.feed((yield Recv()))
            continue
        if isinstance(ev, Head):
            if ev.status < 200:
                continue
            return ev
        raise ProtocolError("the response has a body before its head")


def _read_body(parser: ResponseParser, limit: int, what: str) -> Generator[Any, Any, bytes]:
    out = bytearray()
    while True:
        ev = parser.next_event()
        if ev is None:
            parser.feed((yield Recv()))
            continue
        if ev is END:
            return bytes(out)
        out += ev  # type: ignore[operator]
        if len(out) > limit:
            raise ProtocolError(f"{what} is larger than the client's limit of {limit} bytes")


def _answer(parser: ResponseParser, head: Head, want: Tuple[int, ...]) -> Generator[Any, Any, Any]:
    """Reads the body; raises the API error for a status not in want,
    returns the decoded JSON (None for an empty body) otherwise."""
    data = yield from _read_body(parser, MAX_JSON_BYTES, "the answer")
    if head.status not in want:
        raise from_response(head.status, data, head.header("retry-after"))
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except ValueError as e:
        raise ProtocolError(f"the answer is not JSON: {e}") from None


def json_call(method: str, path: str, payload: Any = None, want: Tuple[int, ...] = (200,)) -> Exchange:
    """One request with an optional JSON body, answered with JSON (or nothing)."""
    body = None if payload is None else json.dumps(payload).encode("utf-8")
    headers = [("Accept", "application/json")]
    if body is not None:
        headers.append(("Content-Type", "application/json"))
    yield SendHead(method, path, headers, None if body is None else len(body))
    if body:
        yield Send(body)
    parser = ResponseParser(method)
    head = yield from _read_head(parser)
    return (yield from _answer(parser, head, want))


def run_cell(sandbox_id: str, code: str, timeout_ms: Optional[int], on_event: Callable[[dict], Any],
             language: Optional[str] = None, context: Optional[str] = None) -> Exchange:
    """Runs a cell, streaming: on_event gets each event (stdout, stderr,
    result, error) as it arrives; the end event's result is returned.
    language and context (None: Python, the default session) pick the
    session; the daemon checks them."""
    payload = {"code": code}
    if timeout_ms is not None:
        payload["timeout_ms"] = timeout_ms
    if language:
        payload["language"] = language
    if context:
        payload["context"] = context
    body = json.dumps(payload).encode("utf-8")
    yield SendHead("POST", sandbox_path(sandbox_id, "cells"),
                   [("Content-Type", "application/json"), ("Accept", "application/x-ndjson")], len(body))
    yield Send(body)
    parser = ResponseParser("POST")
    head = yield from _read_head(parser)
    if head.status != 200:
        return (yield from _answer(parser, head, (200,)))
    ctype = (head.header("content-type") or "").split(";")[0].strip()
    if ctype != "application/x-ndjson":
        return _check_result((yield from _answer(parser, head, (200,))))
    buf = bytearray()
    events = 0
    while True:
        try:
            ev = parser.next_event()
            if ev is None:
                parser.feed((yield Recv()))
                continue
        except ConnectionLost as e:
            raise ConnectionLost(f"the connection broke while the cell ran, after {events} event(s) ({e.message}); "
                                 "the cell may have run in part, so its variables may have changed") from None
        if ev is END:
            raise ConnectionLost(f"the cell's event stream ended after {events} event(s) without its end event; "
                                 "the cell may have run in part, so its variables may have changed")
        buf += ev  # type: ignore[operator]
        while True:
            i = buf.find(b"\n")
            if i < 0:
                if len(buf) > MAX_EVENT_LINE_BYTES:
                    raise ProtocolError(f"an event line is longer than {MAX_EVENT_LINE_BYTES} bytes")
                break
            line = bytes(buf[:i])
            del buf[:i + 1]
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as e:
                raise ProtocolError(f"a cell event is not JSON: {e}") from None
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise ProtocolError("a cell event is not an object with a type")
            if event["type"] == "end":
                return _check_result(event.get("end"))
            events += 1
            yield Call(on_event, event)


def _check_result(res: Any) -> dict:
    if not isinstance(res, dict) or not isinstance(res.get("status"), str):
        raise ProtocolError("the cell's result is not an object with a status")
    return res


def upload(sandbox_id: str, guest_path: str, source: Union[bytes, BinaryIO], length: Optional[int]) -> Exchange:
    """Uploads bytes or a binary file object (length None: chunked). The
    daemon's go-ahead is awaited first, so a refusal costs no transfer."""
    yield SendHead("PUT", files_path(sandbox_id, guest_path),
                   [("Content-Type", "application/octet-stream"), ("Expect", "100-continue")],
                   -1 if length is None else length)
    parser = ResponseParser("PUT")
    final = None
    while final is None:
        ev = parser.next_event()
        if ev is None:
            data = yield Recv(within=EXPECT_CONTINUE_S)
            if data is None:
                break  # no go-ahead in time: send anyway
            parser.feed(data)
            continue
        if isinstance(ev, Head):
            if ev.status == 100:
                break
            if ev.status > 100 and ev.status < 200:
                continue
            final = ev
    if final is None:
        sent = 0
        while True:
            if isinstance(source, (bytes, bytearray, memoryview)):
                piece = bytes(source[sent:sent + UPLOAD_PIECE_BYTES])
            else:
                piece = source.read(UPLOAD_PIECE_BYTES)
                if isinstance(piece, str):
                    raise TypeError("files.write: the file object is open in text mode; open it with 'rb'")
            if length is not None and sent + len(piece) > length:
                raise ValueError(f"files.write: the source has more than the {length} bytes it declared")
            if not piece:
                if length is not None and sent != length:
                    raise ValueError(f"files.write: the source ended after {sent} of {length} bytes")
                if length is None:
                    yield Send(chunk(b""))
                break
            if not (yield Send(piece if length is not None else chunk(piece))):
                break  # the daemon stopped reading: its answer says why
            sent += len(piece)
        final = yield from _read_head(parser)
    return (yield from _answer(parser, final, (200,)))


def download(sandbox_id: str, guest_path: str, limit: int) -> Exchange:
    """Downloads a file into memory, at most limit bytes. A transfer the
    daemon cuts off is an error, never a silently short file."""
    yield SendHead("GET", files_path(sandbox_id, guest_path), [], None)
    parser = ResponseParser("GET")
    head = yield from _read_head(parser)
    if head.status != 200:
        return (yield from _answer(parser, head, (200,)))
    try:
        data = yield from _read_body(parser, limit, f"the file {guest_path}")
    except ConnectionLost as e:
        raise ConnectionLost(f"the download of {guest_path} was cut off ({e.message}): the daemon failed "
                             "during the transfer; nothing partial is returned") from None
    except ProtocolError as e:
        from .errors import TooLarge
        raise TooLarge(f"{e.message}; pass a larger max_bytes to read it") from None
    return data

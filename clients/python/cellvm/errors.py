"""Errors raised by the cellvm client.

Every error is a :class:`CellvmError`. Errors the daemon answers with carry
its code (``err.code``, e.g. ``"not_found"``), the HTTP status and the
daemon's message, and are raised as the class for that code, so callers can
catch exactly what they can act on::

    try:
        sbx = Sandbox.connect(saved_id)
    except cellvm.NotFound:
        sbx = Sandbox.create()

A cell that raises, times out or loses its interpreter is *not* an error:
it is a result (``Execution.error``, ``Execution.status``).
"""

from __future__ import annotations

from typing import Optional


class CellvmError(Exception):
    """Base of every error the client raises.

    ``code`` is the API's error code ("not_found", "busy", ...) or one of
    the client's own: "connect" (no daemon), "timeout", "connection_lost",
    "protocol".
    """

    code = "error"

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        if self.status:
            return f"cellvm: {self.code} ({self.status}): {self.message}"
        return f"cellvm: {self.code}: {self.message}"


class Invalid(CellvmError, ValueError):
    """400: the request is malformed or out of bounds (the message says which field)."""

    code = "invalid"


class Forbidden(CellvmError, PermissionError):
    """403: the daemon refuses this user (only its own user and root may connect)."""

    code = "forbidden"


class Unauthorized(CellvmError, PermissionError):
    """401: a remote daemon (a URL) wants a valid bearer token; 429 with code
    "rate_limited" when this address failed too often."""

    code = "unauthorized"


class NotFound(CellvmError, LookupError):
    """404: no such sandbox or snapshot, or no such file in the sandbox."""

    code = "not_found"


class Busy(CellvmError):
    """409: a cell is already running in the sandbox (cells are not queued), the sandbox is not in the
    state the call needs (a pause of a paused sandbox, a resume of a running one), or a workspace is held
    by another sandbox (a create naming it, a delete of it)."""

    code = "busy"


class Lost(CellvmError):
    """410: the sandbox's VM died; it can only be killed."""

    code = "lost"


class TooLarge(CellvmError, ValueError):
    """413: a body or file is larger than the daemon allows."""

    code = "too_large"


class Internal(CellvmError):
    """500: the daemon failed; its log says why."""

    code = "internal"


class NotSupported(CellvmError):
    """501: this daemon or host does not offer the operation (e.g. network policies without root)."""

    code = "not_supported"


class Full(CellvmError):
    """503: the host's cap on sandboxes, memory or snapshot disk is reached (or its disk is full); retry
    after ``retry_after`` seconds."""

    code = "full"

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None,
                 retry_after: Optional[float] = None):
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class Upstream(CellvmError):
    """502: a registry an image request named could not be reached or refused (the message says which and why)."""

    code = "upstream"


class BuildFailed(CellvmError):
    """422: a step of an image's making failed: ``step`` names it, ``tail`` is the end of its output."""

    code = "build_failed"

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None,
                 step: Optional[str] = None, tail: Optional[str] = None):
        super().__init__(message, status=status, code=code)
        self.step = step
        self.tail = tail


class ConnectError(CellvmError, ConnectionError):
    """No daemon could be reached (no socket, nothing listening, no permission)."""

    code = "connect"


class ConnectionLost(CellvmError, ConnectionError):
    """The connection ended before the answer did (the daemon died or cut the stream).

    A cell whose stream broke may still have run: its variables may or may
    not have changed.
    """

    code = "connection_lost"


class Timeout(CellvmError, TimeoutError):
    """The daemon did not answer within the call's timeout."""

    code = "timeout"


class ProtocolError(CellvmError):
    """The daemon's answer was not what the API promises (bad HTTP, bad JSON, too large)."""

    code = "protocol"


_BY_CODE = {cls.code: cls for cls in (Invalid, Unauthorized, Forbidden, NotFound, Busy, Lost, TooLarge, Internal, NotSupported, Full,
                                     Upstream, BuildFailed)}
_BY_CODE["rate_limited"] = Unauthorized
_BY_STATUS = {400: Invalid, 401: Unauthorized, 429: Unauthorized, 403: Forbidden, 404: NotFound, 405: Invalid, 409: Busy, 410: Lost, 413: TooLarge,
              500: Internal, 501: NotSupported, 503: Full}


def from_response(status: int, body: bytes, retry_after: Optional[str] = None) -> CellvmError:
    """The error for a non-success answer: by the code in its JSON body, else by its status."""
    import json

    code, message = None, body.decode("utf-8", "replace").strip()[:4096]
    step = tail = None
    try:
        doc = json.loads(body)
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            code = err["code"]
            message = str(err.get("message", ""))
            step = err.get("step") if isinstance(err.get("step"), str) else None
            tail = err.get("tail") if isinstance(err.get("tail"), str) else None
    except ValueError:
        pass
    cls = _BY_CODE.get(code) if code else None
    if cls is None:
        cls = _BY_STATUS.get(status, Invalid if 400 <= status < 500 else Internal)
    if not message:
        message = f"HTTP {status}"
    if cls is Full:
        seconds = None
        try:
            seconds = float(retry_after) if retry_after else None
        except ValueError:
            pass
        return Full(message, status=status, code=code, retry_after=seconds)
    if cls is BuildFailed:
        return BuildFailed(message, status=status, code=code, step=step, tail=tail)
    return cls(message, status=status, code=code)


__all__ = [
    "CellvmError", "Invalid", "Unauthorized", "Forbidden", "NotFound", "Busy", "Lost", "TooLarge", "Internal",
    "NotSupported", "Full", "ConnectError", "ConnectionLost", "Timeout", "ProtocolError", "from_response",
]

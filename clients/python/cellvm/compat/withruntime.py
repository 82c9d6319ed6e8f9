"""A Runtime-style interpreter, on cellvm.

A program written for that interface runs with only its import changed::

    from cellvm.compat.withruntime import Sandbox

    with Sandbox.create(memory_mib=2048, network={"internet": False}) as sbx:
        out = sbx.interpreter.run("import matplotlib.pyplot as plt; plt.plot([1, 2])", timeout_ms=30_000)
        png = sbx.interpreter.result(out["results"][0]["refs"]["image/png"])

``interpreter.run`` returns a dict: ``stdout``, ``stderr``, ``results``
(each ``{"data": {mime: value}, "refs": {mime: ref}}``: binary values such
as PNG images are given by ref, fetched with ``interpreter.result(ref)``,
never inline), ``error`` (None or ``{"name", "value", "traceback"}`` with
the traceback as one string) and ``status`` ("ok", "error", "timeout",
"lost"). A timeout is a result, not an exception. ``status`` follows the
interface's contract, which cellvm's own status does not: "timeout" means
the cell was interrupted and the variables are still there; "lost" means
the interpreter was killed or died during the cell (a timeout whose
interrupt was ignored, out of memory, a crash) and the variables are gone.
It is derived from cellvm's ``state_kept`` and ``killed_by``, which the
dict also carries, never from cellvm's status alone (cellvm says "timeout"
for a killed interpreter too).

``network={"internet": False}`` means no network device at all;
``network={"allow": [...]}`` passes a cellvm allowlist. cellvm has no
"whole internet" mode (private ranges, the host and metadata stay shut),
so ``{"internet": True}`` is refused: list what the sandbox needs.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any, Dict, Optional, Union

from .. import sandbox as _native
from ..models import BINARY_MIMES, Execution, join_traceback
from ._truth import lost_cause

__all__ = ["Sandbox", "Interpreter"]

#: What the refs of one sandbox may hold in all; the oldest go first.
MAX_REF_BYTES = 256 << 20


def runtime_status(ex: Execution) -> str:
    """The interface's status for a cellvm result: "lost" whenever the
    interpreter was killed or died during the cell (its variables are
    gone), else cellvm's own. A cell that ran in a fresh interpreter (the
    previous one ended between cells) keeps its "ok" or "error", with
    ``state_kept`` False and the reason on stderr."""
    if lost_cause(ex) is not None and (ex.killed_by is not None or ex.status in ("timeout", "lost")):
        return "lost"
    return ex.status


def _network(network: Any) -> Any:
    if network is None:
        return None
    if not isinstance(network, dict):
        raise TypeError('network is {"internet": False} or {"allow": [...]}')
    if "allow" in network:
        return {"allow": list(network["allow"])}
    if network.get("internet") is False or network == {}:
        return None
    raise ValueError('cellvm has no open-internet mode: pass network={"allow": [...]} with the hosts, '
                     'CIDRs or names the sandbox needs (private ranges stay shut even then)')


class Interpreter:
    """``sbx.interpreter``: the sandbox's persistent Python interpreter."""

    def __init__(self, sbx: _native.Sandbox):
        self._sbx = sbx
        self._refs: "OrderedDict[str, bytes]" = OrderedDict()
        self._ref_bytes = 0

    def run(self, code: str, timeout_ms: int = 30_000) -> Dict[str, Any]:
        """Runs code and returns its outcome as a dict (see the module)."""
        ex = self._sbx.run_code(code, timeout=timeout_ms / 1000)
        return self._outcome(ex)

    def result(self, ref: str) -> bytes:
        """The bytes behind a ref from a result's ``refs``."""
        try:
            return self._refs[ref]
        except KeyError:
            raise KeyError(f"no result with ref {ref!r} (refs are kept per sandbox, at most "
                           f"{MAX_REF_BYTES >> 20} MiB in all; older ones are dropped first)") from None

    def _keep(self, data: bytes) -> str:
        ref = "ref_" + secrets.token_hex(8)
        self._refs[ref] = data
        self._ref_bytes += len(data)
        while self._ref_bytes > MAX_REF_BYTES and len(self._refs) > 1:
            _, old = self._refs.popitem(last=False)
            self._ref_bytes -= len(old)
        return ref

    def _outcome(self, ex: Execution) -> Dict[str, Any]:
        results = []
        for r in ex.results:
            data: Dict[str, Any] = {}
            refs: Dict[str, str] = {}
            for mime, value in r.data.items():
                if mime in BINARY_MIMES:
                    import base64
                    try:
                        refs[mime] = self._keep(base64.b64decode(value))
                    except ValueError:
                        continue
                else:
                    data[mime] = value
            results.append({"data": data, "refs": refs, "main": r.main})
        err = None
        if ex.error is not None:
            err = {"name": ex.error.name, "value": ex.error.value, "traceback": join_traceback(ex.error.traceback_lines)}
        return {
            "stdout": "".join(ex.logs.stdout),
            "stderr": "".join(ex.logs.stderr),
            "results": results,
            "error": err,
            "status": runtime_status(ex),
            "state_kept": ex.state_kept,
            "killed_by": ex.killed_by,
            "execution_count": ex.execution_count,
            "duration_ms": ex.duration_ms,
        }


class _Files:
    def __init__(self, sbx: _native.Sandbox):
        self._sbx = sbx

    def write(self, path: str, data: Union[bytes, str]) -> int:
        return self._sbx.files.write(path, data)

    def read(self, path: str) -> bytes:
        return self._sbx.files.read(path)


class Sandbox:
    """A cellvm sandbox with a Runtime-style interface."""

    def __init__(self, native: _native.Sandbox):
        self._native = native
        self.id = native.sandbox_id
        self.interpreter = Interpreter(native)
        self.files = _Files(native)

    @classmethod
    def create(cls, *, memory_mib: Optional[int] = None, vcpus: Optional[int] = None, network: Any = None,
               env: Optional[Dict[str, str]] = None, timeout_ms: int = 180_000, socket_path: Optional[str] = None,
               **kwargs: Any) -> "Sandbox":
        """Creates a sandbox (deleted at the end of ``with``)."""
        return cls(_native.Sandbox.create(memory_mib=memory_mib, vcpus=vcpus, network=_network(network), env=env,
                                          request_timeout=timeout_ms / 1000, socket_path=socket_path))

    @classmethod
    def connect(cls, sandbox_id: str, *, socket_path: Optional[str] = None) -> "Sandbox":
        return cls(_native.Sandbox.connect(sandbox_id, socket_path=socket_path))

    def exec(self, cmd: Union[str, list], cwd: Optional[str] = None, timeout_ms: int = 30_000) -> Dict[str, Any]:
        """Runs a command (a string goes to sh -c) and returns
        ``{"stdout", "stderr", "exit_code", "timed_out"}``."""
        r = self._native.commands.run(cmd, cwd=cwd, timeout=timeout_ms / 1000)
        return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code, "timed_out": r.timed_out}

    def close(self) -> None:
        """Deletes the sandbox."""
        self._native.kill()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

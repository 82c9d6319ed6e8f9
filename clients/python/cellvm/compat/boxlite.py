"""BoxLite's CodeBox, on cellvm.

A program written for BoxLite runs with only its import changed::

    from cellvm.compat.boxlite import CodeBox

    async with CodeBox() as box:
        print(await box.run("print('hello')"))

Unlike BoxLite's, whose ``run`` starts a fresh ``python -c`` each time,
cellvm's interpreter keeps its state between runs. ``run`` returns what the
cell printed, stdout then stderr, then the error as Python prints it (as
``python -c`` would show it). ``image`` is accepted and ignored: cellvm
sandboxes run cellvm's guest image (Debian with Python and the data
stack). When no sandbox can be started (no daemon, no KVM), entering the
box raises RuntimeError with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from ..aio import AsyncSandbox
from ..errors import CellvmError
from ..models import Execution

__all__ = ["CodeBox", "SimpleBox", "ExecResult"]


@dataclass
class ExecResult:
    """A command's outcome, as BoxLite shapes it."""

    exit_code: int
    stdout: str
    stderr: str


def _env(env: Union[None, Dict[str, str], Sequence[Tuple[str, str]]]) -> Optional[Dict[str, str]]:
    if env is None:
        return None
    return dict(env)


def cell_output(ex: Execution) -> str:
    """stdout, stderr, then the error as Python prints it."""
    out = ex.logs.stdout + ex.logs.stderr
    if ex.error is not None:
        tb = ex.error.traceback
        if tb and not tb.endswith("\n"):
            tb += "\n"
        out += tb or f"{ex.error.name}: {ex.error.value}\n"
    return out


class SimpleBox:
    """A sandbox as an async context manager, with ``exec``."""

    def __init__(self, image: Optional[str] = None, memory_mib: Optional[int] = None, cpus: Optional[int] = None,
                 runtime: Any = None, *, env: Union[None, Dict[str, str], Sequence[Tuple[str, str]]] = None,
                 auto_remove: bool = True, timeout: float = 180.0, socket_path: Optional[str] = None, **kwargs: Any):
        self._opts = dict(vcpus=cpus, memory_mib=memory_mib, env=_env(env), timeout=timeout, socket_path=socket_path)
        self._auto_remove = auto_remove
        self._sbx: Optional[AsyncSandbox] = None

    @property
    def id(self) -> Optional[str]:
        return self._sbx.sandbox_id if self._sbx else None

    async def start(self) -> "SimpleBox":
        if self._sbx is None:
            try:
                self._sbx = await AsyncSandbox.create(**self._opts)
            except CellvmError as e:
                raise RuntimeError(f"cellvm could not start a sandbox: {e}") from e
        return self

    async def __aenter__(self) -> "SimpleBox":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        if self._auto_remove:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Deletes the sandbox."""
        if self._sbx is not None:
            sbx, self._sbx = self._sbx, None
            await sbx.kill()

    def _box(self) -> AsyncSandbox:
        if self._sbx is None:
            raise RuntimeError("the box is not started: use 'async with' or await start()")
        return self._sbx

    async def exec(self, cmd: str, *args: str, env: Optional[Dict[str, str]] = None,
                   timeout: Optional[float] = 600.0) -> ExecResult:
        """Runs a program with arguments (no shell)."""
        r = await self._box().commands.run([cmd, *args], envs=env, timeout=timeout)
        return ExecResult(exit_code=r.exit_code, stdout=r.stdout, stderr=r.stderr)


class CodeBox(SimpleBox):
    """A sandbox for Python code: ``await box.run(code)`` returns its output."""

    def __init__(self, image: str = "python:slim", memory_mib: Optional[int] = None, cpus: Optional[int] = None,
                 runtime: Any = None, **kwargs: Any):
        super().__init__(image, memory_mib, cpus, runtime, **kwargs)

    async def run(self, code: str, timeout: Optional[float] = None) -> str:
        """Runs code in the box's interpreter and returns what it printed
        (stdout, stderr, then the error's traceback if it raised)."""
        ex = await self._box().run_code(code, timeout=timeout or 60.0)
        return cell_output(ex)

    async def run_script(self, script_path: str) -> str:
        """Runs a local Python file in the box."""
        with open(script_path, encoding="utf-8") as f:
            return await self.run(f.read())

    async def install_package(self, package: str) -> str:
        """pip install in the box (it needs an allowlist that reaches the package index)."""
        return await self.install_packages(package)

    async def install_packages(self, *packages: str) -> str:
        r = await self.exec("python3", "-m", "pip", "install", *packages)
        return r.stdout + r.stderr


"""BoxLite's CodeBox, on cellvm.

A program written for BoxLite runs with only its import changed::

    from cellvm.compat.boxlite import CodeBox

    async with CodeBox() as box:
        print(await box.run("print('hello')"))

Unlike BoxLite's, whose ``run`` starts a fresh ``python -c`` each time,
cellvm's interpreter keeps its state between runs. ``run`` returns what the
cell printed, stdout then stderr, then the error as Python prints it (as
``python -c`` would show it). When the interpreter did not keep its state
(a timeout whose interrupt was ignored, out of memory, a crash: cellvm's
``state_kept`` and ``killed_by``), the output ends with a line that says
so, "...: variables are gone; re-run the setup code.", since a program
that relies on the kept state would otherwise meet a NameError later with
nothing to explain it. When no sandbox can be started (no daemon,
no KVM), entering the box raises RuntimeError with the reason.

The box's options, as cellvm reads them:

- ``image`` names a cellvm image (``cellvm image ls``): one built, pulled
  or imported. An OCI reference such as ``python:slim`` is read as the
  image ``cellvm image pull`` names after it by default: lower case, with
  '/', ':' and '@' made '-' (``python-slim``, ``ghcr.io-org-app-1.0``).
  When there is no such image, entering the box raises RuntimeError with
  the ``cellvm image pull`` to run; CodeBox's default (``python:slim``,
  when not given) falls back to the daemon's own image.
- ``volumes`` mounts a named workspace (``cellvm workspace ls``) at
  /workspace: ``[("NAME", "/workspace")]``; a host path, another guest
  path, a read-only mount or a second volume is a ValueError (cellvm
  shares no host directory with a sandbox).
- ``network`` is the egress allowlist (hosts, CIDRs, names), as
  ``Sandbox.create(network=...)`` takes it; none means no network.
- ``working_dir`` (an absolute path) is made if missing and is where
  ``run`` and ``exec`` work: the box's interpreter changes to it before
  its first run, and each ``exec`` goes through ``/bin/sh -c 'cd ...'``
  (so an image without a shell takes no working_dir for ``exec``).
  Without it they work in the image's working directory (its WORKDIR, or
  /workspace).
- ``ports`` raises ValueError: a sandbox has no inbound network to publish
  a port on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..aio import AsyncSandbox
from ..errors import CellvmError, Invalid
from ..models import Execution
from ._truth import lost_note

__all__ = ["CodeBox", "SimpleBox", "ExecResult", "image_name_for"]

_IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def image_name_for(ref: str) -> str:
    """The cellvm image name of an OCI reference, as ``cellvm image pull``
    names it by default: lower case, '/', ':' and '@' made '-', other
    characters dropped, at most 64; "" when nothing valid is left."""
    out = []
    for ch in ref.lower():
        if ch in "/:@":
            out.append("-")
        elif ch.isascii() and (ch.isalnum() or ch in "-_."):
            out.append(ch)
    name = "".join(out).lstrip("-_.")[:64]
    return name if _IMAGE_NAME.fullmatch(name) and name != "default" else ""


def _workspace(volumes: Any) -> Optional[str]:
    """The workspace a box's volumes name: one ("NAME", "/workspace")."""
    if not volumes:
        return None
    if isinstance(volumes, dict):
        volumes = list(volumes.items())
    if isinstance(volumes, (str, bytes)) or not isinstance(volumes, (list, tuple)) or len(volumes) != 1:
        raise ValueError("volumes: cellvm mounts one named workspace at /workspace: volumes=[('NAME', '/workspace')]")
    vol = volumes[0]
    if not isinstance(vol, (list, tuple)) or len(vol) not in (2, 3) or not all(isinstance(v, str) for v in vol):
        raise ValueError(f"volumes: {vol!r}: want ('NAME', '/workspace'), NAME a cellvm workspace")
    name, guest = vol[0], vol[1]
    mode = vol[2] if len(vol) == 3 else "rw"
    if guest.rstrip("/") != "/workspace":
        raise ValueError(f"volumes: {guest!r}: a cellvm workspace is mounted at /workspace only")
    if mode != "rw":
        raise ValueError(f"volumes: mode {mode!r}: a cellvm workspace is mounted read-write")
    if not _IMAGE_NAME.fullmatch(name):
        raise ValueError(f"volumes: {name!r} is not a workspace name: cellvm shares no host directory with a sandbox; "
                         "name a workspace (1 to 64 of a-z, 0-9, '-', '_', '.'), made empty on first use and kept")
    return name


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
    """stdout, stderr, the error as Python prints it, then, when the
    interpreter's variables did not survive the cell, a line saying so."""
    out = "".join(ex.logs.stdout) + "".join(ex.logs.stderr)
    if ex.error is not None:
        tb = ex.error.traceback
        if tb and not tb.endswith("\n"):
            tb += "\n"
        out += tb or f"{ex.error.name}: {ex.error.value}\n"
    note = lost_note(ex)
    if note and out and not out.endswith("\n"):
        out += "\n"
    return out + note


class SimpleBox:
    """A sandbox as an async context manager, with ``exec``."""

    def __init__(self, image: Optional[str] = None, memory_mib: Optional[int] = None, cpus: Optional[int] = None,
                 runtime: Any = None, *, env: Union[None, Dict[str, str], Sequence[Tuple[str, str]]] = None,
                 volumes: Any = None, ports: Any = None, working_dir: Optional[str] = None,
                 network: Union[None, List[str], Dict[str, List[str]]] = None,
                 auto_remove: bool = True, timeout: float = 180.0, socket_path: Optional[str] = None, **kwargs: Any):
        if ports:
            raise ValueError("ports: a cellvm sandbox has no inbound network, so no port can be published; "
                             "reach what runs in it through exec or run")
        if working_dir is not None and (not isinstance(working_dir, str) or not working_dir.startswith("/")
                                        or "\x00" in working_dir or len(working_dir) > 1024):
            raise ValueError(f"working_dir: {working_dir!r}: want an absolute path in the box")
        self._working_dir = working_dir
        self._in_working_dir = False
        self._opts = dict(vcpus=cpus, memory_mib=memory_mib, env=_env(env), request_timeout=timeout, socket_path=socket_path,
                          workspace=_workspace(volumes), network=network)
        self._image = image
        self._image_fallback = False
        self._auto_remove = auto_remove
        self._sbx: Optional[AsyncSandbox] = None

    async def _image_name(self) -> Optional[str]:
        """The cellvm image the box boots (None: the daemon's own)."""
        ref = self._image
        if ref is None:
            return None
        if not isinstance(ref, str):
            raise TypeError(f"image is a str, not {type(ref).__name__}")
        if _IMAGE_NAME.fullmatch(ref) and not self._image_fallback:
            return ref
        name = image_name_for(ref)
        names = {i.name for i in await AsyncSandbox.list_images(socket_path=self._opts["socket_path"])}
        if name in names:
            return name
        if self._image_fallback:
            return None
        raise RuntimeError(f"no cellvm image for {ref!r}: pull it first (cellvm image pull {ref}, which names it "
                           f"{name or '...'!r}), or give a cellvm image name (cellvm image ls)")

    @property
    def id(self) -> Optional[str]:
        return self._sbx.sandbox_id if self._sbx else None

    async def start(self) -> "SimpleBox":
        if self._sbx is None:
            try:
                image = await self._image_name()
                self._sbx = await AsyncSandbox.create(image=image, **self._opts)
            except Invalid as e:
                hint = ""
                if "no image" in e.message and self._image:
                    hint = f" (an image from a registry: cellvm image pull {self._image})"
                raise RuntimeError(f"cellvm could not start a sandbox: {e}{hint}") from e
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
        """Runs a program with arguments (no shell; with working_dir, a
        shell that changes to it and execs the program)."""
        r = await self._box().commands.run(self._argv(cmd, *args), envs=env, timeout=timeout)
        return ExecResult(exit_code=r.exit_code, stdout=r.stdout, stderr=r.stderr)


    def _argv(self, cmd: str, *args: str) -> List[str]:
        """The argv exec runs: the command, or with working_dir a shell
        that makes and enters it first."""
        if self._working_dir is None:
            return [cmd, *args]
        return ["/bin/sh", "-c", 'mkdir -p -- "$0" && cd -- "$0" && exec "$@"', self._working_dir, cmd, *args]


class CodeBox(SimpleBox):
    """A sandbox for Python code: ``await box.run(code)`` returns its output."""

    def __init__(self, image: Optional[str] = None, memory_mib: Optional[int] = None, cpus: Optional[int] = None,
                 runtime: Any = None, **kwargs: Any):
        super().__init__(image or "python:slim", memory_mib, cpus, runtime, **kwargs)
        # BoxLite's default: the image named after it when there is one,
        # else the daemon's own (which has Python and the data stack).
        self._image_fallback = image is None

    async def run(self, code: str, timeout: Optional[float] = None) -> str:
        """Runs code in the box's interpreter and returns what it printed
        (stdout, stderr, then the error's traceback if it raised)."""
        box = self._box()
        if self._working_dir is not None and not self._in_working_dir:
            enter = await box.run_code("import os as _cellvm_os\n_cellvm_os.makedirs(%r, exist_ok=True)\n"
                                       "_cellvm_os.chdir(%r)\ndel _cellvm_os" % (self._working_dir, self._working_dir),
                                       timeout=60.0)
            if enter.error is not None:
                return cell_output(enter)
            self._in_working_dir = True
        ex = await box.run_code(code, timeout=timeout or 60.0)
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


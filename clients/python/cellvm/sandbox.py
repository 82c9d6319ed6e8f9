"""Sandbox: a cellvm sandbox driven with blocking calls."""

from __future__ import annotations

import socket
from typing import Any, Dict, List, Optional

from ._sandbox import (
    DEFAULT_CREATE_TIMEOUT_S, Plan, SandboxCalls, create_plan, create_image_plan, delete_image_plan, delete_snapshot_plan,
    delete_workspace_plan, get_snapshot_plan, info_plan, list_images_plan, list_plan, list_snapshots_plan,
    list_workspaces_plan, version_plan,
)
from ._procs import ThreadRunner, port_error, port_request, port_status
from ._transport import Connection
from .errors import ProtocolError, Timeout
from .models import ImageInfo, SandboxInfo, SnapshotInfo, WorkspaceInfo


class Sandbox(SandboxCalls):
    """A microVM with a persistent Python interpreter, driven with blocking calls.

    ::

        with Sandbox.create(memory_mib=1024) as sbx:
            sbx.run_code("x = 41")
            print(sbx.run_code("x + 1").text)   # 42

    The sandbox is deleted when the ``with`` block ends (or by
    :meth:`kill`); without ``with`` it lives until killed or its ``ttl_s``
    passes, and another process can take it up with :meth:`connect` (one
    sandbox per conversation). Calls: ``run_code``, ``commands.run``
    (and ``commands.list``/``kill``/``send_stdin``/``connect``, ``pty``),
    ``files.read``/``write``/``list``/``get_info``/``exists``/``make_dir``/
    ``rename``/``remove``/``watch_dir``, ``connect_port``, ``network.set``, ``interrupt``, ``restart``,
    ``pause``, ``resume``, ``snapshot``, ``checkpoint``, ``checkpoints``,
    ``restore_checkpoint``, ``undo``, ``info``, ``kill``; snapshots are
    listed, described and deleted with :meth:`list_snapshots`,
    :meth:`get_snapshot` and :meth:`delete_snapshot`, workspaces listed and
    deleted with :meth:`list_workspaces` and :meth:`delete_workspace`, root
    images with :meth:`list_images` and :meth:`delete_image`.
    """

    @classmethod
    def create(cls, template: Optional[str] = None, *, vcpus: Optional[int] = None, memory_mib: Optional[int] = None,
               network: Any = None,
               env: Optional[Dict[str, str]] = None, ttl_s: Optional[int] = None, idle_timeout_s: Optional[int] = None,
               start: Optional[str] = None, snapshot: Optional[str] = None, workspace: Optional[str] = None,
               image: Optional[str] = None, timeout: Optional[float] = None,
               metadata: Optional[Dict[str, str]] = None,
               envs: Optional[Dict[str, str]] = None, request_timeout: float = DEFAULT_CREATE_TIMEOUT_S,
               checkpoints: Any = None, checkpoint: Any = None,
               connection: Optional[Connection] = None, socket_path: Optional[str] = None) -> "Sandbox":
        """Creates a sandbox and returns once it runs. ``network`` is None
        (no network device at all) or an allowlist; ``env`` reaches the
        interpreter and commands; ``timeout`` bounds the boot. ``start`` is
        "template" (restore the daemon's prepared template, the default
        where there is one) or "cold" (boot); ``snapshot`` (an id from
        :meth:`snapshot`) forks that snapshot instead: a new sandbox with
        its variables and files, and its vCPUs and memory. ``workspace``
        mounts the named workspace at /workspace: made empty on first use,
        kept when the sandbox is deleted, held by one sandbox at a time
        (Busy when another holds it); not with ``snapshot``. ``image``
        boots that root image (:meth:`list_images`; "default", or none, is
        the daemon's own; Invalid, naming the images, when there is no
        such image); a fork has its snapshot's image. ``ttl_s`` deletes
        the sandbox that many seconds after its creation and
        ``idle_timeout_s`` after that many without a call; None (not sent)
        takes the daemon's defaults (``serve --default-ttl``, 1 h, and
        ``--default-idle-timeout``, 15 min), 0 asks for none (Invalid,
        naming the cap, above a daemon's ``--max-ttl`` or 0 under one).

        E2B's names take E2B's meanings: ``timeout`` is the sandbox's
        lifetime in seconds (``ttl_s``; give one of them), ``template`` the
        image ("base" and "code-interpreter-v1" are the daemon's own),
        ``metadata`` its labels (``Sandbox.list(metadata=...)`` finds it),
        ``envs`` its env. ``request_timeout`` bounds the boot (seconds).

        ``checkpoints`` turns time travel on: True, or {"every_cell": True,
        "keep": 20}, records a checkpoint of the whole machine after each
        cell and command (the result's ``checkpoint``), which
        :meth:`undo` and :meth:`restore_checkpoint` go back to; without
        every_cell only :meth:`checkpoint` records one. ``checkpoint``
        ({"sandbox": id, "n": n}) branches a new sandbox from a kept
        checkpoint, as ``snapshot`` forks a snapshot."""
        conn = connection or Connection(socket_path)
        plan = create_plan(conn, vcpus=vcpus, memory_mib=memory_mib, network=network, env=env,
                           ttl_s=ttl_s, idle_timeout_s=idle_timeout_s, boot_timeout=request_timeout, start=start,
                           snapshot=snapshot, workspace=workspace, image=image, template=template, metadata=metadata,
                           envs=envs, timeout=timeout, checkpoints=checkpoints, checkpoint=checkpoint)
        return cls(conn, plan.run(conn))

    @classmethod
    def connect(cls, sandbox_id: str, *, connection: Optional[Connection] = None,
                socket_path: Optional[str] = None) -> "Sandbox":
        """Takes up an existing sandbox by id (NotFound if there is none)."""
        conn = connection or Connection(socket_path)
        return cls(conn, info_plan(conn, sandbox_id).run(conn))

    @classmethod
    def list(cls, *, metadata: Optional[Dict[str, str]] = None, state: Any = None,
             connection: Optional[Connection] = None, socket_path: Optional[str] = None) -> List[SandboxInfo]:
        """The daemon's sandboxes (a tenant's own), oldest first: those with
        every label of ``metadata`` and, when given, in ``state`` ("running",
        "paused", ... or a list of them)."""
        conn = connection or Connection(socket_path)
        return list_plan(conn, metadata=metadata, state=state).run(conn)

    @classmethod
    def server_version(cls, *, connection: Optional[Connection] = None,
                       socket_path: Optional[str] = None) -> Dict[str, str]:
        """The daemon's {"version", "commit", "go"} (GET /v1/version)."""
        conn = connection or Connection(socket_path)
        return version_plan(conn).run(conn)

    @classmethod
    def list_snapshots(cls, *, connection: Optional[Connection] = None,
                       socket_path: Optional[str] = None) -> List[SnapshotInfo]:
        """Every snapshot of the daemon, oldest first."""
        conn = connection or Connection(socket_path)
        return list_snapshots_plan(conn).run(conn)

    @classmethod
    def get_snapshot(cls, snapshot_id: str, *, connection: Optional[Connection] = None,
                     socket_path: Optional[str] = None) -> SnapshotInfo:
        """Describes one snapshot (NotFound if there is none)."""
        conn = connection or Connection(socket_path)
        return get_snapshot_plan(conn, snapshot_id).run(conn)

    @classmethod
    def delete_snapshot(cls, snapshot_id: str, *, connection: Optional[Connection] = None,
                        socket_path: Optional[str] = None) -> bool:
        """Deletes a snapshot (forks of it keep running). Returns False when
        it was already gone."""
        conn = connection or Connection(socket_path)
        return delete_snapshot_plan(conn, snapshot_id).run(conn)

    @classmethod
    def list_workspaces(cls, *, connection: Optional[Connection] = None,
                        socket_path: Optional[str] = None) -> List[WorkspaceInfo]:
        """Every workspace of the daemon, by name, with the sandbox that
        holds it."""
        conn = connection or Connection(socket_path)
        return list_workspaces_plan(conn).run(conn)

    @classmethod
    def delete_workspace(cls, name: str, *, connection: Optional[Connection] = None,
                         socket_path: Optional[str] = None) -> bool:
        """Deletes a workspace and its files (Busy while a sandbox holds
        it). Returns False when it was already gone."""
        conn = connection or Connection(socket_path)
        return delete_workspace_plan(conn, name).run(conn)

    @classmethod
    def list_images(cls, *, connection: Optional[Connection] = None,
                    socket_path: Optional[str] = None) -> List[ImageInfo]:
        """Every root image of the daemon, the default first, with its
        manifest's Python and modules and how many sandboxes use it."""
        conn = connection or Connection(socket_path)
        return list_images_plan(conn).run(conn)

    @classmethod
    def create_image(cls, name: str, *, pull: Optional[str] = None, recipe: Optional[Dict[str, Any]] = None,
                     replace: bool = False, platform: Optional[str] = None, insecure: bool = False,
                     registry_token: Optional[str] = None, timeout_s: Optional[int] = None,
                     connection: Optional[Connection] = None, socket_path: Optional[str] = None) -> ImageInfo:
        """Makes an image in the daemon's builder VM and returns it: ``pull``
        an OCI reference, or build ``recipe`` ({"base": IMAGE, "steps":
        [{"apt": [...]}, {"run": "..."}, {"env": ["K=V"]}, ...]}, steps that
        need no files). Busy when the name is taken (unless ``replace``),
        Invalid for a bad request, and the daemon's upstream (502) or
        build_failed (422, naming the step) errors otherwise. The registry
        token is sent, never kept."""
        conn = connection or Connection(socket_path)
        return create_image_plan(conn, name, pull=pull, recipe=recipe, replace=replace, platform=platform,
                                 insecure=insecure, registry_token=registry_token, timeout_s=timeout_s).run(conn)

    @classmethod
    def delete_image(cls, name: str, *, connection: Optional[Connection] = None,
                     socket_path: Optional[str] = None) -> bool:
        """Deletes a built image (Busy while a sandbox or a snapshot uses
        it; Invalid for "default", the daemon's own). Returns False when
        it was already gone."""
        conn = connection or Connection(socket_path)
        return delete_image_plan(conn, name).run(conn)

    def _do(self, plan: Plan) -> Any:
        return plan.run(self._conn)

    def _runner(self, exchange_of: Any, timeout: float) -> Any:
        return ThreadRunner(self._conn, exchange_of, timeout)

    def connect_port(self, port: int, *, timeout: Optional[float] = None) -> socket.socket:
        """Connects to a TCP port a process in the sandbox listens on and
        returns the connected socket (a plain ``socket.socket``, or an
        ``ssl.SSLSocket`` to a remote daemon): what it sends reaches the
        port, what the port sends comes back. Upstream (502, code
        "port_closed") when nothing listens there. ``timeout`` bounds the
        connect; the socket is returned blocking, without a timeout."""
        limit = timeout or self._conn.timeout
        sock = self._conn._open(limit)
        try:
            sock.settimeout(limit)
            sock.sendall(port_request(self.sandbox_id, port, self._conn.headers()))
            head = bytearray()
            # One byte at a time up to the head's end, so nothing of the
            # port's own bytes is read here.
            while not head.endswith(b"\r\n\r\n"):
                b = sock.recv(1)
                if not b:
                    break
                head += b
                if len(head) > 64 << 10:
                    raise ProtocolError("the answer's head is too long")
            status = port_status(bytes(head))
            if status != 101:
                rest = b""
                while True:
                    b = sock.recv(65536)
                    if not b:
                        break
                    rest += b
                raise port_error(bytes(head), rest)
            sock.settimeout(None)
            return sock
        except socket.timeout:
            sock.close()
            raise Timeout(f"connecting to port {port} of {self.sandbox_id} took longer than {limit:g} s") from None
        except BaseException:
            sock.close()
            raise

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

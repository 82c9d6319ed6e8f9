"""AsyncSandbox: a cellvm sandbox driven with asyncio (streams, no threads)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Dict, List, Optional, Tuple

from ._sandbox import (
    DEFAULT_CREATE_TIMEOUT_S, Plan, SandboxCalls, create_plan, create_image_plan, delete_image_plan, delete_snapshot_plan,
    delete_workspace_plan, get_snapshot_plan, info_plan, list_images_plan, list_plan, list_snapshots_plan,
    list_workspaces_plan, version_plan,
)
from ._procs import TaskRunner, port_error, port_request, port_status
from ._transport import Connection
from .errors import Timeout
from .models import ImageInfo, SandboxInfo, SnapshotInfo, WorkspaceInfo


class AsyncSandbox(SandboxCalls):
    """The same calls as :class:`~cellvm.Sandbox`, as awaitables::

        async with await AsyncSandbox.create() as sbx:
            ex = await sbx.run_code("1 + 1", on_stdout=print)

    ``async with AsyncSandbox.create() as sbx`` works too. Callbacks may be
    plain functions or coroutines (awaited in order, as events arrive).
    Cancelling a call closes its connection, which interrupts a cell.
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
               connection: Optional[Connection] = None, socket_path: Optional[str] = None) -> "_Creating":
        """Creates a sandbox; await the result (or use it in ``async with``).
        The arguments are :meth:`cellvm.Sandbox.create`'s: ``ttl_s`` and
        ``idle_timeout_s`` None take the daemon's defaults, 0 asks for none."""
        conn = connection or Connection(socket_path)
        plan = create_plan(conn, vcpus=vcpus, memory_mib=memory_mib, network=network, env=env,
                           ttl_s=ttl_s, idle_timeout_s=idle_timeout_s, boot_timeout=request_timeout, start=start,
                           snapshot=snapshot, workspace=workspace, image=image, template=template, metadata=metadata,
                           envs=envs, timeout=timeout, checkpoints=checkpoints, checkpoint=checkpoint)
        return _Creating(cls, conn, plan)

    @classmethod
    async def connect(cls, sandbox_id: str, *, connection: Optional[Connection] = None,
                      socket_path: Optional[str] = None) -> "AsyncSandbox":
        """Takes up an existing sandbox by id (NotFound if there is none)."""
        conn = connection or Connection(socket_path)
        return cls(conn, await info_plan(conn, sandbox_id).arun(conn))

    @classmethod
    async def list(cls, *, metadata: Optional[Dict[str, str]] = None, state: Any = None,
                   connection: Optional[Connection] = None, socket_path: Optional[str] = None) -> List[SandboxInfo]:
        """The daemon's sandboxes, filtered as :meth:`cellvm.Sandbox.list`'s."""
        conn = connection or Connection(socket_path)
        return await list_plan(conn, metadata=metadata, state=state).arun(conn)

    @classmethod
    async def server_version(cls, *, connection: Optional[Connection] = None,
                             socket_path: Optional[str] = None) -> Dict[str, str]:
        """The daemon's {"version", "commit", "go"} (GET /v1/version)."""
        conn = connection or Connection(socket_path)
        return await version_plan(conn).arun(conn)

    @classmethod
    async def list_snapshots(cls, *, connection: Optional[Connection] = None,
                             socket_path: Optional[str] = None) -> List[SnapshotInfo]:
        """Every snapshot of the daemon, oldest first."""
        conn = connection or Connection(socket_path)
        return await list_snapshots_plan(conn).arun(conn)

    @classmethod
    async def get_snapshot(cls, snapshot_id: str, *, connection: Optional[Connection] = None,
                           socket_path: Optional[str] = None) -> SnapshotInfo:
        """Describes one snapshot (NotFound if there is none)."""
        conn = connection or Connection(socket_path)
        return await get_snapshot_plan(conn, snapshot_id).arun(conn)

    @classmethod
    async def delete_snapshot(cls, snapshot_id: str, *, connection: Optional[Connection] = None,
                              socket_path: Optional[str] = None) -> bool:
        """Deletes a snapshot; False when it was already gone."""
        conn = connection or Connection(socket_path)
        return await delete_snapshot_plan(conn, snapshot_id).arun(conn)

    @classmethod
    async def list_workspaces(cls, *, connection: Optional[Connection] = None,
                              socket_path: Optional[str] = None) -> List[WorkspaceInfo]:
        """Every workspace of the daemon, by name, with the sandbox that holds it."""
        conn = connection or Connection(socket_path)
        return await list_workspaces_plan(conn).arun(conn)

    @classmethod
    async def delete_workspace(cls, name: str, *, connection: Optional[Connection] = None,
                               socket_path: Optional[str] = None) -> bool:
        """Deletes a workspace (Busy while a sandbox holds it); False when it was already gone."""
        conn = connection or Connection(socket_path)
        return await delete_workspace_plan(conn, name).arun(conn)

    @classmethod
    async def list_images(cls, *, connection: Optional[Connection] = None,
                          socket_path: Optional[str] = None) -> List[ImageInfo]:
        """Every root image of the daemon, the default first."""
        conn = connection or Connection(socket_path)
        return await list_images_plan(conn).arun(conn)

    @classmethod
    async def create_image(cls, name: str, *, pull: Optional[str] = None, recipe: Optional[Dict[str, Any]] = None,
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
        return await create_image_plan(conn, name, pull=pull, recipe=recipe, replace=replace, platform=platform,
                                 insecure=insecure, registry_token=registry_token, timeout_s=timeout_s).arun(conn)

    @classmethod
    async def delete_image(cls, name: str, *, connection: Optional[Connection] = None,
                           socket_path: Optional[str] = None) -> bool:
        """Deletes a built image (Busy while a sandbox or snapshot uses it); False when it was already gone."""
        conn = connection or Connection(socket_path)
        return await delete_image_plan(conn, name).arun(conn)

    def _do(self, plan: Plan) -> Awaitable[Any]:
        return plan.arun(self._conn)

    def _runner(self, exchange_of: Any, timeout: float) -> Any:
        return TaskRunner(self._conn, exchange_of, timeout)

    async def connect_port(self, port: int, *, timeout: Optional[float] = None
                           ) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connects to a TCP port a process in the sandbox listens on and
        returns asyncio's (reader, writer) over it; Upstream (502, code
        "port_closed") when nothing listens there."""
        limit = timeout or self._conn.timeout
        reader, writer = await self._conn._aopen(limit)
        try:
            writer.write(port_request(self.sandbox_id, port, self._conn.headers()))
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), limit)
            except asyncio.IncompleteReadError as e:
                head = e.partial
            except asyncio.TimeoutError:
                raise Timeout(f"connecting to port {port} of {self.sandbox_id} took longer than {limit:g} s") from None
            if port_status(head) != 101:
                raise port_error(head, await asyncio.wait_for(reader.read(), limit))
            return reader, writer
        except BaseException:
            writer.close()
            raise

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.kill()


class _Creating:
    """A create in flight: awaitable, and an async context manager that
    deletes the sandbox at exit."""

    def __init__(self, cls: type, conn: Connection, plan: Plan):
        self._cls, self._conn, self._plan = cls, conn, plan
        self._sbx: Optional[AsyncSandbox] = None

    async def _create(self) -> AsyncSandbox:
        if self._sbx is None:
            self._sbx = self._cls(self._conn, await self._plan.arun(self._conn))
        return self._sbx

    def __await__(self):
        return self._create().__await__()

    async def __aenter__(self) -> AsyncSandbox:
        return await self._create()

    async def __aexit__(self, *exc: Any) -> None:
        if self._sbx is not None:
            await self._sbx.kill()

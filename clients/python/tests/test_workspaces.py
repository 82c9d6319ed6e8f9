import asyncio
import unittest

import cellvm
from cellvm import AsyncSandbox, Sandbox

from .fake import BAD_NAMES, GOOD_NAMES, SOCKET, RefusedBeforeSending, needs_daemon


def listed(name):
    """The workspace of that name in the daemon's list, or None."""
    return next((w for w in Sandbox.list_workspaces(socket_path=SOCKET) if w.name == name), None)


@needs_daemon
class WorkspaceTest(unittest.TestCase):
    def forget(self, name):
        """Deletes the workspace at the end of the test, after the
        sandboxes created after this call (cleanups run last first)."""
        self.addCleanup(Sandbox.delete_workspace, name, socket_path=SOCKET)

    def create(self, **kw):
        sbx = Sandbox.create(socket_path=SOCKET, **kw)
        self.addCleanup(sbx.kill)
        return sbx

    def test_files_outlive_the_sandbox(self):
        self.forget("py-notes")
        first = self.create(workspace="py-notes")
        self.assertEqual(first.created.config.get("workspace"), "py-notes")
        self.assertEqual(first.info().config.get("workspace"), "py-notes")
        self.assertEqual(first.created.started_from, "boot")  # a template's machine has no workspace disk
        self.assertEqual(first.files.write("notes.txt", b"kept across sandboxes"), 21)
        first.files.write("/tmp/scratch.txt", b"the sandbox's own")
        self.assertTrue(first.kill())

        second = self.create(workspace="py-notes")
        self.assertNotEqual(second.sandbox_id, first.sandbox_id)
        self.assertEqual(second.files.read("/workspace/notes.txt"), b"kept across sandboxes")
        with self.assertRaises(cellvm.NotFound):
            second.files.read("/tmp/scratch.txt")
        # A sandbox without the workspace does not see its files.
        plain = self.create()
        with self.assertRaises(cellvm.NotFound):
            plain.files.read("notes.txt")

    def test_one_holder_at_a_time(self):
        self.forget("py-held")
        holder = self.create(workspace="py-held")
        with self.assertRaises(cellvm.Busy) as cm:
            self.create(workspace="py-held")
        e = cm.exception
        self.assertEqual((e.code, e.status), ("busy", 409))
        self.assertIn(f"workspace py-held is mounted by sandbox {holder.sandbox_id}", e.message)

        holder.files.write("data.bin", b"12345")
        ws = listed("py-held")
        self.assertIsInstance(ws, cellvm.WorkspaceInfo)
        self.assertEqual(ws.sandbox_id, holder.sandbox_id)
        self.assertEqual((ws.size_bytes, ws.disk_bytes), (2 << 30, 5))
        self.assertTrue(ws.created_at.startswith("20"), ws.created_at)
        self.assertEqual(ws.raw["sandbox"], holder.sandbox_id)

        with self.assertRaises(cellvm.Busy) as cm:
            Sandbox.delete_workspace("py-held", socket_path=SOCKET)
        self.assertEqual(cm.exception.status, 409)
        self.assertIn(f"held by sandbox {holder.sandbox_id}", cm.exception.message)
        with self.assertRaises(cellvm.NotSupported) as cm:
            holder.snapshot()
        self.assertIn("workspace", cm.exception.message)

        self.assertTrue(holder.kill())
        self.assertIsNone(listed("py-held").sandbox_id)
        self.assertTrue(Sandbox.delete_workspace("py-held", socket_path=SOCKET))
        self.assertIsNone(listed("py-held"))
        self.assertFalse(Sandbox.delete_workspace("py-held", socket_path=SOCKET))
        # The next sandbox with the name gets a new, empty workspace.
        fresh = self.create(workspace="py-held")
        with self.assertRaises(cellvm.NotFound):
            fresh.files.read("data.bin")

    def test_the_daemon_refuses_a_workspace_for_a_fork(self):
        snap = self.create().snapshot()
        self.addCleanup(Sandbox.delete_snapshot, snap.snapshot_id, socket_path=SOCKET)
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id, workspace="py-fork")
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("workspace with snapshot", cm.exception.message)
        self.assertIsNone(listed("py-fork"))

    def test_async(self):
        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET, workspace="py-async") as sbx:
                await sbx.files.write("a.txt", "from async")
                ws = next(w for w in await AsyncSandbox.list_workspaces(socket_path=SOCKET) if w.name == "py-async")
                self.assertEqual(ws.sandbox_id, sbx.sandbox_id)
                with self.assertRaises(cellvm.Busy):
                    await AsyncSandbox.create(socket_path=SOCKET, workspace="py-async")
                with self.assertRaises(cellvm.Busy):
                    await AsyncSandbox.delete_workspace("py-async", socket_path=SOCKET)
            async with AsyncSandbox.create(socket_path=SOCKET, workspace="py-async") as sbx:
                self.assertEqual(await sbx.files.read("a.txt"), b"from async")
            self.assertTrue(await AsyncSandbox.delete_workspace("py-async", socket_path=SOCKET))
            self.assertFalse(await AsyncSandbox.delete_workspace("py-async", socket_path=SOCKET))
        asyncio.run(main())


class WorkspaceNameTest(RefusedBeforeSending):
    """Bad workspace names are refused before any request."""

    def test_bad_names(self):
        for bad in BAD_NAMES:
            msg = self.refused(ValueError, Sandbox.create, workspace=bad)
            self.assertIn("is not a workspace name (1 to 64 of a-z, 0-9, '-', '_' and '.'", msg)
            self.refused(ValueError, Sandbox.delete_workspace, bad)
        self.assertLess(len(self.refused(ValueError, Sandbox.delete_workspace, "x/" * 10000)), 200)
        self.refused(TypeError, Sandbox.delete_workspace, None)
        self.refused(TypeError, Sandbox.create, workspace=123)

    def test_good_names_are_sent(self):
        for good in GOOD_NAMES:
            with self.assertRaises(cellvm.ConnectError):
                Sandbox.create(socket_path=self.nowhere, workspace=good)
            with self.assertRaises(cellvm.ConnectError):
                Sandbox.delete_workspace(good, socket_path=self.nowhere)

    def test_async_checks_too(self):
        with self.assertRaises(ValueError):
            AsyncSandbox.create(socket_path=self.nowhere, workspace="Bad")

        async def main():
            with self.assertRaises(ValueError):
                await AsyncSandbox.delete_workspace("../x", socket_path=self.nowhere)
        asyncio.run(main())

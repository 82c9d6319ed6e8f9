import asyncio
import re
import unittest

import cellvm
from cellvm import AsyncSandbox, Sandbox

from .fake import SOCKET, RefusedBeforeSending, needs_daemon

SNAP_ID = re.compile(r"snap-[0-9a-f]{12}")


@needs_daemon
class SnapshotTest(unittest.TestCase):
    def setUp(self):
        self.sbx = Sandbox.create(socket_path=SOCKET, memory_mib=1024, env={"GREETING": "hello"})
        self.addCleanup(self.sbx.kill)

    def snapshot(self, sbx=None):
        snap = (sbx or self.sbx).snapshot()
        self.addCleanup(Sandbox.delete_snapshot, snap.snapshot_id, socket_path=SOCKET)
        return snap

    def fork(self, snap, **kw):
        fork = Sandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id, **kw)
        self.addCleanup(fork.kill)
        return fork

    def test_a_fork_has_what_the_sandbox_had_at_the_snapshot(self):
        self.assertEqual(self.sbx.created.started_from, "template")
        self.sbx.run_code("x = 41")
        self.sbx.files.write("/workspace/kept.txt", b"from the parent")
        snap = self.snapshot()
        self.assertRegex(snap.snapshot_id, SNAP_ID)
        self.assertEqual(snap.id, snap.snapshot_id)
        self.assertEqual(snap.sandbox_id, self.sbx.sandbox_id)
        self.assertEqual((snap.vcpus, snap.memory_mib), (1, 1024))
        self.assertGreater(snap.size_bytes, 0)
        self.assertTrue(snap.created_at.startswith("20"), snap.created_at)
        # The sandbox keeps running, and what it does after the snapshot is
        # not in the fork.
        self.assertEqual(self.sbx.info().state, "running")
        self.sbx.run_code("after = 1")

        fork = self.fork(snap)
        self.assertNotEqual(fork.sandbox_id, self.sbx.sandbox_id)
        self.assertEqual(fork.created.started_from, "snapshot")
        self.assertEqual(fork.info().started_from, "snapshot")
        self.assertEqual(fork.run_code("x").text, "41")
        self.assertEqual(fork.run_code("after").error.name, "NameError")
        self.assertEqual(fork.files.read("kept.txt"), b"from the parent")
        # The fork has the snapshot's machine, and its parent's env.
        self.assertEqual((fork.created.config["vcpus"], fork.created.config["memory_mib"]), (1, 1024))
        self.assertEqual(fork.run_code("env").logs.stdout, ['{"GREETING":"hello"}\n'])
        # A change in the fork stays in the fork.
        fork.run_code("x = 7")
        self.assertEqual(fork.run_code("x").text, "7")
        self.assertEqual(self.sbx.run_code("x").text, "41")

    def test_pause_then_a_cell_resumes_and_finds_the_variable(self):
        self.sbx.run_code("x = 41")
        self.assertIsNone(self.sbx.pause())
        self.assertEqual(self.sbx.info().state, "paused")
        with self.assertRaises(cellvm.Busy) as cm:
            self.sbx.pause()
        self.assertEqual(cm.exception.status, 409)
        self.assertIn("already paused", cm.exception.message)
        self.assertEqual(self.sbx.run_code("x").text, "41")
        self.assertEqual(self.sbx.info().state, "running")

    def test_pause_and_resume(self):
        self.sbx.run_code("x = 41")
        self.sbx.pause()
        self.assertIsNone(self.sbx.resume())
        self.assertEqual(self.sbx.info().state, "running")
        with self.assertRaises(cellvm.Busy) as cm:
            self.sbx.resume()
        self.assertIn("not paused", cm.exception.message)
        self.assertEqual(self.sbx.run_code("x").text, "41")

    def test_list_get_and_delete(self):
        snap = self.snapshot()
        self.assertIn(snap.snapshot_id, [s.snapshot_id for s in Sandbox.list_snapshots(socket_path=SOCKET)])
        got = Sandbox.get_snapshot(snap.snapshot_id, socket_path=SOCKET)
        self.assertEqual(got, snap)
        self.assertIsInstance(got, cellvm.SnapshotInfo)
        self.assertTrue(Sandbox.delete_snapshot(snap.snapshot_id, socket_path=SOCKET))
        with self.assertRaises(cellvm.NotFound) as cm:
            Sandbox.get_snapshot(snap.snapshot_id, socket_path=SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        self.assertIn(f"no snapshot {snap.snapshot_id}", cm.exception.message)
        self.assertNotIn(snap.snapshot_id, [s.snapshot_id for s in Sandbox.list_snapshots(socket_path=SOCKET)])
        self.assertFalse(Sandbox.delete_snapshot(snap.snapshot_id, socket_path=SOCKET))
        with self.assertRaises(cellvm.NotFound):
            Sandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id)

    def test_start_reaches_the_daemon(self):
        with Sandbox.create(socket_path=SOCKET, start="cold") as cold:
            self.assertEqual(cold.created.started_from, "boot")
            self.assertEqual(cold.info().started_from, "boot")
        with Sandbox.create(socket_path=SOCKET, start="template") as warm:
            self.assertEqual(warm.created.started_from, "template")

    def test_busy_while_a_cell_runs(self):
        def on_stdout(text):
            if text == "waiting\n":
                for call in (self.sbx.snapshot, self.sbx.pause):
                    with self.assertRaises(cellvm.Busy) as cm:
                        call()
                    self.assertEqual(cm.exception.status, 409)
                    self.assertIn("a cell is running", cm.exception.message)
                self.sbx.interrupt()
        self.assertEqual(self.sbx.run_code("gate", on_stdout=on_stdout, timeout=30).status, "ok")
        self.assertEqual([s for s in Sandbox.list_snapshots(socket_path=SOCKET) if s.sandbox_id == self.sbx.sandbox_id], [])

    def test_full_disk(self):
        with Sandbox.create(socket_path=SOCKET, memory_mib=6000) as big:
            for call in (big.snapshot, big.pause):
                with self.assertRaises(cellvm.Full) as cm:
                    call()
                e = cm.exception
                self.assertEqual((e.code, e.status, e.retry_after), ("full", 503, 5.0))
                self.assertIn("snapshot disk cap", e.message)
            self.assertEqual(big.info().state, "running")

    def test_the_daemon_refuses_a_bad_fork(self):
        snap = self.snapshot()
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id, start="cold")
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("a fork starts from its snapshot", cm.exception.message)
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id, memory_mib=2048)
        self.assertIn("the snapshot's 1 vCPUs and 1024 MiB", cm.exception.message)

    def test_a_lost_sandbox(self):
        self.sbx.run_code("die")
        for call in (self.sbx.snapshot, self.sbx.pause):
            with self.assertRaises(cellvm.Lost) as cm:
                call()
            self.assertIn("VM exited", cm.exception.message)
        with self.assertRaises(cellvm.Busy) as cm:
            self.sbx.resume()
        self.assertIn("is lost, not paused", cm.exception.message)

    def test_async(self):
        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET) as sbx:
                await sbx.run_code("x = 41")
                snap = await sbx.snapshot()
                try:
                    self.assertEqual(await AsyncSandbox.get_snapshot(snap.snapshot_id, socket_path=SOCKET), snap)
                    self.assertIn(snap, await AsyncSandbox.list_snapshots(socket_path=SOCKET))
                    async with AsyncSandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id) as fork:
                        self.assertEqual(fork.created.started_from, "snapshot")
                        self.assertEqual((await fork.run_code("x")).text, "41")
                    await sbx.pause()
                    self.assertEqual((await sbx.info()).state, "paused")
                    await sbx.resume()
                    self.assertEqual((await sbx.run_code("x")).text, "41")
                finally:
                    self.assertTrue(await AsyncSandbox.delete_snapshot(snap.snapshot_id, socket_path=SOCKET))
                with self.assertRaises(cellvm.NotFound):
                    await AsyncSandbox.get_snapshot(snap.snapshot_id, socket_path=SOCKET)
                self.assertFalse(await AsyncSandbox.delete_snapshot(snap.snapshot_id, socket_path=SOCKET))
        asyncio.run(main())


class ClientSideInputTest(RefusedBeforeSending):
    """Bad snapshot ids and start values are refused before any request."""

    def test_bad_snapshot_ids(self):
        for bad in ("snap-123", "snap-0123456789AB", "snap-0123456789abc", "sb-0123456789ab", "../sandboxes", "",
                    "snap-" + "0" * 100):
            msg = self.refused(ValueError, Sandbox.create, snapshot=bad)
            self.assertIn("is not a snapshot id (snap- and 12 hex digits", msg)
            self.refused(ValueError, Sandbox.get_snapshot, bad)
            self.refused(ValueError, Sandbox.delete_snapshot, bad)
        self.assertLess(len(self.refused(ValueError, Sandbox.get_snapshot, "x" * 10000)), 200)
        self.refused(TypeError, Sandbox.delete_snapshot, None)
        self.refused(TypeError, Sandbox.create, snapshot=123)

    def test_bad_start(self):
        msg = self.refused(ValueError, Sandbox.create, start="warm")
        self.assertIn("start is 'template' or 'cold'", msg)
        self.refused(ValueError, Sandbox.create, start="")
        self.refused(TypeError, Sandbox.create, start=True)

    def test_good_input_is_sent(self):
        for call, args, kw in ((Sandbox.create, (), {"snapshot": "snap-0123456789ab"}),
                               (Sandbox.create, (), {"start": "cold"}),
                               (Sandbox.get_snapshot, ("snap-0123456789ab",), {}),
                               (Sandbox.delete_snapshot, ("snap-0123456789ab",), {})):
            with self.assertRaises(cellvm.ConnectError):
                call(*args, socket_path=self.nowhere, **kw)

    def test_async_checks_too(self):
        with self.assertRaises(ValueError):
            AsyncSandbox.create(socket_path=self.nowhere, start="warm")

        async def main():
            with self.assertRaises(ValueError):
                await AsyncSandbox.get_snapshot("snap-nope", socket_path=self.nowhere)
        asyncio.run(main())

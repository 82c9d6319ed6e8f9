import asyncio
import unittest

import cellvm
from cellvm import AsyncSandbox, Sandbox

from .fake import SOCKET, RefusedBeforeSending, needs_daemon


@needs_daemon
class CheckpointTest(unittest.TestCase):
    def create(self, **kw):
        sbx = Sandbox.create(socket_path=SOCKET, **kw)
        self.addCleanup(sbx.kill)
        return sbx

    def test_every_cell_undo_and_restore(self):
        sbx = self.create(checkpoints={"every_cell": True, "keep": 5})
        self.assertEqual(sbx.created.raw["config"]["checkpoints"], {"every_cell": True, "keep": 5})
        self.assertEqual([sbx.run_code(c).checkpoint for c in ("x = 1", "x = 2", "x = 3")], [1, 2, 3])
        cps = sbx.checkpoints()
        self.assertEqual([c.n for c in cps], [1, 2, 3])
        self.assertEqual((cps[1].kind, cps[1].execution_count, cps[1].depth), ("cell", 2, 2))
        self.assertEqual(len(cps[1].code_sha256), 64)
        self.assertIsInstance(cps[0], cellvm.CheckpointInfo)

        back = sbx.undo()
        self.assertEqual(back.n, 2)
        self.assertEqual(sbx.run_code("x").text, "2")
        back = sbx.restore_checkpoint(1)
        self.assertEqual((back.n, back.execution_count), (1, 1))
        ex = sbx.run_code("x")
        self.assertEqual((ex.text, ex.execution_count, ex.checkpoint), ("1", 2, 2))

        with self.assertRaises(cellvm.NotFound):
            sbx.restore_checkpoint(9)

    def test_a_manual_checkpoint_brings_a_file_back(self):
        sbx = self.create(checkpoints=True)
        sbx.files.write("/workspace/a.txt", b"before")
        n = sbx.checkpoint()
        self.assertEqual((n.n, n.kind), (1, "manual"))
        sbx.files.write("/workspace/a.txt", b"after")
        sbx.files.write("/workspace/b.txt", b"new")
        sbx.restore_checkpoint(n.n)
        self.assertEqual(sbx.files.read("/workspace/a.txt"), b"before")
        self.assertFalse(sbx.files.exists("/workspace/b.txt"))

    def test_a_command_records_one(self):
        sbx = self.create(checkpoints=True)
        r = sbx.commands.run(["echo", "hi"])
        self.assertEqual((r.stdout, r.checkpoint, r.checkpoint_error), ("hi\n", 1, None))

    def test_without_checkpoints(self):
        sbx = self.create()
        ex = sbx.run_code("x = 1")
        self.assertEqual((ex.checkpoint, ex.checkpoint_error), (None, None))
        with self.assertRaises(cellvm.Invalid):
            sbx.undo()

    def test_branches(self):
        parent = self.create(memory_mib=1024, checkpoints=True)
        parent.run_code("x = 1")
        parent.run_code("x = 5")
        kids = [self.create(checkpoint={"sandbox": parent.sandbox_id, "n": 1}),
                self.create(checkpoint=(parent, 1), memory_mib=1024)]
        for kid, v in zip(kids, ("10", "20")):
            self.assertEqual(kid.created.started_from, "snapshot")
            self.assertEqual(kid.created.config["memory_mib"], 1024)
            self.assertEqual(kid.run_code("x").text, "1")
            kid.run_code("x = " + v)
        self.assertEqual([k.run_code("x").text for k in kids], ["10", "20"])
        self.assertEqual(parent.run_code("x").text, "5")
        with self.assertRaises(cellvm.NotFound):
            self.create(checkpoint={"sandbox": parent.sandbox_id, "n": 7})

    def test_async(self):
        async def go():
            async with await AsyncSandbox.create(socket_path=SOCKET, checkpoints={"every_cell": True}) as sbx:
                self.assertEqual((await sbx.run_code("x = 1")).checkpoint, 1)
                self.assertEqual((await sbx.run_code("x = 2")).checkpoint, 2)
                back = await sbx.undo()
                self.assertEqual(back.n, 1)
                self.assertEqual((await sbx.run_code("x")).text, "1")
        asyncio.run(go())


class CheckpointArgsTest(RefusedBeforeSending):
    def test_bad_arguments_are_refused_before_sending(self):
        for bad, exc in (({"keep": 0}, ValueError), ({"keep": 33}, ValueError), ({"keep": "3"}, TypeError),
                         ({"every_cell": 1}, TypeError), ({"each_cell": True}, ValueError), ("yes", TypeError)):
            self.refused(exc, Sandbox.create, checkpoints=bad)
        for bad, exc in (({"sandbox": "sb-1", "n": 0}, ValueError), ({"sandbox": "", "n": 1}, ValueError),
                         ({"sandbox": "sb-1", "n": True}, TypeError), ("sb-1", TypeError), (("sb-1",), TypeError)):
            self.refused(exc, Sandbox.create, checkpoint=bad)


if __name__ == "__main__":
    unittest.main()

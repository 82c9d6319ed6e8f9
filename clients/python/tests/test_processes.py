"""Background processes, file operations and ports against the fake daemon
(go test ./clients): the fake's processes are scripted by argv[0] (echo,
fail, sleep, cat, sh with a PTY), its files are a map, and a sandbox
labelled cellvm-test-echo-port=N gets an echo server on its port N."""

import asyncio
import socket
import time
import unittest

import cellvm
from cellvm import AsyncSandbox, Connection, Sandbox

from .fake import SOCKET, needs_daemon

ECHO_PORT_LABEL = "cellvm-test-echo-port"


def wait_for(cond, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        time.sleep(0.02)


@needs_daemon
class TestCommands(unittest.TestCase):
    def setUp(self):
        self.sbx = Sandbox.create(connection=Connection(SOCKET))
        self.addCleanup(self.sbx.kill)

    def test_run_streams_and_raises_on_failure(self):
        out = []
        r = self.sbx.commands.run(["echo", "hi", "there"], on_stdout=out.append)
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.error), (0, "hi there\n", "", None))
        self.assertEqual(out, ["hi there\n"])
        err = []
        with self.assertRaises(cellvm.CommandExitError) as cm:
            self.sbx.commands.run(["fail"], on_stderr=err.append)
        e = cm.exception
        self.assertEqual((e.exit_code, e.stderr, e.result.exit_code), (1, "failed\n", 1))
        self.assertEqual(err, ["failed\n"])
        with self.assertRaises(cellvm.CommandExitError) as cm:
            self.sbx.commands.run(["no-such-program"], user="user")
        self.assertIn("no such file", cm.exception.error)

    def test_background_list_stdin_kill(self):
        seen = []
        h = self.sbx.commands.run(["cat"], background=True, stdin=True, on_stdout=seen.append, tag="t1", timeout=0)
        self.assertIsInstance(h, cellvm.CommandHandle)
        self.assertIsInstance(h.pid, int)
        procs = self.sbx.commands.list()
        self.assertEqual([(p.pid, p.cmd, p.tag) for p in procs], [(h.pid, "cat", "t1")])
        self.sbx.commands.send_stdin(h.pid, "abc\n")
        h.send_stdin(b"\xff", eof=True)
        r = h.wait(timeout=10)
        self.assertEqual((r.exit_code, r.stdout), (0, "abc\n\ufffd"))
        self.assertEqual("".join(seen), "abc\n\ufffd")
        self.assertEqual(self.sbx.commands.list(), [])

        s = self.sbx.commands.run(["sleep", "100"], background=True)
        self.assertTrue(self.sbx.commands.kill(s.pid))
        with self.assertRaises(cellvm.CommandExitError) as cm:
            s.wait(timeout=10)
        self.assertEqual((cm.exception.exit_code, cm.exception.result.signal), (-1, "SIGKILL"))
        self.assertFalse(self.sbx.commands.kill(s.pid))
        with self.assertRaises(cellvm.NotFound):
            self.sbx.commands.send_stdin(s.pid, "x")

    def test_connect_and_timeout(self):
        h = self.sbx.commands.run(["cat"], background=True, stdin=True)
        self.sbx.commands.send_stdin(h.pid, "early\n")
        wait_for(lambda: h.stdout == "early\n")
        h.disconnect()
        again = self.sbx.commands.connect(h.pid)
        wait_for(lambda: again.stdout == "early\n")
        self.sbx.commands.close_stdin(h.pid)
        self.assertEqual(again.wait(timeout=10).stdout, "early\n")  # the backlog, then the end
        with self.assertRaises(cellvm.NotFound):
            self.sbx.commands.connect(99999).wait(timeout=10)
        with self.assertRaises(cellvm.CommandExitError) as cm:
            self.sbx.commands.run(["sleep"], background=True, timeout=0.2).wait(timeout=10)
        self.assertTrue(cm.exception.result.timed_out)

    def test_pty(self):
        data = []
        t = self.sbx.pty.create(cols=80, rows=24, on_data=data.append)
        self.sbx.pty.resize(t.pid, cols=100, rows=30)
        self.sbx.pty.send_stdin(t.pid, "exit\n")
        self.assertEqual(t.wait(timeout=10).exit_code, 0)
        text = b"".join(data).decode()
        self.assertIn("resized 100x30", text)
        self.assertIn("exit", text)

    def test_refused_before_sending(self):
        with self.assertRaises(TypeError):
            self.sbx.commands.run(["cat"], background=True, stdin="data")
        with self.assertRaises(ValueError):
            self.sbx.commands.kill(0)
        with self.assertRaises(ValueError):
            self.sbx.commands.kill(5, signal="SIGSTOP")
        with self.assertRaises(ValueError):
            self.sbx.commands.run(["echo"], user="nobody")

    def test_plain_run_still_returns_failures(self):
        r = self.sbx.commands.run(["argv"])
        self.assertEqual(r.exit_code, 3)


@needs_daemon
class TestFiles(unittest.TestCase):
    def setUp(self):
        self.sbx = Sandbox.create(connection=Connection(SOCKET))
        self.addCleanup(self.sbx.kill)

    def test_list_stat_mkdir_rename_remove(self):
        f = self.sbx.files
        self.assertTrue(f.make_dir("/home/user/d/e"))
        self.assertFalse(f.make_dir("/home/user/d/e"))
        f.write("/home/user/d/a.txt", "hello")
        names = sorted((e.name, e.type) for e in f.list("/home/user/d"))
        self.assertEqual(names, [("a.txt", "file"), ("e", "dir")])
        deep = sorted(e.path for e in f.list("/home/user", depth=3))
        self.assertIn("/home/user/d/e", deep)
        info = f.get_info("/home/user/d/a.txt")
        self.assertEqual((info.name, info.type, info.size, info.permissions), ("a.txt", "file", 5, "rw-r--r--"))
        self.assertTrue(f.exists("/home/user/d/a.txt"))
        self.assertFalse(f.exists("/home/user/d/none"))
        moved = f.rename("/home/user/d/a.txt", "/home/user/b.txt")
        self.assertEqual(moved.path, "/home/user/b.txt")
        self.assertEqual(f.read("/home/user/b.txt"), b"hello")
        f.remove("/home/user/d")
        self.assertFalse(f.exists("/home/user/d/e"))
        with self.assertRaises(cellvm.NotFound):
            f.get_info("/home/user/d")
        with self.assertRaises(cellvm.Forbidden):
            f.list("/root")
        with self.assertRaises(ValueError):
            f.list("/home/user", depth=0)

    def test_watch_dir(self):
        f = self.sbx.files
        f.make_dir("/home/user/w")
        got = []
        h = f.watch_dir("/home/user/w", got.append)
        self.assertIsInstance(h, cellvm.WatchHandle)
        f.write("/home/user/w/x", "1")
        f.remove("/home/user/w/x")
        wait_for(lambda: len(got) >= 2)
        h.stop()
        self.assertIn(cellvm.FilesystemEvent("x", "create"), got)
        self.assertEqual(got[-1], cellvm.FilesystemEvent("x", "remove"))
        self.assertEqual(len(h.get_new_events()), len(got))
        f.write("/home/user/w/y", "after stop")
        time.sleep(0.3)
        self.assertFalse(any(e.name == "y" for e in got))
        with self.assertRaises(cellvm.NotFound):
            f.watch_dir("/home/user/none")


@needs_daemon
class TestPorts(unittest.TestCase):
    def test_connect_port(self):
        with Sandbox.create(metadata={ECHO_PORT_LABEL: "8000"}, connection=Connection(SOCKET)) as sbx:
            deadline = time.monotonic() + 10
            while True:
                try:
                    s = sbx.connect_port(8000)
                    break
                except cellvm.CellvmError as e:
                    if e.status != 502 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            with s:
                self.assertIsInstance(s, socket.socket)
                s.sendall(b"ping\n")
                got = b""
                while len(got) < 5:
                    got += s.recv(100)
                self.assertEqual(got, b"ping\n")
            with self.assertRaises(cellvm.CellvmError) as cm:
                sbx.connect_port(8001)
            self.assertEqual((cm.exception.status, cm.exception.code), (502, "port_closed"))
            with self.assertRaises(ValueError):
                sbx.connect_port(0)


@needs_daemon
class TestAsync(unittest.TestCase):
    def test_async_processes_files_ports(self):
        async def main():
            async with AsyncSandbox.create(metadata={ECHO_PORT_LABEL: "9000"}, connection=Connection(SOCKET)) as sbx:
                got = []

                async def on_out(t):
                    got.append(t)
                r = await sbx.commands.run(["echo", "a"], on_stdout=on_out)
                self.assertEqual((r.stdout, got), ("a\n", ["a\n"]))
                with self.assertRaises(cellvm.CommandExitError):
                    await sbx.commands.run(["fail"], user="user")
                h = await sbx.commands.run(["cat"], background=True, stdin=True)
                self.assertEqual([p.pid for p in await sbx.commands.list()], [h.pid])
                await h.send_stdin("x", eof=True)
                self.assertEqual((await h.wait(timeout=10)).stdout, "x")
                s = await sbx.commands.run(["sleep"], background=True)
                self.assertTrue(await s.kill())
                with self.assertRaises(cellvm.CommandExitError):
                    await s.wait(timeout=10)

                self.assertTrue(await sbx.files.make_dir("/home/user/q"))
                events = []
                w = await sbx.files.watch_dir("/home/user/q", events.append)
                await sbx.files.write("/home/user/q/f", "z")
                self.assertEqual([e.name for e in await sbx.files.list("/home/user/q")], ["f"])
                self.assertTrue(await sbx.files.exists("/home/user/q/f"))
                self.assertEqual((await sbx.files.get_info("/home/user/q/f")).size, 1)
                for _ in range(200):
                    if events:
                        break
                    await asyncio.sleep(0.02)
                await w.stop()
                self.assertEqual(events[0], cellvm.FilesystemEvent("f", "create"))

                for _ in range(500):
                    try:
                        reader, writer = await sbx.connect_port(9000)
                        break
                    except cellvm.CellvmError as e:
                        if e.status != 502:
                            raise
                        await asyncio.sleep(0.02)
                writer.write(b"hey")
                self.assertEqual(await reader.readexactly(3), b"hey")
                writer.close()
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()


class TestStartBeforeTheRunner(unittest.TestCase):
    """A stream's runner thread may see the start (or the watch being set)
    before the runner is handed to its handle; the start must still reach
    the runner, or commands.run(background=True) waits for the process's
    end (a 60 s hang, then a kill of a process already gone)."""

    class Runner:
        def __init__(self):
            self.starts = 0

        def started(self):
            self.starts += 1

    def test_command_start_seen_first(self):
        from cellvm._procs import CommandHandle
        h = CommandHandle(None)
        h._event({"kind": "start", "pid": 7})
        r = self.Runner()
        h.attach_runner(r)
        self.assertEqual((h.pid, r.starts), (7, 1))

    def test_watch_set_seen_first(self):
        from cellvm._procs import WatchHandle
        h = WatchHandle(None)
        h._line({"watching": True})
        r = self.Runner()
        h.attach_runner(r)
        self.assertEqual(r.starts, 1)

    def test_start_after_the_runner(self):
        from cellvm._procs import CommandHandle
        h = CommandHandle(None)
        r = self.Runner()
        h.attach_runner(r)
        h._event({"kind": "start", "pid": 8})
        self.assertEqual(r.starts, 1)

import base64
import json
import os
import unittest

import cellvm
from cellvm import Sandbox

from .fake import SOCKET, needs_daemon, wait_idle


@needs_daemon
class SandboxTest(unittest.TestCase):
    def setUp(self):
        self.sbx = Sandbox.create(socket_path=SOCKET, env={"GREETING": "hello", "TOKEN": "s3cret"})
        self.addCleanup(self.sbx.kill)

    def test_streaming_order_and_execution(self):
        seen = []
        ex = self.sbx.run_code("stream", on_stdout=lambda t: seen.append(("stdout", t)),
                               on_stderr=lambda t: seen.append(("stderr", t)),
                               on_result=lambda r: seen.append(("result", r.text, r.main)))
        self.assertEqual(seen, [("stdout", "out 1\n"), ("stderr", "err 1\n"), ("stdout", "out 2\n"), ("result", "3", True)])
        self.assertEqual(ex.status, "ok")
        self.assertEqual(ex.text, "3")
        self.assertEqual(ex.logs.stdout, ["out 1\n", "out 2\n"])  # E2B's lists
        self.assertEqual(ex.logs.stderr, ["err 1\n"])
        self.assertEqual(ex.execution_count, 1)
        self.assertTrue(ex.state_kept)
        self.assertIsNone(ex.killed_by)
        self.assertIsNone(ex.error)
        self.assertEqual((ex.truncated.stdout_bytes, ex.truncated.stderr_bytes), (0, 0))

    def test_events_arrive_while_the_cell_runs(self):
        # The gate cell blocks after its first event until the sandbox is
        # interrupted: only a client that hands events over as they arrive
        # can release it, from the callback.
        seen = []

        def on_stdout(text):
            seen.append(text)
            if text == "waiting\n":
                # A second cell while this one runs is refused, not queued.
                with self.assertRaises(cellvm.Busy) as cm:
                    self.sbx.run_code("x = 1")
                self.assertEqual(cm.exception.status, 409)
                self.assertTrue(self.sbx.info().cell_running)
                self.sbx.interrupt()

        ex = self.sbx.run_code("gate", on_stdout=on_stdout, timeout=30)
        self.assertEqual(seen, ["waiting\n", "released\n"])
        self.assertEqual(ex.status, "ok")

    def test_state_across_cells_and_restart(self):
        self.sbx.run_code("x = 41")
        self.assertEqual(self.sbx.run_code("x").text, "41")
        self.sbx.restart()
        ex = self.sbx.run_code("x")
        self.assertEqual(ex.status, "error")
        self.assertEqual(ex.error.name, "NameError")

    def test_error_is_a_result(self):
        errors = []
        ex = self.sbx.run_code("raise", on_error=errors.append)
        self.assertEqual(ex.status, "error")
        self.assertEqual([e.name for e in errors], ["KeyError"])
        self.assertEqual(ex.error.name, "KeyError")
        self.assertEqual(ex.error.value, "'x'")
        self.assertEqual(ex.error.traceback,
                         "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\n    {}['x']\nKeyError: 'x'")
        self.assertEqual(len(ex.error.traceback_lines), 3)

    def test_timeout_result_keeps_state(self):
        ex = self.sbx.run_code("timeout", timeout=1.5)
        self.assertEqual(ex.status, "timeout")
        self.assertTrue(ex.state_kept)
        self.assertEqual(ex.killed_by, "timeout")
        self.assertEqual(ex.error.name, "TimeoutError")

    def test_timeout_is_sent_in_ms(self):
        self.assertEqual(self.sbx.run_code("timeout_ms", timeout=2.5).logs.stdout, ["2500\n"])
        self.assertEqual(self.sbx.run_code("timeout_ms").logs.stdout, ["60000\n"])
        with self.assertRaises(ValueError):
            self.sbx.run_code("x = 1", timeout=-1)

    def test_rich_results(self):
        ex = self.sbx.run_code("chart")
        fig, main = ex.results
        self.assertFalse(fig.main)
        self.assertTrue(fig.png_bytes.startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertEqual(base64.b64decode(fig.png), fig.png_bytes)  # E2B's base64 text
        self.assertEqual(fig.text, "<Figure size 640x480 with 1 Axes>")
        self.assertTrue(main.is_main_result)
        self.assertEqual(main.html, "<b>done</b>")
        self.assertEqual(main.json, {"a": [1, 2]})
        self.assertEqual(main.markdown, "**done**")
        self.assertIn("<svg", main.svg)
        self.assertEqual(ex.text, "'done'")
        self.assertIn("image/png", fig.formats())

    def test_large_event(self):
        ex = self.sbx.run_code("big")
        self.assertEqual(len("".join(ex.logs.stdout)), 1 << 20)

    def test_env_reaches_the_sandbox(self):
        self.assertEqual(self.sbx.run_code("env").logs.stdout, ['{"GREETING":"hello","TOKEN":"s3cret"}\n'])

    def test_broken_connection_mid_stream(self):
        seen = []
        with self.assertRaises(cellvm.ConnectionLost) as cm:
            self.sbx.run_code("break", on_stdout=seen.append)
        self.assertEqual(seen, ["partial\n"])
        self.assertIn("may have run in part", str(cm.exception))
        self.assertIsInstance(cm.exception, ConnectionError)

    def test_client_timeout_closes_the_connection(self):
        with self.assertRaises(cellvm.Timeout) as cm:
            self.sbx.run_code("hang", timeout=60, request_timeout=0.5)
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertIn("/cells", str(cm.exception))
        # The daemon sees the client go and ends the cell: the next one runs.
        wait_idle(self.sbx)
        self.assertEqual(self.sbx.run_code("stream").status, "ok")

    def test_lost_sandbox(self):
        ex = self.sbx.run_code("die")
        self.assertEqual(ex.status, "lost")
        self.assertFalse(ex.state_kept)
        with self.assertRaises(cellvm.Lost) as cm:
            self.sbx.run_code("x = 1")
        self.assertEqual(cm.exception.status, 410)
        self.assertEqual(self.sbx.info().state, "lost")

    def test_internal_error(self):
        with self.assertRaises(cellvm.Internal) as cm:
            self.sbx.run_code("internal")
        self.assertEqual(cm.exception.status, 500)
        self.assertIn("disk is on fire", cm.exception.message)

    def test_commands(self):
        r = self.sbx.commands.run(["echo", "a", "b c"])
        self.assertEqual((r.exit_code, r.stdout, r.timed_out), (0, "a b c\n", False))
        self.assertEqual(self.sbx.commands.run(["cat"], stdin="héllo").stdout, "héllo")
        self.assertEqual(self.sbx.commands.run(["hex"], stdin=b"\x00\xff\xfe").stdout, "00fffe")
        r = self.sbx.commands.run("ls -l /workspace")
        self.assertEqual(json.loads(r.stdout), ["sh", "-c", "ls -l /workspace"])
        self.assertEqual((r.exit_code, r.stderr), (127, "sh: not found\n"))
        r = self.sbx.commands.run(["prog", "x"], cwd="/tmp", envs={"A": "1"})
        self.assertEqual(json.loads(r.stdout),
                         ["sh", "-c", 'cd -- "$1" || exit 125; shift; exec "$@"', "sh", "/tmp", "env", "A=1", "prog", "x"])
        r = self.sbx.commands.run(["argv"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, '["argv"]', "to stderr\n"))
        r = self.sbx.commands.run(["sleep", "100"], timeout=1)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.exit_code, 137)

    def test_network_and_info(self):
        self.sbx.network.set(["pypi.org", "10.0.0.0/8"])
        info = self.sbx.info()
        self.assertEqual(info.config["network"], {"allow": ["pypi.org", "10.0.0.0/8"]})
        self.assertEqual(info.sandbox_id, self.sbx.sandbox_id)
        self.assertEqual(info.state, "running")
        with self.assertRaises(cellvm.Invalid):
            self.sbx.network.set(["not a host!"])
        with self.assertRaises(cellvm.NotSupported) as cm:
            self.sbx.network.set(["not-supported.test"])
        self.assertEqual(cm.exception.status, 501)

    def test_connect_and_kill(self):
        other = Sandbox.connect(self.sbx.sandbox_id, socket_path=SOCKET)
        other.run_code("y = 7")
        self.assertEqual(self.sbx.run_code("y").text, "7")
        self.assertIn(self.sbx.sandbox_id, [i.sandbox_id for i in Sandbox.list(socket_path=SOCKET)])
        self.assertTrue(other.kill())
        self.assertFalse(self.sbx.kill())
        with self.assertRaises(cellvm.NotFound):
            Sandbox.connect(self.sbx.sandbox_id, socket_path=SOCKET)


@needs_daemon
class LifecycleTest(unittest.TestCase):
    def test_with_deletes_the_sandbox(self):
        with Sandbox.create(socket_path=SOCKET) as sbx:
            sid = sbx.sandbox_id
            sbx.run_code("z = 1")
        with self.assertRaises(cellvm.NotFound):
            Sandbox.connect(sid, socket_path=SOCKET)

    def test_with_deletes_on_error(self):
        with self.assertRaises(ZeroDivisionError):
            with Sandbox.create(socket_path=SOCKET) as sbx:
                sid = sbx.sandbox_id
                1 / 0
        with self.assertRaises(cellvm.NotFound):
            Sandbox.connect(sid, socket_path=SOCKET)

    def test_lifetimes_left_out_are_the_daemons(self):
        """ttl_s and idle_timeout_s not given are not sent, so the daemon's
        defaults apply (the fake daemon has serve's: 1 h and 15 min); 0
        asks for none, and a number is kept."""
        for kw, want in (({}, (3600, 900)), ({"ttl_s": 0, "idle_timeout_s": 0}, (0, 0)),
                         ({"ttl_s": 60}, (60, 900)), ({"idle_timeout_s": 0}, (3600, 0))):
            with Sandbox.create(socket_path=SOCKET, **kw) as sbx:
                cfg = sbx.info().config
                self.assertEqual((cfg.get("ttl_s"), cfg.get("idle_timeout_s")), want, kw)

    def test_socket_from_the_environment(self):
        old = os.environ.get("CELLVM_SOCKET")
        os.environ["CELLVM_SOCKET"] = SOCKET
        try:
            with Sandbox.create() as sbx:
                self.assertTrue(sbx.sandbox_id.startswith("sb-"))
        finally:
            if old is None:
                del os.environ["CELLVM_SOCKET"]
            else:
                os.environ["CELLVM_SOCKET"] = old

    def test_callback_error_ends_the_call(self):
        with Sandbox.create(socket_path=SOCKET) as sbx:
            def boom(text):
                raise RuntimeError("callback failed")
            with self.assertRaises(RuntimeError):
                sbx.run_code("gate", on_stdout=boom)
            # The daemon sees the connection go and ends the cell: the next runs.
            wait_idle(sbx)
            self.assertEqual(sbx.run_code("stream").status, "ok")

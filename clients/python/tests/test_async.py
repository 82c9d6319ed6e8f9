import asyncio
import threading
import unittest

import cellvm
from cellvm import AsyncSandbox

from .fake import SOCKET, async_wait_idle, needs_daemon


def run(coro):
    return asyncio.run(coro)


@needs_daemon
class AsyncSandboxTest(unittest.TestCase):
    def test_streaming_with_async_and_plain_callbacks(self):
        async def main():
            seen = []

            async def on_stdout(text):
                await asyncio.sleep(0)
                seen.append(("stdout", text))

            async with AsyncSandbox.create(socket_path=SOCKET) as sbx:
                ex = await sbx.run_code("stream", on_stdout=on_stdout, on_stderr=lambda t: seen.append(("stderr", t)),
                                        on_result=lambda r: seen.append(("result", r.text)))
                return seen, ex, sbx.sandbox_id
        seen, ex, sid = run(main())
        self.assertEqual(seen, [("stdout", "out 1\n"), ("stderr", "err 1\n"), ("stdout", "out 2\n"), ("result", "3")])
        self.assertEqual(ex.text, "3")

        async def gone():
            with self.assertRaises(cellvm.NotFound):
                await AsyncSandbox.connect(sid, socket_path=SOCKET)
        run(gone())

    def test_no_threads(self):
        async def main():
            before = threading.active_count()
            sbx = await AsyncSandbox.create(socket_path=SOCKET)
            try:
                await sbx.run_code("x = 1")
                await sbx.files.write("a.bin", b"\x00\x01")
                self.assertEqual(await sbx.files.read("a.bin"), b"\x00\x01")
                self.assertEqual((await sbx.commands.run(["echo", "hi"])).stdout, "hi\n")
                self.assertEqual(threading.active_count(), before)
            finally:
                self.assertTrue(await sbx.kill())
        run(main())

    def test_gate_released_from_an_async_callback(self):
        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET) as sbx:
                async def on_stdout(text):
                    if text == "waiting\n":
                        with self.assertRaises(cellvm.Busy):
                            await sbx.run_code("x = 1")
                        await sbx.interrupt()
                return await sbx.run_code("gate", on_stdout=on_stdout, timeout=30)
        self.assertEqual(run(main()).logs.stdout, ["waiting\n", "released\n"])

    def test_concurrent_sandboxes(self):
        async def one(i):
            async with AsyncSandbox.create(socket_path=SOCKET) as sbx:
                await sbx.run_code(f"v = {i}")
                return (await sbx.run_code("v")).text
        async def main():
            return await asyncio.gather(*(one(i) for i in range(5)))
        self.assertEqual(run(main()), ["0", "1", "2", "3", "4"])

    def test_errors_timeouts_and_broken_stream(self):
        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET) as sbx:
                with self.assertRaises(cellvm.ConnectionLost):
                    await sbx.run_code("break")
                with self.assertRaises(cellvm.Timeout):
                    await sbx.run_code("hang", request_timeout=0.5)
                await async_wait_idle(sbx)
                ex = await sbx.run_code("timeout", timeout=1)
                self.assertEqual((ex.status, ex.state_kept), ("timeout", True))
                with self.assertRaises(cellvm.ConnectionLost):
                    await sbx.files.read("fail-midway")
            with self.assertRaises(cellvm.Invalid):
                await AsyncSandbox.create(socket_path=SOCKET, vcpus=0 - 1)
        run(main())

    def test_cancel_closes_the_connection(self):
        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET) as sbx:
                task = asyncio.ensure_future(sbx.run_code("hang"))
                await asyncio.sleep(0.2)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                # The cell ends when its connection closes: a new one runs.
                await async_wait_idle(sbx)
                return await sbx.run_code("stream")
        self.assertEqual(run(main()).status, "ok")

import asyncio
import os
import tempfile
import unittest

from cellvm import Sandbox
from cellvm.compat.boxlite import CodeBox, SimpleBox, image_name_for
from cellvm.compat.withruntime import Sandbox as RuntimeSandbox

from .fake import SOCKET, needs_daemon


@needs_daemon
class BoxLiteTest(unittest.TestCase):
    def test_codebox(self):
        async def main():
            async with CodeBox(socket_path=SOCKET) as box:
                self.assertTrue(box.id.startswith("sb-"))
                out = await box.run("stream")
                err = await box.run("raise")
                r = await box.exec("echo", "hi", "there")
                await box.run("x = 3")
                return out, err, r, await box.run("x"), box
        out, err, r, x, box = asyncio.run(main())
        self.assertEqual(out, "out 1\nout 2\nerr 1\n")
        self.assertTrue(err.endswith("KeyError: 'x'\n"), err)
        self.assertIn("Traceback (most recent call last):", err)
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (0, "hi there\n", ""))
        self.assertEqual(x, "")  # run returns printed output; a bare expression prints nothing
        self.assertIsNone(box.id)  # deleted at exit

    def test_no_daemon_is_a_runtime_error(self):
        async def main():
            async with CodeBox(socket_path=os.path.join(tempfile.mkdtemp(), "none.sock")):
                pass
        with self.assertRaises(RuntimeError) as cm:
            asyncio.run(main())
        self.assertIn("no cellvm daemon", str(cm.exception))

    def test_simplebox_env_and_options(self):
        async def main():
            async with SimpleBox(image="team", memory_mib=256, cpus=1, env=[("A", "1")], socket_path=SOCKET) as box:
                return await box._box().run_code("env"), (await box._box().info()).config
        ex, config = asyncio.run(main())
        self.assertEqual(ex.logs.stdout, ['{"A":"1"}\n'])
        self.assertEqual((config.get("image"), config.get("memory_mib"), config.get("vcpus")), ("team", 256, 1))

    def test_image_references(self):
        # An OCI reference is the image cellvm image pull names after it.
        Sandbox.create_image("python-3.12-slim", pull="python:3.12-slim", socket_path=SOCKET)
        self.addCleanup(Sandbox.delete_image, "python-3.12-slim", socket_path=SOCKET)

        async def config(**kw):
            async with SimpleBox(socket_path=SOCKET, **kw) as box:
                return (await box._box().info()).config
        self.assertEqual(asyncio.run(config(image="python:3.12-slim")).get("image"), "python-3.12-slim")
        # None for one that is not there: the error says what to pull.
        with self.assertRaises(RuntimeError) as cm:
            asyncio.run(config(image="alpine:3.20"))
        self.assertIn("cellvm image pull alpine:3.20", str(cm.exception))
        self.assertIn("'alpine-3.20'", str(cm.exception))
        with self.assertRaises(RuntimeError) as cm:
            asyncio.run(config(image="alpine"))
        self.assertIn("cellvm image pull alpine", str(cm.exception))
        # CodeBox's default falls back to the daemon's image, or takes
        # python-slim once there is one.
        async def codebox():
            async with CodeBox(socket_path=SOCKET) as box:
                return (await box._box().info()).config.get("image")
        self.assertIn(asyncio.run(codebox()), (None, "default"))
        Sandbox.create_image("python-slim", pull="python:slim", socket_path=SOCKET)
        self.addCleanup(Sandbox.delete_image, "python-slim", socket_path=SOCKET)
        self.assertEqual(asyncio.run(codebox()), "python-slim")
        self.assertEqual((image_name_for("ghcr.io/Org/App:1.0"), image_name_for("default"), image_name_for("!!")),
                         ("ghcr.io-org-app-1.0", "", ""))

    def test_volumes_and_network(self):
        self.addCleanup(Sandbox.delete_workspace, "boxdata", socket_path=SOCKET)

        async def main():
            async with SimpleBox(volumes=[("boxdata", "/workspace")], network=["pypi.org"], socket_path=SOCKET) as box:
                return (await box._box().info()).config
        config = asyncio.run(main())
        self.assertEqual((config.get("workspace"), config.get("network")), ("boxdata", {"allow": ["pypi.org"]}))

    def test_working_dir(self):
        box = SimpleBox(working_dir="/srv/app", socket_path=SOCKET)
        self.assertEqual(box._argv("ls", "-l"), ["/bin/sh", "-c", 'mkdir -p -- "$0" && cd -- "$0" && exec "$@"',
                                                  "/srv/app", "ls", "-l"])
        self.assertEqual(SimpleBox(socket_path=SOCKET)._argv("ls"), ["ls"])

    def test_unsupported_options_are_errors(self):
        for kw, want in (
            (dict(ports=[(8080, 80)]), "no inbound network"),
            (dict(working_dir="app"), "absolute path"),
            (dict(volumes=[("/home/me/data", "/workspace")]), "shares no host directory"),
            (dict(volumes=[("data", "/data")]), "at /workspace only"),
            (dict(volumes=[("data", "/workspace", "ro")]), "read-write"),
            (dict(volumes=[("a", "/workspace"), ("b", "/workspace")]), "one named workspace"),
        ):
            with self.assertRaises(ValueError) as cm:
                SimpleBox(socket_path=SOCKET, **kw)
            self.assertIn(want, str(cm.exception), kw)


@needs_daemon
class WithRuntimeTest(unittest.TestCase):
    def test_interpreter(self):
        with RuntimeSandbox.create(memory_mib=2048, network={"internet": False}, socket_path=SOCKET) as sbx:
            out = sbx.interpreter.run("chart", timeout_ms=30_000)
            self.assertEqual(out["status"], "ok")
            fig, main = out["results"]
            self.assertNotIn("image/png", fig["data"])
            self.assertEqual(fig["data"]["text/plain"], "<Figure size 640x480 with 1 Axes>")
            png = sbx.interpreter.result(fig["refs"]["image/png"])
            self.assertTrue(png.startswith(b"\x89PNG\r\n\x1a\n"))
            self.assertEqual(main["refs"], {})
            self.assertEqual(main["data"]["text/html"], "<b>done</b>")
            with self.assertRaises(KeyError):
                sbx.interpreter.result("ref_nope")

            err = sbx.interpreter.run("raise")
            self.assertEqual(err["status"], "error")
            self.assertEqual(err["error"]["name"], "KeyError")
            self.assertIsInstance(err["error"]["traceback"], str)
            self.assertEqual(err["error"]["traceback"].splitlines()[0], "Traceback (most recent call last):")

            t = sbx.interpreter.run("timeout", timeout_ms=1000)
            self.assertEqual((t["status"], t["state_kept"]), ("timeout", True))
            sbx.interpreter.run("v = 5")
            self.assertEqual(sbx.interpreter.run("v")["results"][0]["data"]["text/plain"], "5")

            self.assertEqual(sbx.files.write("/workspace/a.txt", "hi"), 2)
            r = sbx.exec(["echo", "ok"], timeout_ms=5000)
            self.assertEqual(r, {"stdout": "ok\n", "stderr": "", "exit_code": 0, "timed_out": False})
            r = sbx.exec("ls", cwd="/workspace")
            self.assertEqual(r["exit_code"], 127)
            sid = sbx.id
        with self.assertRaises(Exception):
            RuntimeSandbox.connect(sid, socket_path=SOCKET)

    def test_network_options(self):
        with RuntimeSandbox.create(network={"allow": ["pypi.org"]}, socket_path=SOCKET) as sbx:
            self.assertEqual(sbx._native.info().config["network"], {"allow": ["pypi.org"]})
        with self.assertRaises(ValueError):
            RuntimeSandbox.create(network={"internet": True}, socket_path=SOCKET)

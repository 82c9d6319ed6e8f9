"""E2B's names with E2B's meanings (timeout as the lifetime, template,
metadata, envs), list filters, set_timeout and the daemon's version."""

import unittest

import cellvm
from cellvm import AsyncSandbox, Sandbox

from .fake import SOCKET, RefusedBeforeSending, needs_daemon


@needs_daemon
class E2BNamesTest(unittest.TestCase):
    def test_create_takes_e2bs_names(self):
        with Sandbox.create(socket_path=SOCKET, timeout=120, template="base", metadata={"run": "e2b-names"},
                            envs={"GREETING": "hi"}) as sbx:
            info = sbx.info()
            self.assertEqual(info.config.get("ttl_s"), 120)  # the lifetime, not the boot wait
            self.assertEqual(info.metadata, {"run": "e2b-names"})
            self.assertEqual(info.config.get("image", ""), "")  # "base" is the daemon's own image
            self.assertIn("GREETING", info.raw.get("env_names") or [])
        with Sandbox.create("team", socket_path=SOCKET) as sbx:  # E2B's positional template
            self.assertEqual(sbx.info().config.get("image"), "team")

    def test_list_filters_by_metadata_and_state(self):
        a = Sandbox.create(socket_path=SOCKET, metadata={"suite": "labels", "who": "a"})
        b = Sandbox.create(socket_path=SOCKET, metadata={"suite": "labels", "who": "b"})
        try:
            b.pause()
            ids = lambda **kw: [s.sandbox_id for s in Sandbox.list(socket_path=SOCKET, **kw)]
            self.assertEqual(ids(metadata={"suite": "labels"}), [a.sandbox_id, b.sandbox_id])
            self.assertEqual(ids(metadata={"suite": "labels", "who": "b"}), [b.sandbox_id])
            self.assertEqual(ids(metadata={"suite": "labels"}, state="running"), [a.sandbox_id])
            self.assertEqual(ids(metadata={"suite": "labels"}, state=["paused", "lost"]), [b.sandbox_id])
            self.assertEqual(ids(metadata={"suite": "nothing"}), [])
        finally:
            a.kill()
            b.kill()

    def test_set_timeout(self):
        with Sandbox.create(socket_path=SOCKET, timeout=60) as sbx:
            info = sbx.set_timeout(3600)
            self.assertEqual(info.config.get("ttl_s"), 3600)
            self.assertEqual(sbx.info().config.get("ttl_s"), 3600)
            with self.assertRaises(cellvm.Invalid):
                sbx.set_timeout(10**9)

    def test_server_version(self):
        v = Sandbox.server_version(socket_path=SOCKET)
        self.assertEqual(sorted(v), ["commit", "go", "version"])
        self.assertTrue(v["go"].startswith("go"))

    def test_async_names(self):
        import asyncio

        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET, timeout=90, metadata={"suite": "async-labels"}) as sbx:
                found = await AsyncSandbox.list(socket_path=SOCKET, metadata={"suite": "async-labels"})
                info = await sbx.set_timeout(30)
                return [s.sandbox_id for s in found], sbx.sandbox_id, info.config.get("ttl_s"), await AsyncSandbox.server_version(socket_path=SOCKET)
        found, sid, ttl, v = asyncio.run(main())
        self.assertEqual(found, [sid])
        self.assertEqual(ttl, 30)
        self.assertIn("version", v)


class E2BNamesRefusedTest(RefusedBeforeSending):
    def test_bad_arguments_fail_before_sending(self):
        for kw, exc in (
            ({"timeout": 0}, ValueError),
            ({"timeout": -5}, ValueError),
            ({"timeout": "1h"}, ValueError),
            ({"timeout": 60, "ttl_s": 60}, ValueError),
            ({"env": {"A": "1"}, "envs": {"A": "1"}}, ValueError),
            ({"metadata": {"bad key": "x"}}, ValueError),
            ({"metadata": {"k": "line\nbreak"}}, ValueError),
            ({"metadata": {"k": 1}}, TypeError),
            ({"metadata": {str(i): "x" for i in range(65)}}, ValueError),
            ({"template": "Bad Name"}, ValueError),
            ({"template": "team", "image": "other"}, ValueError),
        ):
            with self.subTest(kw=kw):
                self.refused(exc, Sandbox.create, **kw)
        for kw, exc in (({"state": "asleep"}, ValueError), ({"metadata": {"k": "\x00"}}, ValueError)):
            with self.subTest(kw=kw):
                self.refused(exc, Sandbox.list, **kw)


class ModelsTest(unittest.TestCase):
    def test_logs_are_lists_and_png_is_base64(self):
        ex = cellvm.Execution({"stdout": "a\nb", "stderr": "", "results": [{"data": {"image/png": "iVBORw0KGgo="}}]})
        self.assertEqual(ex.logs.stdout, ["a\n", "b"])
        self.assertEqual(ex.logs.stderr, [])
        self.assertEqual(ex.results[0].png, "iVBORw0KGgo=")
        self.assertEqual(ex.results[0].png_bytes, b"\x89PNG\r\n\x1a\n")

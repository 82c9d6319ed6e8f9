import asyncio
import unittest

import cellvm
from cellvm import AsyncSandbox, Sandbox

from .fake import BAD_NAMES, GOOD_NAMES, SOCKET, RefusedBeforeSending, needs_daemon

# The fake daemon's images (sandbox/sandboxtest/images.go): "default", "team"
# (built with --apt jq) and "scratch", which nothing uses and which
# test_delete_image deletes (the other tests leave it alone).


def listed(name):
    """The image of that name in the daemon's list, or None."""
    return next((i for i in Sandbox.list_images(socket_path=SOCKET) if i.name == name), None)


@needs_daemon
class ImageTest(unittest.TestCase):
    def create(self, **kw):
        sbx = Sandbox.create(socket_path=SOCKET, **kw)
        self.addCleanup(sbx.kill)
        return sbx

    def test_list_images(self):
        images = Sandbox.list_images(socket_path=SOCKET)
        self.assertTrue(all(isinstance(i, cellvm.ImageInfo) for i in images), images)
        names = [i.name for i in images]
        self.assertEqual(names[0], "default")
        self.assertIn("team", names)
        self.assertEqual(names[1:], sorted(names[1:]))

        team = listed("team")
        self.assertEqual((team.size_bytes, team.python, team.sandboxes), (1006 << 20, "3.11.2", 0))
        self.assertIn("pandas 1.5.3", team.modules)
        self.assertEqual((team.key, team.apt, team.build_seconds), ("sha256:5f0c2e8a91d3", ["jq"], 31.5))
        self.assertEqual(team.built_at, "2023-11-14T23:13:20Z")
        self.assertEqual(team.raw["apt"], ["jq"])

        default = images[0]
        self.assertEqual((default.python, default.key, default.apt, default.build_seconds), ("3.11.2", None, [], 0.0))
        self.assertNotIn("key", default.raw)  # omitted for the default image, as the daemon does

    def test_create_with_image(self):
        sbx = self.create(image="team")
        self.assertEqual(sbx.created.config.get("image"), "team")
        self.assertEqual(sbx.info().config.get("image"), "team")
        self.assertEqual(listed("team").sandboxes, 1)
        plain = self.create(image="default")
        self.assertEqual(plain.created.config.get("image"), "default")
        self.assertTrue(sbx.kill())
        self.assertEqual(listed("team").sandboxes, 0)

    def test_unknown_image_is_invalid(self):
        before = {s.sandbox_id for s in Sandbox.list(socket_path=SOCKET)}
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, image="no-such-image")
        e = cm.exception
        self.assertEqual((e.code, e.status), ("invalid", 400))
        self.assertIn('no image "no-such-image"; the images here are default, ', e.message)
        self.assertIn("team", e.message)
        self.assertEqual({s.sandbox_id for s in Sandbox.list(socket_path=SOCKET)}, before)

    def test_delete_image_in_use_is_busy(self):
        holder = self.create(image="team")
        with self.assertRaises(cellvm.Busy) as cm:
            Sandbox.delete_image("team", socket_path=SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("busy", 409))
        self.assertIn(f"image team is used by sandbox {holder.sandbox_id}", cm.exception.message)

        snap = holder.snapshot()
        self.addCleanup(Sandbox.delete_snapshot, snap.snapshot_id, socket_path=SOCKET)
        self.assertTrue(holder.kill())
        with self.assertRaises(cellvm.Busy) as cm:
            Sandbox.delete_image("team", socket_path=SOCKET)
        self.assertIn(f"image team is the image of snapshot {snap.snapshot_id}", cm.exception.message)
        # A fork has its snapshot's image; another is refused.
        fork = self.create(snapshot=snap.snapshot_id)
        self.assertEqual(fork.created.config.get("image"), "team")
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, snapshot=snap.snapshot_id, image="default")
        self.assertIn("it has its snapshot's image", cm.exception.message)
        self.assertIsNotNone(listed("team"))

    def test_delete_default_is_invalid(self):
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.delete_image("default", socket_path=SOCKET)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("the default image is the daemon's own", cm.exception.message)
        self.assertIsNotNone(listed("default"))

    def test_delete_image(self):
        self.assertIsNotNone(listed("scratch"))
        self.assertTrue(Sandbox.delete_image("scratch", socket_path=SOCKET))
        self.assertIsNone(listed("scratch"))
        # Gone (404): False, as for snapshots and workspaces.
        self.assertFalse(Sandbox.delete_image("scratch", socket_path=SOCKET))
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, image="scratch")
        self.assertIn('no image "scratch"', cm.exception.message)

    def test_async(self):
        async def main():
            async with AsyncSandbox.create(socket_path=SOCKET, image="team") as sbx:
                self.assertEqual(sbx.created.config.get("image"), "team")
                images = await AsyncSandbox.list_images(socket_path=SOCKET)
                self.assertIsInstance(images[0], cellvm.ImageInfo)
                self.assertEqual(next(i for i in images if i.name == "team").sandboxes, 1)
                with self.assertRaises(cellvm.Busy):
                    await AsyncSandbox.delete_image("team", socket_path=SOCKET)
            with self.assertRaises(cellvm.Invalid):
                await AsyncSandbox.delete_image("default", socket_path=SOCKET)
            with self.assertRaises(cellvm.Invalid):
                await AsyncSandbox.create(socket_path=SOCKET, image="no-such-image")
            self.assertFalse(await AsyncSandbox.delete_image("never-built", socket_path=SOCKET))
        asyncio.run(main())


@needs_daemon
class CreateImageTest(unittest.TestCase):
    def test_pull_and_recipe(self):
        self.addCleanup(Sandbox.delete_image, "pulled", socket_path=SOCKET)
        self.addCleanup(Sandbox.delete_image, "cooked", socket_path=SOCKET)
        info = Sandbox.create_image("pulled", pull="python:3.12-slim", registry_token="tok-py-19", socket_path=SOCKET)
        self.assertIsInstance(info, cellvm.ImageInfo)
        self.assertEqual((info.name, info.source, info.ref), ("pulled", "pull", "python:3.12-slim"))
        self.assertTrue(info.digest.startswith("sha256:"))
        self.assertNotIn("tok-py-19", repr(info.raw))
        self.assertEqual(listed("pulled").source, "pull")
        with self.assertRaises(cellvm.Busy):
            Sandbox.create_image("pulled", pull="python:3.13-slim", socket_path=SOCKET)
        self.assertEqual(Sandbox.create_image("pulled", pull="python:3.13-slim", replace=True, socket_path=SOCKET).ref,
                         "python:3.13-slim")
        info = Sandbox.create_image("cooked", recipe={"base": "pulled", "steps": [{"apt": ["jq"]}, {"env": ["A=1"]}]},
                                    timeout_s=600, socket_path=SOCKET)
        self.assertEqual((info.source, info.base, info.apt, info.raw.get("env")), ("build", "pulled", ["jq"], ["A=1"]))

    def test_errors(self):
        with self.assertRaises(cellvm.Upstream) as cm:
            Sandbox.create_image("nowhere", pull="registry.invalid/x:1", socket_path=SOCKET)
        self.assertEqual(cm.exception.status, 502)
        with self.assertRaises(cellvm.BuildFailed) as cm:
            Sandbox.create_image("broken", recipe={"steps": [{"run": "exit 4"}]}, socket_path=SOCKET)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.step), (422, "build_failed", "run"))
        self.assertIn("exit status 4", e.tail)
        with self.assertRaises(cellvm.Invalid):
            Sandbox.create_image("bad", recipe={"base": "never-made", "steps": [{"run": "true"}]}, socket_path=SOCKET)

        async def main():
            with self.assertRaises(cellvm.BuildFailed):
                await AsyncSandbox.create_image("broken", recipe={"steps": [{"run": "false"}]}, socket_path=SOCKET)
            info = await AsyncSandbox.create_image("async-made", pull="alpine:3", socket_path=SOCKET)
            self.assertEqual(info.source, "pull")
            self.assertTrue(await AsyncSandbox.delete_image("async-made", socket_path=SOCKET))
        asyncio.run(main())
        self.assertIsNone(listed("broken"))


class ImageNameTest(RefusedBeforeSending):
    """Bad image names are refused before any request."""

    def test_bad_names(self):
        for bad in BAD_NAMES:
            msg = self.refused(ValueError, Sandbox.create, image=bad)
            self.assertIn("is not an image name (1 to 64 of a-z, 0-9, '-', '_' and '.'", msg)
            msg = self.refused(ValueError, Sandbox.delete_image, bad)
            self.assertIn("is not an image name", msg)
        self.assertLess(len(self.refused(ValueError, Sandbox.delete_image, "x/" * 10000)), 200)
        self.refused(TypeError, Sandbox.delete_image, None)
        self.assertIn("an image name is a str", self.refused(TypeError, Sandbox.create, image=123))

    def test_good_names_are_sent(self):
        for good in GOOD_NAMES + ("default",):
            with self.assertRaises(cellvm.ConnectError):
                Sandbox.create(socket_path=self.nowhere, image=good)
            with self.assertRaises(cellvm.ConnectError):
                Sandbox.delete_image(good, socket_path=self.nowhere)
        with self.assertRaises(cellvm.ConnectError):
            Sandbox.list_images(socket_path=self.nowhere)

    def test_create_image_checks(self):
        self.refused(ValueError, Sandbox.create_image, "Bad", pull="alpine:3")
        self.refused(ValueError, Sandbox.create_image, "ok")
        self.refused(ValueError, Sandbox.create_image, "ok", pull="alpine:3", recipe={"steps": []})
        self.refused(TypeError, Sandbox.create_image, "ok", recipe=["run"])
        self.refused(ValueError, Sandbox.create_image, "ok", pull="alpine:3", timeout_s=0)

    def test_async_checks_too(self):
        with self.assertRaises(ValueError):
            AsyncSandbox.create(socket_path=self.nowhere, image="Bad")

        async def main():
            with self.assertRaises(ValueError):
                await AsyncSandbox.delete_image("../x", socket_path=self.nowhere)
        asyncio.run(main())

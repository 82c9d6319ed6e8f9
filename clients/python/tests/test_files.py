import io
import os
import tempfile
import unittest

import cellvm
from cellvm import Sandbox

from .fake import SOCKET, needs_daemon

ALL_BYTES = bytes(range(256)) * 4096  # 1 MiB with every byte value


@needs_daemon
class FilesTest(unittest.TestCase):
    def setUp(self):
        self.sbx = Sandbox.create(socket_path=SOCKET)
        self.addCleanup(self.sbx.kill)

    def test_binary_round_trip(self):
        data = ALL_BYTES[: (1 << 20) - 1]
        self.assertEqual(self.sbx.files.write("/workspace/blob.bin", data), len(data))
        self.assertEqual(self.sbx.files.read("/workspace/blob.bin"), data)

    def test_text_file_object_and_relative_paths(self):
        self.sbx.files.write("notes/é.txt", "héllo ✓")
        self.assertEqual(self.sbx.files.read("/workspace/notes/é.txt").decode("utf-8"), "héllo ✓")
        with tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(b"\x00from a file\xff")
        self.addCleanup(os.unlink, f.name)
        with open(f.name, "rb") as src:
            self.assertEqual(self.sbx.files.write("from-file", src), 13)
        self.assertEqual(self.sbx.files.read("from-file"), b"\x00from a file\xff")
        self.assertEqual(self.sbx.files.write("bio", io.BytesIO(b"abc")), 3)

    def test_stream_of_unknown_length_is_chunked(self):
        r, w = os.pipe()
        os.write(w, b"piped bytes\x00")
        os.close(w)
        with os.fdopen(r, "rb") as src:
            self.assertEqual(self.sbx.files.write("piped", src), 12)
        self.assertEqual(self.sbx.files.read("piped"), b"piped bytes\x00")

    def test_missing_file(self):
        with self.assertRaises(cellvm.NotFound):
            self.sbx.files.read("/workspace/nope")

    def test_bad_path(self):
        with self.assertRaises(cellvm.Invalid):
            self.sbx.files.write("/proc/self/mem", b"x")
        with self.assertRaises(ValueError):
            self.sbx.files.read("/")

    def test_too_large_is_refused_before_the_transfer(self):
        # The fake daemon takes at most 1 MiB; the declared length is over it.
        with self.assertRaises(cellvm.TooLarge) as cm:
            self.sbx.files.write("big", b"x" * ((1 << 20) + 1))
        self.assertEqual(cm.exception.status, 413)

    def test_too_large_chunked(self):
        r, w = os.pipe()
        import threading

        def feed():
            try:
                for _ in range(24):
                    os.write(w, b"y" * (64 << 10))
            except BrokenPipeError:
                pass
            finally:
                os.close(w)

        t = threading.Thread(target=feed)
        t.start()
        try:
            with os.fdopen(r, "rb") as src:
                with self.assertRaises(cellvm.TooLarge):
                    self.sbx.files.write("big-chunked", src)
        finally:
            t.join(10)

    def test_download_cut_off_is_an_error(self):
        with self.assertRaises(cellvm.ConnectionLost) as cm:
            self.sbx.files.read("/workspace/fail-midway")
        self.assertIn("cut off", str(cm.exception))

    def test_read_limit(self):
        self.sbx.files.write("ten", b"0123456789")
        with self.assertRaises(cellvm.TooLarge):
            self.sbx.files.read("ten", max_bytes=5)

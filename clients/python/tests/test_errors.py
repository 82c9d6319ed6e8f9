import os
import tempfile
import unittest

import cellvm
from cellvm import Connection, Sandbox

from .fake import FORBIDDEN_SOCKET, SOCKET, needs_daemon


@needs_daemon
class ErrorCodeTest(unittest.TestCase):
    """Every error code of the API arrives as its own exception class."""

    def test_invalid(self):
        with self.assertRaises(cellvm.Invalid) as cm:
            Sandbox.create(socket_path=SOCKET, vcpus=999)
        e = cm.exception
        self.assertEqual((e.code, e.status), ("invalid", 400))
        self.assertIn("vcpus 999", e.message)
        self.assertIsInstance(e, ValueError)

    def test_not_found(self):
        with self.assertRaises(cellvm.NotFound) as cm:
            Sandbox.connect("sb-nope", socket_path=SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))

    def test_full(self):
        with self.assertRaises(cellvm.Full) as cm:
            Sandbox.create(socket_path=SOCKET, memory_mib=60000)
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.retry_after), ("full", 503, 5.0))

    def test_not_supported(self):
        with self.assertRaises(cellvm.NotSupported):
            Sandbox.create(socket_path=SOCKET, network=["not-supported.test"])

    def test_forbidden(self):
        if not FORBIDDEN_SOCKET:
            self.skipTest("no socket that refuses this user")
        with self.assertRaises(cellvm.Forbidden) as cm:
            Sandbox.create(socket_path=FORBIDDEN_SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("forbidden", 403))
        self.assertIn("may not use this socket", cm.exception.message)

    def test_busy_and_lost_and_too_large_and_internal(self):
        # Shown in test_sandbox.py and test_files.py; here, the mapping
        # from the body alone.
        for code, cls in (("busy", cellvm.Busy), ("lost", cellvm.Lost), ("too_large", cellvm.TooLarge),
                          ("internal", cellvm.Internal)):
            e = cellvm.errors.from_response(499, b'{"error":{"code":"%s","message":"m"}}' % code.encode())
            self.assertIsInstance(e, cls)
            self.assertEqual(e.message, "m")
        e = cellvm.errors.from_response(502, b"<html>bad gateway</html>")
        self.assertIsInstance(e, cellvm.Internal)
        self.assertIn("bad gateway", e.message)

    def test_client_side_bad_input(self):
        with self.assertRaises(TypeError):
            Sandbox.create(socket_path=SOCKET, env={"A": 1})
        with self.assertRaises(TypeError):
            Sandbox.create(socket_path=SOCKET, network="pypi.org")
        with self.assertRaises(ValueError):
            Sandbox.connect("", socket_path=SOCKET)


class ConnectErrorTest(unittest.TestCase):
    def test_no_socket(self):
        path = os.path.join(tempfile.mkdtemp(), "none.sock")
        with self.assertRaises(cellvm.ConnectError) as cm:
            Sandbox.create(socket_path=path)
        self.assertIn("does not exist", str(cm.exception))
        self.assertIn("CELLVM_SOCKET", str(cm.exception))

    def test_stale_socket(self):
        import socket
        path = os.path.join(tempfile.mkdtemp(), "stale.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
        with self.assertRaises(cellvm.ConnectError) as cm:
            Sandbox.list(socket_path=path)
        self.assertIn("stale", str(cm.exception))

    def test_default_socket(self):
        old = os.environ.pop("CELLVM_SOCKET", None)
        try:
            self.assertEqual(Connection().socket_path, "/run/cellvm/cellvm.sock")
            os.environ["CELLVM_SOCKET"] = "/tmp/x.sock"
            self.assertEqual(Connection().socket_path, "/tmp/x.sock")
            self.assertEqual(Connection("/tmp/y.sock").socket_path, "/tmp/y.sock")
        finally:
            os.environ.pop("CELLVM_SOCKET", None)
            if old is not None:
                os.environ["CELLVM_SOCKET"] = old

    def test_silent_server_times_out(self):
        import socket
        import threading
        path = os.path.join(tempfile.mkdtemp(), "silent.sock")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen(1)
        conns = []
        t = threading.Thread(target=lambda: conns.append(srv.accept()[0]), daemon=True)
        t.start()
        try:
            with self.assertRaises(cellvm.Timeout) as cm:
                Sandbox.list(connection=Connection(path, timeout=0.3))
            self.assertIn("GET /v1/sandboxes", str(cm.exception))
        finally:
            t.join(5)
            for c in conns:
                c.close()
            srv.close()

"""What the tests share: the fake daemon's socket, which the Go test
(go test ./clients) serves over a fake manager and passes in
CELLVM_TEST_FAKE_SOCKET. Without it the tests that need a daemon skip."""

import os
import tempfile
import unittest

import cellvm

SOCKET = os.environ.get("CELLVM_TEST_FAKE_SOCKET", "")
FORBIDDEN_SOCKET = os.environ.get("CELLVM_TEST_FORBIDDEN_SOCKET", "")

#: Workspace and image names the daemon's rule (1 to 64 of a-z, 0-9, '-',
#: '_' and '.', starting with a letter or digit) refuses, and some it takes.
BAD_NAMES = ("", "-a", "_a", ".a", "..", "A", "Notes", "a/b", "../x", "a b", "a\n", "é", "a" * 65)
GOOD_NAMES = ("a", "0", "a" * 64, "my-ws_1.2", "9.-_")


def needs_daemon(cls):
    return unittest.skipUnless(SOCKET, "needs the fake daemon: run 'go test ./clients' (it serves one)")(cls)


class RefusedBeforeSending(unittest.TestCase):
    """A base for tests of input a client refuses before any request: the
    socket at self.nowhere does not exist, so a request would be a
    ConnectError, not the refusal."""

    def setUp(self):
        self.nowhere = os.path.join(tempfile.mkdtemp(), "none.sock")

    def refused(self, exc, call, *args, **kw):
        """Calls call with the socket that does not exist and returns the
        message of the exc it raised, which must not be the daemon's."""
        with self.assertRaises(exc) as cm:
            call(*args, socket_path=self.nowhere, **kw)
        self.assertNotIsInstance(cm.exception, cellvm.CellvmError)
        return str(cm.exception)


def wait_idle(sbx, seconds=30.0):
    """Waits until the daemon has ended the sandbox's cell (it notices a
    closed connection a moment after the client closed it)."""
    import time
    deadline = time.monotonic() + seconds
    while sbx.info().cell_running:
        if time.monotonic() > deadline:
            raise AssertionError(f"the cell of {sbx.sandbox_id} still runs {seconds:g} s after its client left")
        time.sleep(0.02)


async def async_wait_idle(sbx, seconds=30.0):
    import asyncio
    import time
    deadline = time.monotonic() + seconds
    while (await sbx.info()).cell_running:
        if time.monotonic() > deadline:
            raise AssertionError(f"the cell of {sbx.sandbox_id} still runs {seconds:g} s after its client left")
        await asyncio.sleep(0.02)

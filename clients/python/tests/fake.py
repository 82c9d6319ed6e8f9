"""What the tests share: the fake daemon's socket, which the Go test
(go test ./clients) serves over a fake manager and passes in
CELLVM_TEST_FAKE_SOCKET. Without it the tests that need a daemon skip."""

import os
import unittest

SOCKET = os.environ.get("CELLVM_TEST_FAKE_SOCKET", "")
FORBIDDEN_SOCKET = os.environ.get("CELLVM_TEST_FORBIDDEN_SOCKET", "")


def needs_daemon(cls):
    return unittest.skipUnless(SOCKET, "needs the fake daemon: run 'go test ./clients' (it serves one)")(cls)


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

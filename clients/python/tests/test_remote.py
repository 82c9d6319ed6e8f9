import asyncio
import os
import unittest

import cellvm
from cellvm import AsyncSandbox, Connection, Sandbox

URL = os.environ.get("CELLVM_TEST_FAKE_URL", "")
TOKEN = os.environ.get("CELLVM_TEST_FAKE_TOKEN", "")
CA = os.environ.get("CELLVM_TEST_FAKE_CA", "")


@unittest.skipUnless(URL, "needs the fake daemon: run 'go test ./clients' (it serves one over TLS too)")
class RemoteTest(unittest.TestCase):
    """A daemon's TLS listener (cellvm serve --listen) with a bearer token."""

    def conn(self, token=TOKEN, ca_file=CA):
        return Connection(url=URL, token=token, ca_file=ca_file)

    def test_cells_over_tls_with_the_token(self):
        sbx = Sandbox.create(connection=self.conn())
        try:
            self.assertEqual(sbx.run_code("x = 5").status, "ok")
            self.assertEqual(sbx.run_code("x").text, "5")
            self.assertEqual(Sandbox.connect(sbx.id, connection=self.conn()).id, sbx.id)
        finally:
            sbx.kill()

    def test_async_over_tls(self):
        async def go():
            sbx = await AsyncSandbox.create(connection=self.conn())
            try:
                await sbx.run_code("y = 7")
                return (await sbx.run_code("y")).text
            finally:
                await sbx.kill()
        self.assertEqual(asyncio.run(go()), "7")

    def test_without_or_with_a_wrong_token(self):
        for token in ("", "wrong-token-0123456789"):
            with self.assertRaises(cellvm.Unauthorized) as cm:
                Sandbox.list(connection=self.conn(token=token))
            self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))

    def test_untrusted_certificate(self):
        with self.assertRaises(cellvm.ConnectError) as cm:
            Sandbox.list(connection=Connection(url=URL, token=TOKEN, ca_file=None))
        self.assertIn("certificate", str(cm.exception))

    def test_environment_and_token_file(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".tokens") as f:
            f.write("# the daemon's format\n\n" + TOKEN + "\n")
            f.flush()
            saved = {k: os.environ.get(k) for k in ("CELLVM_URL", "CELLVM_TOKEN", "CELLVM_TOKEN_FILE", "CELLVM_TLS_CA")}
            try:
                os.environ.pop("CELLVM_TOKEN", None)
                os.environ.update(CELLVM_URL=URL, CELLVM_TOKEN_FILE=f.name, CELLVM_TLS_CA=CA)
                c = Connection()
                self.assertEqual(c.url, URL)
                self.assertNotIn(TOKEN, repr(c))
                Sandbox.list(connection=c)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

    def test_bad_urls(self):
        for url in ("http://127.0.0.1:1", "https://127.0.0.1:1/v1", "ftp://x"):
            with self.assertRaises(ValueError):
                Connection(url=url, token=TOKEN)
        with self.assertRaises(ValueError):
            Connection("/run/x.sock", url=URL)

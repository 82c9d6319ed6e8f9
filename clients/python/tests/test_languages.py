"""run_code's language and context, restart of one session and the
contexts calls, checked on the wire: a small recording server stands in
for the daemon (the fake daemon's sessions are tested by go test
./clients)."""

import json
import os
import socketserver
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler

import cellvm
from cellvm import ContextInfo, Sandbox

from .fake import SOCKET, needs_daemon

INFO = {"id": "sb-1", "state": "running", "config": {}}
END = {"type": "end", "end": {"status": "ok", "state_kept": True, "stdout": "", "stderr": "", "results": [], "execution_count": 1}}


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, status, body=None, ctype="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        self.server.seen.append((self.command, self.path, body))
        path = self.path.split("?")[0]
        if self.command == "GET" and path == "/v1/sandboxes/sb-1":
            return self._answer(200, INFO)
        if path.endswith("/cells"):
            return self._answer(200, (json.dumps(END) + "\n").encode(), "application/x-ndjson")
        if path.endswith("/restart") or self.command == "DELETE":
            return self._answer(204)
        if path.endswith("/contexts") and self.command == "POST":
            return self._answer(201, {"language": body.get("language"), "name": body.get("name") or "c1", "cwd": body.get("cwd", ""), "running": False})
        if path.endswith("/contexts"):
            return self._answer(200, [{"language": "python", "name": "default", "running": True},
                                      {"language": "javascript", "name": "c1", "cwd": "/tmp", "running": False}])
        return self._answer(404, {"error": {"code": "not_found", "message": "no"}})

    do_GET = do_POST = do_DELETE = _handle


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that closed its connection early

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("local", 0)


class LanguagesOnTheWireTest(unittest.TestCase):
    def setUp(self):
        d = tempfile.mkdtemp()
        self.path = os.path.join(d, "d.sock")
        self.srv = _Server(self.path, _Recorder)
        self.srv.seen = []
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        self.sbx = Sandbox.connect("sb-1", socket_path=self.path)

    def last(self):
        return self.srv.seen[-1]

    def test_run_code_language_and_context(self):
        self.sbx.run_code("1 + 1")
        self.assertEqual(self.last()[2], {"code": "1 + 1", "timeout_ms": 60000})
        self.sbx.run_code("x + 1", language="js")
        self.assertEqual(self.last()[2], {"code": "x + 1", "timeout_ms": 60000, "language": "js"})
        self.sbx.run_code("echo $V", language="bash", context="build")
        self.assertEqual(self.last()[2]["language"], "bash")
        self.assertEqual(self.last()[2]["context"], "build")
        with self.assertRaises(TypeError):
            self.sbx.run_code("1", language=3)

    def test_restart_one_session(self):
        self.sbx.restart()
        self.assertEqual(self.last(), ("POST", "/v1/sandboxes/sb-1/restart", None))
        self.sbx.restart(language="ts", context="c1")
        self.assertEqual(self.last(), ("POST", "/v1/sandboxes/sb-1/restart", {"language": "ts", "context": "c1"}))

    def test_contexts(self):
        info = self.sbx.create_context("js", name="c1", cwd="/tmp")
        self.assertEqual(self.last(), ("POST", "/v1/sandboxes/sb-1/contexts", {"language": "js", "name": "c1", "cwd": "/tmp"}))
        self.assertIsInstance(info, ContextInfo)
        self.assertEqual((info.language, info.name, info.cwd), ("js", "c1", "/tmp"))
        self.sbx.create_context()
        self.assertEqual(self.last()[2], {"language": "python"})
        got = self.sbx.list_contexts()
        self.assertEqual([(c.language, c.name, c.cwd, c.running) for c in got],
                         [("python", "default", "", True), ("javascript", "c1", "/tmp", False)])
        self.sbx.remove_context("c1", language="javascript")
        self.assertEqual(self.last(), ("DELETE", "/v1/sandboxes/sb-1/contexts/c1?language=javascript", None))
        self.sbx.remove_context("a/b")
        self.assertEqual(self.last()[1], "/v1/sandboxes/sb-1/contexts/a%2Fb?language=python")
        with self.assertRaises(ValueError):
            self.sbx.remove_context("")


@needs_daemon
class LanguagesOverTheFakeTest(unittest.TestCase):
    """The fake daemon: a bad language is the daemon's 400 naming the
    languages; each language's session has its own variables."""

    def setUp(self):
        self.sbx = Sandbox.create(socket_path=SOCKET)
        self.addCleanup(self.sbx.kill)

    def test_unknown_language(self):
        with self.assertRaises(cellvm.Invalid) as cm:
            self.sbx.run_code("1", language="cobol")
        self.assertIn("javascript (js)", str(cm.exception))

    def test_sessions_are_separate(self):
        self.sbx.run_code("x = 1")
        self.sbx.run_code("x = 2", language="javascript")
        self.assertEqual(self.sbx.run_code("x").text, "1")
        self.assertEqual(self.sbx.run_code("x", language="js").text, "2")
        self.sbx.restart(language="js")
        self.assertEqual(self.sbx.run_code("x", language="js").status, "error")
        self.assertEqual(self.sbx.run_code("x").text, "1")


if __name__ == "__main__":
    unittest.main()

"""The HTTP/1.1 parser, fed byte by byte and in odd pieces, no daemon."""

import unittest

from cellvm import ConnectionLost, ProtocolError
from cellvm._http import END, Head, ResponseParser, build_request, chunk


def events(raw, method="GET", piece=1, eof=True):
    p = ResponseParser(method)
    out = []
    for i in range(0, len(raw), piece):
        p.feed(raw[i:i + piece])
        while True:
            ev = p.next_event()
            if ev is None:
                break
            out.append(ev)
    if eof:
        p.feed(b"")
        while True:
            ev = p.next_event()
            if ev is None:
                break
            out.append(ev)
    return out


def body(evs):
    return b"".join(e for e in evs if isinstance(e, bytes))


class ParserTest(unittest.TestCase):
    def test_content_length(self):
        for piece in (1, 3, 1000):
            evs = events(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello", piece=piece)
            self.assertIsInstance(evs[0], Head)
            self.assertEqual((evs[0].status, evs[0].header("x-a")), (200, "1"))
            self.assertEqual(body(evs), b"hello")
            self.assertIs(evs[-1], END)

    def test_chunked_with_trailers_and_extensions(self):
        raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n\n\r\n0\r\nT: x\r\n\r\n"
        for piece in (1, 2, 7, 4096):
            evs = events(raw, piece=piece)
            self.assertEqual(body(evs), b"hello\n")
            self.assertIs(evs[-1], END)

    def test_interim_then_final(self):
        evs = events(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
        self.assertEqual([e.status for e in evs if isinstance(e, Head)], [100, 204])
        self.assertIs(evs[-1], END)

    def test_until_eof(self):
        evs = events(b"HTTP/1.1 200 OK\r\n\r\nrest of it")
        self.assertEqual(body(evs), b"rest of it")

    def test_cut_chunked_body_is_connection_lost(self):
        with self.assertRaises(ConnectionLost):
            events(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
        with self.assertRaises(ConnectionLost):
            events(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel")
        with self.assertRaises(ConnectionLost):
            events(b"")

    def test_malformed(self):
        for raw in (b"HTTP/1.1 2000 OK\r\n\r\n", b"SPDY 200 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"):
            with self.assertRaises(ProtocolError, msg=raw):
                events(raw)

    def test_bounded_head(self):
        with self.assertRaises(ProtocolError):
            events(b"HTTP/1.1 200 OK\r\nX: " + b"a" * (70 << 10), eof=False, piece=4096)

    def test_request(self):
        r = build_request("PUT", "/v1/x", [("A", "b")], -1)
        self.assertTrue(r.startswith(b"PUT /v1/x HTTP/1.1\r\nHost: cellvm\r\n"))
        self.assertIn(b"Transfer-Encoding: chunked\r\n", r)
        self.assertTrue(r.endswith(b"\r\n\r\n"))
        self.assertIn(b"Content-Length: 3\r\n", build_request("POST", "/", [], 3))
        with self.assertRaises(ValueError):
            build_request("GET", "/", [("A", "b\r\nInjected: 1")], None)
        self.assertEqual(chunk(b"abc"), b"3\r\nabc\r\n")
        self.assertEqual(chunk(b""), b"0\r\n\r\n")

    def test_paths_are_escaped(self):
        from cellvm._exchange import files_path, sandbox_path
        self.assertEqual(sandbox_path("sb-1/../x", "cells"), "/v1/sandboxes/sb-1%2F..%2Fx/cells")
        self.assertEqual(files_path("sb-1", "/workspace/a b?.csv"), "/v1/sandboxes/sb-1/files/workspace/a%20b%3F.csv")
        self.assertEqual(files_path("sb-1", "data.csv"), "/v1/sandboxes/sb-1/files/workspace/data.csv")

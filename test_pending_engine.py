"""Tests of the engine branch, until they move into tests/ (the modules by concern)."""

from __future__ import annotations

import hashlib
import io
import socket
import unittest
from typing import Any
from unittest import mock

import dataset_client as dc
import test_dataset_client as base

# unittest's hook: these tests run on the suite's workers too.
load_tests = base.load_tests


class DeadlineCostTests(base.ServerTestCase):
    def record_responses(self) -> list[tuple[Any, Any]]:
        """(the stream under each response the pool makes, its watch), as the pool returns it."""
        seen: list[tuple[Any, Any]] = []
        handle = dc._ConnectionPool.handle_request

        def recorded(pool: dc._ConnectionPool, request: Any) -> dc._PooledResponse:
            response = handle(pool, request)
            seen.append((response.fp.raw, response.watch))
            return response

        patcher = mock.patch.object(dc._ConnectionPool, "handle_request", recorded)
        patcher.start()
        self.addCleanup(patcher.stop)
        return seen

    def test_a_call_without_a_deadline_pays_for_none(self) -> None:
        # A deadline costs a thread for each name looked up, a stream that bounds each receive and
        # a watch on the body's reads: a call without one has none of them.
        self.script(base.reply(body=[]))
        seen = self.record_responses()
        url = self.server.url.replace("127.0.0.1", "localhost") + "/api/v1"
        with mock.patch.object(dc, "_resolve_within", side_effect=AssertionError) as resolve:
            self.assertEqual(self.client(url).list_datasets(), [])
        self.assertEqual(resolve.call_count, 0)
        ((stream, watch),) = seen
        self.assertIs(type(stream), socket.SocketIO)
        self.assertIsNone(watch)
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"])

    def test_a_call_with_a_deadline_pays_for_all(self) -> None:
        self.script(base.reply(body=[]))
        seen = self.record_responses()
        url = self.server.url.replace("127.0.0.1", "localhost") + "/api/v1"
        with mock.patch.object(dc, "_resolve_within", wraps=dc._resolve_within) as resolve:
            self.assertEqual(self.client(url, deadline=30).list_datasets(), [])
        self.assertEqual(resolve.call_count, 1)
        ((stream, watch),) = seen
        self.assertIs(type(stream), dc._ReceivingWithin)
        self.assertIsInstance(watch, dc._Watch)
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"])


class SmallFileHashTests(base.ServerTestCase):
    def test_a_file_of_one_read_is_hashed_without_a_thread(self) -> None:
        # A thread for the hash costs more than hashing a small file: one of at most a read (1 MiB)
        # is hashed as it arrives; a larger one's rest goes to the thread, as before.
        for size, threads in ((64 * 1024, 0), (3 * 1024 * 1024, 1)):
            with self.subTest(size=size):
                data = bytes(range(256)) * (size // 256)
                self.script(base.serve_file(data))
                out = io.BytesIO()
                starts = dc._Digest._start
                with mock.patch.object(dc._Digest, "_start", autospec=True) as start:
                    start.side_effect = starts
                    self.client().download("files/x", out, sha256=hashlib.sha256(data).hexdigest())
                self.assertEqual(start.call_count, threads)
                self.assertEqual(out.getvalue(), data)
                self.assertEqual(self.requests[-1].path, "/api/v1/files/x")
        with self.assertRaises(dc.ChecksumMismatchError):
            self.script(base.serve_file(b"x" * 1000))
            self.client().download("files/x", io.BytesIO(), sha256="0" * 64)


if __name__ == "__main__":
    unittest.main()

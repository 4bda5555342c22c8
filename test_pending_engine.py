"""Tests of the engine branch, until they move into tests/ (the modules by concern)."""

from __future__ import annotations

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


if __name__ == "__main__":
    unittest.main()

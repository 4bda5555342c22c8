"""Retries: what is retried (statuses, transport failures, a stale connection), how often and
after how long (Retry-After, back-off), and how a download counts its attempts.
"""

from __future__ import annotations

import io
import socket
import threading
import time
from unittest import mock

import dataset_client as dc
from dataset_client import ServiceError
from tests.support import (
    BIG,
    BIG_SHA,
    DATA,
    Handler,
    ServerTestCase,
    cut,
    drop,
    first_bytes_then_stall,
    free_port,
    hang,
    outcome_of,
    recorded_sleeps,
    reply,
    reset,
    serve_file,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def email_date(timestamp: float) -> str:
    import email.utils

    return email.utils.formatdate(timestamp, usegmt=True)


class RetryTests(ServerTestCase):
    def test_get_retries_retryable_statuses(self) -> None:
        for status in (429, 502, 503, 504):
            self.server.requests.clear()
            self.script(reply(status, {}), reply(body=["ok"]))
            with self.subTest(status=status), recorded_sleeps() as sleeps:
                self.assertEqual(self.client().list_datasets(), ["ok"])
                self.assertEqual(len(self.requests), 2)
                self.assertEqual(len(sleeps), 1)

    def test_get_does_not_retry_other_errors(self) -> None:
        for status in (400, 401, 404, 500, 501):
            self.server.requests.clear()
            self.script(reply(status, {}))
            with self.subTest(status=status), self.assertRaises(ServiceError):
                self.client().list_datasets()
            self.assertEqual(len(self.requests), 1)

    def test_posts_retry_only_what_was_not_acted_on(self) -> None:
        for status, retried in ((429, True), (503, True), (502, False), (504, False), (500, False)):
            self.server.requests.clear()
            self.script(reply(status, {}), reply(body={"ok": True}))
            with self.subTest(status=status):
                client = self.client()
                if retried:
                    self.assertEqual(client.query("SELECT 1"), {"ok": True})
                else:
                    with self.assertRaises(ServiceError):
                        client.query("SELECT 1")
                    self.server.script.clear()
                self.assertEqual(len(self.requests), 2 if retried else 1)

    def test_posts_are_not_retried_after_a_reset_or_timeout(self) -> None:
        for fault in (reset, drop, hang):
            self.server.requests.clear()
            self.script(fault, reply(body={}))
            with self.subTest(fault=fault.__name__), self.assertRaises(dc.DatasetClientError):
                self.client(timeout=0.15).query("SELECT 1")
            self.server.script.clear()
            self.assertEqual(len(self.requests), 1)

    def test_get_retries_transport_failures(self) -> None:
        self.script(reset, hang, cut(b'{"a": 1}', 3), reply(body={"a": 1}))
        with recorded_sleeps() as sleeps:
            self.assertEqual(self.client(timeout=0.15, max_retries=3).list_datasets(), {"a": 1})
        self.assertEqual(len(self.requests), 4)
        self.assertEqual(len(sleeps), 3)

    def test_failure_to_connect_is_retried_for_any_method(self) -> None:
        client = self.client(f"http://127.0.0.1:{free_port()}", max_retries=2)
        with self.assertRaises(dc.NetworkError) as caught:
            client.query("SELECT 1")
        self.assertEqual(caught.exception.attempts, 3)
        self.assertIn("(after 3 attempts)", str(caught.exception))

    def test_exhausted_retries_raise_the_last_failure(self) -> None:
        self.script(
            reply(503, {"message": "a"}), reply(503, {"message": "b"}), reply(503, {"message": "c"})
        )
        client = self.client(max_retries=2, backoff_factor=1.0)
        with recorded_sleeps() as sleeps, self.assertRaises(ServiceError) as caught:
            client.list_datasets()
        self.assertEqual(
            str(caught.exception),
            f"503 Service Unavailable: GET {self.server.url}/api/v1/datasets: c (after 3 attempts)",
        )
        self.assertEqual(len(self.requests), 3)
        # exponential back-off with jitter: in [d/2, d] for d = 1, 2
        self.assertTrue(0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0, sleeps)

    def test_max_retries_zero_disables_retries(self) -> None:
        self.script(reply(503, {}), reply(body=[]))
        with self.assertRaises(ServiceError):
            self.client(max_retries=0).list_datasets()
        self.assertEqual(len(self.requests), 1)
        self.server.script.clear()

    def test_retry_after(self) -> None:
        when = email_date(time.time() + 30)
        self.script(
            reply(429, {}, {"Retry-After": "7"}),
            reply(503, {}, {"Retry-After": when}),
            reply(body=[]),
        )
        with recorded_sleeps() as sleeps:
            self.client(max_retries=3).list_datasets()
        self.assertEqual(sleeps[0], 7.0)
        self.assertTrue(25 <= sleeps[1] <= 30, sleeps)

    def test_retry_after_over_a_minute_is_not_waited_for(self) -> None:
        self.script(reply(503, {}, {"Retry-After": "120"}), reply(body=[]))
        with recorded_sleeps() as sleeps, self.assertRaises(ServiceError) as caught:
            self.client().list_datasets()
        self.assertEqual(caught.exception.retry_after, 120.0)
        self.assertEqual((sleeps, len(self.requests)), ([], 1))
        self.server.script.clear()

    def test_idempotency_key_is_kept_across_retries(self) -> None:
        self.script(reply(503, {}), reply(429, {}), reply(201, {"id": "e1"}))
        client = self.client(max_retries=2)
        self.assertEqual(
            client.create_export("d", symbols="A", start_date="2024-01-01", end_date="2024-01-02"),
            {"id": "e1"},
        )
        keys = {r.headers["Idempotency-Key"] for r in self.requests}
        self.assertEqual(len(self.requests), 3)
        self.assertEqual(len(keys), 1)

    def test_each_retry_says_why_how_long_and_how_many_are_left(self) -> None:
        # Issue 30: "retrying GET URL in 0.93 s (attempt 1 failed: ...)" said not what was left.
        self.script(reply(503, {}), reply(502, {"message": "upstream down"}), reply(body=[]))
        with (
            recorded_sleeps() as sleeps,
            mock.patch.object(dc.random, "uniform", lambda low, high: high),  # no jitter
            self.assertLogs("dataset_client", level="WARNING") as logs,
        ):
            self.client(backoff_factor=1.0, max_retries=3).list_datasets()
        url = f"{self.server.url}/api/v1/datasets"
        self.assertEqual(
            [record.getMessage() for record in logs.records],
            [
                f"retrying in 1.0 s (3 attempts left): 503 Service Unavailable: GET {url}",
                f"retrying in 2.0 s (2 attempts left): 502 Bad Gateway: GET {url}: upstream down",
            ],
        )
        self.assertEqual(sleeps, [1.0, 2.0])
        self.assertEqual(len(self.requests), 3)

    def test_a_download_that_cannot_connect_again_never_says_it_resumes(self) -> None:
        # Issue 30: "resuming at 1.4 MiB" was said before each attempt, though none connected.
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"

        def serve_once() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                fields = f'Content-Length: {len(DATA)}\r\nAccept-Ranges: bytes\r\nETag: "v1"\r\n'
                connection.sendall(f"HTTP/1.1 200 OK\r\n{fields}\r\n".encode() + DATA[:1_500_000])
                listener.close()  # before the cut: every later connect is refused

        thread = threading.Thread(target=serve_once, daemon=True)
        thread.start()
        out = self.tmp() / "out.bin"
        with (
            self.assertLogs("dataset_client", level="INFO") as logs,
            self.assertRaises(dc.NetworkError) as caught,
        ):
            self.client(max_retries=2).download(url, out, resume=True)
        thread.join(5)
        self.assertEqual(caught.exception.attempts, 3)
        cut_off = f"connection closed after 1500000 of {len(DATA)} bytes"
        refused = "could not connect: [Errno 111] Connection refused"
        self.assertEqual(
            [record.getMessage() for record in logs.records],
            [
                f"retrying in 0.0 s (2 attempts left): GET {url}: {cut_off}",
                f"retrying in 0.0 s (1 attempt left): GET {url}: {refused}",
            ],
        )
        kept = (out.parent / ".out.bin.part").stat().st_size
        self.assertEqual(kept, 1_500_000, "kept for the next run")
        # A retry that gets its bytes back says it resumes, once, after the retry's line.
        self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}), serve_file(DATA))
        with self.assertLogs("dataset_client", level="INFO") as logs:
            self.client().download("files/x", out)
        self.assertEqual(out.read_bytes(), DATA)
        resumed = f"resuming at 1.4 MiB of 3.0 MiB after an interruption, GET {self.server.url}"
        said = [record.getMessage() for record in logs.records]
        self.assertEqual(said[1:], [resumed + "/api/v1/files/x"], "after the retry's line")

    def test_a_post_answered_307_then_503_is_retried(self) -> None:
        # 307 keeps the POST and a 503 says it was not acted on: the whole call is safe to repeat.
        self.script(reply(307, b"", {"Location": "/api/v1/q2"}), reply(503, {}))
        self.script(reply(307, b"", {"Location": "/api/v1/q2"}), reply(body={"ok": True}))
        with recorded_sleeps() as sleeps:
            self.assertEqual(self.client().query("SELECT 1"), {"ok": True})
        self.assertEqual(
            [(r.method, r.path) for r in self.requests],
            [("POST", "/api/v1/query"), ("POST", "/api/v1/q2")] * 2,
        )
        self.assertEqual(len(sleeps), 1)

    def test_a_plain_server_that_drops_a_request_is_still_retried(self) -> None:
        self.script(drop, reply(body=["ok"]))
        self.assertEqual(self.client().list_datasets(), ["ok"])
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"] * 2)

    def test_stale_connection_is_retried_once_for_get(self) -> None:
        self.script(reply(body=[1]), drop, reply(body=[2]))
        client = self.client(max_retries=0)
        self.assertEqual(client.list_datasets(), [1])
        self.assertEqual(client.list_datasets(), [2])
        self.assertEqual(self.server.connections, 2)

    def test_any_number_of_dead_idle_connections_end_in_a_fresh_one(self) -> None:
        # Three kept-alive connections a NAT dropped: they still poll as open, then reset on the next request.
        together = threading.Barrier(3)

        def respond(handler: Handler) -> None:
            if handler.connection_number > 3:
                reply(body=["fresh"])(handler)
            elif handler.handled == 1:
                together.wait(5)  # three calls at once: three connections in the pool afterwards
                reply(body=["warm"])(handler)
            else:
                reset(handler)

        self.server.default = respond
        client = self.client(max_retries=0)
        threads = [threading.Thread(target=client.list_datasets) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        self.assertEqual(client.list_datasets(), ["fresh"])
        self.assertEqual(
            client.query("SELECT 1"), ["fresh"], "a POST never meets the other dead ones"
        )
        self.assertEqual(self.server.connections, 4)
        self.assertIn(self.requests[3].connection, (1, 2, 3))  # a dead one, reset
        self.assertEqual([r.connection for r in self.requests[4:]], [4, 4])


class DownloadRetryTests(ServerTestCase):
    """A download's attempts: progress resets the count; stalls and cut heads count."""

    def test_progress_resets_the_retry_count(self) -> None:
        cuts = list(range(100_000, len(DATA), 1_100_000))  # more than a chunk (1 MiB) between cuts
        self.server.default = serve_file(DATA, cuts=cuts)
        out = io.BytesIO()
        self.client(max_retries=1).download("files/x", out)
        self.assertEqual(out.getvalue(), DATA)
        self.assertEqual(len(self.requests), len(cuts) + 1)

    def test_a_server_trickling_a_byte_per_attempt_exhausts_the_retries(self) -> None:
        # Each attempt brings one more byte: progress, but less than a chunk, so no new retries.
        self.server.default = serve_file(DATA, cuts=list(range(1, 50)))
        with self.assertRaises(dc.IncompleteResponseError) as caught:
            self.client(max_retries=2).download("files/x", io.BytesIO())
        self.assertEqual(caught.exception.attempts, 3)
        self.assertEqual(
            [r.headers["Range"] for r in self.requests],
            [None, "bytes=1-", "bytes=2-"],
            "what each attempt asked",
        )

    def test_no_progress_exhausts_the_retries(self) -> None:
        self.server.default = serve_file(DATA, ranges=False, cuts=[1000] * 10)
        with self.assertRaises(dc.IncompleteResponseError) as caught:
            self.client(max_retries=2).download("files/x", io.BytesIO())
        self.assertEqual(caught.exception.attempts, 3)

    def test_stalls_count_as_attempts_though_each_brought_a_mib(self) -> None:
        # Found in the third review (issue 30): each attempt brought a MiB or more, then stalled;
        # that reset the count of retries: with max_retries=2, 9 attempts in 12 s, and no end.
        self.server.default = first_bytes_then_stall(BIG, 1536 * 1024)
        out, client = self.tmp() / "big.bin", self.client(timeout=0.2, max_retries=2)
        error = outcome_of(lambda: client.download("files/big", out, min_rate=16 * 1024 * 1024))
        self.assertIsInstance(error, dc.RequestTimeoutError)
        rate = r"stalled at [\d.]+ (KiB|MiB)/s over 0\.\d s, below the 16\.0 MiB/s of min_rate"
        url = f"{self.server.url}/api/v1/files/big"
        self.assertRegex(str(error), rf"^GET {url}: {rate} \(after 3 attempts\)$")
        ranges = [r.headers["Range"] for r in self.requests]
        self.assertEqual(ranges, [None, "bytes=1572864-", "bytes=3145728-"])
        self.assertEqual(list(out.parent.iterdir()), [])

    def test_a_cut_head_on_a_parts_request_is_retried(self) -> None:
        def respond(handler: Handler) -> None:
            if "Range" in handler.headers and not getattr(handler.server, "cut_once", False):
                handler.server.cut_once = True  # type: ignore[attr-defined]
                handler.wfile.write(b"HTTP/1.1 206 Partial Content\r\nContent-Ra")
                handler.close_connection = True
                return
            serve_file(BIG)(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        self.client().download("files/big", out, connections=2, sha256=BIG_SHA)
        self.assertEqual(out.read_bytes(), BIG)
        ranges = [r.headers["Range"] for r in self.requests if r.headers["Range"]]
        self.assertEqual(len(ranges), 2, "the cut one was asked again")
        self.assertEqual(ranges[0], ranges[1], "for the same range")

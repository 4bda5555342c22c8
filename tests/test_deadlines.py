"""The deadline and min_rate: every wait ends by the deadline (connecting, a head, a body, a
retry's wait, a part), and a stalled connection is resumed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import pickle
import re
import select
import socket
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient, ServiceError
from tests.support import (
    BIG,
    BIG_SHA,
    SMALL,
    Handler,
    ServerTestCase,
    cut,
    first_bytes_then_stall,
    hang,
    outcome_of,
    part_threads,
    raw_server,
    recorded_sleeps,
    reply,
    run_within,
    serve_file,
    trickle,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class DeadlineTests(ServerTestCase):
    def assert_deadline_reached(
        self, error: object, seconds: float, attempts: int = 1
    ) -> dc.RequestTimeoutError:
        self.assertIsInstance(error, dc.RequestTimeoutError)
        assert isinstance(error, dc.RequestTimeoutError)
        self.assertEqual((error.deadline, error.attempts), (seconds, attempts))
        said = "(after 1 attempt)" if attempts == 1 else f"(after {attempts} attempts)"
        ended = "was reached|comes before .*: not waited for"
        self.assertRegex(str(error), rf"the deadline of {seconds:g} s ({ended}) {re.escape(said)}$")
        return error

    def assert_no_thread_left(self) -> None:
        names = [thread.name for thread in threading.enumerate()]
        self.assertFalse([name for name in names if name.startswith("dataset-client")], names)

    def test_a_server_that_never_answers_ends_the_call_at_its_deadline(self) -> None:
        hung_up: list[bool] = []

        def never_answer(connection: socket.socket) -> None:  # the request has been read
            with contextlib.suppress(TimeoutError):
                hung_up.append(connection.recv(1) == b"")  # the client's close, long before 5 s
            hung_up.append(False)

        base_url = raw_server(self, never_answer)
        client = self.client(base_url + "/api/v1", timeout=30, deadline=0.3)
        error = outcome_of(
            client.list_datasets
        )  # a 30 s timeout would fail the suite's time budget first
        self.assert_deadline_reached(error, 0.3)
        said = (
            f"GET {base_url}/api/v1/datasets: the deadline of 0.3 s was reached (after 1 attempt)"
        )
        self.assertEqual(str(error), said)
        wait_for(lambda: len(hung_up) == 2)
        self.assertEqual(
            hung_up[0], True, "the client hung up: it did not wait for its 30 s time-out"
        )
        self.assertEqual(len(hung_up), 2, "one attempt: no retry once the deadline is reached")
        self.assertIsNone(error.retry_after)  # type: ignore[union-attr]

    def test_a_head_trickled_a_byte_at_a_time_ends_at_the_deadline(self) -> None:
        sent: list[int] = []  # bytes of the head sent when the client hung up

        def trickle_the_head(connection: socket.socket) -> None:
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Slow: " + b"a" * 40 + b"\r\n\r\n[]"
            for index in range(
                len(head)
            ):  # a byte every 0.05 s: no receive waits long; the whole head 3.5 s
                try:
                    connection.sendall(head[index : index + 1])
                except OSError:
                    break
                time.sleep(0.05)
            sent.append(index)

        base_url = raw_server(self, trickle_the_head)
        error = outcome_of(
            self.client(base_url + "/api/v1", timeout=30, deadline=0.3, max_retries=0).list_datasets
        )
        self.assert_deadline_reached(error, 0.3)
        wait_for(lambda: bool(sent))
        # 0.3 s is some 6 bytes; half the head's 90 leaves a loaded machine room (a timing margin, not a measure).
        self.assertLess(
            sent[0], 45, "the client hung up at its deadline, long before the head's end"
        )

    def test_a_body_trickled_a_byte_every_0_2_s_ends_at_the_deadline_and_leaves_its_partial_file(
        self,
    ) -> None:
        data = os.urandom(5000)
        self.script(trickle(data, 1000, 0.2))
        out = self.tmp() / "out.bin"
        error = outcome_of(
            lambda: self.client(timeout=5).download(
                "/files/x", out, deadline=0.3, resume=True, sha256=hashlib.sha256(data).hexdigest()
            )
        )
        self.assert_deadline_reached(error, 0.3)
        self.assert_no_thread_left()  # the sha256 thread ended with the call
        self.assertEqual(
            [(r.path, r.headers["Range"]) for r in self.requests], [("/files/x", None)]
        )
        kept = (out.parent / ".out.bin.part").read_bytes()
        self.assertFalse(out.exists())
        self.assertGreaterEqual(len(kept), 1000, "the bytes received before the deadline are kept")
        self.assertEqual(kept, data[: len(kept)])
        self.assertLess(
            len(kept), 1000 + 40, "ended by the deadline, not by the end of the trickle"
        )
        self.script(serve_file(data))  # and the next run continues from there
        self.client().download(
            "/files/x", out, resume=True, sha256=hashlib.sha256(data).hexdigest()
        )
        self.assertEqual(out.read_bytes(), data)
        self.assertEqual(self.requests[1].headers["Range"], f"bytes={len(kept)}-")

    def test_a_name_lookup_that_hangs_ends_at_the_deadline(self) -> None:
        # Issue 30: a 1 s deadline, a 10 s call: getaddrinfo, which has no time-out, hung.
        released, real = threading.Event(), socket.getaddrinfo
        self.addCleanup(released.set)
        asked: list[str] = []

        def hanging(host: Any, port: Any, *options: Any) -> Any:  # a name server that never answers
            if host != "hangs.example" or (len(options) > 3 and options[3] & socket.AI_NUMERICHOST):
                return real(host, port, *options)  # no lookup: an address, or AI_NUMERICHOST
            asked.append(host)
            released.wait(3)  # bounded: the unfixed client waits this long
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

        started = time.monotonic()
        with mock.patch.object(dc.socket, "getaddrinfo", hanging):
            error = outcome_of(self.client("http://hangs.example/api", deadline=0.5).list_datasets)
        self.assertLess(time.monotonic() - started, 0.5 + 1)
        self.assertEqual(asked, ["hangs.example"])
        self.assertIsInstance(error, dc.RequestTimeoutError)
        reached = "the deadline of 0.5 s was reached (after 1 attempt)"
        self.assertEqual(str(error), f"GET http://hangs.example/api/datasets: {reached}")
        self.assertRegex(str(error.__cause__), r": timed out connecting$")
        released.set()  # the lookup's thread, left to the resolver, ends when it gives up

        def looking_up() -> bool:
            return any(t.name.startswith("dataset_client: looking") for t in threading.enumerate())

        wait_for(lambda: not looking_up())

    def test_a_deadline_never_lengthens_a_wait_nor_hides_a_cut_body(self) -> None:
        def head_then_silence(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", "10")
            handler.end_headers()
            handler.wfile.write(b"[1")
            handler.wfile.flush()
            hang(handler)

        self.script(cut(b"[1, 2, 3]\n", 5), head_then_silence)
        with self.assertLogs("dataset_client", "WARNING") as logs:
            error = outcome_of(self.client(timeout=0.1, deadline=5, max_retries=1).list_datasets)
        self.assertEqual(
            logs.records[0].getMessage(),
            f"retrying in 0.0 s (1 attempt left): GET {self.server.url}/api/v1/datasets:"
            " connection closed after 5 of 10 bytes",
        )
        self.assertIsInstance(error, dc.RequestTimeoutError)
        assert isinstance(error, dc.RequestTimeoutError)
        self.assertIsNone(error.deadline, "its 0.1 s time-out ended it, long before the deadline")
        self.assertEqual(
            str(error),
            f"GET {self.server.url}/api/v1/datasets: timed out waiting for data (after 2 attempts)",
        )
        # The second request was sent (its answer timed out), but the server may read it later.
        wait_for(lambda: len(self.requests) >= 2)
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"] * 2)

    def test_a_retry_after_longer_than_the_deadline_is_not_waited_for(self) -> None:
        self.script(reply(503, {"message": "busy"}, {"Retry-After": "5"}))
        with recorded_sleeps() as sleeps:
            error = outcome_of(self.client(deadline=1).list_datasets)
        self.assert_deadline_reached(error, 1)
        assert isinstance(error, dc.RequestTimeoutError)
        self.assertEqual(sleeps, [], "not waited for")
        self.assertEqual(error.retry_after, 5.0)
        self.assertIn(
            "comes before the retry in 5 s that Retry-After asks for: not waited for", str(error)
        )
        self.assertIsInstance(error.__cause__, ServiceError)
        self.assertEqual(len(self.requests), 1)
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((copy.retry_after, copy.deadline, str(copy)), (5.0, 1.0, str(error)))

    def test_a_back_off_longer_than_the_deadline_is_not_waited_for(self) -> None:
        self.script(reply(502), reply(200, []))
        with recorded_sleeps() as sleeps:
            self.assertEqual(self.client(deadline=0.5, backoff_factor=0.001).list_datasets(), [])
        self.assertEqual(len(sleeps), 1, "a short back-off is waited for")
        self.script(reply(502), reply(200, []))
        with recorded_sleeps() as sleeps:
            error = outcome_of(
                self.client(deadline=0.5, backoff_factor=4, max_retries=5).list_datasets
            )
        self.assert_deadline_reached(error, 0.5)
        self.assertEqual(sleeps, [], "a back-off of 2 s or more is not waited for")
        self.assertIsNone(error.retry_after)  # type: ignore[union-attr]
        self.assertIn(
            "the deadline of 0.5 s comes before the next retry: not waited for", str(error)
        )
        self.assertEqual(len(self.requests), 3, "the 200 is never asked for")

    def test_the_deadline_and_min_rate_are_checked_like_timeout(self) -> None:
        for value, error in (
            (0, ValueError),
            (-1, ValueError),
            (float("nan"), ValueError),
            ("1", TypeError),
        ):
            with self.subTest(value=value):
                with self.assertRaisesRegex(error, "^deadline must be"):
                    DatasetClient(self.server.url, deadline=value)  # type: ignore[arg-type]
                for name in ("deadline", "min_rate"):
                    with self.assertRaisesRegex(error, f"^{name} must be"):
                        self.client().download("/files/x", io.BytesIO(), **{name: value})
        self.assertEqual(self.requests, [], "nothing sent")

    def test_a_parallel_download_with_a_silent_part_ends_at_its_deadline_with_every_thread(
        self,
    ) -> None:
        quarter = len(BIG) // 4

        def respond(handler: Handler) -> None:
            if handler.headers.get("Range", "").startswith(f"bytes={2 * quarter}-"):
                first_bytes_then_stall(BIG, 1000)(handler)  # then silent until the test ends
            else:
                serve_file(BIG)(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        # 1 s, not less: under load the four parts' connections may take a few tenths to be made.
        client = self.client(timeout=30, deadline=1.0)
        error = outcome_of(
            lambda: client.download("files/big", out, connections=4, sha256=BIG_SHA, resume=True)
        )
        self.assert_deadline_reached(error, 1.0)
        self.assert_no_thread_left()
        # Each part was sent before the deadline; the server may read one after it.
        wait_for(lambda: len(self.requests) >= 4)
        self.assertEqual(len(self.requests), 4, "each part asked once")
        names = sorted(path.name for path in out.parent.iterdir())
        self.assertEqual(names, [".big.bin.part", ".big.bin.part.json"], "what resume=True keeps")
        parts = json.loads((out.parent / ".big.bin.part.json").read_text())["parts"]
        self.assertEqual(
            [done for _, _, done in parts][2], 1000, "the silent part's bytes are kept"
        )
        self.server.default = serve_file(BIG)
        client.download(
            "files/big", out, connections=4, sha256=BIG_SHA, resume=True
        )  # within 1 s once more
        self.assertEqual(out.read_bytes(), BIG)
        self.assertIn(
            f"bytes={2 * quarter + 1000}-{len(BIG) * 3 // 4 - 1}",
            [r.headers["Range"] for r in self.requests],
        )

    def test_a_connection_a_deadline_shortened_gets_the_whole_timeout_back_for_the_next_call(
        self,
    ) -> None:
        self.script(reply(200, []), reply(200, []))
        client = self.client(timeout=5)
        self.assertEqual(client.download("/files/x", io.BytesIO(), deadline=0.5), None)
        (connection,) = [c for idle in client._pool._idle.values() for c in idle]
        self.assertLessEqual(connection.sock.gettimeout(), 0.5)
        self.assertEqual(client.list_datasets(), [])
        self.assertEqual(connection.sock.gettimeout(), 5.0, "not the 0.5 s the download left it")
        self.assertEqual(
            [(r.path, r.connection) for r in self.requests],
            [("/files/x", 1), ("/api/v1/datasets", 1)],
        )

    def test_a_stalled_part_is_fetched_again_from_its_offset_while_the_others_go_on(self) -> None:
        quarter = len(BIG) // 4
        stalled = [0]

        def respond(handler: Handler) -> None:
            if handler.headers.get("Range", "").startswith(f"bytes={quarter}-") and not stalled[0]:
                stalled[0] += 1
                trickle(BIG, 1000, 0.04)(handler)  # 25 B/s, a byte well within each wait's time-out
            else:
                serve_file(BIG)(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        self.client(timeout=0.3).download(
            "files/big", out, connections=4, sha256=BIG_SHA, min_rate=64 * 1024
        )
        self.assertEqual(out.read_bytes(), BIG)
        ranges = [r.headers["Range"] or "" for r in self.requests]
        again = [
            r
            for r in ranges
            if r.startswith("bytes=") and quarter < int(r[6:].split("-")[0]) < 2 * quarter
        ]
        self.assertEqual(len(again), 1, ranges)
        start = int(again[0][6:].split("-")[0])
        # Cut after about 0.3 s of trickle (8 bytes), not when the 40 bytes the server trickles ran out.
        self.assertTrue(
            quarter + 1000 <= start < quarter + 1030, f"from where it stalled: {again[0]}"
        )
        self.assertEqual(len(ranges), 5, "the other parts were fetched once")
        self.assert_no_thread_left()

    def test_a_connection_below_min_rate_is_resumed_and_one_that_always_is_says_its_rate(
        self,
    ) -> None:
        data = os.urandom(200_000)
        self.script(trickle(data, 50_000, 0.03), serve_file(data))
        out = self.tmp() / "out.bin"
        self.client(timeout=0.2).download("/files/x", out, min_rate=1024 * 1024)
        self.assertEqual(out.read_bytes(), data)
        start = int((self.requests[1].headers["Range"] or "=-")[6:].split("-")[0])
        # Cut after about 0.2 s of trickle (7 bytes), not when the 40 bytes the server trickles ran out.
        self.assertTrue(50_000 <= start < 50_030, self.requests[1].headers["Range"])
        self.assertEqual(self.requests[1].headers["If-Range"], '"v1"')
        self.script(
            trickle(data, 1000, 0.03), trickle(data, 1000, 1)
        )  # the second silent past its time-out
        error = outcome_of(
            lambda: self.client(timeout=0.2, max_retries=1).download(
                "/x", out, min_rate=1024 * 1024
            )
        )
        self.assertIsInstance(error, dc.RequestTimeoutError)
        rate = r"stalled at [\d.]+ (B|KiB)/s over 0\.\d s, below the 1\.0 MiB/s of min_rate"
        self.assertRegex(str(error), rf"^GET {self.server.url}/x: {rate} \(after 2 attempts\)$")
        self.assertEqual(
            [r.headers["Range"] is None for r in self.requests[2:]], [True, False], "resumed once"
        )
        self.assertEqual(out.read_bytes(), data, "the file already there is untouched")

    def test_the_command_line_s_max_time_and_speed_limit_are_exit_3_naming_them(self) -> None:
        self.server.default = hang
        err = io.StringIO()
        with (
            contextlib.redirect_stderr(err),
            mock.patch.dict(os.environ, {"DATASET_CLIENT_BASE_URL": self.server.url}),
        ):
            status = cli.main(["datasets", "--max-time", "0.15", "--timeout", "30"])
        self.assertEqual(status, 3)
        said = f"GET {self.server.url}/datasets: --max-time 0.15 was reached (after 1 attempt)"
        self.assertEqual(err.getvalue(), f"dataset-client: error: {said}\n")
        self.assertEqual([r.path for r in self.requests], ["/datasets"])
        self.server.default = trickle(os.urandom(100_000), 1000, 0.03)
        out = self.tmp() / "out.bin"
        err = io.StringIO()
        argv = [
            "download",
            f"{self.server.url}/files/x",
            str(out),
            "--speed-limit",
            "1M",
            "--timeout",
            "0.15",
        ]
        with contextlib.redirect_stderr(err):
            status = cli.main([*argv, "--retries", "0", "-q"])
        self.assertEqual(status, 3)
        self.assertRegex(
            err.getvalue(),
            rf"^dataset-client: error: GET {self.server.url}/files/x: stalled at [\d.]+ (B|KiB)/s over 0\.\d s, "
            r"below the 1\.0 MiB/s of --speed-limit; with -c, the partial file is kept [^\n]*\n$",
        )
        self.assertEqual([r.path for r in self.requests], ["/datasets", "/files/x"])

    def test_a_pipe_whose_reader_stopped_reading_ends_at_the_deadline_or_on_close(self) -> None:
        # Found in the third review (issue 30): a reader that neither reads nor closes held the
        # write into the pipe for ever, whatever the deadline. A raw pipe on one connection; a
        # buffered one (as sys.stdout.buffer is) on four; and close() from another thread.
        self.server.default = serve_file(BIG)
        cases = ((1, 0, "deadline"), (4, -1, "deadline"), (4, 0, "close"))

        def close_once_writes_block(client: DatasetClient, pipe: int, closed: list[float]) -> None:
            # Once bytes are in the pipe (none were 0.5 s after the start on a busy machine), and
            # a while after: the writes block by now (and if not yet, close() still comes).
            select.select([pipe], [], [], 5)
            time.sleep(0.5)
            closed.append(time.monotonic())
            client.close()

        for connections, buffering, ender in cases:
            with self.subTest(connections=connections, ender=ender):
                self.server.requests.clear()
                client, read_end, write_end = self.client(), *os.pipe()
                received, options = bytearray(), {"connections": connections}
                closed: list[float] = []
                if ender == "deadline":
                    options["deadline"] = 0.5
                else:
                    closer = threading.Thread(
                        target=close_once_writes_block, args=(client, read_end, closed)
                    )
                    closer.start()
                    self.addCleanup(closer.join, 10)
                pipe = open(write_end, "wb", buffering=buffering)  # noqa: SIM115 -- closed below
                with contextlib.suppress(BrokenPipeError), pipe:
                    download = functools.partial(client.download, "files/big", pipe, **options)
                    outcome, took = run_within(2 if ender == "deadline" else 7, download)
                    ended = time.monotonic()
                    os.set_blocking(read_end, False)
                    with contextlib.suppress(BlockingIOError):
                        while piece := os.read(read_end, 65536):
                            received += piece
                    os.close(read_end)  # a write still blocked (the test fails) ends now
                if ender == "deadline":
                    self.assertIsInstance(outcome, dc.RequestTimeoutError)
                    self.assertIn("the deadline of 0.5 s was reached", str(outcome))
                    self.assertLess(took, 1.5)
                else:
                    self.assertIsInstance(outcome, dc.ClientClosedError)
                    self.assertLess(ended - closed[0], 1, "ended promptly")
                self.assertEqual(part_threads(), [])
                self.assertEqual(bytes(received), BIG[: len(received)])
                self.assertGreater(len(received), 0)
                self.assertIsNone(self.requests[0].headers["Range"])

    def test_a_stall_measured_with_a_body_s_last_bytes_is_no_error_once_the_body_is_whole(
        self,
    ) -> None:
        # Found in review2: --limit-rate below --speed-limit per connection (-n 4): a part whose last bytes
        # came with a stall got the stall from its check for bytes past its Content-Range, was fetched
        # again as "Range: bytes=4718592-4718591", and the download failed with an InvalidResponseError.
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        with theirs:
            theirs.sendall(
                b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-2/3\r\nContent-Length: 3\r\n\r\nabc"
            )
        response = dc._PooledResponse(ours, method="GET")
        response.method, response.url = "GET", "http://127.0.0.1/files/x"
        self.addCleanup(response.close)
        response.begin()
        now = [0.0]
        with mock.patch.object(
            dc, "time", mock.Mock(monotonic=lambda: now[0])
        ):  # this module's clock alone
            response.watch = dc._Watch(1.0, min_rate=1000.0)
            now[0] = 5.0  # 3 bytes in 5 s: below min_rate, measured as the last bytes arrive
            self.assertEqual(response.read(3), b"abc")
            self.assertEqual(
                response.read(1), b"", "the body is whole: nothing past it, and no stall to report"
            )
        self.assertEqual(response.length, 0)


class FifoWithoutReaderTests(ServerTestCase):
    """Issue 35: a FIFO no one reads never holds the call: opened without waiting, the wait for a
    reader ended by the deadline and by close()."""

    def fifo(self) -> Path:
        fifo = self.tmp() / "out.csv"
        os.mkfifo(fifo)

        def release() -> None:
            # A writer left waiting in open() (the bug) goes on once a reader comes and goes.
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

        self.addCleanup(release)
        return fifo

    def test_the_deadline_ends_the_wait_for_a_reader_before_any_request(self) -> None:
        fifo = self.fifo()
        self.script(serve_file(SMALL))
        download = functools.partial(self.client().download, "files/x", fifo, deadline=0.5)
        outcome, _ = run_within(10, download)
        self.assertIsInstance(outcome, dc.RequestTimeoutError, outcome)
        self.assertIn("the deadline of 0.5 s was reached", str(outcome))
        self.assertEqual(self.requests, [], "nothing asked while no one reads")

    def test_close_ends_the_wait_for_a_reader(self) -> None:
        fifo = self.fifo()
        client = self.client()
        download = functools.partial(client.download, "files/x", fifo)
        outcome = self.closed_during(client, download, lambda: True)
        self.assertIsInstance(outcome, dc.ClientClosedError, outcome)
        self.assertEqual(self.requests, [])

    def test_a_reader_that_comes_later_gets_the_file(self) -> None:
        fifo = self.fifo()
        self.script(serve_file(SMALL))
        received = bytearray()
        outcome: list[object] = []
        download = functools.partial(self.client().download, "files/x", fifo)
        thread = threading.Thread(target=lambda: outcome.append(outcome_of(download)))
        thread.start()
        with contextlib.suppress(AssertionError):
            wait_for(lambda: bool(self.requests), 0.5)  # main's: none before the reader
        with fifo.open("rb") as reader:
            received.extend(reader.read())
        thread.join(10)
        self.assertEqual((outcome, bytes(received)), ([None], SMALL))


class DeadlineCostTests(ServerTestCase):
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
        self.script(reply(body=[]))
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
        self.script(reply(body=[]))
        seen = self.record_responses()
        url = self.server.url.replace("127.0.0.1", "localhost") + "/api/v1"
        with mock.patch.object(dc, "_resolve_within", wraps=dc._resolve_within) as resolve:
            self.assertEqual(self.client(url, deadline=30).list_datasets(), [])
        self.assertEqual(resolve.call_count, 1)
        ((stream, watch),) = seen
        self.assertIs(type(stream), dc._ReceivingWithin)
        self.assertIsInstance(watch, dc._Watch)
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"])

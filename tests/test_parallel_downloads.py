"""Downloads on several connections: parts with their ranges and validators, into a file or a
stream, max_rate over all of them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import dataset_client as dc
from dataset_client import ServiceError
from tests.support import (
    BIG,
    BIG_SHA,
    DATA,
    DATA_SHA,
    SMALL,
    Handler,
    Respond,
    ServerTestCase,
    Verified,
    all_ranges_at_once,
    cut,
    digest_field,
    first_bytes_then_stall,
    ignoring_ranges,
    local_service,
    outcome_of,
    part_threads,
    reply,
    run_within,
    serve_file,
    serve_parts,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def big(start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of BIG."""
    return BIG[start:end]


def pattern(start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file of any size: DATA's first MiB and a byte, over and over."""
    period = 1024 * 1024 + 1
    first = start % period
    return (DATA[:period] * ((first + end - start) // period + 1))[first : first + end - start]


def serve_chunked_parts(
    read: Callable[[int, int], bytes], size: int, digests: bool = True
) -> Respond:
    """A file of ``size`` bytes (``read(start, end)`` gives them), ranges, a strong ETag, served
    as some servers do: a 200 with a Content-Length, each 206 chunked, with no length (with its
    Content-Digest when ``digests``). Past 256 MiB, a 200 is cut."""
    mib = 1024 * 1024

    def respond(handler: Handler) -> None:
        span = local_service._requested_range(handler.headers.get("Range"), size)
        start, end = span or (0, size)
        headers = {"ETag": '"v1"', "Accept-Ranges": "bytes"}
        if span is None:
            headers["Content-Length"] = str(size)
        else:
            headers |= {"Content-Range": f"bytes {start}-{end - 1}/{size}"}
            headers |= {"Transfer-Encoding": "chunked"}
            headers |= {"Content-Digest": digest_field(read(start, end))} if digests else {}
        handler.send_response(206 if span else 200)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.close_connection = span is None
        with contextlib.suppress(OSError):  # the client hung up: it reads a part of a 200 only
            for offset in range(start, min(end, start + 256 * mib), mib):
                piece = read(offset, min(end, offset + mib))
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if span else piece)
            if span:
                handler.wfile.write(b"0\r\n\r\n")

    return respond


class Checking:
    """A binary stream that cannot seek, for a file too large to keep: it counts the bytes
    written, and notes where they first differ from ``read(start, end)``."""

    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self.read, self.size, self.wrong = read, 0, None

    def write(self, data: bytes) -> int:
        if self.wrong is None and data != self.read(self.size, self.size + len(data)):
            self.wrong = self.size
        self.size += len(data)
        return len(data)

    def seekable(self) -> bool:
        return False


class Recorder:
    """A binary stream that cannot seek: what was written to it, in order."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def seekable(self) -> bool:
        return False


class ParallelDownloadTests(ServerTestCase):
    def test_parts_are_fetched_at_once_each_with_its_range_and_validator(self) -> None:
        self.server.default = all_ranges_at_once(serve_file(BIG))
        seen = self.download_big(self.tmp() / "big.bin")
        quarter = len(BIG) // 4
        self.assertEqual(
            sorted((r.headers["Range"] or "", r.headers["If-Range"] or "") for r in self.requests),
            [
                ("", ""),
                (f"bytes={quarter}-{2 * quarter - 1}", '"v1"'),
                (f"bytes={2 * quarter}-{len(BIG) * 3 // 4 - 1}", '"v1"'),
                (f"bytes={len(BIG) * 3 // 4}-", '"v1"'),
            ],
        )
        self.assertEqual(self.server.connections, 4)
        self.assertEqual(
            [d for d, _ in seen], sorted(d for d, _ in seen), "progress never goes back"
        )
        self.assertEqual(seen[-1], (len(BIG), len(BIG)))
        self.assertTrue(all(t == len(BIG) for _, t in seen[1:]))

    def download_on_a_fake_clock(self, connections: int, rate: int) -> tuple[float, list[float]]:
        """Download BIG with ``max_rate``; the limiter's waits advance its clock instead of sleeping.

        Returns the time the download took on that clock, and the waits asked for.
        """
        offset = [0.0]
        waits: list[float] = []
        real_monotonic = time.monotonic

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            offset[0] += seconds

        out = self.tmp() / "big.bin"
        with (
            mock.patch.object(dc.time, "monotonic", lambda: real_monotonic() + offset[0]),
            mock.patch.object(dc.time, "sleep", sleep),
        ):
            started = dc.time.monotonic()
            self.client().download("files/big", out, connections=connections, max_rate=rate)
            elapsed = dc.time.monotonic() - started
        self.assertEqual(out.read_bytes(), BIG)
        return elapsed, waits

    def test_max_rate_caps_the_whole_download_on_one_and_on_several_connections(self) -> None:
        # No timing assertion: without the cap the download would end at once on the fake clock.
        rate = 4 * 1024 * 1024
        for connections in (1, 4):
            with self.subTest(connections=connections):
                self.server.requests.clear()
                self.server.default = serve_file(BIG)
                elapsed, waits = self.download_on_a_fake_clock(connections, rate)
                self.assertGreaterEqual(elapsed, len(BIG) / rate * 0.999, "faster than the cap")
                self.assertLessEqual(
                    max(waits), 2 * (rate / 8) / rate + 0.5, "waits stay short: small reads"
                )
                ranged = [r for r in self.requests if "Range" in r.headers]
                self.assertEqual(len(ranged), 3 if connections == 4 else 0)

    def test_max_rate_is_checked_before_anything_is_sent(self) -> None:
        bad: list[tuple[object, type[Exception]]] = [(0, ValueError), (-1, ValueError)]
        for rate, error in [*bad, (float("nan"), ValueError), ("1M", TypeError)]:
            with self.subTest(rate=rate), self.assertRaisesRegex(error, "max_rate"):
                self.client().download("files/big", io.BytesIO(), max_rate=rate)  # type: ignore[arg-type]
        self.assertEqual(self.requests, [])

    def test_a_wrong_digest_over_parts_leaves_nothing(self) -> None:
        for resume in (False, True):
            self.server.default = serve_file(BIG)
            directory = self.tmp()
            with self.subTest(resume=resume), self.assertRaises(dc.ChecksumMismatchError) as caught:
                self.client().download(
                    "files/big",
                    directory / "big.bin",
                    connections=3,
                    sha256="0" * 64,
                    resume=resume,
                )
            self.assertIn(BIG_SHA, str(caught.exception))
            self.assertEqual(list(directory.iterdir()), [])

    def test_a_part_cut_midway_is_resumed_alone(self) -> None:
        cut_at = len(BIG) * 3 // 4 + 100_000  # inside the last part
        whole, ranged = serve_file(BIG), serve_file(BIG, cuts=[cut_at])
        self.server.default = lambda handler: (ranged if "Range" in handler.headers else whole)(
            handler
        )
        out = self.tmp() / "big.bin"
        self.client(max_retries=1).download("files/big", out, connections=4, sha256=BIG_SHA)
        self.assertEqual(out.read_bytes(), BIG)
        bounds = [len(BIG) * index // 4 for index in range(5)]
        whole_parts = [
            f"bytes={start}-{end - 1}" for start, end in itertools.pairwise(bounds[1:-1])
        ]
        expected = [
            "",
            *whole_parts,
            f"bytes={bounds[3]}-",
            f"bytes={cut_at}-",
        ]  # the cut part alone, from the cut
        self.assertEqual(sorted(r.headers["Range"] or "" for r in self.requests), sorted(expected))

    def test_a_server_that_ignores_ranges_gets_one_stream(self) -> None:
        for etag, ranges in (('"v1"', False), ('W/"weak"', True), (None, True)):
            self.server.requests.clear()
            self.server.default = serve_file(BIG, etag=etag, ranges=ranges)
            out = self.tmp() / "big.bin"
            with self.subTest(etag=etag, ranges=ranges):
                self.client().download("files/big", out, connections=4, sha256=BIG_SHA)
                self.assertEqual(out.read_bytes(), BIG)
                self.assertEqual(len(self.requests), 1)

    def test_a_file_that_changes_during_the_download_starts_over_whole(self) -> None:
        new = bytes(reversed(BIG))
        versions = iter(
            [serve_file(BIG)]
        )  # the first answer is the old file; everything after, the new

        def respond(handler: Handler) -> None:
            next(versions, serve_file(new, etag='"v2"'))(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        self.client().download(
            "files/big", out, connections=3, sha256=hashlib.sha256(new).hexdigest()
        )
        self.assertEqual(out.read_bytes(), new)
        plain = [r for r in self.requests if r.headers["Range"] is None]
        self.assertEqual(len(plain), 2, "started over with a whole request")

    def test_a_part_of_another_version_or_range_is_never_spliced(self) -> None:
        def wrong(kind: str) -> Respond:
            def respond(handler: Handler) -> None:
                if "Range" not in handler.headers:
                    return serve_file(BIG)(handler)
                start, end = local_service._requested_range(handler.headers["Range"], len(BIG))
                if kind == "range":
                    start += 1  # not the bytes asked for
                handler.send_response(206)
                handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(BIG)}")
                handler.send_header("Content-Length", str(end - start))
                handler.send_header("ETag", '"v2"' if kind == "etag" else '"v1"')
                handler.end_headers()
                handler.wfile.write(BIG[start:end])

            return respond

        for kind, error in (("etag", "changed on the server"), ("range", "Content-Range")):
            self.server.default = wrong(kind)
            directory = self.tmp()
            with self.subTest(kind), self.assertRaisesRegex(dc.InvalidResponseError, error):
                self.client().download("files/big", directory / "big.bin", connections=3)
            self.assertEqual(list(directory.iterdir()), [])

    def test_each_parts_progress_is_kept_and_resumed(self) -> None:
        self.server.default = first_bytes_then_stall(
            BIG, 1_300_000
        )  # of each part: one whole chunk, and a bit
        directory = self.tmp()
        client = self.client(timeout=30)
        counted = (
            threading.Event()
        )  # 4 MiB: the four parts' first chunks, kept (progress comes after)
        download = functools.partial(
            client.download,
            "files/big",
            directory / "out.bin",
            connections=4,
            resume=True,
            progress=lambda done, total: done >= 4 * 1024 * 1024 and counted.set(),
        )
        worker = threading.Thread(target=outcome_of, args=(download,))
        worker.start()
        self.assertTrue(counted.wait(10))
        client.close()
        worker.join(10)
        self.assertEqual(
            sorted(p.name for p in directory.iterdir()), [".out.bin.part", ".out.bin.part.json"]
        )
        starts = sorted(
            int(r.headers["Range"].split("=")[1].split("-")[0]) for r in self.requests[1:]
        )
        starts = [
            0,
            *starts,
        ]  # where each part begins: the whole file's request, then each ranged one

        self.server.requests.clear()
        self.server.bytes_served = 0
        self.server.default = serve_file(BIG)
        self.download_big(directory / "out.bin", resume=True)
        resumed = sorted(int(r.headers["Range"].split("=")[1].split("-")[0]) for r in self.requests)
        kept = [at - start for start, at in zip(starts, resumed, strict=True)]
        # A whole chunk each, and what close() let through after it (the socket's last bytes).
        self.assertTrue(all(1024 * 1024 <= done <= 1_300_000 for done in kept), kept)
        self.assertEqual(
            self.server.bytes_served, len(BIG) - sum(kept), "each part goes on from what it kept"
        )


class ParallelIntoStreamsTests(ServerTestCase):
    def pieces(self, size: int, connections: int) -> list[int]:
        """Where the parts of a download of ``size`` bytes into a stream start."""
        count = -(-size // (min(64, connections) * 1024 * 1024 // connections))
        return [size * index // count for index in range(count)]

    def ranged(self) -> list[str]:
        return [r.headers["Range"] for r in self.requests if "Range" in r.headers]

    def test_a_stream_in_parts_is_cut_into_no_more_parts_than_a_bound_whatever_the_size_announced(
        self,
    ) -> None:
        # Found in reread: a server announcing 2**62 bytes (with Accept-Ranges and a strong ETag) had
        # 2**42 parts listed at once for a stream: memory until MemoryError, before a byte was written.
        target, limit = dc._StreamTarget(io.BytesIO(), lambda: None), 2 * dc._CHUNK_SIZE
        buffer = dc._ReorderBuffer(target, limit, lambda _: None, lambda: None)
        self.assertEqual(
            buffer.part_count(10 * dc._CHUNK_SIZE, 2, 2), 10, "a part a chunk, as before"
        )
        self.assertEqual(buffer.part_count(2**62, 2, 2), dc._ReorderBuffer.max_parts)

    def test_parts_are_fetched_at_once_into_a_file_object_and_written_in_order(self) -> None:
        self.server.default = all_ranges_at_once(serve_file(DATA, digests=True))
        out, progress = io.BytesIO(b"head"), Verified()
        out.seek(4)
        self.client().download(
            "files/x",
            out,
            connections=4,
            sha256=DATA_SHA,
            **progress.hooks(),
        )
        self.assertEqual(out.getvalue(), b"head" + DATA)
        starts = self.pieces(len(DATA), 4)
        self.assertEqual(len(starts), 4)
        self.assertEqual(
            sorted(self.ranged()),
            sorted(
                [f"bytes={a}-{b - 1}" for a, b in itertools.pairwise(starts[1:])]
                + [f"bytes={starts[-1]}-"]
            ),
        )
        self.assertEqual(
            [d for d, _ in progress.seen], sorted(d for d, _ in progress.seen), "never goes back"
        )
        self.assertEqual(progress.seen[-1], (len(DATA), len(DATA)))
        self.assertEqual(progress.verified, ["sha256", "Repr-Digest (sha-256)"])

    def test_a_reader_that_stops_reading_stops_the_fetching_and_memory_stays_bounded(self) -> None:
        self.server.default = serve_file(DATA, digests=True)
        buffers: list[Any] = []
        real_init = dc._ReorderBuffer.__init__

        def init(buffer: Any, *args: Any) -> None:
            real_init(buffer, *args)
            buffers.append(buffer)

        starts = self.pieces(len(DATA), 2)
        read_end, write_end = os.pipe()
        go, received = threading.Event(), bytearray()

        def read() -> None:
            with open(read_end, "rb", buffering=0) as pipe:
                go.wait(10)
                while chunk := pipe.read(65536):
                    received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        self.addCleanup(reader.join, 10)
        outcome: list[object] = []
        with (
            mock.patch.object(dc._ReorderBuffer, "__init__", init),
            open(write_end, "wb", buffering=0) as pipe,
        ):
            download = threading.Thread(
                target=lambda: outcome.append(
                    outcome_of(lambda: self.client().download("files/x", pipe, connections=2))
                )
            )
            download.start()
            self.addCleanup(go.set)
            # The first part fills the pipe; the second waits in the buffer; the third waits for room, its request sent.
            piece = starts[2] - starts[1]
            wait_for(
                lambda: len(self.requests) == 3 and bool(buffers) and buffers[0].buffered == piece
            )
            time.sleep(0.05)  # were it not stopped, it would go on within this
            self.assertEqual(
                (len(self.requests), buffers[0].buffered), (3, piece), "the fetching stopped"
            )
            go.set()
            download.join(10)
        reader.join(10)
        self.assertEqual(outcome, [None])
        self.assertEqual(bytes(received), DATA)
        (buffer,) = buffers
        self.assertEqual(buffer.limit, 2 * 1024 * 1024, "2 connections: two chunks")
        self.assertLessEqual(buffer.peak, buffer.limit)
        self.assertEqual(len(self.ranged()), len(starts) - 1)

    def test_ctrl_c_ends_a_download_into_a_pipe_whose_reader_stopped_reading(self) -> None:
        # The reader takes 3 MiB, then neither reads nor closes: every write into the pipe blocks. Only the
        # caller's thread writes into a stream, so the Ctrl-C it gets interrupts that write.
        data = BIG + BIG[: 4 * 1024 * 1024]
        self.server.default = serve_file(data, digests=True)
        self.addCleanup(
            signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, signal.default_int_handler)
        )
        read_end, write_end = os.pipe()
        received, stopped, ended = bytearray(), threading.Event(), threading.Event()

        def read_then_stop() -> None:
            while len(received) < 3 * 1024 * 1024:
                received.extend(os.read(read_end, 65536))
            stopped.set()

        def interrupt_then_free() -> None:
            stopped.wait(10)
            time.sleep(0.5)  # the writes block by now (and if not yet, the Ctrl-C still comes)
            signal.pthread_kill(main, signal.SIGINT)
            if not ended.wait(
                5
            ):  # a thread still blocked in a write: let it go, for the test to fail, not hang
                freed.append(True)
                os.close(read_end)

        main, freed = threading.get_ident(), []
        helpers = [
            threading.Thread(target=read_then_stop),
            threading.Thread(target=interrupt_then_free),
        ]
        for helper in helpers:
            helper.start()
        with open(write_end, "wb", buffering=0) as pipe:
            outcome = outcome_of(lambda: self.client().download("files/x", pipe, connections=4))
            ended.set()
        for helper in helpers:
            helper.join(10)
        if not freed:
            os.close(read_end)
        self.assertEqual(
            freed, [], "5 s after Ctrl-C a thread was still blocked writing into the pipe"
        )
        self.assertIsInstance(outcome, KeyboardInterrupt)
        self.assertEqual(
            [t.name for t in threading.enumerate() if t.name.startswith("dataset-client")], []
        )

    def test_a_part_with_a_wrong_content_digest_is_held_and_never_written(self) -> None:
        starts = self.pieces(len(DATA), 3)
        second = f"bytes={starts[1]}-{starts[2] - 1}"
        for flips in (1, 2):
            with self.subTest(flips=flips):
                self.server.requests.clear()
                served = serve_parts(DATA, corrupt=[starts[1]] * flips)
                out = Recorder()

                def respond(
                    handler: Handler, served: Respond = served, out: Recorder = out
                ) -> None:
                    # The part fetched again is answered once all before it is written: a second
                    # mismatch ends the download at once, the first part's bytes written or not.
                    if handler.headers.get("Range") == second and self.ranged().count(second) == 2:
                        wait_for(lambda: len(out.data) >= starts[1])
                    served(handler)

                self.server.default = respond
                outcome = outcome_of(
                    functools.partial(self.client().download, "files/x", out, connections=3)
                )
                self.assertEqual(self.ranged().count(second), 2)
                if flips == 1:
                    self.assertIsNone(outcome)
                    self.assertEqual(bytes(out.data), DATA)
                else:
                    self.assertIsInstance(outcome, dc.ChecksumMismatchError)
                    self.assertEqual(
                        bytes(out.data), DATA[: starts[1]], "the bad bytes were never written"
                    )

    def test_a_part_that_cannot_be_held_and_mismatches_is_the_error(self) -> None:
        # One stream into a file object: a resumed 206's bytes go on as they come, so its Content-Digest
        # can only be checked after them: a mismatch is the error, never a second copy appended.
        self.script(cut(SMALL, 100_000, {"ETag": '"v1"', "Accept-Ranges": "bytes"}))
        self.server.default = serve_parts(SMALL, corrupt=[100_000])
        out = Recorder()
        with self.assertRaises(dc.ChecksumMismatchError) as caught:
            self.client().download("files/x", out)
        where = f"{self.server.url}/api/v1/files/x (bytes 100000-{len(SMALL) - 1})"
        self.assertIn(f"Content-Digest (sha-256) mismatch for {where}: ", str(caught.exception))
        self.assertEqual([r.headers.get("Range") for r in self.requests], [None, "bytes=100000-"])
        self.assertEqual(len(out.data), len(SMALL))

    def test_a_server_that_ignores_ranges_gets_one_stream(self) -> None:
        self.server.default = ignoring_ranges
        out, progress = Recorder(), Verified()
        self.client().download(
            "files/big",
            out,
            connections=4,
            sha256=BIG_SHA,
            **progress.hooks(),
        )
        self.assertEqual(bytes(out.data), BIG)
        self.assertEqual(progress.seen[-1], (len(BIG), len(BIG)))
        self.assertEqual([d for d, _ in progress.seen], sorted(d for d, _ in progress.seen))

    def test_close_ends_parts_still_connecting(self) -> None:
        # Found in review: a server that accepts no connection after the first GET's; close()
        # (or Ctrl-C) came 20-28 s late: the parts' sockets, still connecting, were out of reach.
        listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.addCleanup(listener.close)
        port, queued = listener.getsockname()[1], list[socket.socket]()
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\nAccept-Ranges: bytes\r\n"

        def serve() -> None:
            connection, _ = listener.accept()
            self.addCleanup(connection.close)
            connection.recv(65536)
            for _ in range(3):  # the accept queue full from now on: a SYN goes unanswered
                queued.append(socket.socket())
                self.addCleanup(queued[-1].close)
                queued[-1].setblocking(False)
                queued[-1].connect_ex(("127.0.0.1", port))
            with contextlib.suppress(OSError):
                connection.sendall(head + b'ETag: "v1"\r\n\r\n' + bytes(1024 * 1024))

        threading.Thread(target=serve, daemon=True).start()
        client, out = self.client(f"http://127.0.0.1:{port}", timeout=30), self.tmp() / "out"
        download = functools.partial(client.download, "files/x", out, connections=2)
        waits = lambda: len(queued) == 3  # noqa: E731  (the parts connect from then on)
        self.assertIsInstance(self.closed_during(client, download, waits), dc.ClientClosedError)
        self.assertEqual(part_threads(), [])
        self.assertEqual(list(out.parent.iterdir()), [], "nothing left")

    def test_a_cut_part_is_resumed_from_its_own_offset(self) -> None:
        starts = self.pieces(len(DATA), 3)
        whole, ranged = (
            serve_file(DATA),
            serve_file(DATA, cuts=[starts[2] + 1000]),
        )  # a part is cut, not the first
        self.server.default = lambda handler: (ranged if "Range" in handler.headers else whole)(
            handler
        )
        out = Recorder()
        self.client().download("files/x", out, connections=3, sha256=DATA_SHA)
        self.assertEqual(bytes(out.data), DATA)
        self.assertIn(f"bytes={starts[2] + 1000}-{starts[3] - 1}", self.ranged())

    # Found in the third review (issue 30): a 200 announcing 64 GiB (Accept-Ranges, a strong ETag),
    # its 206s chunked with a Content-Digest. A stream is cut into 2**14 parts at most: here 4 MiB
    # each, twice the buffer of 2 connections. A part's bytes were held for its digest as though
    # they fitted (a length not said counted as 0), and the rest of the part waited for room that
    # only their release would make: three threads waited for ever, past deadline=5 and close().
    HUGE = 2**36

    def test_parts_larger_than_the_buffer_in_chunked_206s_end_at_the_deadline(self) -> None:
        self.server.default = serve_chunked_parts(pattern, self.HUGE)
        out, client = Checking(pattern), self.client()
        download = functools.partial(client.download, "files/x", out, connections=2)
        outcome, took = run_within(2, functools.partial(download, deadline=1))
        self.assertIsInstance(outcome, dc.RequestTimeoutError)
        self.assertIn("the deadline of 1 s was reached", str(outcome))
        self.assertLess(took, 2)
        self.assertEqual(part_threads(), [])
        self.assertGreater(out.size, 8 * 1024 * 1024, "the parts flowed")
        self.assertIsNone(out.wrong)
        self.assertIsNone(self.requests[0].headers["Range"])
        # Parts of 4 MiB, twice the buffer of 2 connections. The 200 closes its connection: the
        # next two parts are asked on two new ones, and the server may read the second's first.
        size = 4 * 1024 * 1024
        asked = [r.headers["Range"] for r in self.requests[1:]]
        starts = [int(range_.removeprefix("bytes=").partition("-")[0]) for range_ in asked]
        self.assertIn(size, starts, "the part after the 200's: its bytes were written")
        self.assertEqual(asked, [f"bytes={start}-{start + size - 1}" for start in starts])
        self.assertTrue(all(start % size == 0 for start in starts), asked)
        self.assertEqual(len(set(starts)), len(starts), "each once")
        self.assertEqual({r.headers["If-Range"] for r in self.requests[1:]}, {'"v1"'})

    def test_close_ends_a_download_in_parts_larger_than_the_buffer(self) -> None:
        self.server.default = serve_chunked_parts(pattern, self.HUGE)
        out, client, closed = Checking(pattern), self.client(), []

        def close_once_parts_are_fetched() -> None:
            wait_for(lambda: out.size >= 4 * 1024 * 1024 and len(self.requests) >= 3)
            time.sleep(0.3)  # by now the threads waited on each other, and for ever
            closed.append(time.monotonic())
            client.close()

        closer = threading.Thread(target=close_once_parts_are_fetched)
        closer.start()
        self.addCleanup(closer.join, 10)
        outcome, _ = run_within(6, lambda: client.download("files/x", out, connections=2))
        ended = time.monotonic()
        self.assertIsInstance(outcome, dc.ClientClosedError)
        self.assertLess(ended - closed[0], 1, "ended promptly")
        self.assertEqual(part_threads(), [])
        self.assertIsNone(out.wrong)

    def test_a_failing_part_ends_a_download_in_parts_larger_than_the_buffer(self) -> None:
        served, out = serve_chunked_parts(pattern, self.HUGE), Checking(pattern)

        def respond(handler: Handler) -> None:
            if not handler.headers.get("Range", "").startswith("bytes=8388608-"):
                return served(handler)
            wait_for(lambda: out.size >= 4 * 1024 * 1024)  # the others wait (they did for ever)
            reply(403, {"error": "no"})(handler)  # the third part: refused

        self.server.default = respond
        outcome, _ = run_within(6, lambda: self.client().download("files/x", out, connections=3))
        self.assertIsInstance(outcome, ServiceError)
        self.assertEqual(getattr(outcome, "status", None), 403)
        self.assertEqual(part_threads(), [])
        self.assertIn("bytes=8388608-12582911", self.ranged())

    def test_a_buffer_that_waits_on_itself_still_ends_at_the_deadline_and_on_close(self) -> None:
        # The rule behind the hang above, whatever else goes wrong: no wait in the buffer (a
        # part's for room, the writer's for the bytes at its position) outlives the deadline or
        # close(). The hang made again: parts twice the buffer, held as though they fitted.
        self.server.default = serve_chunked_parts(big, len(BIG))
        held = mock.patch.object(dc._ReorderBuffer, "can_hold", return_value=True)
        with held, mock.patch.object(dc._ReorderBuffer, "max_parts", 2):
            for ender in ("deadline", "close"):
                with self.subTest(ender=ender):
                    client, ends = self.client(), {"deadline": 0.5} if ender == "deadline" else {}
                    if ender == "close":
                        threading.Timer(0.5, client.close).start()
                    download = functools.partial(client.download, "files/big", Recorder(), **ends)
                    outcome, took = run_within(2, functools.partial(download, connections=2))
                    ended = dc.RequestTimeoutError if ender == "deadline" else dc.ClientClosedError
                    self.assertIsInstance(outcome, ended)
                    self.assertLess(took, 1.5)
                    self.assertEqual(part_threads(), [])

    def test_chunked_206s_are_written_whole_parts_larger_than_the_buffer_too(self) -> None:
        for most, digests in itertools.product((2, dc._ReorderBuffer.max_parts), (True, False)):
            capped = mock.patch.object(dc._ReorderBuffer, "max_parts", most)
            with self.subTest(max_parts=most, digests=digests), capped:
                self.server.requests.clear()
                self.server.default = serve_chunked_parts(big, len(BIG), digests)
                out, verified, client = Recorder(), [], self.client()
                download = functools.partial(client.download, "files/big", out, connections=2)
                checks = {"sha256": BIG_SHA, "verified": verified.append}
                outcome, _ = run_within(10, functools.partial(download, **checks))
                self.assertIsNone(outcome)
                self.assertEqual((bytes(out.data), verified), (BIG, ["sha256"]))
                starts = [0, len(BIG) // 2] if most == 2 else self.pieces(len(BIG), 2)
                expected = [f"bytes={a}-{b - 1}" for a, b in itertools.pairwise(starts[1:])]
                self.assertEqual(sorted(self.ranged()), sorted([*expected, f"bytes={starts[-1]}-"]))

"""Downloads: the destination (what can be written, what is replaced, the final move) and
what a download does when the server or the caller misbehaves.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
from dataset_client import ServiceError
from tests.support import (
    BIG,
    BIG_SHA,
    DATA,
    DATA_SHA,
    ROOT,
    Handler,
    ServerTestCase,
    cut,
    first_bytes_then_stall,
    hang,
    ignoring_ranges,
    outcome_of,
    reply,
    serve_file,
    until_closed,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class DestinationTests(ServerTestCase):
    def test_a_character_device_is_written_not_replaced(self) -> None:
        if os.geteuid() != 0:
            self.skipTest("making a device node needs root")
        null = self.tmp() / "null"
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
        self.script(serve_file(DATA))
        self.client().download("files/x", null, sha256=DATA_SHA)
        self.assertTrue(stat.S_ISCHR(null.stat().st_mode), "replaced by a regular file")
        self.assertEqual(sorted(p.name for p in null.parent.iterdir()), ["null"])

    def test_a_fifo_is_written_not_replaced(self) -> None:
        fifo = self.tmp() / "pipe"
        os.mkfifo(fifo)
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
        reader.start()
        self.script(serve_file(DATA))
        self.client().download("files/x", fifo)
        reader.join(10)
        self.assertEqual(received, [DATA])
        self.assertTrue(stat.S_ISFIFO(fifo.stat().st_mode))
        self.assertEqual(sorted(p.name for p in fifo.parent.iterdir()), ["pipe"])

    def test_a_long_file_name_works(self) -> None:
        name = (
            "é" * 100 + "x" * 40 + ".csv"
        )  # 244 bytes in UTF-8: legal, but not with a suffix added
        for resume in (False, True):
            self.script(cut(DATA, 500_000, {"ETag": '"v1"'}), serve_file(DATA))
            directory = self.tmp()
            with self.subTest(resume=resume):
                self.client().download("files/x", directory / name, resume=resume, sha256=DATA_SHA)
                self.assertEqual((directory / name).read_bytes(), DATA)
                self.assertEqual([p.name for p in directory.iterdir()], [name])
                self.assertEqual(
                    self.requests[-1].headers["Range"], "bytes=500000-", "continued, not restarted"
                )

    def test_a_failing_final_move_leaves_nothing(self) -> None:
        directory = self.tmp()
        target = directory / "out.bin"

        def block_the_destination(done: int, total: int | None) -> None:
            if done == total:  # a directory takes the name just before the move
                target.mkdir(exist_ok=True)
                (target / "inside").write_bytes(b"")

        self.script(serve_file(DATA))
        with self.assertRaises(OSError) as caught:
            self.client().download("files/x", target, progress=block_the_destination)
        self.assertNotIsInstance(caught.exception, dc.DatasetClientError)
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])
        self.assertTrue(target.is_dir())

    def test_a_stream_that_accepts_nothing_is_an_error_not_a_busy_loop(self) -> None:
        class Stuck(io.RawIOBase):
            calls = 0

            def writable(self) -> bool:
                return True

            def write(self, data: object) -> int:
                self.calls += 1
                if self.calls > 1000:
                    raise RuntimeError("busy loop")
                return 0

        self.script(serve_file(DATA))
        stuck = Stuck()
        with self.assertRaisesRegex(OSError, "no progress"):
            self.client().download("files/x", stuck)
        self.assertEqual(stuck.calls, 1)

    def test_a_download_that_cannot_write_names_the_destination(self) -> None:
        directory = self.tmp()
        (directory / "a-file").write_bytes(b"")
        for destination, error, problem in (
            (
                directory / "missing" / "out.bin",
                FileNotFoundError,
                f"the directory {directory / 'missing'} does not exist",
            ),
            (
                directory / "a-file" / "out.bin",
                NotADirectoryError,
                f"{directory / 'a-file'} is not a directory",
            ),
        ):
            with self.subTest(problem):
                with self.assertRaises(error) as caught:
                    self.client().download("files/x", destination)
                self.assertEqual(caught.exception.filename, str(destination))
                self.assertIn(f"({problem})", str(caught.exception))
                self.assertNotRegex(
                    str(caught.exception), r"\.(new|part)\b", "never the client's own file"
                )
                self.assertIsNone(caught.exception.__cause__)
                status, err = self.run_cli(
                    "download", self.server.url + "/files/x", str(destination)
                )
                self.assertEqual(status, 1)
                reason = os.strerror(caught.exception.errno)
                self.assertEqual(
                    err,
                    f"dataset-client: error: cannot write {destination}: {reason} ({problem})\n",
                )
        self.assertEqual(self.requests, [], "refused before any request")

    def test_a_download_into_a_directory_that_is_not_writable_says_so(self) -> None:
        directory = self.tmp() / "read-only"
        directory.mkdir(0o555)
        destination = directory / "out.bin"
        if (
            os.geteuid() == 0
        ):  # root writes anywhere: the file system's refusal, as another user would meet it
            real_open = os.open

            def refusing(path: Any, flags: int, mode: int = 0o777, **options: Any) -> int:
                if str(path).startswith((f"{directory}/", ".out.bin")) and flags & os.O_CREAT:
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
                return real_open(path, flags, mode, **options)

            refused = contextlib.ExitStack()
            refused.enter_context(mock.patch.object(dc.os, "open", refusing))
            refused.enter_context(
                mock.patch.object(dc.os, "access", lambda path, mode: path != str(directory))
            )
        else:
            refused = contextlib.ExitStack()
        with refused, self.assertRaises(PermissionError) as caught:
            self.client().download("files/x", destination)
        self.assertEqual(caught.exception.filename, str(destination))
        self.assertEqual(
            str(caught.exception),
            f"[Errno 13] Permission denied (the directory {directory} is not writable): '{destination}'",
        )
        self.assertEqual(list(directory.iterdir()), [])
        self.assertEqual(self.requests, [])

    def test_a_final_move_that_fails_names_the_destination(self) -> None:
        directory = self.tmp()
        destination = directory / "out.bin"

        def make_a_directory_there(
            done: int, total: int | None
        ) -> None:  # as another program might
            if not destination.exists():
                destination.mkdir()
                (destination / "keep").write_bytes(b"")

        self.script(serve_file(DATA))
        with self.assertRaises(IsADirectoryError) as caught:
            self.client().download("files/x", destination, progress=make_a_directory_there)
        self.assertEqual(
            str(caught.exception),
            f"[Errno {errno.EISDIR}] {os.strerror(errno.EISDIR)}: '{destination}'",
        )
        self.assertEqual(
            sorted(p.name for p in directory.iterdir()), ["out.bin"], "the temporary file removed"
        )
        self.assertEqual([r.path for r in self.requests], ["/api/v1/files/x"])

    def test_a_file_not_of_the_announced_size_is_not_committed_and_the_error_has_both_sizes(
        self,
    ) -> None:
        # Issue 27: the sizes as fields (like IncompleteResponseError's), so that no one parses the message.
        directory = self.tmp()
        with dc._FileTarget(dc._Directory(str(directory / "out.bin")), resume=False) as target:
            target.write_at(0, b"abc")
            with self.assertRaises(dc.InvalidResponseError) as caught:
                target.commit(5)
        self.assertEqual((caught.exception.received, caught.exception.expected), (3, 5))
        self.assertIn("has 3 bytes where the server announced 5", str(caught.exception))
        self.assertEqual(list(directory.iterdir()), [], "not moved into place, nothing left")
        self.assertIsNone(dc.InvalidResponseError("x").received)


class DownloadFaultTests(ServerTestCase):
    """What a download does when the server or the caller misbehaves (issue 16, cases 6 and 9 to 15)."""

    def test_connections_are_bounded(self) -> None:
        for connections in (33, 10**6):
            with (
                self.subTest(connections=connections),
                self.assertRaisesRegex(ValueError, "at most 32"),
            ):
                self.client().download("files/big", io.BytesIO(), connections=connections)
        self.assertEqual(self.requests, [])
        self.server.default = serve_file(BIG)
        out = self.tmp() / "big.bin"
        self.client().download("files/big", out, connections=32)
        self.assertEqual(out.read_bytes(), BIG)
        self.assertEqual(len(self.requests), 8, "parts of at least 1 MiB: 8 of them for 8 MiB")

    def test_progress_is_first_called_with_the_total_once_the_headers_are_in(self) -> None:
        seen: list[tuple[int, int | None]] = []
        self.script(serve_file(DATA))
        self.client().download("files/x", io.BytesIO(), progress=lambda d, t: seen.append((d, t)))
        self.assertEqual(seen[0], (0, len(DATA)))
        self.assertEqual(seen[-1], (len(DATA), len(DATA)))

    def test_no_thread_outlives_a_download_whose_progress_raises(self) -> None:
        def broken(
            done: int, total: int | None
        ) -> None:  # on its first call, before any part thread starts
            raise RuntimeError("the progress bar broke")

        def broken_once_bytes_arrive(
            done: int, total: int | None
        ) -> None:  # the parts' threads have started
            if done:
                raise RuntimeError("the progress bar broke")

        for progress, connections in ((broken, 1), (broken, 1), (broken_once_bytes_arrive, 4)):
            self.server.default = serve_file(BIG)
            destination = self.tmp() / "big.bin"
            with (
                self.subTest(connections=connections),
                self.assertRaisesRegex(RuntimeError, "progress bar broke"),
            ):
                self.client().download(
                    "files/big",
                    destination,
                    connections=connections,
                    sha256=BIG_SHA,
                    progress=progress,
                )
            self.assertEqual(list(destination.parent.iterdir()), [])
        threads = [
            thread.name
            for thread in threading.enumerate()
            if thread.name.startswith("dataset-client")
        ]
        self.assertEqual(threads, [])

    def test_an_error_reading_the_file_back_for_the_hash_reaches_the_caller(self) -> None:
        def unreadable(target: Any, offset: int, size: int) -> bytes:
            raise OSError(errno.EIO, "the disk went away")

        self.server.default = serve_file(BIG)
        directory = self.tmp()
        with (
            mock.patch.object(dc._FileTarget, "read_at", unreadable),
            self.assertRaises(OSError) as caught,
        ):
            self.client().download(
                "files/big", directory / "big.bin", connections=4, sha256=BIG_SHA
            )
        self.assertEqual(
            (caught.exception.errno, caught.exception.strerror), (errno.EIO, "the disk went away")
        )
        self.assertNotIsInstance(caught.exception, dc.DatasetClientError)
        self.assertEqual(
            [t.name for t in threading.enumerate() if t.name.startswith("dataset-client")], []
        )
        self.assertEqual(list(directory.iterdir()), [])
        self.assertEqual(
            sorted(bool(r.headers["Range"]) for r in self.requests), [False, True, True, True]
        )

    def download_ended_by_ctrl_c(
        self, destination: Path, *, resume: bool = False
    ) -> list[threading.Thread]:
        """download(connections=4) of BIG, ended by a real SIGINT to this (the main) thread while it waits
        for the three other parts; the part threads still alive when KeyboardInterrupt came out.

        The server sends the first part whole and 1 MiB of each other one. Each part thread's write of
        that MiB is held until, after the SIGINT, the main thread waits for that very thread (a frame of
        the library's whose ``thread`` is it, seen on two looks in a row, not one passing call): a part
        that download() stops waiting for is still there when it returns.
        """
        quarter = len(BIG) // 4
        self.server.default = lambda handler: first_bytes_then_stall(
            BIG, 1024 * 1024 if "Range" in handler.headers else quarter
        )(handler)
        main = threading.main_thread()
        held: set[threading.Thread] = set()
        interrupted, returned = threading.Event(), threading.Event()
        self.addCleanup(returned.set)

        def main_joins(thread: threading.Thread | None) -> bool:
            frame = sys._current_frames().get(main.ident or 0)
            while frame is not None:
                waited = frame.f_locals.get("thread") if frame.f_globals is vars(dc) else None
                if isinstance(waited, threading.Thread) and thread in (None, waited):
                    return True
                frame = frame.f_back
            return False

        def held_write(target: Any, offset: int, data: bytes) -> None:
            part, looks = threading.current_thread(), [0]

            def joined_after_ctrl_c() -> bool:
                looks[0] = looks[0] + 1 if interrupted.is_set() and main_joins(part) else 0
                return returned.is_set() or looks[0] == 2

            if part.name == "dataset-client-part":
                held.add(part)
                with contextlib.suppress(AssertionError):
                    wait_for(joined_after_ctrl_c, 10)
            write_at(target, offset, data)

        def ctrl_c(number: int, frame: Any) -> None:  # Python's own handler, saying when it ran
            interrupted.set()
            raise KeyboardInterrupt

        def interrupt_once_joining() -> None:
            with contextlib.suppress(AssertionError):
                wait_for(lambda: len(held) == 3 and main_joins(None), 10)
                signal.pthread_kill(
                    main.ident or 0, signal.SIGINT
                )  # a real Ctrl-C, to the main thread

        write_at = dc._FileTarget.write_at
        previous = signal.signal(signal.SIGINT, ctrl_c)  # whatever the test run inherited
        self.addCleanup(signal.signal, signal.SIGINT, previous)
        interrupter = threading.Thread(target=interrupt_once_joining)
        interrupter.start()
        try:
            with (
                mock.patch.object(dc._FileTarget, "write_at", held_write),
                self.assertRaises(KeyboardInterrupt),
            ):
                self.client(timeout=30).download(
                    "files/big", destination, connections=4, resume=resume
                )
            return [
                thread for thread in threading.enumerate() if thread.name == "dataset-client-part"
            ]
        finally:
            returned.set()
            interrupter.join(10)
            self.assertTrue(interrupted.is_set(), "never waiting for the parts in Thread.join")

    def test_ctrl_c_while_the_parts_are_waited_for_leaves_nothing_or_what_resumes(self) -> None:
        for resume in (False, True):
            self.server.requests.clear()
            directory = self.tmp()
            with self.subTest(resume=resume):
                self.download_ended_by_ctrl_c(directory / "out.bin", resume=resume)
                wait_for(
                    lambda: (
                        not [t for t in threading.enumerate() if t.name == "dataset-client-part"]
                    )
                )
                left = sorted(p.name for p in directory.iterdir())
                self.assertEqual(left, [".out.bin.part", ".out.bin.part.json"] if resume else [])
                ranges = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests]
                self.assertEqual(ranges[0], (None, None), "the whole file first, then its parts")
                self.assertTrue(all(r and i == '"v1"' for r, i in ranges[1:]), ranges)
        self.server.requests.clear()
        self.server.bytes_served = 0
        self.server.default = serve_file(BIG)
        self.download_big(directory / "out.bin", resume=True)
        ranges = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests]
        self.assertTrue(
            all(r and not r.startswith("bytes=0-") and i == '"v1"' for r, i in ranges), ranges
        )
        self.assertEqual(
            self.server.bytes_served,
            len(BIG) - len(BIG) // 4,
            "the first part kept, not fetched again",
        )

    # Found while writing the test above: on Python 3.11 and 3.12 a Thread.join() that Ctrl-C interrupts
    # marks the thread it waited for as stopped while it still runs (CPython's bpo-45274 handling), so a
    # second join() of it returned at once, and download() returned with that part still running.
    def test_no_part_thread_outlives_a_download_ended_by_ctrl_c(self) -> None:
        self.assertEqual(self.download_ended_by_ctrl_c(self.tmp() / "out.bin"), [])

    def test_a_failing_part_ends_the_parts_still_waiting_for_their_answer(self) -> None:
        # Found in review: fail() ended the reads under way, not a part still waiting for its response's
        # head: the call waited out the time-out, for ever with timeout=None.
        def respond(handler: Handler) -> None:
            (hang if "Range" in handler.headers else serve_file(BIG))(handler)

        def broken(done: int, total: int | None) -> None:
            if (
                done
            ):  # the first part's bytes arrive: once both other parts wait for their answer, fail
                wait_for(lambda: len([r for r in self.requests if r.headers["Range"]]) == 2, 10)
                raise RuntimeError("the progress bar broke")

        self.server.default = respond
        client = self.client(timeout=None)
        outcome: list[object] = []
        download = functools.partial(
            client.download, "files/big", self.tmp() / "big.bin", connections=3, progress=broken
        )
        thread = threading.Thread(target=lambda: outcome.append(outcome_of(download)), daemon=True)
        thread.start()
        thread.join(5)
        self.assertFalse(
            thread.is_alive(), "download() waits for a part that will never be answered"
        )
        self.assertIsInstance(outcome[0], RuntimeError)
        self.assertEqual(
            [t.name for t in threading.enumerate() if t.name.startswith("dataset-client")], []
        )

    def test_a_server_that_ignores_ranges_keeps_one_stream_without_starting_over(self) -> None:
        self.server.default = ignoring_ranges
        seen = self.download_big(self.tmp() / "big.bin")
        self.assertEqual(
            [r.headers["Range"] for r in self.requests].count(None), 1, "never started over"
        )
        self.assertLessEqual(
            len(self.requests), 4, "the ranged requests sent at once, nothing more"
        )
        self.assertEqual(seen[-1], (len(BIG), len(BIG)))

    def test_a_parallel_resume_from_a_server_now_ignoring_ranges_goes_on_as_one_stream(
        self,
    ) -> None:
        # Found in review: the dropped parts' own 200s were taken for a single stream's restart,
        # truncating the file under the live stream: a short, shifted file committed without error.
        directory = self.tmp()
        third = len(BIG) // 3
        bounds = [0, third, 2 * third, len(BIG)]
        parts = [[start, end, 1024 * 1024] for start, end in itertools.pairwise(bounds)]
        kept = bytearray(len(BIG))
        for start, _, done in parts:
            kept[start : start + done] = BIG[start : start + done]
        (directory / ".out.bin.part").write_bytes(kept)
        state = {
            "url": self.server.url + "/api/v1/files/x",
            "validator": '"v1"',
            "total": len(BIG),
            "parts": parts,
        }
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (directory / ".out.bin.part.json").touch(0o600)
        (directory / ".out.bin.part.json").write_text(json.dumps(state))

        self.server.default = ignoring_ranges
        self.client().download(
            "files/x", directory / "out.bin", resume=True, connections=3, sha256=BIG_SHA
        )
        self.assertEqual((directory / "out.bin").read_bytes(), BIG)
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])
        self.assertTrue(
            all(r.headers["Range"] for r in self.requests), "each part asked for its range"
        )

    def complete_partial(self, directory: Path, data: bytes) -> None:
        """What a resumable download killed after its last byte, before its rename, leaves."""
        (directory / ".out.bin.part").write_bytes(data)
        url = self.server.url + "/api/v1/files/x"
        state = {
            "url": url,
            "validator": '"v1"',
            "total": len(data),
            "parts": [[0, len(data), len(data)]],
        }
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (directory / ".out.bin.part.json").touch(0o600)
        (directory / ".out.bin.part.json").write_text(json.dumps(state))

    def test_a_complete_partial_file_is_checked_with_the_server_before_it_is_committed(
        self,
    ) -> None:
        new = bytes(reversed(DATA))
        for served, etag in ((DATA, '"v1"'), (new, '"v2"')):
            with self.subTest(server_has=etag):
                self.server.requests.clear()
                directory = self.tmp()
                self.complete_partial(directory, DATA)
                self.script(serve_file(served, etag=etag))
                digest = hashlib.sha256(
                    served
                ).hexdigest()  # another version: downloaded again, not refused
                self.client().download("files/x", directory / "out.bin", resume=True, sha256=digest)
                self.assertEqual((directory / "out.bin").read_bytes(), served)
                (request,) = self.requests
                self.assertEqual(
                    (request.headers["Range"], request.headers["If-Range"]),
                    (f"bytes={len(DATA) - 1}-", '"v1"'),
                )
                self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])

    def test_a_wrong_total_kept_from_a_lying_server_is_discarded_on_416(self) -> None:
        directory = self.tmp()
        lying = cut(DATA + b"?" * 1196, len(DATA), {"ETag": '"v1"', "Accept-Ranges": "bytes"})
        self.script(lying)
        with self.assertRaises(dc.IncompleteResponseError):
            self.client(max_retries=0).download("files/x", directory / "out.bin", resume=True)
        self.assertEqual(
            sorted(p.name for p in directory.iterdir()), [".out.bin.part", ".out.bin.part.json"]
        )
        self.server.default = serve_file(DATA)
        self.client(max_retries=0).download(
            "files/x", directory / "out.bin", resume=True, sha256=DATA_SHA
        )
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assertEqual(
            [r.headers["Range"] for r in self.requests], [None, f"bytes={len(DATA)}-", None]
        )
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])

    def test_a_second_416_after_starting_over_is_an_error(self) -> None:
        directory = self.tmp()
        self.complete_partial(directory, DATA[:1000] + b"\0" * (len(DATA) - 1000))

        def always_416(handler: Handler) -> None:
            reply(416, b"", {"Content-Range": f"bytes */{len(DATA)}"})(handler)

        def cut_then_416(handler: Handler) -> None:
            cut(DATA, 2000, {"ETag": '"v1"'})(
                handler
            ) if "Range" not in handler.headers else always_416(handler)

        self.server.default = cut_then_416
        with self.assertRaises(ServiceError) as caught:
            self.client(max_retries=1).download("files/x", directory / "out.bin", resume=True)
        self.assertEqual(caught.exception.status, 416)
        self.assertEqual(
            [r.headers["Range"] for r in self.requests],
            [f"bytes={len(DATA) - 1}-", None, "bytes=2000-"],
        )

    def test_a_file_changed_under_a_parallel_resume_starts_over_even_with_no_retries(self) -> None:
        directory = self.tmp()
        quarter = len(BIG) // 4
        bounds = [0, quarter, 2 * quarter, 3 * quarter, len(BIG)]
        parts = [[start, end, 1000] for start, end in itertools.pairwise(bounds)]
        (directory / ".out.bin.part").write_bytes(
            b"".join(BIG[s : s + 1000].ljust(e - s, b"\0") for s, e, _ in parts)
        )
        url = self.server.url + "/api/v1/files/x"
        state = {"url": url, "validator": '"v1"', "total": len(BIG), "parts": parts}
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (directory / ".out.bin.part.json").touch(0o600)
        (directory / ".out.bin.part.json").write_text(json.dumps(state))
        new = bytes(reversed(BIG))
        self.server.default = serve_file(new, etag='"v2"')
        client = self.client(max_retries=0)
        client.download(
            "files/x",
            directory / "out.bin",
            resume=True,
            connections=4,
            sha256=hashlib.sha256(new).hexdigest(),
        )
        self.assertEqual((directory / "out.bin").read_bytes(), new)
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])
        asked = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests]
        restart = asked.index((None, None))  # the whole file anew, once the kept parts were refused
        kept = [
            f"bytes={start + 1000}-{'' if end == len(BIG) else end - 1}" for start, end, _ in parts
        ]
        # The kept parts' requests all go out before the whole file's (their threads end first),
        # but each on its own connection: the server may read one after it. The new file's parts
        # are asked once its headers are in.
        resumed = [request for request in asked if request[1] == '"v1"']
        fetched = [request for request in asked[restart + 1 :] if request[1] == '"v2"']
        self.assertIn('"v1"', [if_range for _, if_range in asked[:restart]], "a kept part first")
        self.assertLessEqual(
            set(resumed), {(range_, '"v1"') for range_ in kept}, "each from where it stopped"
        )
        self.assertEqual(len(resumed), len(set(resumed)), "each once")
        self.assertEqual(len(asked), len(resumed) + 1 + len(fetched), asked)

    def test_a_file_that_keeps_changing_is_refused_after_three_restarts(self) -> None:
        versions = itertools.count()

        def changing(handler: Handler) -> None:  # each response a new version, cut short
            version = next(versions)
            cut(BIG, 2_000_000, {"ETag": f'"v{version}"', "Accept-Ranges": "bytes"})(handler)

        self.server.default = changing
        with self.assertRaisesRegex(
            dc.InvalidResponseError, "changed on the server during each of 4 tries"
        ):
            self.client(max_retries=1).download("files/x", self.tmp() / "out.bin", connections=2)
        self.assertEqual(
            [r.headers["Range"] for r in self.requests].count(None), 4, "started over three times"
        )


def counted_listings() -> tuple[list[int], contextlib.ExitStack]:
    """os.listdir and os.scandir wrapped to count the entries they return (a list, its one
    element the count), and the patches to enter."""
    counted = [0]
    listdir, scandir = os.listdir, os.scandir

    def counting_listdir(*args: Any, **kwargs: Any) -> list[Any]:
        names = listdir(*args, **kwargs)
        counted[0] += len(names)
        return names

    @contextlib.contextmanager
    def counting_scandir(*args: Any, **kwargs: Any) -> Iterator[Iterator[os.DirEntry[str]]]:
        with scandir(*args, **kwargs) as entries:

            def each() -> Iterator[os.DirEntry[str]]:
                for entry in entries:
                    counted[0] += 1
                    yield entry

            yield each()

    patches = contextlib.ExitStack()
    patches.enter_context(mock.patch.object(os, "listdir", counting_listdir))
    patches.enter_context(mock.patch.object(os, "scandir", counting_scandir))
    return counted, patches


class CrowdedDirectoryTests(ServerTestCase):
    """Issue 35: a download's cost does not grow with its directory; nothing it leaves is listed."""

    def test_thirty_downloads_into_a_directory_of_20000_files_read_no_listing(self) -> None:
        # Issue 35: each download listed its whole directory (twice with resume=True) and
        # filtered the names: 30 downloads here read 800,590 entries.
        directory = self.tmp()
        for number in range(20_000):
            (directory / f"export-{number:05d}.csv").touch()
        small = DATA[:70_000]
        self.server.default = serve_file(small, digests=True)
        client = self.client()
        kinds: list[dict[str, Any]] = [
            {},
            {"resume": True},
            {"sha256": hashlib.sha256(small).hexdigest()},
            {"connections": 2},
        ]
        counted, patches = counted_listings()
        with patches:
            for number in range(30):
                options = kinds[number % 4]
                client.download("files/x", directory / f"new-{number}.csv", **options)
        self.assertLessEqual(counted[0], 2 * 20_030, "at most two listings' worth in all")
        names = {path.name for path in directory.iterdir()}
        self.assertEqual(len(names), 20_030)
        self.assertTrue(all(not name.startswith(".") for name in names), "nothing left beside")

    def test_the_free_space_is_looked_at_only_for_a_known_length(self) -> None:
        # Found in review: a body of no stated length (read until the connection closes) had the
        # file system's free space asked all the same, for nothing to compare it with.
        out = self.tmp() / "out.bin"
        self.server.default = until_closed(DATA)
        with mock.patch.object(dc.shutil, "disk_usage", wraps=dc.shutil.disk_usage) as usage:
            self.client().download("files/x", out)
            self.assertEqual(usage.call_count, 0)
            self.server.default = serve_file(DATA)
            self.client().download("files/x", out)
            self.assertEqual(usage.call_count, 1, "the control: a Content-Length, looked at")
        self.assertEqual(out.read_bytes(), DATA)
        self.assertEqual([r.path for r in self.requests], ["/api/v1/files/x"] * 2)


class KilledInACrowdedDirectoryTests(ServerTestCase):
    """Issue 35: kill -9 mid-download in a crowded directory; the next download to that
    destination finds what it left by name: the file right, nothing left."""

    CODE = (
        "import json, sys, dataset_client as dc\n"
        "with dc.DatasetClient(sys.argv[1], timeout=30, max_retries=0) as client:\n"
        "    progress = lambda done, total: print(done, flush=True)\n"
        "    client.download('files/x', sys.argv[2], progress=progress, **json.loads(sys.argv[3]))\n"
    )

    def test_the_next_download_leaves_nothing_beside_the_file(self) -> None:
        directory = self.tmp()
        for number in range(1000):
            (directory / f"export-{number:04d}.csv").touch()
        for options in (
            {},
            {"connections": 2},
            {"resume": True},
            {"resume": True, "connections": 2},
        ):
            with self.subTest(**options):
                self.server.default = first_bytes_then_stall(DATA, 1_500_000)
                destination = directory / "out.bin"
                arguments = [self.server.url + "/api/v1", str(destination), json.dumps(options)]
                process = subprocess.Popen(
                    [sys.executable, "-c", self.CODE, *arguments],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                )
                self.addCleanup(process.kill)
                self.addCleanup(process.stdout.close)  # type: ignore[union-attr]
                for line in iter(process.stdout.readline, b""):  # type: ignore[union-attr]
                    if int(line) > 0:
                        break
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                left = [p.name for p in directory.iterdir() if p.name.startswith(".")]
                self.assertTrue(left, "the killed download left its files")
                self.server.default = serve_file(DATA)
                self.client().download("files/x", destination, sha256=DATA_SHA, **options)
                self.assertEqual(destination.read_bytes(), DATA)
                hidden = [p.name for p in directory.iterdir() if p.name.startswith(".")]
                self.assertEqual(hidden, [], "nothing left beside it")
                destination.unlink()

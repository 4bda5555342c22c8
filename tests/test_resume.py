"""Resuming: a cut transfer continued from its offset (never spliced onto another version),
across runs from the state file, which is discarded when it does not hold.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
from tests.support import (
    DATA,
    DATA_SHA,
    KEY,
    ROOT,
    Handler,
    Respond,
    ServerTestCase,
    cut,
    first_bytes_then_stall,
    local_service,
    outcome_of,
    part_ignoring_if_range,
    raw_server,
    reply,
    serve_file,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class ResumeTests(ServerTestCase):
    def test_resume_after_cuts_at_several_offsets(self) -> None:
        cuts = [1, 300_000, 1_048_576, 2_500_000]
        self.server.default = serve_file(DATA, cuts=cuts)
        out = self.tmp() / "out.bin"
        self.client(max_retries=len(cuts)).download("files/x", out, sha256=DATA_SHA)
        self.assertEqual(out.read_bytes(), DATA)
        ranges = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests]
        self.assertEqual(ranges, [(None, None)] + [(f"bytes={c}-", '"v1"') for c in cuts])
        self.assertEqual(self.server.bytes_served, len(DATA))  # type: ignore[attr-defined]

    def test_the_partial_files_identity_is_read_once_not_at_each_save(self) -> None:
        # Found in review: the state's load and each save fstat'd the partial file again for an
        # inode its descriptor cannot change (seven fstat calls for this download, where two do).
        self.server.default = serve_file(DATA)
        out = self.tmp() / "out.bin"
        fstat = os.fstat
        partial_file_calls: list[int] = []

        def counted_fstat(fd: int) -> os.stat_result:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}").endswith("/.out.bin.part"):
                    partial_file_calls.append(fd)
            return fstat(fd)

        with mock.patch.object(dc.os, "fstat", counted_fstat):
            self.client().download("files/x", out, resume=True, sha256=DATA_SHA)
        self.assertEqual(out.read_bytes(), DATA)
        self.assertEqual([r.headers["Range"] for r in self.requests], [None])
        # Once made (its identity, for the state and the lock's check), once at the commit.
        self.assertEqual(len(partial_file_calls), 2)

    def test_resume_uses_last_modified_without_a_strong_etag(self) -> None:
        modified = "Wed, 21 Oct 2026 07:28:00 GMT"

        def respond(handler: Handler) -> None:
            if "Range" in handler.headers:
                self.assertEqual(handler.headers["If-Range"], modified)
                handler.send_response(206)
                handler.send_header("Content-Range", f"bytes 100-{len(DATA) - 1}/{len(DATA)}")
                handler.send_header("Content-Length", str(len(DATA) - 100))
                handler.end_headers()
                handler.wfile.write(DATA[100:])
            else:
                cut(DATA, 100, {"ETag": 'W/"weak"', "Last-Modified": modified})(handler)

        self.server.default = respond
        out = io.BytesIO()
        self.client().download("files/x", out)
        self.assertEqual(out.getvalue(), DATA)

    def test_a_server_ignoring_range_starts_over(self) -> None:
        self.server.default = serve_file(DATA, ranges=False, cuts=[2_000_000])
        directory = self.tmp()
        self.client().download("files/x", directory / "out.bin", sha256=DATA_SHA)
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assertEqual(self.requests[1].headers["Range"], "bytes=2000000-")
        self.assertEqual(self.server.bytes_served, 2_000_000 + len(DATA))  # type: ignore[attr-defined]

    def test_starting_over_rewinds_a_file_object(self) -> None:
        self.server.default = serve_file(DATA, ranges=False, cuts=[1_500_000])
        out = io.BytesIO(b"keep:")
        out.seek(5)
        self.client().download("files/x", out)
        self.assertEqual(out.getvalue(), b"keep:" + DATA)

    def test_no_validator_means_no_range(self) -> None:
        self.server.default = serve_file(DATA, etag=None, cuts=[1_000_000])
        out = io.BytesIO()
        self.client().download("files/x", out)
        self.assertEqual(out.getvalue(), DATA)
        self.assertIsNone(self.requests[1].headers["Range"])

    def test_a_resumed_part_without_a_length_is_checked_against_the_total(self) -> None:
        def chunked_206(handler: Handler) -> None:
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes 1000-{len(DATA) - 1}/{len(DATA)}")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            part = DATA[1000:2000]  # far less than promised, then a clean end of the chunked body
            handler.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(part), part))

        self.script(cut(DATA, 1000, {"ETag": '"v1"'}), chunked_206, serve_file(DATA))
        out = io.BytesIO()
        self.client(max_retries=3).download("files/x", out)
        self.assertEqual(out.getvalue(), DATA)
        self.assertEqual(self.requests[2].headers["Range"], "bytes=2000-")

    def test_a_file_object_gets_bytes_it_may_keep(self) -> None:
        class Collector(io.RawIOBase):
            def __init__(self) -> None:
                self.chunks: list[object] = []

            def writable(self) -> bool:
                return True

            def write(self, data: object) -> int:
                self.chunks.append(data)  # kept, not copied
                return len(data)  # type: ignore[arg-type]

        self.script(serve_file(DATA))
        collector = Collector()
        self.client().download("files/x", collector)
        self.assertEqual(b"".join(bytes(c) for c in collector.chunks), DATA)  # type: ignore[call-overload]

    def test_wrong_content_range_is_an_error(self) -> None:
        def wrong_range(handler: Handler) -> None:
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes 0-{len(DATA) - 1}/{len(DATA)}")
            handler.send_header("Content-Length", str(len(DATA)))
            handler.end_headers()
            handler.wfile.write(DATA)

        self.script(cut(DATA, 5000, {"ETag": '"v1"'}), wrong_range)
        directory = self.tmp()
        with self.assertRaisesRegex(dc.InvalidResponseError, "resume at byte 5000"):
            self.client().download("files/x", directory / "out.bin")
        self.assertEqual(list(directory.iterdir()), [])

    def test_a_malformed_content_range_is_refused_resumed_or_in_parts(self) -> None:
        def malformed(value: str) -> Respond:
            def respond(handler: Handler) -> None:
                if "Range" not in handler.headers:
                    return (cut(DATA, 1000, {"ETag": '"v1"'}) if resumed else serve_file(DATA))(
                        handler
                    )
                start, end = local_service._requested_range(handler.headers["Range"], len(DATA))
                reply(206, DATA[start:end], {"Content-Range": value, "ETag": '"v1"'})(handler)

            return respond

        for value, resumed in itertools.product(("bytes 0-abc/100", "items 0-9/10"), (True, False)):
            server = (
                self.start_server()
            )  # of its own: a part's request may arrive after download() raised
            server.default = malformed(value)
            directory = self.tmp()
            client = self.client(server.url + "/api/v1")
            with (
                self.subTest(value=value, resumed=resumed),
                self.assertRaises(dc.InvalidResponseError) as caught,
            ):
                client.download("files/x", directory / "out.bin", connections=1 if resumed else 3)
            self.assertIn("Content-Range", str(caught.exception))
            self.assertIn(value, str(caught.exception))
            self.assertEqual(list(directory.iterdir()), [], "nothing committed, nothing left")
            ranges = [(r.headers["Range"], r.headers["If-Range"]) for r in server.requests]
            self.assertEqual(ranges[0], (None, None), "the whole file first")
            if resumed:
                self.assertEqual(ranges[1:], [("bytes=1000-", '"v1"')], "refused, not retried")
            else:
                self.assertTrue(
                    ranges[1:] and all(r and i == '"v1"' for r, i in ranges[1:]), ranges
                )

    def test_a_malformed_content_range_of_another_version_starts_over(self) -> None:
        # Found in review: a 206 of another ETag says the file changed, whatever its Content-Range.
        def respond(handler: Handler) -> None:
            if "Range" in handler.headers:
                return reply(206, DATA[1000:], {"Content-Range": "bytes garbage", "ETag": '"v2"'})(
                    handler
                )
            (
                cut(DATA, 1000, {"ETag": '"v1"'})
                if len(self.requests) == 1
                else serve_file(DATA, etag='"v2"')
            )(handler)

        self.server.default = respond
        out = self.tmp() / "out.bin"
        self.client().download("files/x", out)
        self.assertEqual(out.read_bytes(), DATA)
        ranges = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests]
        self.assertEqual(ranges, [(None, None), ("bytes=1000-", '"v1"'), (None, None)])

    def test_a_resumed_part_of_another_version_is_never_spliced_on(self) -> None:
        for what, new, etag in (
            ("ETag", bytes(reversed(DATA)), '"v2"'),
            ("total", DATA + b"more", '"v1"'),
        ):
            self.server.requests.clear()
            self.script(
                cut(DATA, 1000, {"ETag": '"v1"'}),
                part_ignoring_if_range(new, 1000, etag),
                serve_file(new, etag=etag),
            )
            out = self.tmp() / "out.bin"
            with self.subTest(another=what):
                self.client().download("files/x", out)
                self.assertEqual(out.read_bytes(), new, "started over: one version, whole")
                self.assertEqual(
                    [r.headers["Range"] for r in self.requests], [None, "bytes=1000-", None]
                )

    def test_a_206_of_unknown_total_is_never_spliced_on(self) -> None:
        # Found in review: after a chunked 200 (no length) was cut, a 206 "bytes N-M/*" sent more than
        # M-N+1 bytes, all of them committed.
        first = b"A" * (1024 * 1024 + 1000)

        def chunk(data: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(data), data)

        def respond(connection: socket.socket) -> None:
            if not hasattr(
                respond, "cut"
            ):  # the whole file, chunked, cut after its first MiB and a bit
                respond.cut = True  # type: ignore[attr-defined]
                connection.sendall(
                    b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: "v1"\r\n\r\n'
                    + chunk(first)
                )
                return
            start = 1024 * 1024
            head = b'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\nETag: "v1"\r\n'
            head += b"Content-Range: bytes %d-%d/*\r\n\r\n" % (start, start + 9)
            connection.sendall(head + chunk(b"B" * 10 + b"EVIL" * 1250) + b"0\r\n\r\n")

        destination = self.tmp() / "out.bin"
        with self.assertRaisesRegex(dc.InvalidResponseError, "unknown length"):
            self.client(raw_server(self, respond), max_retries=1).download("files/x", destination)
        self.assertEqual(list(destination.parent.iterdir()), [])


class ResumeAcrossRunsTests(ServerTestCase):
    def start_download_process(
        self, destination: Path, **options: object
    ) -> subprocess.Popen[bytes]:
        """``download(files/x, destination, resume=True, **options)`` in a process of its own, printing
        each ``done`` its progress is given on a line of its stdout."""
        code = (
            "import json, sys, dataset_client as dc\n"
            "with dc.DatasetClient(sys.argv[1], sys.argv[2], timeout=30, max_retries=0) as client:\n"
            "    progress = lambda done, total: print(done, flush=True)\n"
            "    client.download('files/x', sys.argv[3], resume=True, progress=progress, **json.loads(sys.argv[4]))\n"
        )
        arguments = [self.server.url + "/api/v1", KEY, str(destination), json.dumps(options)]
        process = subprocess.Popen(
            [sys.executable, "-c", code, *arguments],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.addCleanup(process.stderr.close)  # type: ignore[union-attr]
        self.addCleanup(process.stdout.close)  # type: ignore[union-attr]
        self.addCleanup(process.kill)
        return process

    def kill_once_progressed(self, process: subprocess.Popen[bytes]) -> int:
        """SIGKILL ``process`` once its progress has counted bytes (kept on disk, to resume: what it is told);
        how many."""
        for line in iter(process.stdout.readline, b""):  # type: ignore[union-attr]  # ends when the process does
            if int(line) > 0:
                break
        process.kill()  # SIGKILL: no clean-up of any kind
        process.wait(10)
        return int(line)

    def test_a_killed_download_continues_where_it_stopped(self) -> None:
        self.script(first_bytes_then_stall(DATA, 1_500_000))
        directory = self.tmp()
        process = self.start_download_process(directory / "out.bin")
        kept = self.kill_once_progressed(process)
        self.assertEqual(kept, 1024 * 1024, "what reached the disk before the kill, a whole chunk")
        left = {p.name for p in directory.iterdir()} - {
            ".out.bin.part.lock"
        }  # where there is no flock (Windows)
        self.assertEqual(sorted(left), [".out.bin.part", ".out.bin.part.json"])
        self.assertEqual((directory / ".out.bin.part").stat().st_size, kept)

        self.script(serve_file(DATA))
        self.server.bytes_served = 0
        seen: list[tuple[int, int | None]] = []
        self.client().download(
            "files/x",
            directory / "out.bin",
            resume=True,
            sha256=DATA_SHA,
            progress=lambda d, t: seen.append((d, t)),
        )
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])
        self.assertEqual(
            (self.requests[-1].headers["Range"], self.requests[-1].headers["If-Range"]),
            (f"bytes={kept}-", '"v1"'),
        )
        self.assertEqual(self.server.bytes_served, len(DATA) - kept)
        self.assertEqual(seen[0], (kept, len(DATA)))
        self.assertEqual(seen[-1], (len(DATA), len(DATA)))

    def test_ctrl_c_as_the_state_is_read_or_the_file_moved_into_place_keeps_what_resumes(
        self,
    ) -> None:
        # Found in review: a KeyboardInterrupt while the kept state was read, or at the start of the
        # commit, lost the partial file (and left a stale state beside nothing).
        directory = self.tmp()
        out = directory / "out.bin"
        commit, fstat = dc._FileTarget.commit, os.fstat
        committing: list[int] = []

        def ctrl_c_in_commit(target: Any, total: int | None) -> None:
            committing.append(threading.get_ident())
            commit(target, total)

        def fstat_or_ctrl_c(fd: int) -> os.stat_result:
            if threading.get_ident() in committing:
                raise KeyboardInterrupt
            return fstat(fd)

        def ctrl_c(*arguments: object) -> None:
            raise KeyboardInterrupt

        self.server.default = serve_file(DATA)
        with (
            mock.patch.object(dc._FileTarget, "commit", ctrl_c_in_commit),
            mock.patch.object(dc.os, "fstat", fstat_or_ctrl_c),
            self.assertRaises(KeyboardInterrupt),
        ):
            self.client().download("files/x", out, resume=True)
        self.assertEqual(sorted(os.listdir(directory)), [".out.bin.part", ".out.bin.part.json"])
        self.assertEqual((directory / ".out.bin.part").read_bytes(), DATA, "the whole file, kept")
        with mock.patch.object(dc, "_read_state", ctrl_c), self.assertRaises(KeyboardInterrupt):
            self.client().download("files/x", out, resume=True)
        self.assertEqual(sorted(os.listdir(directory)), [".out.bin.part", ".out.bin.part.json"])
        self.client().download(
            "files/x", out, resume=True
        )  # the lock was let go: the same file, continued
        self.assertEqual(out.read_bytes(), DATA)
        self.assertEqual(os.listdir(directory), ["out.bin"])
        self.assertEqual(
            self.requests[-1].headers["Range"],
            f"bytes={len(DATA) - 1}-",
            "its last byte, asked again",
        )
        self.assertEqual(
            len(self.requests), 2, "the run interrupted while reading the state sent nothing"
        )

    def test_a_file_changed_on_the_server_between_runs_starts_over(self) -> None:
        new = bytes(reversed(DATA))
        self.script(first_bytes_then_stall(DATA, 1_500_000))
        directory = self.tmp()
        self.kill_once_progressed(self.start_download_process(directory / "out.bin"))
        self.script(serve_file(new, etag='"v2"'))
        self.client().download(
            "files/x", directory / "out.bin", resume=True, sha256=hashlib.sha256(new).hexdigest()
        )
        self.assertEqual((directory / "out.bin").read_bytes(), new)
        self.assertEqual(self.requests[-1].headers["If-Range"], '"v1"')
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])

    def test_a_partial_file_of_another_url_is_not_continued(self) -> None:
        self.script(first_bytes_then_stall(DATA, 1_500_000))
        directory = self.tmp()
        self.kill_once_progressed(self.start_download_process(directory / "out.bin"))
        self.script(serve_file(DATA))
        self.client().download("files/other", directory / "out.bin", resume=True)
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assertIsNone(self.requests[-1].headers["Range"])

    def test_another_file_renamed_in_as_the_partial_file_is_not_continued(self) -> None:
        # Found in review (issue 35, M4): a teammate renamed another of the user's own files in as
        # .NAME.part between runs; the next run kept its first bytes, appended, and reported ok.
        directory = self.tmp()
        self.script(cut(DATA, 1_200_000, {"ETag": '"v1"'}))
        with self.assertRaises(dc.DatasetClientError):
            self.client(max_retries=0).download("files/x", directory / "out.bin", resume=True)
        partial, spare = directory / ".out.bin.part", directory / "spare.csv"
        spare.write_bytes(b"S" * partial.stat().st_size)
        spare.replace(partial)
        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "out.bin", resume=True)
        self.assertIsNone(self.requests[-1].headers["Range"], "started over")
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assertEqual(os.listdir(directory), ["out.bin"])

    def test_two_processes_to_one_destination_at_once(self) -> None:
        look = self.serve_two_at_once()
        directory = self.tmp()
        processes = [
            self.start_download_process(directory / "out.bin", sha256=DATA_SHA) for _ in range(2)
        ]
        during = [
            name for name in look(directory) if not name.endswith(".lock")
        ]  # no flock: a lock file too
        for process in processes:
            self.assertEqual(process.wait(30), 0, process.stderr.read() if process.stderr else b"")
        self.assertEqual(len(during), 2)
        self.assertIn(".out.bin.part", during, "one of them holds the resumable file")
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])

    def test_a_save_cut_short_leaves_no_stray_file(self) -> None:
        directory = self.tmp()
        stray = directory / ".out.bin.part.json.tmp"
        stray.write_text("{")  # what kill -9 in the middle of saving the state leaves
        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "out.bin", resume=True)
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])
        partial, covered = directory / ".again.bin.part", [0]

        def replace(
            source: str, destination: str, **at: Any
        ) -> None:  # Ctrl-C inside a state's rename, once 1 MiB is kept
            if destination.endswith(".part.json") and partial.stat().st_size > 1024 * 1024:
                raise KeyboardInterrupt
            os_replace(source, destination, **at)
            if destination.endswith(".part.json"):
                covered[0] = partial.stat().st_size  # what this whole save describes

        os_replace = os.replace
        self.script(serve_file(DATA))
        with mock.patch("os.replace", replace), self.assertRaises(KeyboardInterrupt):
            self.client().download("files/x", directory / "again.bin", resume=True)
        left = sorted(p.name for p in directory.iterdir())
        self.assertEqual(left, [".again.bin.part", ".again.bin.part.json", "out.bin"])
        self.assertGreater(covered[0], 0)
        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "again.bin", resume=True, sha256=DATA_SHA)
        self.assertEqual(
            self.requests[-1].headers["Range"], f"bytes={covered[0]}-", "from the last whole save"
        )
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["again.bin", "out.bin"])

    def test_a_failure_keeps_what_can_be_resumed_and_nothing_else(self) -> None:
        directory = self.tmp()
        cases: list[tuple[str, Respond, dict[str, Any], list[str]]] = [
            (
                "cut with a validator",
                cut(DATA, 1_200_000, {"ETag": '"v1"'}),
                {},
                [".out.bin.part", ".out.bin.part.json"],
            ),
            ("cut without a validator", cut(DATA, 1_200_000), {}, []),
            ("an error status", reply(404, {"message": "gone"}), {}, []),
            ("a wrong digest", serve_file(DATA), {"sha256": "0" * 64}, []),
        ]
        for name, respond, options, left in cases:
            self.script(respond)
            with self.subTest(name), self.assertRaises(dc.DatasetClientError):
                self.client(max_retries=0).download(
                    "files/x", directory / "out.bin", resume=True, **options
                )
            self.assertEqual(sorted(p.name for p in directory.iterdir()), left)
            for path in directory.iterdir():
                path.unlink()


class StateFileTests(ServerTestCase):
    """A crafted or damaged state is discarded: the download starts over, and the next run too is fine."""

    def prepare(self, state: object, *, raw: bytes | None = None) -> Path:
        directory = self.tmp()
        (directory / ".out.bin.part").write_bytes(DATA[:1000])
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (directory / ".out.bin.part.json").touch(0o600)
        (directory / ".out.bin.part.json").write_bytes(
            raw if raw is not None else json.dumps(state).encode()
        )
        return directory

    def sound_state(self) -> dict[str, Any]:
        """A state that holds: DATA's first 1000 bytes kept of files/x."""
        url = self.server.url + "/api/v1/files/x"
        return {
            "url": url,
            "validator": '"v1"',
            "total": len(DATA),
            "parts": [[0, len(DATA), 1000]],
        }

    def test_states_that_do_not_hold_are_discarded(self) -> None:
        good = self.sound_state()
        cases: dict[str, object] = {
            "parts ending early": {**good, "parts": [[0, 1000, 1000]]},
            "a gap between parts": {**good, "parts": [[0, 1000, 1000], [2000, len(DATA), 0]]},
            "total not a number": {**good, "total": "x"},
            "total a boolean": {**good, "total": True},
            "CR LF in the validator": {**good, "validator": '"v1"\r\nX-Evil: 1'},
            "an empty validator": {**good, "validator": ""},
            "a negative start": {**good, "parts": [[-5, len(DATA), 0]]},
            "done past the end": {**good, "parts": [[0, len(DATA), len(DATA) + 7]]},
            "a part of two numbers": {**good, "parts": [[0, len(DATA)]]},
            "parts not a list": {**good, "parts": "0-100"},
            "not an object": [1, 2, 3],
            "saved with another partial file": {**good, "file": [0, 0, 1000]},
            "its partial file an object": {**good, "file": {"st_ino": 1}},
            "its partial file an empty list": {**good, "file": []},
        }
        directory = self.prepare(
            good
        )  # the control: the sound state these are made from is taken up
        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "out.bin", resume=True, sha256=DATA_SHA)
        self.assertEqual([r.headers["Range"] for r in self.requests], ["bytes=1000-"])
        for name, state in cases.items():
            with self.subTest(name):
                self.server.requests.clear()
                directory = self.prepare(state)
                for _ in range(2):  # and the next run is fine too
                    self.script(serve_file(DATA))
                    self.client().download(
                        "files/x", directory / "out.bin", resume=True, sha256=DATA_SHA
                    )
                    self.assertEqual((directory / "out.bin").read_bytes(), DATA)
                    self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])
                self.assertEqual(
                    [r.headers["Range"] for r in self.requests], [None, None], "started over"
                )

    def test_a_state_saved_before_a_remount_is_taken_up(self) -> None:
        # Found in review (issue 37, F2): mounted again (a container's restart: overlayfs, NFS,
        # btrfs, tmpfs), the partial file kept its inode under another device number, and the
        # resume started over. A state of the earlier scheme, [dev, ino], is read as well.
        for recorded in ("[dev + 1, ino]", "[dev, ino]"):
            with self.subTest(recorded):
                self.server.requests.clear()
                directory = self.prepare(None)
                state = self.sound_state()
                partial = (directory / ".out.bin.part").stat()
                dev, ino = partial.st_dev, partial.st_ino
                file = [dev + 1, ino] if recorded == "[dev + 1, ino]" else [dev, ino]
                # Made as the client saves a state: no one else may write it (whatever the umask).
                (directory / ".out.bin.part.json").touch(0o600)
                (directory / ".out.bin.part.json").write_text(json.dumps({**state, "file": file}))
                self.script(serve_file(DATA))
                self.client().download(
                    "files/x", directory / "out.bin", resume=True, sha256=DATA_SHA
                )
                self.assertEqual([r.headers["Range"] for r in self.requests], ["bytes=1000-"])
                self.assertEqual((directory / "out.bin").read_bytes(), DATA)
                self.assertEqual([r.headers["If-Range"] for r in self.requests], ['"v1"'])
                self.assertEqual(os.listdir(directory), ["out.bin"], "the state's side files gone")

    def test_a_state_others_may_write_is_not_taken_up(self) -> None:
        # Found in review (issue 37): in a 2775 team directory a teammate wrote a state into one of
        # the user's group-writable files and renamed it in as .NAME.part.json, and the user's 0600
        # file in as .NAME.part (no inode in the state: one of an earlier version); resume=True
        # kept that file's bytes and committed them at 0664, for the teammate to read.
        for mode, asked in ((0o600, "bytes=1000-"), (0o620, None), (0o602, None)):
            with self.subTest(mode=oct(mode)):
                self.server.requests.clear()
                directory = self.prepare(self.sound_state())
                (directory / ".out.bin.part").write_bytes(b"S" * 1000)
                os.chmod(directory / ".out.bin.part.json", mode)
                self.script(serve_file(DATA))
                self.client().download("files/x", directory / "out.bin", resume=True)
                self.assertEqual([r.headers["Range"] for r in self.requests], [asked])
                kept = b"S" * 1000 + DATA[1000:] if asked else DATA
                self.assertEqual((directory / "out.bin").read_bytes(), kept)
                self.assertEqual(os.listdir(directory), ["out.bin"])

    def test_a_state_larger_than_1_mib_is_not_read(self) -> None:
        url = self.server.url + "/api/v1/files/x"
        state = json.dumps(
            {"url": url, "validator": '"v1"', "total": len(DATA), "parts": [[0, len(DATA), 1000]]}
        )
        for size, asked in (
            (1024 * 1024, "bytes=1000-"),
            (1024 * 1024 + 1, None),
        ):  # 1 MiB is read, 1 byte more not
            with self.subTest(size=size):
                self.server.requests.clear()
                directory = self.prepare(None, raw=state.encode().ljust(size))
                self.script(serve_file(DATA))
                self.client().download("files/x", directory / "out.bin", resume=True)
                self.assertEqual((directory / "out.bin").read_bytes(), DATA)
                self.assertEqual([r.headers["Range"] for r in self.requests], [asked])

    def test_a_fifo_or_a_link_to_a_device_as_the_state_never_hangs(self) -> None:
        for kind in ("fifo", "link to /dev/zero"):
            with self.subTest(kind):
                directory = self.tmp()
                (directory / ".out.bin.part").write_bytes(DATA[:1000])
                state = directory / ".out.bin.part.json"
                if kind == "fifo":
                    os.mkfifo(state)
                else:
                    state.symlink_to("/dev/zero")
                self.script(serve_file(DATA))
                outcome: list[object] = []
                download = functools.partial(
                    self.client().download, "files/x", directory / "out.bin", resume=True
                )
                thread = threading.Thread(
                    target=lambda o=outcome, d=download: o.append(outcome_of(d)), daemon=True
                )
                thread.start()
                thread.join(10)
                self.assertFalse(thread.is_alive(), "the download hangs on the state file")
                self.assertEqual(outcome, [None])
                self.assertEqual((directory / "out.bin").read_bytes(), DATA)
                self.assertTrue(os.path.lexists(state), "what is not ours is left alone")

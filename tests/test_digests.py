"""The server's digests (Repr-Digest, Content-Digest, the legacy Digest) and the caller's
sha256: each checked, never trusted blindly.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import itertools
import json
import threading
import time
from collections.abc import Callable
from unittest import mock

import dataset_client as dc
from tests.support import (
    CA_FILE,
    DATA,
    KEY,
    SMALL,
    Handler,
    ServerTestCase,
    Verified,
    cut,
    digest_field,
    outcome_of,
    part_threads,
    reply,
    serve_file,
    serve_parts,
    server_tls_context,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests

SMALL_SHA = hashlib.sha256(SMALL).hexdigest()


class ServerDigestTests(ServerTestCase):
    def ranges(self) -> list[str | None]:
        return [r.headers.get("Range") for r in self.requests]

    def test_a_wrong_server_digest_is_a_checksum_mismatch_and_nothing_is_left(self) -> None:
        other = b"another file"
        cases = [
            ("Repr-Digest", "sha-256", digest_field(other)),
            ("Repr-Digest", "sha-512", digest_field(other, "sha-512")),
            (
                "Content-Digest",
                "sha-256",
                digest_field(other),
            ),  # a 200 without a content coding: the file's
            ("Digest", "sha-512", digest_field(other, "sha-512", legacy=True)),
        ]
        for header, algorithm, value in cases:
            with self.subTest(header=header, algorithm=algorithm):
                self.server.requests.clear()
                self.server.default = serve_parts(SMALL, headers={header: value})
                directory = self.tmp()
                with self.assertRaises(dc.ChecksumMismatchError) as caught:
                    self.client().download("files/x", directory / "out.bin", resume=True)
                name = algorithm.replace("-", "")
                self.assertEqual(
                    str(caught.exception),
                    f"{header} ({algorithm}) mismatch for {self.server.url}/api/v1/files/x: "
                    f"expected {hashlib.new(name, other).hexdigest()}, got {hashlib.new(name, SMALL).hexdigest()}",
                )
                self.assertEqual(
                    list(directory.iterdir()), [], "the partial file is not the file: discarded"
                )
                self.assertEqual(self.ranges(), [None], "one GET of the whole file")

    def test_right_digests_of_each_kind_verify_the_file(self) -> None:
        headers = {
            "Repr-Digest": digest_field(SMALL) + ", " + digest_field(SMALL, "sha-512"),
            "Digest": digest_field(SMALL, legacy=True),
        }
        self.server.default = serve_parts(SMALL, headers=headers)
        out, progress = self.tmp() / "out.bin", Verified()
        self.client().download(
            "files/x", out, progress=progress, sha256=SMALL_SHA, verified=progress.verified.append
        )
        self.assertEqual(out.read_bytes(), SMALL)
        expected = ["sha256", "Repr-Digest (sha-256)", "Repr-Digest (sha-512)", "Digest (sha-256)"]
        self.assertEqual(progress.verified, expected)
        self.assertEqual(self.ranges(), [None])

    def test_checks_passed_after_a_redirect_from_https_to_http_say_the_bytes_came_in_clear(
        self,
    ) -> None:
        # Issue 30: the summary said "verified by the server's Repr-Digest" of bytes a redirect sent in clear.
        tls = self.start_server(server_tls_context())
        tls.default = reply(302, headers={"Location": f"{self.server.url}/files/x"})
        self.server.default = serve_parts(SMALL, headers={"Repr-Digest": digest_field(SMALL)})
        checks: list[str] = []
        self.client(tls.url, ca_bundle=CA_FILE).download(
            "f", io.BytesIO(), sha256=SMALL_SHA, verified=checks.append
        )
        self.assertEqual(
            checks, ["sha256 over plain HTTP", "Repr-Digest (sha-256) over plain HTTP"]
        )
        self.assertEqual(
            ([r.path for r in tls.requests], [r.path for r in self.requests]),
            (["/f"], ["/files/x"]),
        )
        checks.clear()
        self.client(self.server.url).download(
            "files/x", io.BytesIO(), sha256=SMALL_SHA, verified=checks.append
        )
        self.assertEqual(
            checks, ["sha256", "Repr-Digest (sha-256)"], "http:// from the start: as it is"
        )
        with self.assertRaisesRegex(TypeError, "^verified must be callable, not list"):
            self.client().download("files/x", io.BytesIO(), verified=checks)  # type: ignore[arg-type]

    def test_every_digest_is_checked_the_callers_too(self) -> None:
        self.server.default = serve_parts(SMALL, headers={"Repr-Digest": digest_field(SMALL)})
        with self.assertRaises(dc.ChecksumMismatchError) as caught:
            self.client().download("files/x", io.BytesIO(), sha256="0" * 64)
        self.assertTrue(str(caught.exception).startswith("sha256 mismatch for "), caught.exception)
        self.server.default = serve_parts(
            SMALL,
            headers={
                "Repr-Digest": digest_field(SMALL),
                "Digest": digest_field(b"other", legacy=True),
            },
        )
        with self.assertRaises(dc.ChecksumMismatchError) as caught:
            self.client().download("files/x", io.BytesIO(), sha256=SMALL_SHA)
        self.assertIn("Digest (sha-256) mismatch for ", str(caught.exception))

    def test_unknown_algorithms_and_malformed_values_are_ignored_never_trusted(self) -> None:
        headers = {
            "Repr-Digest": "md5=:AAAAAAAAAAAAAAAAAAAAAA==:, sha-256=:not base64!:, SHA-256=:"
            + 44 * "A"
            + ":",
            "Content-Digest": "sha-512=:" + base64.b64encode(b"short").decode() + ":",
            "Digest": "UNIXsum=1234, SHA-256=" + base64.b64encode(bytes(31)).decode() + ", sha-256",
        }
        self.server.default = serve_parts(SMALL, headers=headers)
        out, progress = io.BytesIO(), Verified()
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            self.client().download(
                "files/x", out, progress=progress, verified=progress.verified.append
            )
        self.assertEqual(out.getvalue(), SMALL)
        self.assertEqual(progress.verified, [], "nothing was verified: nothing is said to be")
        ignored = [line for line in logs.output if "ignored" in line]
        self.assertEqual(len(ignored), 7, logs.output)
        self.assertEqual(self.ranges(), [None])

    def test_a_parts_content_digest_is_checked_with_the_preferred_algorithm(self) -> None:
        # Issue 31: max() by name chose which of a 206's digests to check, so an algorithm sorting
        # after "sha-512" won (sha3-256, were the client to know it). Between sha-256 and sha-512
        # max() happened to pick sha-512; the order is explicit now: _DIGEST_ALGORITHMS's, sha-512 first.
        def stated(other: str) -> Callable[[bytes], str]:
            wrong = f"{other}=:{base64.b64encode(bytes(32)).decode()}:"
            return lambda body: f"{wrong}, {digest_field(body, 'sha-512')}"

        for other, known in (("sha-256", {}), ("sha3-256", {"sha3-256": "sha3_256"})):
            with self.subTest(other=other), mock.patch.dict(dc._DIGEST_ALGORITHMS, known):
                self.server.requests.clear()
                self.server.default = serve_parts(DATA, part_digest=stated(other))
                out = self.tmp() / "out.bin"
                self.client().download("files/x", out, connections=3)
                self.assertEqual(out.read_bytes(), DATA)
                self.assertEqual(len(self.ranges()), 3, "no part fetched again: sha-512 matched")

    def test_a_restart_ends_the_hashing_thread_of_every_part(self) -> None:
        # Found in the shed (issue 31): a restart ended the first part's Content-Digest hash only; a
        # part cut short when another found the file changed kept its hashing thread, for good.
        third, freed = len(DATA) // 3, threading.Event()
        headers: dict[str, str] = {}
        parts = serve_parts(DATA, headers=headers)

        def respond(handler: Handler) -> None:
            asked = handler.headers.get("Range", "")
            if asked == f"bytes={third}-{2 * third - 1}" and not headers:  # the second part: cut
                body = DATA[third : 2 * third]
                handler.send_response(206)
                handler.send_header("Content-Length", str(len(body)))
                handler.send_header("ETag", '"v1"')
                handler.send_header("Content-Range", f"bytes {third}-{2 * third - 1}/{len(DATA)}")
                handler.send_header("Content-Digest", digest_field(body))
                handler.end_headers()
                handler.wfile.write(body[:1000])
                freed.wait(10)  # the client's read of it is ended when the third finds the change
                return
            if asked.startswith(f"bytes={2 * third}-") and not headers:  # the third: changed
                for _ in range(1000):  # once the second part's bytes are being hashed
                    if "dataset-client-sha256" in part_threads():
                        break
                    time.sleep(0.01)
                headers["ETag"] = '"v2"'
            parts(handler)

        self.server.default = respond
        out = self.tmp() / "out.bin"
        try:
            self.client().download("files/x", out, connections=3)
        finally:
            freed.set()
        self.assertEqual(out.read_bytes(), DATA)
        self.assertEqual(self.ranges()[3], None, "started over")
        self.assertEqual(part_threads(), [], "no hashing thread outlives the call")

    def test_a_wrong_content_digest_on_one_part_is_fetched_once_more_then_an_error(self) -> None:
        third = len(DATA) // 3
        expected_ranges = [None, f"bytes={third}-{2 * third - 1}", f"bytes={2 * third}-"]
        # With the file's own Repr-Digest the parts are checked once it fails; without, as they arrive.
        for flips, whole in itertools.product((1, 2), ({}, {"Repr-Digest": digest_field(DATA)})):
            with self.subTest(flips=flips, whole=whole):
                self.server.requests.clear()
                self.server.default = serve_parts(DATA, headers=whole, corrupt=[third] * flips)
                directory = self.tmp()
                download = functools.partial(
                    self.client().download, "files/x", directory / "out.bin"
                )
                outcome = outcome_of(functools.partial(download, connections=3, resume=True))
                ranges = self.ranges()
                self.assertEqual(sorted(set(ranges), key=str), sorted(expected_ranges, key=str))
                self.assertEqual(
                    ranges.count(expected_ranges[1]), 2, "the bad part, fetched once more"
                )
                self.assertEqual(len(ranges), 4, "the other parts kept")
                if flips == 1:
                    self.assertIsNone(outcome)
                    self.assertEqual((directory / "out.bin").read_bytes(), DATA)
                else:
                    self.assertIsInstance(outcome, dc.ChecksumMismatchError)
                    where = f"(bytes {third}-{2 * third - 1})"
                    self.assertIn(
                        f"Content-Digest (sha-256) mismatch for {self.server.url}/api/v1/files/x {where}: ",
                        str(outcome),
                    )
                    self.assertEqual(list(directory.iterdir()), [], "nothing left")

    def test_a_repr_digest_changed_on_a_resume_across_runs_starts_over(self) -> None:
        directory = self.tmp()
        head = {"ETag": '"v1"', "Accept-Ranges": "bytes", "Repr-Digest": digest_field(SMALL)}
        self.script(cut(SMALL, 100_000, head))
        with self.assertRaises(dc.IncompleteResponseError):
            self.client(max_retries=0).download("files/x", directory / "out.bin", resume=True)
        state = json.loads((directory / ".out.bin.part.json").read_text())
        self.assertEqual(
            state.get("digests"), [["Repr-Digest", "sha-256", SMALL_SHA]], "kept in the state"
        )
        changed = bytes(
            reversed(SMALL)
        )  # same size, same ETag: only its Repr-Digest says it is another
        self.server.requests.clear()
        self.server.default = serve_parts(changed, headers={"Repr-Digest": digest_field(changed)})
        self.client().download("files/x", directory / "out.bin", resume=True)
        self.assertEqual(
            (directory / "out.bin").read_bytes(), changed, "never spliced onto the first version"
        )
        self.assertEqual(self.requests[0].headers["If-Range"], '"v1"')
        self.assertTrue(self.requests[0].headers["Range"].startswith("bytes="))
        self.assertEqual(self.ranges()[1:], [None], "started over")

    def test_a_repr_digest_changed_on_a_part_is_another_version(self) -> None:
        first = {"Repr-Digest": digest_field(DATA)}
        parts = {"Repr-Digest": digest_field(b"other")}

        def respond(handler: Handler) -> None:
            headers = parts if "Range" in handler.headers else first
            serve_parts(DATA, headers=headers)(handler)

        self.server.default = respond
        directory = self.tmp()
        with self.assertRaises(dc.InvalidResponseError) as caught:
            self.client().download("files/x", directory / "out.bin", connections=2)
        self.assertIn(
            "the file changed on the server during each of 4 tries", str(caught.exception)
        )
        self.assertEqual(list(directory.iterdir()), [])
        self.assertEqual(self.ranges().count(None), 4, "started over each time")

    def test_a_part_fetched_again_is_logged_without_the_key_in_its_url(self) -> None:
        # Found in review2: the "fetched again" warnings logged the URL as given, key and all.
        third = len(DATA) // 3
        for whole in (
            {},
            {"Repr-Digest": digest_field(DATA)},
        ):  # checked as they arrive, or once the file fails
            with self.subTest(whole=whole):
                self.server.requests.clear()
                self.server.default = serve_parts(DATA, headers=whole, corrupt=[third])
                out = self.tmp() / "out.bin"
                with self.assertLogs("dataset_client", level="WARNING") as logs:
                    self.client().download(f"files/x?token={KEY}", out, connections=3)
                self.assertEqual(out.read_bytes(), DATA)
                self.assertTrue(
                    all(r.path.endswith(f"?token={KEY}") for r in self.requests), "the key went"
                )
                again = [line for line in logs.output if "fetched again" in line]
                self.assertEqual(len(again), 1, logs.output)
                self.assertIn("files/x?token=<redacted>", again[0])
                self.assertNotIn(KEY, "\n".join(logs.output))

    def test_a_digest_field_of_thousands_of_members_is_looked_at_no_further_than_its_first_few(
        self,
    ) -> None:
        # Found in review2: 100 fields of 64 KiB of commas were 6.5 million members, each parsed and
        # logged: seconds of CPU for each response, past any deadline. A field's 17th member on is ignored.
        junk = "," * 20_000
        headers = {
            "Repr-Digest": junk + digest_field(SMALL),
            "Digest": "md5=x, " * 16 + digest_field(SMALL, legacy=True),
        }
        self.server.default = serve_parts(SMALL, headers=headers)
        out, progress = io.BytesIO(), Verified()
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            self.client().download("files/x", out, progress=progress)
        self.assertEqual(out.getvalue(), SMALL)
        self.assertEqual(
            progress.verified,
            [],
            "a digest past the first 16 members is not looked at: never trusted",
        )
        ignored = [line for line in logs.output if "ignored" in line]
        self.assertEqual(len(ignored), 2 * 17, "16 members and the rest, for each field")
        self.assertEqual(self.ranges(), [None])


class SmallFileHashTests(ServerTestCase):
    def test_a_file_of_one_read_is_hashed_without_a_thread(self) -> None:
        # A thread for the hash costs more than hashing a small file: one of at most a read (1 MiB)
        # is hashed as it arrives; a larger one's rest goes to the thread, as before.
        for size, threads in ((64 * 1024, 0), (3 * 1024 * 1024, 1)):
            with self.subTest(size=size):
                data = bytes(range(256)) * (size // 256)
                self.script(serve_file(data))
                out = io.BytesIO()
                starts = dc._Digest._start
                with mock.patch.object(dc._Digest, "_start", autospec=True) as start:
                    start.side_effect = starts
                    self.client().download("files/x", out, sha256=hashlib.sha256(data).hexdigest())
                self.assertEqual(start.call_count, threads)
                self.assertEqual(out.getvalue(), data)
                self.assertEqual(self.requests[-1].path, "/api/v1/files/x")
        with self.assertRaises(dc.ChecksumMismatchError):
            self.script(serve_file(b"x" * 1000))
            self.client().download("files/x", io.BytesIO(), sha256="0" * 64)

    def test_ctrl_c_as_the_hashing_thread_starts_still_ends_it(self) -> None:
        # Found in review (issue 35, L4): Ctrl-C inside the hashing thread's start() left the
        # digest without its queue: close() raised AttributeError ('NoneType' has no attribute
        # 'put') in place of the KeyboardInterrupt, and the thread stayed blocked.
        start = threading.Thread.start

        def start_then_ctrl_c(thread: threading.Thread) -> None:
            start(thread)
            raise KeyboardInterrupt

        digest = dc._Digest(None, ["sha256"])
        with (
            mock.patch.object(threading.Thread, "start", start_then_ctrl_c),
            self.assertRaises(KeyboardInterrupt),
        ):
            digest.add(b"x" * (dc._Digest.inline + 1))
        digest.close()
        self.assertFalse(digest._thread and digest._thread.is_alive())

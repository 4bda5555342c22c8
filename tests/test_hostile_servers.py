"""What a hostile or broken server can send: framing that disagrees with itself, bodies that
would cost unbounded memory, text at its extremes.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import json
import os
import re
import socket
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient, ServiceError
from tests.support import (
    BIG,
    DATA,
    EXPORT_V,
    KEY,
    Handler,
    Respond,
    ServerTestCase,
    cut,
    outcome_of,
    raw_server,
    reply,
    run_measuring_child,
    serve_file,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests

INVISIBLE = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u200c\u200d\u2060\ufeff\u2028\u2029"
RAW_INVISIBLE = re.compile(f"[{INVISIBLE}\ud800-\udfff]")  # what must not reach a terminal either


class FramingTests(ServerTestCase):
    """Lengths and ranges that disagree, heads cut off, a flood of interim responses."""

    def test_two_different_content_lengths_are_refused(self) -> None:
        def ambiguous(handler: Handler) -> None:
            handler.wfile.write(
                b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Length: 200\r\nETag: "v1"\r\n\r\n'
                + DATA[:100]
            )
            handler.close_connection = True

        self.server.default = ambiguous
        directory = self.tmp()
        with self.assertRaisesRegex(dc.InvalidResponseError, "ambiguous Content-Length 100, 200"):
            self.client().download("files/x", directory / "out.bin")
        self.assertEqual(list(directory.iterdir()), [])
        with self.assertRaises(dc.InvalidResponseError):
            self.client().list_datasets()
        self.assertEqual(len(self.requests), 2, "not retried")

    def test_a_content_length_that_is_not_one_number_is_refused(self) -> None:
        def raw(length: str) -> Respond:
            def respond(handler: Handler) -> None:
                handler.wfile.write(
                    f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n[1, 2]".encode("latin-1")
                )

            return respond

        client = self.client(max_retries=0)
        for length in ("abc", "-6", "\u00b2", "6 6", "6, 6"):
            self.script(raw(length))
            with (
                self.subTest(length=length),
                self.assertRaisesRegex(dc.InvalidResponseError, "ambiguous Content-Length"),
            ):
                client.list_datasets()
        self.script(raw("6"))
        self.assertEqual(client.list_datasets(), [1, 2])

    def test_a_206_that_runs_past_its_content_range_is_refused(self) -> None:
        def longer(handler: Handler, chunked: bool) -> None:
            extra = b"x" * 5000
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes 1000-{len(DATA) - 1}/{len(DATA)}")
            handler.send_header("ETag", '"v1"')
            if chunked:
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                for part in (DATA[1000:], extra):
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                handler.wfile.write(b"0\r\n\r\n")
            else:
                handler.send_header("Content-Length", str(len(DATA) - 1000 + len(extra)))
                handler.end_headers()
                handler.wfile.write(DATA[1000:] + extra)

        for chunked in (False, True):
            self.script(
                cut(DATA, 1000, {"ETag": '"v1"'}), functools.partial(longer, chunked=chunked)
            )
            directory = self.tmp()
            with (
                self.subTest(chunked=chunked),
                self.assertRaises(dc.InvalidResponseError) as caught,
            ):
                self.client().download("files/x", directory / "out.bin")
            self.assertRegex(str(caught.exception), "Content-Range|runs past")
            self.assertEqual(list(directory.iterdir()), [])
            ranges = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests[-2:]]
            self.assertEqual(
                ranges, [(None, None), ("bytes=1000-", '"v1"')], "refused only once resumed"
            )
            self.server.script.clear()

    def test_a_206_without_content_range_is_an_invalid_response(self) -> None:
        # Found in the third review (issue 30): a bare TypeError, to a resume and to a part.
        def respond(handler: Handler) -> None:
            if "Range" not in handler.headers:
                return serve_file(BIG)(handler)
            start = int(handler.headers["Range"][6:].split("-")[0])
            reply(206, BIG[start:], {"ETag": '"v1"'}, content_type="application/x")(handler)

        self.server.default = respond
        for connections in (1, 4):
            with self.subTest(connections=connections):
                self.server.requests.clear()
                if connections == 1:  # the first response is cut: the resume gets the 206
                    self.script(cut(BIG, 100_000, {"ETag": '"v1"', "Accept-Ranges": "bytes"}))
                out = self.tmp() / "big.bin"
                client = self.client()
                invalid = self.assertRaisesRegex(dc.InvalidResponseError, "without Content-Range")
                with invalid as caught:
                    client.download("files/big", out, connections=connections)
                attempts = 2 if connections == 1 else 1  # never asked again
                self.assertEqual(caught.exception.attempts, attempts)
                self.assertEqual(list(out.parent.iterdir()), [])
                ranges = [r.headers["Range"] for r in self.requests]
                self.assertIsNone(ranges[0])
                if connections == 1:
                    self.assertEqual(ranges, [None, "bytes=100000-"])
                else:
                    self.assert_parts_asked_once(ranges[1:])

    def assert_parts_asked_once(self, ranges: list[str]) -> None:
        """``ranges`` are some of BIG's last three quarters, each asked once: the first part
        to fail stops the others, and a part stopped before it sent has asked nothing."""
        quarters = [len(BIG) * index // 4 for index in range(1, 4)]
        parts = {f"bytes={quarters[0]}-{quarters[1] - 1}"}
        parts |= {f"bytes={quarters[1]}-{quarters[2] - 1}", f"bytes={quarters[2]}-"}
        self.assertTrue(ranges, "a part was asked for")
        self.assertLessEqual(set(ranges), parts, "each part with its own range")
        self.assertEqual(len(ranges), len(set(ranges)), "each part asked once")

    def test_a_flood_of_interim_responses_is_refused(self) -> None:
        def flood(connection: socket.socket) -> None:
            connection.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" * 150)

        client = self.client(raw_server(self, flood), max_retries=2)
        with self.assertRaisesRegex(
            dc.InvalidResponseError, r"more than 100 interim \(1xx\) responses"
        ) as caught:
            client.list_datasets()
        self.assertEqual(
            caught.exception.attempts, 1, "not retried: the same server would flood again"
        )

    def test_a_head_cut_off_before_its_blank_line_is_an_incomplete_response(self) -> None:
        heads = [b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nContent-Le', b"HTTP/1.1 200 O"]
        sent: list[bytes] = []

        def cut_head(connection: socket.socket) -> None:
            sent.append(heads[len(sent) % 2])
            connection.sendall(sent[-1])

        destination = self.tmp() / "out.bin"
        destination.write_bytes(b"the good old file")
        client = self.client(raw_server(self, cut_head), max_retries=1)
        with self.assertRaisesRegex(
            dc.IncompleteResponseError, "middle of the response's headers"
        ) as caught:
            client.download("files/x", destination)
        self.assertEqual(caught.exception.attempts, 2, "retried like any cut response")
        self.assertEqual(destination.read_bytes(), b"the good old file")
        self.assertEqual(sorted(p.name for p in destination.parent.iterdir()), ["out.bin"])
        with self.assertRaises(dc.IncompleteResponseError):
            client.list_datasets()


class BodyBoundsTests(ServerTestCase):
    """What a body can cost: compressed, nested, endless or in tiny chunks, memory stays bounded."""

    def test_a_decompression_bomb_is_refused_before_the_memory_is_used(self) -> None:
        member = gzip.compress(b"\0" * (8 * 1024 * 1024), compresslevel=9)  # 8 KiB on the wire
        bomb = member * 256  # a valid gzip body of 256 members: 2 MiB that inflate to 2 GiB
        self.script(reply(body=bomb, headers={"Content-Encoding": "gzip"}))
        code = (  # a limit of 32 MiB, not 256: the same refusal, an eighth of the inflating
            "dc._MAX_DECODED_BODY = 32 * 2**20\n"
            "grown, error = peak_growth(client.list_datasets)\n"
            "print(type(error).__name__, error)\n"
            "print('growth:', grown)\n"
        )
        refusal, growth = run_measuring_child(self, code, self.server.url + "/api/v1")
        self.assertRegex(refusal, "^InvalidResponseError .*decompression bomb")
        # About 72 MiB here, the limit's decoded bytes and a copy; without a limit, RLIMIT_AS stops the child.
        self.assertLess(
            int(growth.split()[1]), 128 * 1024 * 1024, "inflated far past the limit before refusing"
        )
        self.assertEqual([(r.method, r.path) for r in self.requests], [("GET", "/api/v1/datasets")])

    def test_a_body_of_thousands_of_gzip_members_costs_what_its_size_costs(self) -> None:
        # 30,000 members of 20 bytes each, the last holding the JSON: fed whole, each member had zlib copy
        # all that followed it (quadratic: minutes for a few megabytes). Counted in bytes fed, not timed.
        members = gzip.compress(b"", mtime=0) * 30000 + gzip.compress(b'{"ok": true}', mtime=0)
        self.script(reply(body=members, headers={"Content-Encoding": "gzip"}))
        fed: list[int] = []
        real = zlib.decompressobj

        class Counting:
            def __init__(self, **options: Any) -> None:
                self.decoder = real(**options)

            def decompress(self, data: Any, max_length: int = 0) -> bytes:
                fed.append(len(data))
                return self.decoder.decompress(data, max_length)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.decoder, name)

        with mock.patch.object(dc.zlib, "decompressobj", Counting):
            self.assertEqual(self.client().list_datasets(), {"ok": True})
        self.assertEqual(self.requests[0].headers["Accept-Encoding"], "gzip")
        self.assertLessEqual(
            sum(fed), 40 * len(members), "each member fed a bounded piece, not all the rest"
        )

    def test_a_json_body_costs_at_most_twice_its_size_whole_chunked_or_gzipped(self) -> None:
        # Found in review: a 2 MB JSON body in 1-byte chunks peaked at 3.6 times its size (the body,
        # its text and the result at once; and http.client's read(n) joins a read's chunks through
        # 80 bytes each). Peaks measured by tracemalloc, the server's few allocations included.
        size = 2 * 1024 * 1024
        body = b'"' + b"x" * (size - 2) + b'"'

        def chunked(data: bytes, tiny: int) -> bytes:  # its last ``tiny`` bytes in 1-byte chunks
            cut, step = len(data) - tiny, 64 * 1024
            pieces = [data[at : min(at + step, cut)] for at in range(0, cut, step)]
            pieces += [data[at : at + 1] for at in range(cut, len(data))]
            frames = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
            return b"Transfer-Encoding: chunked\r\n\r\n" + frames + b"0\r\n\r\n"

        packed = gzip.compress(body)
        responses = {
            "whole": b"Content-Length: %d\r\n\r\n%s" % (size, body),
            "chunked, its last 32 KiB in 1-byte chunks": chunked(body, 32 * 1024),
            "gzip": b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed) + packed,
            "gzip in 1-byte chunks": b"Content-Encoding: gzip\r\n" + chunked(packed, len(packed)),
        }
        for case, response in responses.items():
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            sent = head + response
            client = self.client(raw_server(self, lambda sock: sock.sendall(sent)))  # noqa: B023
            with self.subTest(case=case):
                client.list_datasets()  # once before: first-use allocations (coverage.py's) aside
                tracemalloc.start()
                try:
                    before = tracemalloc.get_traced_memory()[0]
                    result = client.list_datasets()
                    peak = tracemalloc.get_traced_memory()[1] - before
                finally:
                    tracemalloc.stop()
                self.assertEqual(result, body[1:-1].decode())
                # Twice the size, and a read's buffer and the server's.
                self.assertLessEqual(peak, 2 * size + 128 * 1024, f"{peak / size:.2f} times")
            del result

    def test_an_error_body_is_kept_decoded_and_bounded_whatever_its_compressed_size(self) -> None:
        message = {"message": "overloaded", "detail": os.urandom(300_000).hex()}
        compressed = gzip.compress(json.dumps(message).encode())
        self.assertGreater(len(compressed), 64 * 1024)
        self.script(reply(500, compressed, {"Content-Encoding": "gzip"}))
        with self.assertRaises(ServiceError) as caught:
            self.client().list_datasets()
        body = caught.exception.body
        self.assertEqual(len(body), 64 * 1024)
        self.assertTrue(body.startswith('{"message": "overloaded"'), body[:40])

    def test_an_endless_body_or_one_in_tiny_chunks_in_a_child_under_a_memory_limit(self) -> None:
        size = 1024 * 1024  # at least this much, or the allocator's noise hides the growth
        body = b'"' + b"x" * (size - 2) + b'"'

        def chunked(piece: int, endless: bool = False) -> Respond:
            def respond(handler: Handler) -> None:
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                with contextlib.suppress(OSError):
                    for _ in range(10_000 if endless else 1):
                        data = b"[" + b"1," * (1024 * 1024) if endless else body
                        frames = b"".join(
                            b"%x\r\n%s\r\n" % (len(data[i : i + piece]), data[i : i + piece])
                            for i in range(0, len(data), piece)
                        )
                        handler.wfile.write(frames)
                    handler.wfile.write(b"0\r\n\r\n")
                handler.close_connection = True

            return respond

        code = (
            "dc._MAX_DECODED_BODY = 16 * 2**20\n"
            "growth = [peak_growth(client.list_datasets)[0] for case in ('whole', 'tiny')]\n"
            "print('endless:', peak_growth(client.list_datasets)[1])\n"
            "print('growth:', *growth)\n"
        )
        self.script(reply(200, body), chunked(4), chunked(1024 * 1024, endless=True))
        endless, growth = run_measuring_child(self, code, self.server.url + "/api/v1")
        self.assertIn("refused", endless)
        whole, tiny = map(int, growth.split()[1:])
        # Read whole, tiny chunks cost a Python object each: 90 times the body for 1-byte chunks, 14 for
        # these 4-byte ones (a quarter of the time to send). Now about what the body sent whole costs,
        # plus twice its size (2.6-6.1 MB against 1.1-3.0 MB for 1 MiB: the allocator's reuse of freed
        # memory moves both). The bound leaves room for that noise.
        self.assertLessEqual(
            tiny, max(whole, 2 * size) + 4 * size, f"4-byte chunks: {tiny} bytes against {whole}"
        )


class HostileTextTests(ServerTestCase):
    """Text at its extremes, from a server or the user's own settings: never a bare exception,
    nothing invisible on the terminal.
    """

    def cli(
        self, *argv: str, terminal: bool = False, environment: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        """main() against the scripted server, with a strict UTF-8 stdout (as a real one; ``terminal``: it says
        it is one) and a HOME of its own; its status, stdout and stderr."""

        class Stream(io.TextIOWrapper):
            def isatty(self) -> bool:
                return terminal

        out = Stream(io.BytesIO(), encoding="utf-8", newline="")
        err = Stream(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
        kept = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        base = {
            "DATASET_CLIENT_BASE_URL": self.server.url + "/api/v1",
            "DATASET_CLIENT_API_KEY": KEY,
            "COLUMNS": "80",
        }
        with (
            mock.patch.dict(
                os.environ,
                {**kept, "HOME": str(self.tmp()), **base, **(environment or {})},
                clear=True,
            ),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            status = cli.main(list(argv))
        out.flush()
        err.flush()
        printed = [stream.buffer.getvalue().decode() for stream in (out, err)]  # type: ignore[attr-defined]
        self.assertNotIn("Traceback", printed[1])
        return status, printed[0], printed[1]

    def test_numbers_of_thousands_of_digits_are_the_clients_errors(self) -> None:
        digits = "9" * 5000
        destination = self.tmp() / "out.bin"
        cases: list[tuple[Respond, Callable[[DatasetClient], object]]] = [
            (
                reply(headers={"Content-Length": digits}),
                lambda client: client.list_datasets(),
            ),  # int() refuses
            (
                reply(headers={"Content-Length": digits[:4000]}),
                lambda client: client.download("f", destination),
            ),
            (
                reply(206, b"abc", {"Content-Range": f"bytes 0-{digits}/{digits}"}),
                lambda client: client.download("f", destination, connections=2),
            ),
        ]
        for respond, call in cases:
            self.requests.clear()
            self.script(respond)
            error = outcome_of(lambda: call(self.client(max_retries=0)))  # noqa: B023
            with self.subTest(error=str(error)[:100]):
                self.assertIsInstance(error, dc.InvalidResponseError)
                self.assertLess(len(str(error)), 300, "the digits are not repeated whole")
                self.assertEqual(len(self.requests), 1)
                self.assertEqual(list(destination.parent.iterdir()), [])
        self.requests.clear()
        self.script(
            reply(503, b"", {"Retry-After": "9" * 400})
        )  # a float of it is inf: no sleep takes it
        error = outcome_of(lambda: self.client(max_retries=1).list_datasets())
        self.assertIsInstance(error, ServiceError)
        assert isinstance(error, ServiceError)
        self.assertEqual(
            (error.retry_after, len(self.requests)), (366 * 86400, 1), "not waited for"
        )
        self.script(reply(503, b"", {"Retry-After": "9" * 400}))
        status, out, err = self.cli("datasets")
        self.assertEqual((status, out), (1, ""))
        self.assertRegex(err, r"^dataset-client: error: 503 .*; try again in 8784:00:00\n$")

    def test_a_head_too_long_or_with_too_many_headers_is_a_network_error(self) -> None:
        heads = {
            "a 70 KiB line": b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n{}",
            "101 headers": b"HTTP/1.1 200 OK\r\n"
            + b"".join(b"X-%d: a\r\n" % n for n in range(101))
            + b"\r\n{}",
        }
        for case, head in heads.items():
            with self.subTest(case):
                answered = []
                # Counted before the head is sent: the client may have read it and given up before sendall() returns.
                url = raw_server(
                    self,
                    lambda connection, h=head, a=answered: (a.append(1), connection.sendall(h)),
                )  # type: ignore[misc]
                error = outcome_of(lambda u=url: self.client(u, max_retries=1).list_datasets())  # type: ignore[misc]
                self.assertIsInstance(error, dc.NetworkError)
                self.assertEqual(len(answered), 2, "retried, as any broken response")
                status, out, err = self.cli(
                    "--retries", "0", "datasets", environment={"DATASET_CLIENT_BASE_URL": url}
                )
                self.assertEqual((status, out, err.count("\n")), (3, "", 1), err)
                self.assertIn(
                    "when reading header line" if "line" in case else "more than 100 headers", err
                )

    def test_json_nested_deep_is_a_result_printed_whole_or_the_clients_error(self) -> None:
        deep = "[" * 800 + "]" * 800
        self.server.default = reply(body=f'[{{"name": "n", "deep": {deep}}}]'.encode())
        result = self.client().list_datasets()
        self.assertEqual(
            json.dumps(result, separators=(",", ":")), f'[{{"name":"n","deep":{deep}}}]'
        )
        status, out, err = self.cli("--output", "json", "datasets")
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(
            json.dumps(json.loads(out), separators=(",", ":")), f'[{{"name":"n","deep":{deep}}}]'
        )
        status, out, err = self.cli("--output", "table", "datasets")
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(out.splitlines()[2][:14], "n     [[[[[[[[", out[:300])
        self.assertEqual(out.splitlines()[-1], "(1 row)")
        thousands = "[" * 5000 + "]" * 5000
        self.server.default = reply(body=thousands.encode())
        outcome = outcome_of(
            lambda: self.client().list_datasets()
        )  # Python 3.13's json reads it; 3.11's refuses
        if isinstance(outcome, list):
            self.assertEqual(json.dumps(outcome, separators=(",", ":")), thousands)
            status, out, err = self.cli("--output", "json", "datasets")
            self.assertEqual(
                (status, err, json.dumps(json.loads(out), separators=(",", ":"))),
                (0, "", thousands),
            )
        else:
            self.assertIsInstance(outcome, dc.InvalidResponseError)
            status, out, err = self.cli("datasets")
            self.assertEqual((status, out), (1, ""))
            self.assertNotIn("Traceback", err)
        self.assertEqual({request.path for request in self.requests}, {"/api/v1/datasets"})

    def test_sizes_in_a_servers_message_are_left_as_the_server_wrote_them(self) -> None:
        message = f"the file is {'9' * 5000} bytes, more than 1048576 bytes"  # its words, not the library's
        self.script(reply(413, {"message": message}))
        status, out, err = self.cli("datasets")
        self.assertEqual((status, out), (1, ""))
        self.assertIn(f": {message}\n", err)
        self.assertEqual([request.path for request in self.requests], ["/api/v1/datasets"])

    def test_a_non_ascii_download_url_is_fetched_percent_encoded_as_utf8(self) -> None:
        self.server.default = serve_file(DATA[:1000])
        destination = self.tmp() / "out.bin"
        self.client().download(
            "files/r\u00e9sum\u00e9 \u6570.csv?name=\u00e9&q=%41"[:-1].replace(" ", ""), destination
        )
        self.assertEqual(destination.read_bytes(), DATA[:1000])
        self.assertEqual(
            self.requests[-1].path, "/api/v1/files/r%C3%A9sum%C3%A9%E6%95%B0.csv?name=%C3%A9&q=%4"
        )
        self.server.default = reply(body=[])
        self.assertEqual(
            self.client(self.server.url + "/b\u00e4se").list_datasets(), []
        )  # the user's own, as well
        self.assertEqual(self.requests[-1].path, "/b%C3%A4se/datasets")
        export = {"id": "e1", "download_url": "/files/\ud800.csv", "sha256": "0" * 64}
        self.script(reply(body=json.dumps(export).encode()))  # a lone surrogate: no UTF-8 for it
        argv = [
            *EXPORT_V,
            "--format",
            "csv",
        ]
        status, out, err = self.cli(*argv, "--output", "json", "--download", str(destination))
        self.assertEqual(status, 1, "the service's fault, not a usage error")
        self.assertIn('"download_url": "/files/\\ud800.csv"', out)
        self.assertRegex(
            err,
            r"^dataset-client: error: the export's download_url cannot be downloaded: .*\\ud800",
        )
        self.assertEqual(self.requests[-1].method, "POST", "nothing fetched")

    def test_a_lone_surrogate_in_a_result_is_escaped(self) -> None:
        self.server.default = reply(body=b'{"columns": ["a\\ud800"], "rows": [["x\\udfffy"]]}')
        for output, terminal, shown in (
            ("json", False, '"x\\udfffy"'),
            ("jsonl", False, '{"a\\ud800": "x\\udfffy"}'),
            ("table", True, "x\\udfffy"),
            (
                "csv",
                False,
                "a\\ud800\nx\\udfffy\n",
            ),  # data for a file, as near as UTF-8 can write it
        ):
            with self.subTest(output=output):
                status, out, err = self.cli(
                    "--output", output, "query", "SELECT 1", terminal=terminal
                )
                self.assertEqual((status, err), (0, ""))
                self.assertIn(shown, out)
        self.assertEqual(len(self.requests), 4)

    def test_invisible_characters_from_the_server_are_escaped(self) -> None:
        text = "denied\u202e :ko" + INVISIBLE
        escaped = "denied\\u202e :ko" + "".join(f"\\u{ord(c):04x}" for c in INVISIBLE)
        self.server.default = reply(
            body={"columns": ["name" + INVISIBLE, "n"], "rows": [[text, 1]]}
        )
        for output in ("table", "json", "jsonl", "csv"):
            with self.subTest(output=output, terminal=True):
                wide = {"COLUMNS": "1000"}  # the cell whole
                status, out, err = self.cli(
                    "--output", output, "query", "SELECT 1", terminal=True, environment=wide
                )
                self.assertEqual((status, err), (0, ""))
                self.assertIsNone(RAW_INVISIBLE.search(out), repr(out))
                self.assertIn(escaped, out)
                if output == "json":
                    self.assertEqual(
                        json.loads(out)["rows"][0][0], text, "the same text, escaped as JSON does"
                    )
                elif output == "jsonl":
                    self.assertEqual(json.loads(out), {"name" + INVISIBLE: text, "n": 1})
        status, out, _ = self.cli("--output", "csv", "query", "SELECT 1")  # csv to a pipe is data
        self.assertEqual(out.split("\n")[1], f"{text},1")
        self.script(reply(403, {"message": text}))
        status, out, err = self.cli("datasets")
        self.assertEqual(status, 1)
        self.assertIsNone(RAW_INVISIBLE.search(err), repr(err))
        self.assertIn("denied\\u202e :ko\\u202a", err)
        self.assertTrue(
            err.endswith("\\u2060\\ufeff\n"), err[-40:]
        )  # the separators: whitespace in one line

    def test_a_reason_of_invisible_characters_is_escaped_as_far_as_it_is_shown(self) -> None:
        # The fourth review's second pass: a text body of 1 MB of U+202E was escaped whole, a
        # Python call a character (0.45 s of CPU), before its first 200 characters were kept.
        body = "\u202e" * 1_000_000
        with mock.patch.object(dc, "_escape", wraps=dc._escape) as escape:
            reason = dc._reason_in_text(body)
        self.assertEqual(reason, "\\u202e" * 33 + "\\u")
        self.assertLessEqual(escape.call_count, 200)

    def test_a_file_name_with_an_invisible_character_is_refused(self) -> None:
        directory = self.tmp()
        with contextlib.chdir(directory):
            status, out, err = self.cli(
                "download", self.server.url + "/files/report%E2%80%AEvsc.exe"
            )
        self.assertEqual((status, out), (2, ""))
        self.assertEqual(
            err,
            "dataset-client: error: the file name 'report\\u202evsc.exe' the URL gives holds a control character or"
            " an invisible one: give DEST\n",
        )
        self.assertEqual((self.requests, list(directory.iterdir())), ([], []))

    def test_the_users_extreme_settings_get_a_clear_error_or_the_longest_wait(self) -> None:
        self.server.default = reply(body=[])
        self.assertEqual(
            self.client(timeout=1e300).list_datasets(), []
        )  # as long as the platform waits
        self.assertEqual(self.cli("--timeout", "1e300", "datasets")[:2], (0, "[]\n"))
        self.assertEqual(len(self.requests), 2)
        destination = self.tmp() / "out.bin"
        error = outcome_of(lambda: self.client().download("f", destination, max_rate=0.5))
        self.assertEqual(str(error), "max_rate must be at least 1 (bytes per second), got 0.5")
        self.server.default = reply(
            body=b""
        )  # were it sent, an empty file would be done at any rate
        status, out, err = self.cli(
            "download", "--limit-rate", "0.0000001", self.server.url + "/f", str(destination)
        )
        self.assertEqual((status, out), (2, ""))
        self.assertIn("argument --limit-rate: invalid rate '0.0000001'", err)
        self.assertEqual((len(self.requests), list(destination.parent.iterdir())), (2, []))
        config = self.tmp() / "config.toml"
        for content, expected in (
            (
                "[default]\ntimeout = 5\nbase_url = " + "[" * 3000 + "]" * 3000 + "\n",
                "cannot read the config file",
            ),
            (
                "[default]\ntimeout = inf\n",
                "timeout in [default] in {config} must be a number of seconds",
            ),
        ):
            config.write_text(content)
            config.chmod(0o600)
            status, out, err = self.cli(
                "datasets", environment={"DATASET_CLIENT_CONFIG": str(config)}
            )
            with self.subTest(expected):
                self.assertEqual((status, out, err.count("\n")), (2, "", 1), err)
                self.assertIn(expected.format(config=config), err)
                self.assertIn(str(config), err)
        self.assertEqual(len(self.requests), 2)

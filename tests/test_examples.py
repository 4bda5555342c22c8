"""The examples: the stand-in service, its Parquet writer, fan_out on threads and on a stand-in of Dask."""

from __future__ import annotations

import contextlib
import csv
import datetime
import gzip
import hashlib
import http.client
import importlib
import importlib.util
import io
import json
import os
import pickle
import re
import select
import shlex
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import types
import unittest
import urllib.parse as urllib_parse
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
from dataset_client import DatasetClient, ServiceError
from tests.support import (
    CA_FILE,
    DATA,
    KEY,
    NO_BYTECODE_HERE,
    ROOT,
    ServerTestCase,
    StandInTestCase,
    Verified,
    digest_field,
    hang,
    import_or_skip,
    inherited_signals,
    local_service,
    quick_stand_in,
    reply,
    serve_file,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class FakeFuture:
    """A task of FakeDask: run when its result is asked for; ``None``: its worker is gone, never done."""

    def __init__(self, task: Callable[[], Any] | None) -> None:
        self.task = task

    def done(self) -> bool:
        return self.task is not None

    def result(self, timeout: float | None = None) -> Any:
        assert self.task is not None, "a result asked of a task that never ends"
        return self.task()  # or raises what the task raised, as Dask does


class FakeDask:
    """What fan_out.run uses of dask.distributed, run in this process: the client of each task is
    pickled and unpickled as a worker's is, a task whose label is in ``lost`` never ends and takes
    every worker with it, ``missing`` workers cannot import dataset_client; ``mounts`` maps DIR as
    the submitting machine sees it to DIR as the workers do."""

    address = "tcp://127.0.0.1:8786"

    def __init__(
        self,
        workers: int = 1,
        *,
        lost: Collection[str] = (),
        missing: Collection[str] = (),
        upload: Exception | None = None,
        mounts: dict[str, str] | None = None,
        scheduler_lost: bool = False,
    ) -> None:
        self.workers = [f"tcp://127.0.0.1:{40001 + n}" for n in range(workers)]
        self.lost, self.missing, self.upload, self.mounts = (
            set(lost),
            set(missing),
            upload,
            mounts or {},
        )
        self.scheduler_lost = scheduler_lost
        self.made: list[dict[str, Any]] = []
        self.uploaded: list[str] = []
        self.scheduler = self
        self.Client = self.LocalCluster = (
            self.make
        )  # distributed.Client(...), distributed.LocalCluster(...)

    def make(self, *args: Any, **kwargs: Any) -> FakeDask:
        self.made.append(kwargs)
        return self

    def submit(self, task: Any, client: Any, job: Any, into: str, pure: bool) -> FakeFuture:
        if job.label in self.lost:
            self.workers.clear()
            return FakeFuture(None)
        pickled = pickle.dumps(client)
        return FakeFuture(lambda: task(pickle.loads(pickled), job, self.mounts.get(into, into)))

    def wait(self, futures: list[FakeFuture], timeout: float, return_when: str) -> None:
        if self.scheduler_lost:  # as distributed.wait says it
            raise RuntimeError("2 Futures cancelled:\nReasons:\nscheduler-connection-lost")
        if not any(future.done() for future in futures):
            time.sleep(0.01)
            raise TimeoutError  # as distributed.wait does when its time-out passes

    def run(self, function: Callable[[], str | None]) -> dict[str, str | None]:
        found = function()
        return {
            worker: "ModuleNotFoundError" if worker in self.missing else found
            for worker in self.workers
        }

    def run_on_scheduler(self, function: Callable[[], str | None]) -> str | None:
        return function()

    def upload_file(self, path: str) -> None:
        if self.upload is not None:
            raise self.upload
        self.uploaded.append(path)
        self.missing.clear()

    def scheduler_info(self) -> dict[str, Any]:
        if self.scheduler_lost:
            raise OSError("Timed out trying to connect to tcp://127.0.0.1:8786")
        return {"workers": {worker: {} for worker in self.workers}}

    def close(self) -> None:
        pass


def _load_example(name: str) -> Any:
    """examples/NAME.py as a module (fan_out.py imports Dask only when run)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fan_out_main(
    fan_out: Any, argv: list[str], dask: FakeDask | None
) -> tuple[int, list[str], str]:
    """fan_out.main(argv) with ``dask`` as dask.distributed (None: no Dask installed): its exit
    status, its lines on stdout and its stderr."""
    modules: dict[str, Any] = {"dask": None, "dask.distributed": None}
    if dask is not None:
        modules = {"dask": types.SimpleNamespace(distributed=dask), "dask.distributed": dask}
    with (
        mock.patch.dict(sys.modules, modules),
        contextlib.redirect_stdout(io.StringIO()) as stdout,
        contextlib.redirect_stderr(io.StringIO()) as stderr,
    ):
        status = fan_out.main(argv)
    return status, stdout.getvalue().splitlines(), stderr.getvalue()


def read_parquet(data: bytes) -> tuple[list[dict[int, Any]], list[list[Any]], int]:
    """The schema, columns and row-group count of a Parquet file of the subset parquet_writer writes.

    Written apart from the writer, from the format's documents: the footer in Thrift's compact
    protocol; required columns; data pages (v1) in PLAIN encoding, uncompressed or GZIP.
    """
    if data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise ValueError("not framed by PAR1")
    (length,) = struct.unpack("<I", data[-8:-4])
    footer, _ = thrift_struct(data, len(data) - 8 - length)
    schema = footer[2][1:]  # after the root
    columns: list[list[Any]] = [[] for _ in schema]
    for group in footer[4]:
        for index, chunk in enumerate(group[1]):
            metadata = chunk[3]
            header, start = thrift_struct(data, metadata[9])
            body = data[start : start + header[3]]
            if metadata[4] == 2:  # GZIP: RFC 1952 frames
                if body[:2] != b"\x1f\x8b":
                    raise ValueError("a GZIP page that is not a gzip frame")
                body = gzip.decompress(body)
            if (header[1], header[5][2], len(body)) != (0, 0, header[2]):
                raise ValueError(f"not a PLAIN data page of the size announced: {header}")
            columns[index] += plain_values(body, metadata[1], header[5][1])
    return schema, columns, len(footer[4])


def plain_values(body: bytes, physical: int, count: int) -> list[Any]:
    if physical == 6:  # BYTE_ARRAY: a 4-byte length, the bytes
        values, position = [], 0
        for _ in range(count):
            (size,) = struct.unpack_from("<I", body, position)
            values.append(body[position + 4 : position + 4 + size].decode("utf-8"))
            position += 4 + size
        return values
    return list(struct.unpack(f"<{count}{ {1: 'i', 2: 'q', 5: 'd'}[physical] }", body))


def thrift_struct(data: bytes, position: int) -> tuple[dict[int, Any], int]:
    fields: dict[int, Any] = {}
    field = 0
    while data[position]:
        header = data[position]
        field, position = (
            (field + (header >> 4), position + 1)
            if header >> 4
            else varint(data, position + 1, zigzag=True)
        )
        fields[field], position = thrift_value(data, position, header & 0x0F)
    return fields, position + 1


def thrift_value(data: bytes, position: int, kind: int) -> tuple[Any, int]:
    if kind in (5, 6):  # i32, i64
        return varint(data, position, zigzag=True)
    if kind == 8:  # binary
        size, position = varint(data, position)
        return data[position : position + size].decode("utf-8"), position + size
    if kind == 12:
        return thrift_struct(data, position)
    if kind != 9:
        raise ValueError(f"a Thrift type the writer never uses: {kind}")
    size, element, position = data[position] >> 4, data[position] & 0x0F, position + 1
    if size == 15:
        size, position = varint(data, position)
    items = []
    for _ in range(size):
        item, position = thrift_value(data, position, element)
        items.append(item)
    return items, position


def varint(data: bytes, position: int, *, zigzag: bool = False) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return ((value >> 1) ^ -(value & 1) if zigzag else value), position


class StandInTests(StandInTestCase):
    def test_datasets_and_queries(self) -> None:
        client = self.stand_in_client()
        datasets = {d["name"]: d for d in client.list_datasets()}
        self.assertEqual(sorted(datasets), ["daily_bars", "trades"])
        self.assertIn({"name": "close", "type": "REAL"}, datasets["daily_bars"]["columns"])
        self.assertEqual(len(datasets["daily_bars"]["symbols"]), 12)
        result = client.query(
            "SELECT symbol, count(*) FROM daily_bars GROUP BY symbol ORDER BY symbol LIMIT 2"
        )
        self.assertEqual(result["columns"], ["symbol", "count(*)"])
        self.assertEqual(result["rows"], [["AAPL", 522], ["AMZN", 522]])
        self.assertEqual(result["row_count"], 2)
        capped = client.query("SELECT * FROM trades")
        self.assertEqual((capped["row_count"], capped["truncated"]), (10_000, True))

    def test_deterministic_sample(self) -> None:
        first = self.stand_in_client().query("SELECT sum(close), sum(volume) FROM daily_bars")
        with (
            quick_stand_in("k") as other,
            DatasetClient(other.base_url, "k") as client,
        ):
            self.assertEqual(client.query("SELECT sum(close), sum(volume) FROM daily_bars"), first)

    def test_writes_and_bad_sql_are_refused(self) -> None:
        client = self.stand_in_client()
        for sql, status in (
            ("DELETE FROM daily_bars", 403),
            ("DROP TABLE trades", 403),
            ("INSERT INTO trades VALUES (1, 2, 3, 4, 5)", 403),
            ("SELECT 1; DELETE FROM trades", 400),
            ("SELEC nonsense", 400),
        ):
            with self.subTest(sql=sql), self.assertRaises(ServiceError) as caught:
                client.query(sql)
            self.assertEqual(caught.exception.status, status)
            self.assertTrue(caught.exception.message)
            self.assertTrue(caught.exception.request_id)
        self.assertEqual(client.query("SELECT count(*) FROM trades")["rows"], [[50112]])

    def test_wrong_or_missing_key(self) -> None:
        for key in ("wrong-key", None):
            with self.subTest(key=key), self.assertRaises(ServiceError) as caught:
                self.stand_in_client(key).list_datasets()
            self.assertEqual(
                (caught.exception.status, caught.exception.message),
                (401, "missing or wrong API key"),
            )

    def test_export_and_download_with_checksum(self) -> None:
        client = self.stand_in_client()
        for file_format in ("csv", "jsonl"):
            export = client.create_export(
                "daily_bars",
                symbols=["AAPL", "MSFT"],
                start_date=datetime.date(2024, 1, 1),
                end_date=datetime.date(2024, 3, 31),
                format=file_format,
            )
            self.assertEqual(
                (export["status"], export["format"], export["rows"]), ("ready", file_format, 130)
            )
            target = self.tmp() / f"bars.{file_format}"
            client.download(export["download_url"], target, sha256=export["sha256"])
            data = target.read_bytes()
            self.assertEqual(hashlib.sha256(data).hexdigest(), export["sha256"])
            self.assertEqual(len(data), export["size"])
            lines = data.decode().splitlines()
            self.assertEqual(len(lines), 130 + (file_format == "csv"))
        self.assertEqual(json.loads(lines[0])["symbol"], "AAPL")

    def test_export_validation(self) -> None:
        client = self.stand_in_client()
        day = "2024-01-02"
        for call, status, text in (
            (
                lambda: client.create_export(
                    "nope", symbols="AAPL", start_date=day, end_date=day, format="csv"
                ),
                404,
                "nope",
            ),
            (
                lambda: client.create_export(
                    "trades", symbols="ZZZ", start_date=day, end_date=day, format="csv"
                ),
                422,
                "ZZZ",
            ),
            (
                lambda: client.create_export(
                    "trades", symbols="V", start_date="x", end_date=day, format="csv"
                ),
                422,
                "start_date",
            ),
            (
                lambda: client.create_export(
                    "trades", symbols="V", start_date=day, end_date=day, format="xml"
                ),
                422,
                "xml",
            ),
        ):
            with self.subTest(text=text), self.assertRaises(ServiceError) as caught:
                call()
            self.assertEqual(caught.exception.status, status)
            self.assertIn(text, str(caught.exception))

    def test_idempotency_key_replays_the_export(self) -> None:
        selection = {"dataset": "trades", "symbols": ["V"], "start_date": "2024-01-02"}
        body = json.dumps({**selection, "end_date": "2024-01-02", "format": "csv"}).encode()
        headers = {"Idempotency-Key": "k-1", "Content-Type": "application/json"}
        first, first_body = self.raw("POST", "/exports", headers, body)
        again, again_body = self.raw("POST", "/exports", headers, body)
        self.assertEqual((first.status, again.status), (201, 200))
        self.assertEqual(json.loads(first_body), json.loads(again_body))

    def test_files_support_range_and_etag(self) -> None:
        export = self.stand_in_client().create_export(
            "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-05", format="csv"
        )
        path = urllib_parse.urlsplit(export["download_url"]).path
        whole, data = self.raw("GET", path)
        self.assertEqual((whole.status, whole.headers["Accept-Ranges"]), (200, "bytes"))
        self.assertEqual(int(whole.headers["Content-Length"]), len(data))
        etag = whole.headers["ETag"]
        part, tail = self.raw("GET", path, {"Range": "bytes=100-", "If-Range": etag})
        self.assertEqual(part.status, 206)
        self.assertEqual(part.headers["Content-Range"], f"bytes 100-{len(data) - 1}/{len(data)}")
        self.assertEqual(tail, data[100:])
        stale, everything = self.raw("GET", path, {"Range": "bytes=100-", "If-Range": '"old"'})
        self.assertEqual((stale.status, everything), (200, data))
        beyond, _ = self.raw("GET", path, {"Range": f"bytes={len(data)}-"})
        self.assertEqual(beyond.status, 416)

    def test_large_listings_are_gzipped(self) -> None:
        response, body = self.raw("GET", "/datasets", {"Accept-Encoding": "gzip"})
        self.assertEqual(response.headers["Content-Encoding"], "gzip")
        self.assertEqual(json.loads(gzip.decompress(body))[0]["name"], "daily_bars")

    def test_demo_runs(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = local_service.main(["--demo"])  # type: ignore[attr-defined]
        self.assertEqual(status, 0)
        self.assertIn("sha256 checked", out.getvalue())
        self.assertIn("demo finished", out.getvalue())


class StandInServiceTests(StandInTestCase):
    def test_the_default_export_is_parquet_equal_to_the_csv_export(self) -> None:
        client = self.stand_in_client()
        for dataset in ("daily_bars", "trades"):
            selection = {
                "symbols": ["AAPL", "V"],
                "start_date": "2024-03-01",
                "end_date": "2024-04-30",
            }
            export = client.create_export(dataset, **selection)  # type: ignore[arg-type]
            self.assertEqual(
                (export["format"], export["download_url"][-8:]), ("parquet", ".parquet")
            )
            parquet, csv_text = io.BytesIO(), io.BytesIO()
            client.download(export["download_url"], parquet, sha256=export["sha256"])
            client.download(
                client.create_export(dataset, **selection, format="csv")["download_url"], csv_text
            )  # type: ignore[arg-type]
            header, *rows = list(csv.reader(io.StringIO(csv_text.getvalue().decode())))
            schema, values, _ = read_parquet(parquet.getvalue())
            with self.subTest(dataset=dataset):
                self.assertEqual([element[4] for element in schema], header)
                self.assertEqual(len(rows), export["rows"])
                as_text = [
                    [
                        str(datetime.date(1970, 1, 1) + datetime.timedelta(v))
                        if e[1] == 1
                        else str(v)
                        for v in column
                    ]
                    for e, column in zip(schema, values, strict=True)
                ]
                self.assertEqual([list(row) for row in zip(*as_text, strict=True)], rows)
                types = {
                    d["name"]: {c["name"]: c["type"] for c in d["columns"]}
                    for d in client.list_datasets()
                }[dataset]
                kinds = {"DATE": 1, "TEXT": 6, "REAL": 5, "INTEGER": 2}
                self.assertEqual(
                    [element[1] for element in schema], [kinds[types[name]] for name in header]
                )

    def test_files_carry_repr_digest_and_each_206_its_content_digest(self) -> None:
        client = self.stand_in_client()
        export = client.create_export(
            "trades", symbols=["V"], start_date="2024-01-02", end_date="2024-01-03"
        )
        path = urllib_parse.urlsplit(export["download_url"]).path
        response, body = self.raw("GET", path)
        self.assertEqual(hashlib.sha256(body).hexdigest(), export["sha256"])
        self.assertEqual(response.headers["Repr-Digest"], digest_field(body))
        self.assertIsNone(
            response.headers["Content-Digest"], "a 200's Content-Digest would say the same"
        )
        response, part = self.raw("GET", path, {"Range": "bytes=10-99"})
        self.assertEqual((response.status, part), (206, body[10:100]))
        self.assertEqual(response.headers["Content-Digest"], digest_field(body[10:100]))
        self.assertEqual(response.headers["Repr-Digest"], digest_field(body))
        progress = Verified()
        client.download(
            export["download_url"],
            io.BytesIO(),
            **progress.hooks(),
        )
        self.assertEqual(progress.verified, ["Repr-Digest (sha-256)"])

    def test_values_json_cannot_hold_are_text(self) -> None:
        result = self.stand_in_client().query(
            "SELECT x'00ff' AS blob, 1e999 AS big, -1e999 AS small, 1 AS one"
        )
        self.assertEqual(result["rows"], [["00ff", "inf", "-inf", 1]])

    def test_many_clients_connecting_at_once_are_all_taken(self) -> None:
        with local_service.running(api_key="k") as running:
            # Nothing accepts while the sockets connect: the listen backlog alone must hold them.
            running.shutdown()
            sockets = [socket.socket() for _ in range(40)]
            for sock in sockets:
                self.addCleanup(sock.close)
                sock.setblocking(False)
                sock.connect_ex(running.server_address)
            _, writable, _ = select.select([], sockets, [], 2)
            errors = [sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for sock in writable]
            self.assertEqual((len(writable), set(errors)), (40, {0}))
        results: list[object] = []

        def five_queries(number: int) -> None:
            with DatasetClient(self.base_url, "stand-in-key", max_retries=0) as client:
                results.extend(client.query(f"SELECT {number}, {n}")["rows"][0] for n in range(5))

        threads = [threading.Thread(target=five_queries, args=(number,)) for number in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(
            sorted(results), sorted([number, n] for number in range(32) for n in range(5))
        )

    def test_one_idempotency_key_sent_at_once_makes_one_export(self) -> None:
        body = json.dumps(
            {
                "dataset": "trades",
                "symbols": ["V"],
                "start_date": "2024-01-02",
                "end_date": "2024-03-02",
            }
        )
        together = threading.Barrier(8)
        answers: list[dict[str, Any]] = []

        def create() -> None:
            connection = http.client.HTTPConnection(
                "127.0.0.1", self.service.server_address[1], timeout=10
            )
            together.wait(5)
            headers = {
                "Authorization": "Bearer stand-in-key",
                "Idempotency-Key": "same",
                "Content-Type": "application/json",
            }
            connection.request("POST", "/exports", body, headers)
            answers.append(json.loads(connection.getresponse().read()))
            connection.close()

        threads = [threading.Thread(target=create) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(len(answers), 8)
        self.assertEqual(len({answer["id"] for answer in answers}), 1)

    def all_trades(self) -> Any:
        """An export of every symbol's trades as JSON lines: 4.3 MiB."""
        return self.stand_in_client().create_export(
            "trades",
            symbols=list(local_service.SYMBOLS),
            start_date="2023-01-01",
            end_date="2024-12-31",
            format="jsonl",
        )

    def test_parallel_ranged_downloads_are_served(self) -> None:
        export = self.all_trades()
        size, path = export["size"], urllib_parse.urlsplit(export["download_url"]).path
        self.assertGreaterEqual(size, 4 * 1024 * 1024, "too small to be split in four parts")
        response, whole = self.raw("GET", path)
        self.assertEqual(
            (response.status, len(whole), hashlib.sha256(whole).hexdigest()),
            (200, size, export["sha256"]),
        )
        etag = response.getheader("ETag")
        quarters = [(k * size // 4, (k + 1) * size // 4) for k in range(4)]
        answers: dict[tuple[int, int], tuple[int, str | None, bytes]] = {}
        together = threading.Barrier(4)

        def fetch(start: int, end: int) -> None:
            together.wait(5)
            response, body = self.raw(
                "GET", path, {"Range": f"bytes={start}-{end - 1}", "If-Range": etag}
            )
            answers[start, end] = response.status, response.getheader("Content-Range"), body

        threads = [threading.Thread(target=fetch, args=quarter) for quarter in quarters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for start, end in quarters:
            self.assertEqual(
                answers[start, end], (206, f"bytes {start}-{end - 1}/{size}", whole[start:end])
            )
        self.assertEqual(
            self.raw("GET", path, {"Range": "bytes=0-9", "If-Range": '"another"'})[1], whole
        )

        target = self.tmp() / "trades.jsonl"
        with self.assertLogs("dataset_client", "DEBUG") as logs:
            self.stand_in_client().download(
                export["download_url"], target, sha256=export["sha256"], connections=4
            )
        self.assertEqual(target.read_bytes(), whole)
        statuses = sorted(
            re.findall(r"^DEBUG:dataset_client:GET \S+: (\d+)", "\n".join(logs.output), re.M)
        )
        self.assertEqual(statuses, ["200", "206", "206", "206"], logs.output)

    def test_a_client_hanging_up_is_not_an_error_of_the_service(self) -> None:
        export = self.all_trades()
        request = (
            f"GET {urllib_parse.urlsplit(export['download_url']).path} HTTP/1.1\r\nHost: x\r\n"
        )
        request += "Authorization: Bearer stand-in-key\r\n\r\n"
        for read_all in (
            False,
            True,
        ):  # reset mid-body, then while the service waits for the next request
            with (
                self.subTest(read_all=read_all),
                mock.patch.object(socketserver.BaseServer, "handle_error") as printed,
            ):
                before = set(threading.enumerate())
                sock = socket.create_connection(self.service.server_address[:2], timeout=5)
                sock.sendall(request.encode())
                response = http.client.HTTPResponse(sock)
                response.begin()
                self.assertEqual(response.status, 200)
                if read_all:
                    self.assertEqual(len(response.read()), export["size"])
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                response.close()
                sock.close()  # with unread bytes or SO_LINGER 0: a reset, as a cut download sends
                for thread in set(threading.enumerate()) - before:
                    thread.join(5)
                printed.assert_not_called()  # socketserver prints a traceback there

    def run_service(self, *argv: str) -> subprocess.Popen[str]:
        with inherited_signals(signal.SIG_DFL, "SIGINT"):  # Ctrl-C stops it, as in a terminal
            process = subprocess.Popen(
                [sys.executable, str(ROOT / "examples" / "local_service.py"), *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        self.addCleanup(
            lambda: (process.kill(), process.wait(), process.stdout.close(), process.stderr.close())
        )  # type: ignore[func-returns-value,union-attr]
        return process

    def test_the_export_lines_survive_eval_whatever_the_key(self) -> None:
        key = 'it\'s a $HOME `key` with "quotes" & spaces'
        process = self.run_service("--port", "0", "--api-key", key)
        lines = [process.stdout.readline() for _ in range(2)]  # type: ignore[union-attr]
        self.assertTrue(
            lines[0].startswith("export DATASET_CLIENT_BASE_URL=")
            and lines[1].startswith("export DATASET_CLIENT_API_KEY="),
            lines,
        )
        shell = subprocess.run(
            ["sh", "-c", "".join(lines) + 'printf %s "$DATASET_CLIENT_API_KEY"'],
            capture_output=True,
            text=True,
            check=True,
        )
        self.assertEqual(shell.stdout, key)
        self.assertIn("serving on http://127.0.0.1:", process.stderr.readline())  # type: ignore[union-attr]
        process.send_signal(signal.SIGINT)
        self.assertEqual(process.wait(10), 0)
        self.assertEqual(process.stdout.read(), "", "status lines go to stderr")  # type: ignore[union-attr]

    def test_behind_a_proxy_the_export_lines_keep_the_stand_in_off_it(self) -> None:
        # Found by a new user: with a corporate proxy set, the README's tour failed at `datasets`.
        dead = {"http_proxy": "http://127.0.0.1:9", "NO_PROXY": "corp.example"}
        with mock.patch.dict(os.environ, dead):
            process = self.run_service("--port", "0")
        lines: list[str] = []  # three, read in a thread: a missing one fails, never hangs
        read = lambda: lines.extend(process.stdout.readline() for _ in range(3))  # type: ignore[union-attr]  # noqa: E731
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(10)
        lines = [*lines, "", "", ""][:3]
        expected = "export NO_PROXY=127.0.0.1,corp.example no_proxy=127.0.0.1,corp.example\n"
        self.assertEqual(lines[2], expected)
        tour = ["sh", "-c", "".join(lines) + '"$0" -m dataset_client datasets', sys.executable]
        with mock.patch.dict(os.environ, dead):
            done = subprocess.run(tour, cwd=ROOT, capture_output=True, timeout=60)
        self.assertEqual((done.returncode, done.stderr), (0, b""))
        self.assertIn(b"daily_bars", done.stdout)
        process.send_signal(signal.SIGINT)
        self.assertEqual(process.wait(10), 0)

    def test_a_port_in_use_is_a_one_line_error(self) -> None:
        process = self.run_service("--port", str(self.service.server_address[1]))
        self.assertEqual(process.wait(30), 1)
        error = process.stderr.read()  # type: ignore[union-attr]
        self.assertRegex(
            error, r"^local_service: cannot listen on 127\.0\.0\.1:\d+: Address already in use\n$"
        )
        self.assertEqual(process.stdout.read(), "")  # type: ignore[union-attr]


class StandInProcessTests(ServerTestCase):
    def test_sigterm_removes_its_files_and_the_key_may_come_from_the_environment(self) -> None:
        temporary = self.tmp()
        key = "key-from-the-environment"
        environment = {**os.environ, "TMPDIR": str(temporary), "DATASET_CLIENT_API_KEY": key}
        argv = [sys.executable, str(ROOT / "examples" / "local_service.py"), "--port", "0"]
        with inherited_signals(signal.SIG_DFL, "SIGTERM"):
            process = subprocess.Popen(
                argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        self.addCleanup(lambda: (process.kill(), process.communicate()))  # type: ignore[func-returns-value]
        lines = [process.stdout.readline() for _ in range(2)]  # type: ignore[union-attr]
        self.assertEqual(lines[1], f"export DATASET_CLIENT_API_KEY={key}\n")
        base_url = lines[0].split("=", 1)[1].strip()
        with self.client(base_url, key) as client:  # the key it was given is the one it checks
            export = client.create_export(
                "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-02"
            )
        (files,) = temporary.iterdir()
        self.assertEqual(os.listdir(files), [export["download_url"].rsplit("/", 1)[1]])
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
        self.assertEqual(process.returncode, 0, err)
        self.assertEqual(
            list(temporary.iterdir()), [], "its temporary directory and exports are gone"
        )


class StandInAtATerminalTests(unittest.TestCase):
    def test_ctrl_c_to_stop_is_said_only_in_the_foreground(self) -> None:
        # Found by a new user: started with & (as the README's tour does), it said "Ctrl-C to stop",
        # which stops nothing there.
        pty = import_or_skip(self, "pty")
        if shutil.which("bash") is None:
            self.skipTest("bash is not installed: it runs jobs on the pseudo-terminal")
        master, slave = pty.openpty()
        self.addCleanup(os.close, master)
        variables = {"PATH": os.environ["PATH"], "TERM": "dumb", "PS1": "$ ", **NO_BYTECODE_HERE}
        # Its own session: the pty becomes its terminal, with job control. Ctrl-C as in a terminal,
        # whatever the test run inherited (a shell ignores for good what it starts ignoring).
        bash = ["bash", "--norc", "--noprofile", "-i"]
        with inherited_signals(signal.SIG_DFL, "SIGINT"):
            shell = subprocess.Popen(
                bash, stdin=slave, stdout=slave, stderr=slave, env=variables, start_new_session=True
            )
        self.addCleanup(lambda: (shell.kill(), shell.wait()))  # type: ignore[func-returns-value]
        os.close(slave)
        screen = b""

        def type_until(keys: bytes, wanted: bytes) -> bytes:
            """Type ``keys``; what the screen shows once it holds ``wanted`` (at most 20 s)."""
            nonlocal screen
            start = len(screen)
            os.write(master, keys)
            deadline = time.monotonic() + 20
            while wanted not in screen[start:] and time.monotonic() < deadline:
                if select.select([master], [], [], 0.5)[0]:
                    screen += os.read(master, 4096)
            self.assertIn(wanted, screen[start:])
            return screen[start:]

        script = shlex.quote(str(ROOT / "examples" / "local_service.py"))
        service = f"{shlex.quote(sys.executable)} {script} --port 0 >/dev/null"
        type_until(b"echo REA''DY\n", b"READY\r\n")
        shown = type_until(f"{service}; echo FORE''GROUND ENDED\n".encode(), b"serving on ")
        type_until(b"\x03", b"FOREGROUND ENDED")  # Ctrl-C as typed: the terminal's SIGINT
        self.assertRegex(shown, rb"serving on http://127\.0\.0\.1:\d+; Ctrl-C to stop\r\n")
        shown = type_until(f"{service} &\n".encode(), b"serving on ")
        shown += type_until(b"kill %1; wait; echo BACK''GROUND ENDED\n", b"BACKGROUND ENDED")
        job = re.search(rb"\[1\] (\d+)\r\n", shown)
        self.assertIsNotNone(job, shown)
        said = rb"serving on http://127\.0\.0\.1:\d+; kill %s to stop\r\n" % job[1]  # type: ignore[index]
        self.assertRegex(shown, said)
        self.assertNotIn(b"Ctrl-C", shown)
        type_until(b"exit\n", b"exit")
        self.assertEqual(shell.wait(10), 0)


class ParquetWriterTests(unittest.TestCase):
    def test_every_kind_in_row_groups_gzip_or_not(self) -> None:
        columns = [("day", "date"), ("name", "string"), ("price", "double"), ("count", "int64")]
        rows = [
            ("2024-01-02", "AAPL", 185.64, 82_488_700),
            (datetime.date(1969, 12, 31), "café ☕", -1.5e-300, -(2**63)),
            ("2000-02-29", "", 0.1, 2**63 - 1),
        ] * 7
        for compression in ("gzip", None):
            out = io.BytesIO()
            self.assertEqual(
                local_service.write_parquet(
                    out, columns, iter(rows), compression=compression, row_group_rows=5
                ),
                21,
            )
            with self.subTest(compression=compression):
                schema, values, groups = read_parquet(out.getvalue())
                self.assertEqual(groups, 5)
                self.assertEqual(
                    [(e[4], e[1], e[3]) for e in schema],
                    [("day", 1, 0), ("name", 6, 0), ("price", 5, 0), ("count", 2, 0)],
                )
                self.assertEqual(
                    [(e.get(6), e.get(10)) for e in schema],
                    [(6, {6: {}}), (0, {1: {}}), (None, None), (None, None)],
                )
                days = [datetime.date(1970, 1, 1) + datetime.timedelta(days) for days in values[0]]
                expected = [
                    [datetime.date.fromisoformat(r[0]) if isinstance(r[0], str) else r[0], *r[1:]]
                    for r in rows
                ]
                self.assertEqual(
                    [list(row) for row in zip(days, *values[1:], strict=True)], expected
                )

    def test_no_rows_and_bad_arguments(self) -> None:
        out = io.BytesIO()
        self.assertEqual(local_service.write_parquet(out, [("a", "int64")], []), 0)
        self.assertEqual(read_parquet(out.getvalue())[1:], ([[]], 0))
        (length,) = struct.unpack("<I", out.getvalue()[-8:-4])
        footer, _ = thrift_struct(out.getvalue(), len(out.getvalue()) - 8 - length)
        created_by = "dataset-client stand-in (examples/parquet_writer.py)"  # the file there is
        self.assertEqual(footer[6], created_by)
        with self.assertRaisesRegex(ValueError, "kind must be one of"):
            local_service.write_parquet(io.BytesIO(), [("a", "float")], [])
        with self.assertRaisesRegex(ValueError, "compression"):
            local_service.write_parquet(io.BytesIO(), [("a", "int64")], [], compression="snappy")


class FanOutTests(ServerTestCase):
    """examples/fan_out.py on FakeDask: its plan, its client, its records, its failures."""

    def test_fan_out_plans_one_export_a_month_clipped_and_scheduler_without_dask_says_how_to_install(
        self,
    ) -> None:
        fan_out = _load_example("fan_out")
        argv = [
            "daily_bars",
            "--symbols",
            "AAPL, MSFT,AAPL",
            "--start",
            "2024-01-15",
            "--end",
            "2024-03-10",
        ]
        jobs = fan_out.plan(
            fan_out.parse_arguments([*argv, "--by", "month", "--format", "csv", "--into", "d"])
        )
        self.assertEqual(
            [(job.label, str(job.start), str(job.end), job.symbols, job.name) for job in jobs],
            [
                ("2024-01", "2024-01-15", "2024-01-31", ("AAPL", "MSFT"), "daily_bars-2024-01.csv"),
                ("2024-02", "2024-02-01", "2024-02-29", ("AAPL", "MSFT"), "daily_bars-2024-02.csv"),
                ("2024-03", "2024-03-01", "2024-03-10", ("AAPL", "MSFT"), "daily_bars-2024-03.csv"),
            ],
        )
        # Asked for and not installed: one line, before any request
        into = self.tmp()
        self.assertEqual(
            fan_out_main(
                fan_out, [*argv, "--into", str(into), "--scheduler", "tcp://s:8786"], None
            ),
            (2, [], 'fan_out.py: --scheduler needs Dask: pip install "dask[distributed]"\n'),
        )
        self.assertEqual(self.requests, [])

    def test_fan_out_s_client_is_the_command_lines_service_with_the_librarys_own_defaults(
        self,
    ) -> None:
        fan_out, config = _load_example("fan_out"), self.tmp() / "config.toml"
        config.write_text(
            f'[default]\nbase_url = "{self.server.url}/api"\napi_key = "{KEY}"\ntimeout = 5\n'
        )
        config.chmod(0o600)
        self.server.default = reply(body=[])
        kept = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DATASET_CLIENT_", "XDG_CONFIG_HOME"))
        }
        argv = ["daily_bars", "--symbols", "AAPL", "--start", "2024-01-02", "--end", "2024-01-02"]
        argv += ["--into", str(self.tmp())]
        seen: list[Any] = []

        def run(distributed: Any, args: Any, client: DatasetClient, jobs: Any) -> int:
            seen.append(
                (
                    client.list_datasets(),
                    client._arguments["timeout"],
                    client._arguments["max_retries"],
                )
            )
            return 0

        stderr = io.StringIO()
        with (
            mock.patch.dict(os.environ, {**kept, "DATASET_CLIENT_CONFIG": str(config)}, clear=True),
            mock.patch.dict(sys.modules, {"dask": mock.Mock(), "dask.distributed": mock.Mock()}),
            mock.patch.object(fan_out, "run", run),
            contextlib.redirect_stderr(stderr),
        ):
            self.assertEqual(fan_out.main(argv), 0)
            config.write_text("[default]\n")
            self.assertEqual(fan_out.main(argv), 2)
        self.assertEqual(seen, [([], 5, 2)])
        self.assertRegex(
            stderr.getvalue(), "^fan_out.py: no service address: set DATASET_CLIENT_BASE_URL"
        )
        (request,) = self.requests
        self.assertEqual(
            (request.path, request.headers["Authorization"]), ("/api/datasets", f"Bearer {KEY}")
        )

    def test_fan_out_s_task_downloads_checks_records_and_a_rerun_skips_the_verified(self) -> None:
        fan_out, into, data = _load_example("fan_out"), self.tmp(), DATA[:5000]
        export = reply(
            201, {"download_url": "files/e1", "sha256": hashlib.sha256(data).hexdigest()}
        )
        refused = reply(422, {"message": "unknown symbols: ZZZZ"})
        self.script(export, serve_file(data), export, serve_file(data), refused)
        day = datetime.date(2024, 1, 2)
        job = fan_out.Job("AAPL", "daily_bars", ("AAPL",), day, day, "csv", "daily_bars-AAPL.csv")
        client = self.client()
        self.assertEqual(fan_out.fetch(client, job, str(into)), ("AAPL", None, 5000, True))
        self.assertEqual((into / job.name).read_bytes(), data)
        recorded = (into / f"{job.name}.sha256").read_text()
        covers = "# daily_bars AAPL 2024-01-02 2024-01-02 csv\n"
        self.assertEqual(
            recorded, f"{covers}{hashlib.sha256(data).hexdigest()}  daily_bars-AAPL.csv\n"
        )
        self.assertEqual(fan_out.fetch(client, job, str(into)), ("AAPL", None, 5000, False))
        self.assertEqual(len(self.requests), 2, "a file there and verified is not fetched again")
        with open(into / job.name, "ab") as altered:
            altered.write(b"x")
        self.assertEqual(fan_out.fetch(client, job, str(into)), ("AAPL", None, 5000, True))
        self.assertEqual((into / job.name).read_bytes(), data)
        failing = job._replace(label="ZZZZ", symbols=("ZZZZ",), name="daily_bars-ZZZZ.csv")
        label, error, *_ = fan_out.fetch(client, failing, str(into))
        self.assertEqual(label, "ZZZZ")
        where = re.escape(f"POST {self.server.url}/api/v1/exports")
        self.assertRegex(
            error, rf"^ServiceError: 422 [\w ]+: {where}: unknown symbols: ZZZZ$"
        )  # 3.13: "Content"
        self.assertEqual([r.method for r in self.requests], ["POST", "GET", "POST", "GET", "POST"])
        self.assertEqual(self.requests[-1].json()["symbols"], ["ZZZZ"])
        self.assertEqual(
            sorted(path.name for path in into.iterdir()), [job.name, f"{job.name}.sha256"]
        )

    def test_fan_out_s_summary_takes_the_workers_word_where_dir_is_mounted_elsewhere(self) -> None:
        fan_out, here, there, data = (
            _load_example("fan_out"),
            self.tmp(),
            self.tmp() / "dir",
            DATA[:2000],
        )
        export = reply(
            201, {"download_url": "files/e1", "sha256": hashlib.sha256(data).hexdigest()}
        )
        self.script(export, serve_file(data), reply(422, {"message": "unknown symbols: ZZZZ"}))
        dask = FakeDask(
            mounts={str(here): str(there)}
        )  # the workers see DIR at ``there`` (not made yet)
        argv = [
            "daily_bars",
            "--symbols",
            "AAPL,ZZZZ",
            "--start",
            "2024-01-02",
            "--end",
            "2024-01-02",
        ]
        args = fan_out.parse_arguments([*argv, "--into", str(here)])
        stdout = io.StringIO()
        with self.client() as client, contextlib.redirect_stdout(stdout):
            status = fan_out.run(dask, args, client, fan_out.plan(args))
        failed, counts, summary = stdout.getvalue().splitlines()
        self.assertEqual(
            (status, failed[:33], counts),
            (1, "failed ZZZZ: ServiceError: 422 Un", "1 fetched, 0 already there"),
        )
        self.assertRegex(
            summary,
            r"^1 files, 2000 bytes, 1 failed in [\d.]+ s on tcp://127.0.0.1:8786 \(1 worker\)$",
        )
        self.assertEqual((there / "daily_bars-AAPL.parquet").read_bytes(), data)
        self.assertEqual(
            [r.json()["symbols"] for r in self.requests if r.method == "POST"], [["AAPL"], ["ZZZZ"]]
        )

    def fan_out_run(
        self, fan_out: Any, dask: FakeDask, argv: list[str], client: DatasetClient | None = None
    ) -> tuple[int, list[str]]:
        """fan_out.run on ``dask`` for daily_bars on one day and ``argv``: its exit status and lines."""
        args = fan_out.parse_arguments(
            ["daily_bars", "--start", "2024-01-02", "--end", "2024-01-02", *argv]
        )
        with contextlib.redirect_stdout(io.StringIO()) as stdout:
            status = fan_out.run(dask, args, client or self.client(), fan_out.plan(args))
        return status, stdout.getvalue().splitlines()

    def test_fan_out_turns_a_task_that_cannot_build_or_use_its_client_into_a_failed_line(
        self,
    ) -> None:
        # Found in review3: a ca_bundle missing on a worker failed in pickle.loads; the worker left the
        # cluster and fan_out.py waited for ever, with no summary.
        fan_out, bundle = _load_example("fan_out"), self.tmp() / "corp.pem"
        shutil.copy(CA_FILE, bundle)
        fan_out.LOST_AFTER = 0.2
        dask, into = FakeDask(lost=["MSFT"]), str(self.tmp())
        client = self.client(ca_bundle=bundle)
        bundle.unlink()  # as on a worker without it
        started = time.monotonic()
        status, lines = self.fan_out_run(
            fan_out, dask, ["--symbols", "AAPL,MSFT", "--into", into], client
        )
        self.assertLess(
            time.monotonic() - started, 5, "no worker left: the task still waiting failed"
        )
        failed, lost, counts, summary = lines
        missing = (
            f"ca_bundle names {bundle}, which is not a file or directory of PEM CA certificates"
        )
        self.assertEqual(
            (status, failed),
            (1, f"failed AAPL: FileNotFoundError: {missing}: No such file or directory"),
        )
        self.assertEqual(
            lost, "failed MSFT: no worker left to run it for 0.2 s (see the scheduler's log)"
        )
        self.assertEqual(counts, "0 fetched, 0 already there")
        self.assertRegex(
            summary,
            r"^0 files, 0 bytes, 2 failed in [\d.]+ s on tcp://127.0.0.1:8786 \(0 workers\)$",
        )
        self.assertEqual((self.requests, os.listdir(into)), ([], []))
        status, lines = self.fan_out_run(
            fan_out,
            FakeDask(lost=["AAPL"], scheduler_lost=True),
            ["--symbols", "AAPL", "--into", into],
        )
        gone = "failed AAPL: RuntimeError: 2 Futures cancelled: Reasons: scheduler-connection-lost"
        self.assertEqual((status, lines[0], lines[-1][-11:]), (1, gone, "(0 workers)"))

    def test_fan_out_s_failure_lines_escape_what_the_server_sent(self) -> None:
        fan_out = _load_example("fan_out")
        sent = "unknown\x1b]0;owned\x07 symbols:\u202e ZZZZ\u200b\x9b\nsecond line"
        self.script(reply(422, {"message": sent}))
        status, lines = self.fan_out_run(
            fan_out, FakeDask(), ["--symbols", "ZZZZ", "--into", str(self.tmp())]
        )
        failed = lines[0]
        self.assertEqual(status, 1)
        self.assertTrue(
            failed.endswith(
                ": unknown\\x1b]0;owned\\x07 symbols:\\u202e ZZZZ\\u200b\\x9b second line"
            ),
            failed,
        )
        self.assertIsNone(re.search("[\x00-\x1f\x7f-\x9f\u202e\u200b]", "".join(lines)))
        self.assertEqual(self.requests[0].json()["symbols"], ["ZZZZ"])

    def test_fan_out_ships_dataset_client_to_workers_without_it_or_names_them_in_one_line(
        self,
    ) -> None:
        fan_out, data = _load_example("fan_out"), DATA[:1000]
        self.script(
            reply(201, {"download_url": "files/e1", "sha256": hashlib.sha256(data).hexdigest()}),
            serve_file(data),
        )
        dask, into = FakeDask(2, missing=["tcp://127.0.0.1:40002"]), str(self.tmp())
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            status, lines = self.fan_out_run(fan_out, dask, ["--symbols", "AAPL", "--into", into])
        self.assertEqual((status, dask.uploaded), (0, [dc.__file__]))
        self.assertEqual(
            stderr.getvalue(),
            "fan_out.py: shipped dataset_client.py to tcp://127.0.0.1:40002, which could not import it\n",
        )
        self.assertEqual(lines[-2:-1], ["1 fetched, 0 already there"])
        self.assertRegex(
            lines[-1],
            r"^1 files, 1000 bytes, 0 failed in [\d.]+ s on tcp://127.0.0.1:8786 \(2 workers\)$",
        )
        self.assertEqual(
            dask.made,
            [
                {
                    "n_workers": 2,
                    "threads_per_worker": 2,
                    "dashboard_address": None,
                    "host": "127.0.0.1",
                    "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},
                },
                {},
            ],
        )
        dask = FakeDask(
            2, missing=["tcp://127.0.0.1:40002"], upload=OSError("refused\nby a plugin")
        )
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            status, lines = self.fan_out_run(
                fan_out, dask, ["--symbols", "AAPL", "--into", into, "--scheduler", "tls://s:8786"]
            )
        self.assertEqual((status, lines), (2, []))
        self.assertEqual(
            stderr.getvalue(),
            "fan_out.py: dataset_client cannot be imported on tcp://127.0.0.1:40002 (ModuleNotFoundError), and"
            " shipping it failed (OSError: refused by a plugin): put dataset_client.py on their PYTHONPATH\n",
        )
        self.assertEqual(len(self.requests), 2, "no task submitted")

    def test_fan_out_refuses_into_a_directory_another_user_owns(self) -> None:
        # Found in review3: fan_out.fetch into another user's 1777 directory, a link at the export's
        # predictable name replaced the victim's file.
        if os.geteuid() != 0:
            self.skipTest("needs root to give a directory to another user")
        fan_out, shared = _load_example("fan_out"), self.tmp()
        os.chown(shared, 4242, 4242)
        shared.chmod(0o1777)
        day = datetime.date(2024, 1, 2)
        job = fan_out.Job("AAPL", "daily_bars", ("AAPL",), day, day, "csv", "daily_bars-AAPL.csv")
        refused = f"--into {shared} belongs to another user (uid 4242), who could plant links at its files' names"
        refused += ": use a directory of your own"
        outcome = fan_out.fetch(self.client(), job, str(shared))
        self.assertEqual((outcome.label, outcome.error), ("AAPL", f"PermissionError: {refused}"))
        os.environ.update(DATASET_CLIENT_BASE_URL=self.server.url, DATASET_CLIENT_API_KEY=KEY)
        os.environ["DATASET_CLIENT_CONFIG"] = str(self.tmp() / "config.toml")
        Path(os.environ["DATASET_CLIENT_CONFIG"]).touch(0o600)
        dask = FakeDask()
        argv = [
            "daily_bars",
            "--symbols",
            "AAPL",
            "--start",
            "2024-01-02",
            "--end",
            "2024-01-02",
            "--into",
            str(shared),
        ]
        self.assertEqual(fan_out_main(fan_out, argv, dask), (2, [], f"fan_out.py: {refused}\n"))
        self.assertEqual((dask.made, self.requests, os.listdir(shared)), ([], [], []))

    def test_fan_out_s_rerun_accepts_a_record_in_upper_case_or_with_trailing_white_space(
        self,
    ) -> None:
        fan_out, into, data = _load_example("fan_out"), self.tmp(), DATA[:3000]
        day = datetime.date(2024, 1, 2)
        job = fan_out.Job("AAPL", "daily_bars", ("AAPL",), day, day, "csv", "daily_bars-AAPL.csv")
        (into / job.name).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        for record in (
            f"{fan_out.covers(job)}\n{digest.upper()}  {job.name}\n",
            f"{fan_out.covers(job)}  \r\n{digest}  {job.name}  \n\n",
            f"{fan_out.covers(job)}\n{digest} *{job.name}",
        ):
            with self.subTest(record=record):
                (into / f"{job.name}.sha256").write_text(record)
                self.assertEqual(fan_out.verified_size(str(into / job.name), job), len(data))
                self.assertEqual(
                    fan_out.fetch(self.client(), job, str(into)), ("AAPL", None, len(data), False)
                )
        (into / f"{job.name}.sha256").write_text(f"{fan_out.covers(job)}\n{'0' * 64}  {job.name}\n")
        self.assertIsNone(fan_out.verified_size(str(into / job.name), job))
        self.assertEqual(self.requests, [])

    def test_fan_out_trusts_a_record_only_for_what_it_covers_and_writes_through_no_link(
        self,
    ) -> None:
        fan_out, into, data = _load_example("fan_out"), self.tmp(), DATA[:3000]
        digest = hashlib.sha256(data).hexdigest()
        export = reply(201, {"download_url": "files/e1", "sha256": digest})
        self.script(export, serve_file(data), export, serve_file(data))
        argv = [
            "daily_bars",
            "--symbols",
            "BRK/A",
            "--start",
            "2024-01-02",
            "--end",
            "2024-01-02",
            "--into",
            "d",
        ]
        (job,) = fan_out.plan(fan_out.parse_arguments(argv))
        self.assertEqual(
            job.name, "daily_bars-BRK%2FA.parquet", "one file in the directory, whatever the symbol"
        )
        victim = into / "victim"
        victim.write_text("not the example's\n")
        os.symlink(
            victim, into / f"{job.name}.sha256.{os.getpid()}.part"
        )  # where a neighbour could plant it
        client = self.client()
        self.assertEqual(fan_out.fetch(client, job, str(into)), ("BRK/A", None, 3000, True))
        self.assertEqual(victim.read_text(), "not the example's\n")
        wider = job._replace(
            end=datetime.date(2024, 1, 31)
        )  # a re-run over more days: the file is not that export
        self.assertIsNone(fan_out.verified_size(str(into / job.name), wider))
        self.assertEqual(fan_out.fetch(client, wider, str(into)), ("BRK/A", None, 3000, True))
        self.assertEqual(
            [r.json()["end_date"] for r in self.requests if r.method == "POST"],
            ["2024-01-02", "2024-01-31"],
        )
        self.assertEqual(
            (into / f"{job.name}.sha256").read_text().splitlines()[0],
            "# daily_bars BRK%2FA 2024-01-02 2024-01-31 parquet",
        )
        self.assertEqual(fan_out.verified_size(str(into / job.name), wider), len(data))
        os.unlink(into / f"{job.name}.sha256")
        os.mkfifo(
            into / f"{job.name}.sha256"
        )  # planted by a neighbour: read by no task, which would wait for ever
        looked = list[int | None]()
        looking = threading.Thread(
            target=lambda: looked.append(fan_out.verified_size(str(into / job.name), wider))
        )
        looking.daemon = True
        looking.start()
        looking.join(5)
        if looking.is_alive():  # let it go: a writer that comes and goes is its end of file
            os.close(os.open(into / f"{job.name}.sha256", os.O_WRONLY | os.O_NONBLOCK))
        self.assertEqual(looked, [None])

    def test_fan_out_trusts_no_file_or_record_another_user_left_or_linked(self) -> None:
        # Found in review2: in a shared --into, another user's file with a .sha256 record of its own digest
        # (or links to them) was taken for this run's verified export: never fetched, the planted data kept.
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user")
        fan_out, data, planted = _load_example("fan_out"), DATA[:4000], b"planted rows\n"
        day = datetime.date(2024, 1, 2)
        job = fan_out.Job("AAPL", "daily_bars", ("AAPL",), day, day, "csv", "daily_bars-AAPL.csv")
        record = f"{fan_out.covers(job)}\n{hashlib.sha256(planted).hexdigest()}  {job.name}\n"
        for how in ("owned by another user", "links to a file elsewhere"):
            with self.subTest(how=how):
                self.server.requests.clear()
                into, elsewhere = self.tmp(), self.tmp()
                into.chmod(0o1777)
                where = into if how == "owned by another user" else elsewhere
                (where / job.name).write_bytes(planted)
                (where / f"{job.name}.sha256").write_text(record)
                for name in (job.name, f"{job.name}.sha256"):
                    if where is elsewhere:
                        os.symlink(elsewhere / name, into / name)
                    os.chown(into / name, 4242, 4242, follow_symlinks=False)
                self.assertIsNone(fan_out.verified_size(str(into / job.name), job))
                export = reply(
                    201, {"download_url": "files/e1", "sha256": hashlib.sha256(data).hexdigest()}
                )
                self.script(export, serve_file(data))
                label, error, *_ = fan_out.fetch(self.client(), job, str(into))
                self.assertEqual(
                    self.requests[0].method, "POST", "the export made again, not skipped"
                )
                if (
                    where is into
                ):  # root may replace another user's file: this run's export is there now
                    self.assertEqual(
                        (label, error, (into / job.name).read_bytes()), ("AAPL", None, data)
                    )
                else:  # download() follows no other user's link in a sticky directory: an error, said
                    self.assertRegex(error or "", "^PermissionError: ")
                    self.assertEqual(
                        (elsewhere / job.name).read_bytes(), planted, "nothing written through it"
                    )

    def test_fan_out_records_the_services_sha256_normalised_and_a_rerun_skips_the_file(
        self,
    ) -> None:
        # Found in issue 35: a service sha256 with a trailing newline was recorded as it came, a
        # record of three lines that never matched: each re-run downloaded the file again.
        fan_out, data = _load_example("fan_out"), DATA[:2000]
        digest = hashlib.sha256(data).hexdigest()
        day = datetime.date(2024, 1, 2)
        job = fan_out.Job("AAPL", "daily_bars", ("AAPL",), day, day, "csv", "daily_bars-AAPL.csv")
        client = self.client()
        for spelling in (digest.upper(), f"{digest}\n", f" {digest.upper()}\r\n"):
            with self.subTest(sha256=spelling):
                into = self.tmp()
                self.server.requests.clear()
                export = reply(201, {"download_url": "files/e1", "sha256": spelling})
                self.script(export, serve_file(data))
                self.assertEqual(fan_out.fetch(client, job, str(into)), ("AAPL", None, 2000, True))
                self.assertEqual(
                    (into / f"{job.name}.sha256").read_text(),
                    f"{fan_out.covers(job)}\n{digest}  {job.name}\n",
                )
                self.assertEqual(fan_out.fetch(client, job, str(into)), ("AAPL", None, 2000, False))
                self.assertEqual([r.method for r in self.requests], ["POST", "GET"])
        # An export without a digest: a failed line before any download, never a record of "None"
        self.server.requests.clear()
        into = self.tmp()
        self.script(reply(201, {"download_url": "files/e1", "sha256": None}))
        self.assertEqual(
            fan_out.fetch(client, job, str(into)),
            (
                "AAPL",
                "ValueError: the export has no sha256 to check its file against: None",
                None,
                False,
            ),
        )
        self.assertEqual(([r.method for r in self.requests], os.listdir(into)), (["POST"], []))

    def test_ctrl_c_on_the_threads_closes_the_client_starts_nothing_more_and_sums_up(
        self,
    ) -> None:
        fan_out, into, data = _load_example("fan_out"), self.tmp(), DATA[:1000]
        export = reply(
            201, {"download_url": "files/e1", "sha256": hashlib.sha256(data).hexdigest()}
        )

        def export_at_once_file_never(handler: Any) -> None:
            if handler.command == "POST":
                export(handler)
            else:
                hang(handler)

        self.server.default = export_at_once_file_never
        # Python's own Ctrl-C, whatever the run inherited (a background job starts with SIGINT ignored)
        self.addCleanup(
            signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, signal.default_int_handler)
        )
        main = threading.get_ident()

        def ctrl_c_once_both_threads_download() -> None:
            wait_for(lambda: [r.method for r in self.requests].count("GET") == 2, 20)
            signal.pthread_kill(main, signal.SIGINT)

        threading.Thread(target=ctrl_c_once_both_threads_download, daemon=True).start()
        argv = ["daily_bars", "--symbols", "A,B,C,D,E,F", "--start", "2024-01-02"]
        argv += ["--end", "2024-01-02", "--into", str(into), "--workers", "2"]
        args = fan_out.parse_arguments(argv)
        with (
            contextlib.redirect_stdout(io.StringIO()) as stdout,
            contextlib.redirect_stderr(io.StringIO()) as stderr,
        ):
            status = fan_out.run_on_threads(args, self.client(), fan_out.plan(args))
        *failed, counts, summary = stdout.getvalue().splitlines()
        self.assertEqual(status, 130)
        self.assertEqual(
            sorted(line[: line.index(": the DatasetClient ")] for line in failed),
            ["failed A: ClientClosedError", "failed B: ClientClosedError"],
        )
        self.assertEqual(counts, "0 fetched, 0 already there")
        self.assertRegex(
            summary, r"^0 files, 0 bytes, 2 failed in [\d.]+ s on this machine \(2 threads\)$"
        )
        self.assertEqual(
            stderr.getvalue(),
            "fan_out.py: interrupted: 4 of 6 exports not started (a re-run fetches what is not"
            " there)\n",
        )
        self.assertEqual(
            sorted((r.method, r.json()["symbols"] if r.body else None) for r in self.requests),
            [("GET", None), ("GET", None), ("POST", ["A"]), ("POST", ["B"])],
        )
        self.assertEqual(os.listdir(into), [], "nothing left of the downloads cut")
        alive = [thread.name for thread in threading.enumerate() if "fan_out" in thread.name]
        self.assertEqual(alive, [], "the pool's threads ended")


class FanOutOnThreadsTests(StandInTestCase):
    """examples/fan_out.py without Dask: its jobs on threads of one client, as they run on Dask."""

    def test_without_dask_the_jobs_run_on_threads_with_the_files_lines_and_summary_of_dask(
        self,
    ) -> None:
        fan_out, config = _load_example("fan_out"), self.tmp() / "config.toml"
        config.touch(0o600)
        os.environ.update(
            DATASET_CLIENT_BASE_URL=self.base_url,
            DATASET_CLIENT_API_KEY="stand-in-key",
            DATASET_CLIENT_CONFIG=str(config),
        )
        argv = ["daily_bars", "--symbols", "AAPL,ZZZZ,MSFT", "--start", "2024-01-02"]
        argv += ["--end", "2024-01-31", "--format", "csv"]
        exports, on_threads, on_dask = self.service.service.exports, self.tmp(), self.tmp()
        made = len(exports)
        status, lines, stderr = fan_out_main(
            fan_out, [*argv, "--into", str(on_threads), "--workers", "3"], None
        )
        self.assertEqual((status, stderr, len(exports) - made), (1, "", 2))
        self.assertRegex(lines[0], "^failed ZZZZ: ServiceError: 422 .*: unknown symbols?: ZZZZ")
        self.assertEqual(lines[1:-1], ["2 fetched, 0 already there"])
        summary = r"^2 files, (\d+) bytes, 1 failed in [\d.]+ s on "
        self.assertRegex(lines[-1], summary + r"this machine \(3 threads\)$")
        on_dask_status, on_dask_lines, _ = fan_out_main(
            fan_out, [*argv, "--into", str(on_dask)], FakeDask()
        )
        self.assertEqual((on_dask_status, on_dask_lines[:-1]), (1, lines[:-1]))
        self.assertRegex(on_dask_lines[-1], summary + r"tcp://127\.0\.0\.1:8786 \(1 worker\)$")
        files = {path.name: path.read_bytes() for path in on_threads.iterdir()}
        self.assertEqual(files, {path.name: path.read_bytes() for path in on_dask.iterdir()})
        names = ["daily_bars-AAPL.csv", "daily_bars-MSFT.csv"]
        self.assertEqual(
            sorted(files), [names[0], f"{names[0]}.sha256", names[1], f"{names[1]}.sha256"]
        )
        self.assertEqual(
            re.findall(r"\d+", lines[-1])[1], str(len(files[names[0]]) + len(files[names[1]]))
        )
        made = len(exports)
        status, lines, _ = fan_out_main(
            fan_out, [*argv, "--into", str(on_threads), "--workers", "1"], None
        )
        self.assertEqual((status, len(exports) - made), (1, 0))
        self.assertEqual(lines[1:-1], ["0 fetched, 2 already there"])
        self.assertRegex(lines[-1], summary + r"this machine \(1 thread\)$")

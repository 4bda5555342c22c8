"""Tests for dataset_client, against scripted local servers on 127.0.0.1.

Run with ``python -m unittest -v`` (or pytest). Standard library only.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import errno
import functools
import gzip
import hashlib
import http.client
import importlib
import importlib.util
import inspect
import io
import json
import os
import pickle
import re
import select
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
import uuid
import warnings
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient, ServiceError
from tests.support import (
    CA_FILE,
    DATA,
    DATA_SHA,
    KEY,
    ROOT,
    Handler,
    ServerTestCase,
    StandInTestCase,
    Verified,
    blocked_in_a_socket_read,
    cut,
    digest_field,
    drop,
    file_size_limit,
    free_port,
    hang,
    head_server,
    hold,
    inherited_signals,
    local_service,
    outcome_of,
    quick_stand_in,
    recorded_sleeps,
    reply,
    reset,
    serve_file,
    server_tls_context,
    until_closed,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class BytesPath:
    """A path-like object whose path is bytes."""

    def __fspath__(self) -> bytes:
        return b"out.bin"


def _python_version() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])


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


class OldPythonTests(unittest.TestCase):
    """Python 3.10 or older: a clear ImportError, and one line from the command line, exit status 2."""

    EXPECTED = "dataset_client needs Python 3.11 or later; this is Python {}"

    def run_python(self, python: str, code: str) -> subprocess.CompletedProcess[str]:
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(ROOT),
        }
        return subprocess.run(
            [python, "-c", code],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def assert_refused(self, python: str, pretend: str, version: str) -> None:
        imported = self.run_python(python, f"{pretend}import dataset_client")
        self.assertEqual(imported.returncode, 1)
        self.assertEqual(
            imported.stderr.splitlines()[-1], "ImportError: " + self.EXPECTED.format(version)
        )
        for module in (
            "dataset_client",
            "dataset_client_cli",
        ):  # either file run as the command line
            run = f"sys.argv = ['{module}', 'datasets']; runpy.run_module('{module}', run_name='__main__')"
            command = self.run_python(python, f"import runpy, sys; {pretend}{run}")
            self.assertEqual(
                command.stderr, f"dataset-client: error: {self.EXPECTED.format(version)}\n"
            )
            self.assertEqual((command.returncode, command.stdout), (2, ""))

    def test_this_python_pretending_to_be_3_10(self) -> None:
        self.assert_refused(
            sys.executable, "import sys; sys.version_info = (3, 10, 13, 'final', 0); ", "3.10.13"
        )

    def test_real_older_pythons(self) -> None:
        root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
        pythons = sorted(root.glob("3.[89].*/bin/python")) + sorted(root.glob("3.10.*/bin/python"))
        if not pythons:
            self.skipTest(f"no Python 3.8 to 3.10 under {root} (pyenv install 3.10.13 adds one)")
        for python in pythons:
            with self.subTest(python=str(python)):
                self.assert_refused(str(python), "", python.parent.parent.name)


class ConstructionTests(ServerTestCase):
    def test_base_url_prefix_is_kept_with_or_without_trailing_slash(self) -> None:
        for base in ("/api/v1", "/api/v1/"):
            self.script(reply(body=[]))
            self.client(self.server.url + base).list_datasets()
            self.assertEqual(self.requests[-1].path, "/api/v1/datasets")

    def test_base_url_without_a_path(self) -> None:
        self.script(reply(body=[]))
        self.client(self.server.url).list_datasets()
        self.assertEqual(self.requests[-1].path, "/datasets")

    def test_bad_base_urls_are_refused(self) -> None:
        for base in (
            "ftp://h/api",
            "file:///etc/passwd",
            "http://",
            "h:8000/api",
            "http://h/api?x=1",
            "http://h/api#frag",
            "http://user:pw@h/api",
            "http://h:port/api",
            "http://h/a pi",
            "http://h/api\r\nX: y",
            "",
        ):
            with self.subTest(base=base), self.assertRaisesRegex(ValueError, "base_url"):
                DatasetClient(base)
        with self.assertRaisesRegex(TypeError, "base_url must be a str"):
            DatasetClient(b"http://h/")  # type: ignore[arg-type]

    def test_bad_timeouts_are_refused(self) -> None:
        for value in (0, -1, float("nan"), float("inf")):
            with self.subTest(value=value), self.assertRaisesRegex(ValueError, "timeout"):
                DatasetClient("http://h", timeout=value)
        for value in ("3", True, [1]):
            with self.subTest(value=value), self.assertRaisesRegex(TypeError, "timeout"):
                DatasetClient("http://h", timeout=value)  # type: ignore[arg-type]
        DatasetClient("http://h", timeout=None).close()
        DatasetClient("http://h", timeout=2).close()

    def test_bad_options_are_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "max_retries"):
            DatasetClient("http://h", max_retries=-1)
        with self.assertRaisesRegex(TypeError, "max_retries"):
            DatasetClient("http://h", max_retries=1.5)  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "ssl_context"):
            DatasetClient("https://h", ssl_context="ca.pem")  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "user_agent"):
            DatasetClient("http://h", user_agent="x\r\nEvil: 1")
        with self.assertRaisesRegex(TypeError, "headers must be a mapping"):
            DatasetClient("http://h", headers=[("A", "b")])  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "not a valid header name"):
            DatasetClient("http://h", headers={"Bad Name": "x"})
        for name in ("Content-Length", "transfer-encoding", "Connection"):
            with self.assertRaisesRegex(ValueError, "set by the client"):
                DatasetClient("http://h", headers={name: "1"})
        with self.assertRaisesRegex(ValueError, r"headers\['X-Key'\] contains a control character"):
            DatasetClient("http://h", headers={"X-Key": "secret\nInjected: 1"})

    def test_bad_api_keys_are_refused_without_showing_them(self) -> None:
        for key, error in (
            ("abc\r\nX-Evil: 1", ValueError),
            ("abc\n", ValueError),
            ("two words", ValueError),
            ("", ValueError),
            ("  ", ValueError),
            ("clé-secrète", ValueError),
            (12345, TypeError),
        ):
            with self.subTest(key=key):
                with self.assertRaises(error) as caught:
                    DatasetClient("http://h", api_key=key)  # type: ignore[arg-type]
                self.assertIn("api_key", str(caught.exception))
                if isinstance(key, str) and key.strip():
                    self.assertNotIn(key.strip(), str(caught.exception))

    def test_repr_never_shows_the_key(self) -> None:
        client = self.client()
        self.assertNotIn(KEY, repr(client))
        self.assertIn("/api/v1", repr(client))
        client.close()
        self.assertIn("closed", repr(client))

    def test_public_names(self) -> None:
        self.assertIsInstance(dc.__version__, str)
        for name in dc.__all__:
            self.assertTrue(hasattr(dc, name), name)
        self.assertTrue(issubclass(ServiceError, RuntimeError))


class FirstHourLibraryTests(ServerTestCase):
    """What a new user meets first from a Python prompt: a wrong scheme, a destination that cannot be
    written, a base URL without its scheme, a zero time-out, and the client's base_url."""

    def test_the_library_says_what_the_command_line_says(self) -> None:
        with self.assertRaisesRegex(
            ValueError,
            r"^base_url 'localhost:8000' has no scheme: did you mean 'http://localhost:8000'\?$",
        ):
            DatasetClient("localhost:8000")
        with self.assertRaisesRegex(
            ValueError, r"^timeout must be above 0 and finite, got 0 \(None means no limit\)$"
        ):
            DatasetClient("http://h", timeout=0)
        client = self.client(self.server.url + "/api/v1/")
        self.assertEqual(client.base_url, self.server.url + "/api/v1")
        with self.assertRaises(AttributeError):
            client.base_url = "http://elsewhere"  # type: ignore[misc]
        self.script(reply(body=[]))
        client.list_datasets()
        self.assertEqual(
            self.requests[0].path, "/api/v1/datasets", "the address it shows is the one it uses"
        )


class WireTests(ServerTestCase):
    def test_list_datasets_request_and_headers(self) -> None:
        self.script(reply(body=[{"name": "daily_bars"}]))
        result = self.client().list_datasets()
        self.assertEqual(result, [{"name": "daily_bars"}])
        (request,) = self.requests
        self.assertEqual(
            (request.method, request.path, request.body), ("GET", "/api/v1/datasets", b"")
        )
        self.assertEqual(request.headers["Accept"], "application/json")
        self.assertEqual(request.headers["Accept-Encoding"], "gzip")
        self.assertEqual(request.headers["Authorization"], f"Bearer {KEY}")
        self.assertRegex(
            request.headers["User-Agent"], r"^dataset-client/\d+\.\d+\.\d+ Python/3\.\d+\.\d+$"
        )
        self.assertEqual(
            request.headers["User-Agent"],
            f"dataset-client/{dc.__version__} Python/{_python_version()}",
        )
        self.assertIsNone(request.headers["Content-Type"])
        self.assertIsNone(request.headers["Content-Length"])

    def test_no_key_means_no_authorization_header(self) -> None:
        self.script(reply(body=[]))
        self.client(api_key=None).list_datasets()
        self.assertNotIn("Authorization", self.requests[0].headers)

    def test_query_posts_utf8_json(self) -> None:
        self.script(reply(body={"rows": [[1]]}))
        sql = "SELECT 'café ☕' AS name"
        self.assertEqual(self.client().query(sql), {"rows": [[1]]})
        (request,) = self.requests
        self.assertEqual((request.method, request.path), ("POST", "/api/v1/query"))
        self.assertEqual(request.headers["Content-Type"], "application/json")
        self.assertEqual(json.loads(request.body.decode("utf-8")), {"sql": sql})
        self.assertIn("café ☕".encode(), request.body)
        self.assertEqual(int(request.headers["Content-Length"]), len(request.body))

    def test_create_export_body_and_idempotency_key(self) -> None:
        self.script(reply(201, {"id": "e1"}), reply(201, {"id": "e2"}))
        client = self.client()
        result = client.create_export(
            "daily_bars",
            symbols="AAPL",
            start_date=datetime.date(2024, 1, 1),
            end_date="2024-03-31",
        )
        self.assertEqual(result, {"id": "e1"})
        client.create_export(
            "trades",
            symbols=(s for s in ["AAPL", "MSFT"]),
            start_date=datetime.datetime(2024, 1, 1, 9, 30),
            end_date=datetime.datetime(2024, 1, 2, 16, 0),
            format="csv",
        )
        first, second = self.requests
        self.assertEqual((first.method, first.path), ("POST", "/api/v1/exports"))
        self.assertEqual(
            first.json(),
            {
                "dataset": "daily_bars",
                "symbols": ["AAPL"],
                "start_date": "2024-01-01",
                "end_date": "2024-03-31",
                "format": "parquet",
            },
        )
        self.assertEqual(
            second.json(),
            {
                "dataset": "trades",
                "symbols": ["AAPL", "MSFT"],
                "start_date": "2024-01-01T09:30:00",
                "end_date": "2024-01-02T16:00:00",
                "format": "csv",
            },
        )
        keys = [uuid.UUID(r.headers["Idempotency-Key"]) for r in self.requests]
        self.assertNotEqual(keys[0], keys[1])

    def test_an_idempotency_key_given_is_sent_as_is(self) -> None:
        self.script(reply(201, {"id": "e1"}), reply(201, {"id": "e1"}))
        client = self.client()
        for _ in range(2):
            client.create_export(
                "trades",
                symbols="AAPL",
                start_date="2024-01-01",
                end_date="2024-01-02",
                idempotency_key="run-7f3a",
            )
        self.assertEqual(
            [r.headers["Idempotency-Key"] for r in self.requests], ["run-7f3a", "run-7f3a"]
        )
        with self.assertRaisesRegex(ValueError, "idempotency_key"):
            client.create_export(
                "t", symbols="A", start_date="x", end_date="y", idempotency_key="a\r\nb"
            )
        self.assertEqual(len(self.requests), 2)

    def test_bad_input_sends_nothing(self) -> None:
        client = self.client()
        day = datetime.date(2024, 1, 1)
        cases: list[tuple[Callable[[], object], type[Exception], str]] = [
            (lambda: client.query(""), ValueError, "sql"),
            (lambda: client.query("   "), ValueError, "sql"),
            (lambda: client.query(b"SELECT 1"), TypeError, "sql"),  # type: ignore[arg-type]
            (lambda: client.query(None), TypeError, "sql"),  # type: ignore[arg-type]
            (lambda: client.query("SELECT '\ud800'"), ValueError, "Unicode"),
            (
                lambda: client.create_export("", symbols="A", start_date=day, end_date=day),
                ValueError,
                "dataset",
            ),
            (
                lambda: client.create_export("d", symbols=[], start_date=day, end_date=day),
                ValueError,
                "symbols",
            ),
            (
                lambda: client.create_export("d", symbols=[""], start_date=day, end_date=day),
                ValueError,
                "symbols",
            ),
            (
                lambda: client.create_export("d", symbols=[1], start_date=day, end_date=day),
                TypeError,
                "symbols",
            ),  # type: ignore[list-item]
            (
                lambda: client.create_export("d", symbols=5, start_date=day, end_date=day),
                TypeError,
                "symbols",
            ),  # type: ignore[arg-type]
            (
                lambda: client.create_export("d", symbols="A", start_date=5, end_date=day),
                TypeError,
                "start_date",
            ),  # type: ignore[arg-type]
            (
                lambda: client.create_export("d", symbols="A", start_date=day, end_date=""),
                ValueError,
                "end_date",
            ),
            (
                lambda: client.create_export(
                    "d", symbols="A", start_date=day, end_date=day, format=""
                ),
                ValueError,
                "format",
            ),
            (
                lambda: client.create_export(
                    "d",
                    symbols="A",
                    start_date=datetime.date(2024, 2, 1),
                    end_date=datetime.date(2024, 1, 1),
                ),
                ValueError,
                "start_date 2024-02-01 is after end_date 2024-01-01",
            ),
            (lambda: client.download("ftp://h/file", io.BytesIO()), ValueError, "download_url"),
            (
                lambda: client.download("file:///etc/passwd", io.BytesIO()),
                ValueError,
                "download_url",
            ),
            (
                lambda: client.download("data:text/plain,hi", io.BytesIO()),
                ValueError,
                "download_url",
            ),
            (lambda: client.download("", io.BytesIO()), ValueError, "download_url"),
            (lambda: client.download("files/a\r\nb", io.BytesIO()), ValueError, "download_url"),
            (lambda: client.download("files/a", io.StringIO()), TypeError, "destination"),
            (lambda: client.download("files/a", 42), TypeError, "destination"),  # type: ignore[arg-type]
            (lambda: client.download("files/a", io.BytesIO(), sha256="abc"), ValueError, "sha256"),
            (lambda: client.download("files/a", io.BytesIO(), progress=3), TypeError, "progress"),  # type: ignore[arg-type]
            (lambda: client.download("files/a", io.BytesIO(), resume="yes"), TypeError, "resume"),  # type: ignore[arg-type]
            (lambda: client.download("files/a", io.BytesIO(), sha256=123), TypeError, "sha256"),  # type: ignore[arg-type]
            (lambda: client.download("files/a", b"bytes"), TypeError, "destination"),  # type: ignore[arg-type]
            (
                lambda: client.download("files/a", BytesPath()),
                TypeError,
                "destination must be a str path",
            ),  # type: ignore[arg-type]
            (lambda: client.download("files/a", ""), ValueError, "destination must not be empty"),
            (
                lambda: client.download("files/a", str(self.tmp())),
                ValueError,
                "destination is a directory",
            ),
        ]
        for call, error, text in cases:
            with self.subTest(text=text), self.assertRaisesRegex(error, text):
                call()
        self.assertEqual(self.requests, [])
        self.assertEqual(self.server.connections, 0)

    def test_a_date_and_a_datetime_are_ordered_by_their_days(self) -> None:
        self.script(reply(201, {"id": "e1"}))
        client = self.client()
        noon = datetime.datetime(2024, 1, 31, 12, 0)
        client.create_export(
            "d", symbols="A", start_date=noon, end_date=datetime.date(2024, 1, 31)
        )  # one day
        with self.assertRaisesRegex(
            ValueError, "^start_date 2024-02-01 is after end_date 2024-01-31T12:00:00$"
        ):
            client.create_export(
                "d", symbols="A", start_date=datetime.date(2024, 2, 1), end_date=noon
            )
        (request,) = self.requests
        sent: Any = request.json()
        self.assertEqual(
            (sent["start_date"], sent["end_date"]), ("2024-01-31T12:00:00", "2024-01-31")
        )

    def test_extra_headers_and_user_agent(self) -> None:
        self.script(reply(body=[]))
        self.client(
            api_key=None, headers={"X-API-Key": "k2"}, user_agent="my-app/2"
        ).list_datasets()
        headers = self.requests[0].headers
        self.assertEqual(headers["X-API-Key"], "k2")
        self.assertEqual(headers["User-Agent"], "my-app/2")
        self.assertNotIn("Authorization", headers)

    def test_extra_headers_override_defaults_whatever_their_case(self) -> None:
        self.script(reply(body=[]))
        self.client(
            headers={"authorization": "Token t", "accept": "application/vnd.x+json"}
        ).list_datasets()
        headers = self.requests[0].headers
        self.assertEqual(headers.get_all("Authorization"), ["Token t"])
        self.assertEqual(headers.get_all("Accept"), ["application/vnd.x+json"])

    def test_gzip_response_is_decoded(self) -> None:
        payload = {"rows": list(range(1000))}
        self.script(
            reply(
                body=gzip.compress(json.dumps(payload).encode()),
                headers={"Content-Encoding": "gzip"},
            )
        )
        self.assertEqual(self.client().list_datasets(), payload)
        self.assertEqual(self.requests[0].headers["Accept-Encoding"], "gzip")

    def test_empty_body_and_204_give_none(self) -> None:
        self.script(reply(200, b""), reply(204, b""))
        client = self.client()
        self.assertIsNone(client.list_datasets())
        self.assertIsNone(client.list_datasets())
        self.assertEqual(
            [(r.method, r.path) for r in self.requests], [("GET", "/api/v1/datasets")] * 2
        )
        self.assertEqual(
            self.server.connections, 1, "an empty body still leaves the connection reusable"
        )

    def test_any_2xx_is_success(self) -> None:
        self.script(reply(202, {"status": "queued"}))
        self.assertEqual(self.client().query("SELECT 1"), {"status": "queued"})
        self.assertEqual(len(self.requests), 1, "a 2xx is not retried")
        self.assertEqual(self.requests[0].json(), {"sql": "SELECT 1"})

    def test_non_json_success_body(self) -> None:
        self.script(reply(200, b"<html>proxy login</html>", content_type="text/html"))
        with self.assertRaises(dc.InvalidResponseError) as caught:
            self.client().list_datasets()
        message = str(caught.exception)
        for part in (self.server.url + "/api/v1/datasets", "200", "text/html", "<html>proxy login"):
            self.assertIn(part, message)
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIsInstance(caught.exception, dc.DatasetClientError)
        self.assertIsInstance(caught.exception.__cause__, json.JSONDecodeError)

    def test_a_large_result_is_decoded_whole(self) -> None:
        rows = [[i, f"name-{i}", i * 0.5] for i in range(40_000)]
        self.script(reply(body={"rows": rows}))
        self.assertEqual(self.client().query("SELECT *")["rows"], rows)
        (request,) = self.requests
        self.assertEqual(request.json(), {"sql": "SELECT *"})


class ErrorTests(ServerTestCase):
    def test_service_error_fields_and_message(self) -> None:
        body = {"error": {"message": "no such dataset", "code": "not_found"}}
        self.script(reply(404, body, {"X-Request-Id": "req-42"}))
        with self.assertRaises(ServiceError) as caught:
            self.client().list_datasets()
        error = caught.exception
        url = self.server.url + "/api/v1/datasets"
        self.assertEqual(str(error), f"404 Not Found: GET {url}: no such dataset")
        self.assertEqual(
            (error.status, error.reason, error.method, error.url), (404, "Not Found", "GET", url)
        )
        self.assertEqual(error.payload, body)
        self.assertEqual(json.loads(error.body), body)
        self.assertEqual(error.message, "no such dataset")
        self.assertEqual(error.request_id, "req-42")
        self.assertIsNone(error.retry_after)
        self.assertEqual(error.headers["Content-Type"], "application/json")
        self.assertIsInstance(error, RuntimeError)
        self.assertIsInstance(error, dc.DatasetClientError)
        self.assertEqual(error.attempts, 1)

    def test_service_error_without_json(self) -> None:
        body = b"bad things\nat line 2"
        self.script(reply(400, body, {"Request-Id": "r-7"}, content_type="text/plain"))
        with self.assertRaises(ServiceError) as caught:
            self.client().query("SELECT")
        error = caught.exception
        url = f"{self.server.url}/api/v1/query"
        self.assertEqual(str(error), f"400 Bad Request: POST {url}: bad things")
        self.assertEqual(
            (error.body, error.payload, error.message, error.request_id),
            ("bad things\nat line 2", None, "bad things", "r-7"),
        )

    def test_an_object_stores_xml_or_html_error_gives_a_short_reason(self) -> None:
        # Found in review: an expired presigned S3 URL ended in "403 Forbidden: GET URL", its reason
        # dropped. Bodies as S3, Azure, GCS, CloudFront, nginx and Envoy send them.
        s3 = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
            "<Message>Request has expired</Message><X-Amz-Expires>60</X-Amz-Expires>"
            "<RequestId>4442587FB7D0A2F9</RequestId></Error>"
        )
        azure = (
            '\ufeff<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthenticationFailed</Code>'
            "<Message>Server failed to authenticate the request.\nRequestId:0c5f\nTime:2024-01-01"
            "</Message></Error>"
        )
        gcs = "<?xml version='1.0'?><Error><Code>ExpiredToken</Code><Message>Invalid argument."
        gcs += "</Message><Details>The provided token has expired.</Details></Error>"
        bomb = '<?xml version="1.0"?><!DOCTYPE e [<!ENTITY a "aaaaaaaaaa">' + "".join(
            f'<!ENTITY {"b" * n}a "{("&" + "b" * (n - 1) + "a;") * 10}">' for n in range(1, 9)
        )
        cloudfront = "<!DOCTYPE html><html><head><TITLE>ERROR: The request could not be satisfied"
        envoy = "upstream connect error or disconnect/reset before headers"
        nginx = "<html><head><title>\n  502 Bad \t Gateway\n</title></head><body>nginx</body>"
        hostile = "<Error><Message>denied\u202e:ko \x1b[2J\u200b</Message></Error>"
        cases = {
            s3: "AccessDenied: Request has expired",
            azure: "AuthenticationFailed: Server failed to authenticate the request.",
            gcs: "ExpiredToken: Invalid argument.",
            "<Error><Code>A&amp;B</Code><Message>x &lt;y&gt; &#x7a;</Message>": "A&B: x <y> z",
            bomb + "]><Error><Code>&bbbbbbbba;</Code></Error>": "&bbbbbbbba;",
            cloudfront + "</TITLE>": "ERROR: The request could not be satisfied",
            nginx: "502 Bad Gateway",
            f"\n\n{envoy}\nmore": envoy,
            hostile: "denied\\u202e:ko \\x1b[2J\\u200b",
            f"<Error><Code>No</Code><Message>{KEY} is bad</Message>": "No: <redacted> is bad",
            "<html><body><h1>Forbidden</h1></body></html>": None,
            "<Error><Code>" + "C" * 300 + "</Code></Error>": "C" * 200,
        }
        url = f"{self.server.url}/api/v1/datasets"
        for body, expected in cases.items():
            kind = "text/html" if "html" in body else "text/xml" if "<" in body else "text/plain"
            self.script(reply(403, body.encode(), content_type=kind))
            with self.subTest(body=body[:40]):
                error = outcome_of(self.client(max_retries=0).list_datasets)
                assert isinstance(error, ServiceError), repr(error)
                self.assertEqual(error.message, expected)
                shown = f"403 Forbidden: GET {url}" + (f": {expected}" if expected else "")
                self.assertEqual(str(error), shown)
                self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(len(self.requests), len(cases))

    def test_service_messages_under_common_names(self) -> None:
        for payload, message in (
            ({"message": "m1"}, "m1"),
            ({"detail": "m2"}, "m2"),
            ({"error": "m3"}, "m3"),
            ({"error_description": "m4"}, "m4"),
            ({"detail": [{"loc": "x"}]}, None),
            (["not", "a", "dict"], None),
        ):
            self.script(reply(422, payload))
            with self.subTest(payload=payload), self.assertRaises(ServiceError) as caught:
                self.client().query("SELECT 1")
            self.assertEqual(caught.exception.message, message)

    def test_error_body_is_bounded(self) -> None:
        self.script(reply(500, b"x" * 1_000_000, content_type="text/plain"), reply(body=[]))
        client = self.client()
        with self.assertRaises(ServiceError) as caught:
            client.query("SELECT 1")
        self.assertLessEqual(len(caught.exception.body), 64 * 1024)
        self.assertEqual(client.list_datasets(), [])  # the half-read connection was not reused
        self.assertEqual(self.server.connections, 2)

    def test_unknown_status_without_reason(self) -> None:
        def respond(handler: Handler) -> None:
            handler.wfile.write(b"HTTP/1.1 599 \r\nContent-Length: 0\r\n\r\n")

        self.script(respond)
        with self.assertRaises(ServiceError) as caught:
            self.client(max_retries=0).list_datasets()
        self.assertEqual(caught.exception.status, 599)

    def test_timeout(self) -> None:
        self.script(hang)
        client = self.client(timeout=0.05, max_retries=0)
        with self.assertRaises(dc.RequestTimeoutError) as caught:
            client.list_datasets()
        self.assertIsInstance(caught.exception, TimeoutError)
        self.assertIn(self.server.url + "/api/v1/datasets", str(caught.exception))

    def test_connection_refused(self) -> None:
        port = free_port()
        client = self.client(f"http://127.0.0.1:{port}/api", max_retries=0)
        with self.assertRaises(dc.NetworkError) as caught:
            client.list_datasets()
        self.assertIsInstance(caught.exception, ConnectionError)
        self.assertIn(f"http://127.0.0.1:{port}/api/datasets", str(caught.exception))
        self.assertIsInstance(caught.exception.__cause__, ConnectionRefusedError)

    def test_short_body(self) -> None:
        body = json.dumps({"rows": list(range(100))}).encode()
        self.script(cut(body, 10))
        with self.assertRaises(dc.IncompleteResponseError) as caught:
            self.client(max_retries=0).list_datasets()
        error = caught.exception
        self.assertIsInstance(error, ConnectionError)
        self.assertEqual((error.expected, error.received), (len(body), 10))
        self.assertIn(f"after 10 of {len(body)} bytes", str(error))
        self.assertIn("/api/v1/datasets", str(error))

    def test_reset_and_early_close(self) -> None:
        for fault in (reset, drop):
            self.script(fault)
            with self.subTest(fault=fault.__name__), self.assertRaises(dc.NetworkError) as caught:
                self.client(max_retries=0).list_datasets()
            self.assertIsInstance(caught.exception, ConnectionError)
            self.assertIn("/api/v1/datasets", str(caught.exception))

    def test_closed_client(self) -> None:
        self.script(reply(body=[]))
        with self.client() as client:
            client.list_datasets()
        for call in (
            client.list_datasets,
            lambda: client.query("SELECT 1"),
            lambda: client.download("files/a", io.BytesIO()),
        ):
            with self.assertRaisesRegex(dc.ClientClosedError, "closed"):
                call()
        client.close()  # idempotent
        self.assertIsInstance(dc.ClientClosedError("x"), RuntimeError)
        self.assertEqual(len(self.requests), 1)

    def test_exceptions_pickle_with_their_fields_and_cause(self) -> None:
        self.script(
            reply(503, {"message": "busy"}, {"Retry-After": "1"}), reply(503, {"message": "busy"})
        )
        with recorded_sleeps(), self.assertRaises(ServiceError) as caught:
            self.client(max_retries=1).list_datasets()
        copy = pickle.loads(pickle.dumps(caught.exception))
        self.assertEqual(str(copy), str(caught.exception))
        self.assertEqual(
            (copy.status, copy.message, copy.attempts, copy.payload),
            (503, "busy", 2, {"message": "busy"}),
        )
        self.script(cut(b"0123456789", 3))
        with self.assertRaises(dc.IncompleteResponseError) as caught_short:
            self.client(max_retries=0).list_datasets()
        copy_short = pickle.loads(pickle.dumps(caught_short.exception))
        self.assertEqual(
            (copy_short.expected, copy_short.received, copy_short.url),
            (10, 3, caught_short.exception.url),
        )
        self.assertIsInstance(copy_short.__cause__, type(caught_short.exception.__cause__))
        for error in (
            dc.RequestTimeoutError("t", url="u"),
            dc.ChecksumMismatchError("c", url="u", expected="a", actual="b"),
            dc.ClientClosedError("closed"),
        ):
            self.assertEqual(vars(pickle.loads(pickle.dumps(error))), vars(error))

    def test_exception_fields_are_keywords_each_class_declares(self) -> None:
        short = dc.IncompleteResponseError("GET u: cut", method="GET", url="u", received=3)
        self.assertEqual(
            (short.url, short.expected, short.received, short.certificate), ("u", None, 3, False)
        )
        self.assertEqual(
            (dc.ChecksumMismatchError("c").method, dc.InvalidResponseError("i").received),
            ("GET", None),
        )
        for make in (
            lambda: dc.NetworkError("x", certficate=True),
            lambda: dc.ClientClosedError("x", deadline=1.0),
        ):
            with self.assertRaisesRegex(
                TypeError,
                r"^(NetworkError|ClientClosedError) has no field '(certficate|deadline)'$",
            ):
                make()
        ended = dc.RequestTimeoutError("GET u: the deadline of 1 s was reached", deadline=1.0)
        self.assertEqual(str(ended), "GET u: the deadline of 1 s was reached (after 1 attempt)")

    def test_key_never_leaks_into_errors_or_logs(self) -> None:
        self.script(reply(503, {"message": "busy"}), reply(401, {"message": "bad key"}))
        client = self.client()
        with (
            self.assertLogs("dataset_client", level="DEBUG") as logs,
            self.assertRaises(ServiceError) as caught,
        ):
            client.list_datasets()
        error = caught.exception
        for text in (
            str(error),
            repr(error),
            error.body,
            *logs.output,
            repr(vars(error)),
            repr(client),
        ):
            self.assertNotIn(KEY, text)
        retries = [record for record in logs.records if record.levelname == "WARNING"]
        self.assertEqual(len(retries), 1)
        retried = r"^retrying in 0\.0 s \(2 attempts left\): 503 Service Unavailable: GET "
        self.assertRegex(retries[0].getMessage(), retried)
        self.assertEqual(len(logs.records), 3, "one retry, two requests at DEBUG")

    def test_a_request_imports_no_logging(self) -> None:
        self.script(reply(body=[{"name": "daily_bars"}]))
        code = (
            "import sys\nfrom dataset_client import DatasetClient\n"
            "with DatasetClient(sys.argv[1], 'k') as client:\n    print(client.list_datasets())\n"
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'logging'))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, self.server.url],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=30,
        )
        self.assertEqual((done.stdout, done.stderr), ("[{'name': 'daily_bars'}]\n[]\n", ""))
        self.assertEqual([(r.method, r.path) for r in self.requests], [("GET", "/datasets")])


class FromProfileTests(ServerTestCase):
    """DatasetClient.from_profile: the client the command line builds (the contract's Public API)."""

    def setUp(self) -> None:
        super().setUp()
        for name in [
            name for name in os.environ if name.startswith(("DATASET_CLIENT_", "XDG_CONFIG_HOME"))
        ]:
            del os.environ[name]
        os.environ["HOME"] = str(self.tmp())  # no config file of this machine's
        self.server.default = reply(body=[])

    def config(self, text: str, mode: int = 0o600, directory: Path | None = None) -> Path:
        config = (directory or self.tmp()) / "config.toml"
        config.write_text(text)
        config.chmod(mode)
        os.environ["DATASET_CLIENT_CONFIG"] = str(config)
        return config

    def test_variables_beat_the_file_and_settings_beat_both(self) -> None:
        api = self.server.url + "/api"
        self.config(f'[default]\nbase_url = "{api}/v1"\napi_key = "{KEY}"\ntimeout = 5\n')
        with DatasetClient.from_profile() as client:
            self.assertEqual((client.base_url, client.list_datasets()), (f"{api}/v1", []))
            self.assertEqual(
                (client._arguments["timeout"], client._arguments["max_retries"]), (5, 2)
            )
        os.environ.update(
            DATASET_CLIENT_BASE_URL=f"{api}/v2", DATASET_CLIENT_API_KEY="sk-of-the-variable"
        )
        with DatasetClient.from_profile() as client:
            client.list_datasets()
        with DatasetClient.from_profile(
            base_url=f"{api}/v3", api_key=None, timeout=7, max_retries=0
        ) as client:
            client.list_datasets()
            self.assertEqual(
                (client._arguments["timeout"], client._arguments["max_retries"]), (7, 0)
            )
        self.assertEqual(
            [(request.path, request.headers["Authorization"]) for request in self.requests],
            [
                ("/api/v1/datasets", f"Bearer {KEY}"),
                ("/api/v2/datasets", "Bearer sk-of-the-variable"),
                ("/api/v3/datasets", None),
            ],
        )

    def test_the_profile_asked_for_else_the_variables_else_default_and_what_is_missing_is_named(
        self,
    ) -> None:
        url = self.server.url
        config = self.config(
            f'[default]\nbase_url = "{url}/a"\n[staging]\nbase_url = "{url}/b"\ntimeout = 0\n'
        )

        def built(profile: str | None = None) -> tuple[str, float | None]:
            with DatasetClient.from_profile(profile) as client:
                return client.base_url, client._arguments["timeout"]

        self.assertEqual(built(), (f"{url}/a", 30.0))
        self.assertEqual(built("staging"), (f"{url}/b", None), "timeout = 0: no limit")
        os.environ["DATASET_CLIENT_PROFILE"] = "staging"
        self.assertEqual(built(), (f"{url}/b", None))
        self.assertEqual(built("default"), (f"{url}/a", 30.0))
        with self.assertRaises(LookupError) as caught:
            DatasetClient.from_profile("prod")
        self.assertEqual(
            str(caught.exception), f"no profile 'prod' in {config}; its profiles: default, staging"
        )
        os.environ["DATASET_CLIENT_CONFIG"] = str(config.parent / "none.toml")
        with self.assertRaises(LookupError) as caught:
            DatasetClient.from_profile()
        self.assertEqual(
            str(caught.exception), f"no config file {config.parent}/none.toml for profile staging"
        )
        self.assertEqual(self.requests, [])

    def test_no_base_url_from_anywhere_names_the_variable_and_the_file(self) -> None:
        default = f"{os.environ['HOME']}/.config/dataset-client/config.toml"
        for config in (None, '[staging]\nbase_url = "http://x"\n', "[default]\ntimeout = 5\n"):
            with self.subTest(config=config):
                config = config and str(self.config(config))
                with self.assertRaises(ValueError) as caught:
                    DatasetClient.from_profile(timeout=5)
                self.assertEqual(
                    str(caught.exception),
                    f"no service address: set DATASET_CLIENT_BASE_URL, or give the profile in {config or default}"
                    " a base_url (or pass base_url)",
                )
        os.environ["DATASET_CLIENT_BASE_URL"] = self.server.url
        with DatasetClient.from_profile() as client:
            self.assertEqual(
                client._arguments["timeout"], 5, "the profile's other settings still hold"
            )

    def test_an_unknown_key_is_a_warning_naming_it_the_file_and_the_nearest_known_key(self) -> None:
        config = self.config(
            f'[default]\nbase_url = "{self.server.url}"\ntimout = 5\ncolour = "red"\n'
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with DatasetClient.from_profile() as client:
                self.assertEqual(client._arguments["timeout"], 30.0, "an unknown key is ignored")
        self.assertEqual(
            [str(warning.message) for warning in caught],
            [
                f"unknown key 'colour' in [default] in {config} (ignored): known keys: base_url, api_key,"
                " ca_bundle, timeout",
                f"unknown key 'timout' in [default] in {config} (ignored): did you mean 'timeout'?",
            ],
        )
        self.assertEqual(
            {warning.filename for warning in caught},
            {__file__},
            "said where from_profile was called",
        )

    def test_a_file_others_can_read_or_write_or_another_user_owns_is_refused_saying_what_to_run(
        self,
    ) -> None:
        spaced = self.tmp() / "my configs"
        spaced.mkdir()
        profile = f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n'
        for mode, said in (
            (0o640, "holds an api_key and is readable by others: run chmod 600"),
            (0o620, "is writable by group or others: not used; run chmod go-w"),
        ):
            with self.subTest(mode=oct(mode)):
                config = self.config(profile, mode, spaced)
                with self.assertRaises(PermissionError) as caught:
                    DatasetClient.from_profile()
                self.assertEqual(str(caught.exception), f"{config} {said} '{config}'")
        config = self.config(profile)
        if os.geteuid() == 0:
            os.chown(config, 4242, 4242)
            theirs: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        else:  # this user, seen as another one
            theirs = mock.patch.object(os, "geteuid", return_value=os.geteuid() + 1)
        with theirs, self.assertRaises(PermissionError) as caught:
            DatasetClient.from_profile()
        self.assertRegex(
            str(caught.exception),
            rf"^{re.escape(str(config))} is owned by another user \(uid \d+\)",
        )
        self.assertEqual(self.requests, [], "nothing sent where such a file says")

    def test_where_files_have_no_owner_or_mode_a_key_in_a_profile_is_read(self) -> None:
        # Windows: no geteuid, and every file's mode says 0o666 (0o444 read-only).
        config = self.config(f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n')
        config.chmod(0o666)
        with mock.patch.object(dc, "_HAS_GETEUID", False), DatasetClient.from_profile() as client:
            client.list_datasets()
        self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")

    def test_a_key_by_any_spelling_is_a_key(self) -> None:
        for spelling in ("api-key", "apikey", "API_KEY", "Api-Key"):
            with self.subTest(spelling=spelling):
                config = self.config(
                    f'[default]\nbase_url = "{self.server.url}"\n{spelling} = "{KEY}"\n', 0o644
                )
                with self.assertRaises(PermissionError) as caught:
                    DatasetClient.from_profile()
                self.assertIn("is readable by others: run chmod 600", str(caught.exception))
                config.chmod(0o600)
                with self.assertWarnsRegex(UserWarning, f"^unknown key '{spelling}' in "):
                    DatasetClient.from_profile().close()
        self.config(
            f'api_key = "{KEY}"\n[default]\nbase_url = "{self.server.url}"\n', 0o604
        )  # outside a profile
        self.assertRaises(PermissionError, DatasetClient.from_profile)

    def test_a_relative_ca_bundle_is_the_config_files_neighbour_whatever_the_working_directory(
        self,
    ) -> None:
        # Issue 30: ca_bundle = "corp-ca.pem" was read from the working directory (another user's, in /tmp).
        tls = self.start_server(server_tls_context())
        tls.default = reply(body=[])
        directory, elsewhere = self.tmp(), self.tmp()
        shutil.copy(CA_FILE, directory / "corp-ca.pem")
        (elsewhere / "corp-ca.pem").write_text("planted: not the user's CA\n")
        config = self.config(
            f'[default]\nbase_url = "{tls.url}"\nca_bundle = "corp-ca.pem"\n', directory=directory
        )
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(elsewhere)
        with DatasetClient.from_profile() as client:
            self.assertEqual(client._arguments["ca_bundle"], str(directory / "corp-ca.pem"))
            os.chdir(self.tmp())
            self.assertEqual(client.list_datasets(), [])
        self.config(
            f'[default]\nbase_url = "{tls.url}"\nca_bundle = "missing.pem"\n', directory=directory
        )
        with self.assertRaises(FileNotFoundError) as caught:
            DatasetClient.from_profile()
        said = f"ca_bundle in [default] in {config} names {directory}/missing.pem, which is not a file or directory"
        self.assertTrue(str(caught.exception).startswith(said), caught.exception)
        status, err = self.cli("datasets")
        self.assertEqual((status, err.startswith(f"dataset-client: error: {said}")), (2, True), err)
        with self.assertRaisesRegex(
            FileNotFoundError, "^ca_bundle names "
        ):  # the caller's: as it is
            DatasetClient.from_profile(ca_bundle=str(directory / "missing.pem"))
        self.assertEqual(len(tls.requests), 1)

    def test_numbers_of_any_size_are_value_errors_naming_where_they_came_from(self) -> None:
        # Issue 30: a 400-digit timeout (profile, constructor) or --retries was an OverflowError traceback.
        config = self.config(f'[default]\nbase_url = "{self.server.url}"\ntimeout = {"9" * 400}\n')
        with self.assertRaises(ValueError) as caught:
            DatasetClient.from_profile()
        self.assertEqual(
            str(caught.exception),
            f"timeout in [default] in {config} must be a number of seconds (0: no limit),"
            f" not {'9' * 20}... (400 characters)",
        )
        self.assertEqual(self.cli("datasets"), (2, f"dataset-client: error: {caught.exception}\n"))
        for argument in ("timeout", "max_retries", "backoff_factor", "deadline"):
            with self.subTest(argument=argument):
                with self.assertRaises(ValueError) as caught:
                    DatasetClient(self.server.url, **{argument: 10**400})
                self.assertRegex(
                    str(caught.exception),
                    rf"^{argument} must be .*, got an integer past 1\.8e\+308",
                )
        del os.environ["DATASET_CLIENT_CONFIG"]
        status, err = self.cli("--base-url", self.server.url, "--retries", "9" * 400, "datasets")
        self.assertEqual(status, 2)
        self.assertIn(
            "dataset-client: error: argument --retries: must be 0 to 1000000, got 9999", err
        )
        self.assertEqual(self.requests, [])

    def cli(self, *argv: str) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = cli.main(list(argv))
        return status, err.getvalue()


class ConnectionTests(ServerTestCase):
    def test_close_during_a_call_starts_no_probe(self) -> None:
        # Issue 30: close() from another thread ended the call 5 s later: its hang-up was probed.
        arrived = threading.Event()

        def held(head: str, connection: socket.socket) -> bool:
            arrived.set()
            return hold(head, connection)

        url, seen = head_server(self, held)
        client, outcome = self.client(url), []
        thread = threading.Thread(target=lambda: outcome.append(outcome_of(client.list_datasets)))
        thread.start()
        self.assertTrue(arrived.wait(5))
        closed = time.monotonic()
        client.close()
        thread.join(10)
        self.assertLess(time.monotonic() - closed, 1, "ended promptly")
        self.assertIsInstance(outcome[0], dc.ClientClosedError)
        self.assertEqual(seen, ["GET /datasets HTTP/1.1"], "no probe after close()")

    def test_close_ends_the_wait_for_a_retry(self) -> None:
        # Found in review: a 503 with Retry-After: 20, then close(): the call ended 20 s later.
        self.script(reply(503, {"error": "busy"}, {"Retry-After": "30"}))
        client = self.client(timeout=30)
        outcome = self.closed_during(client, client.list_datasets, lambda: bool(self.requests))
        self.assertIsInstance(outcome, dc.ClientClosedError)
        self.assertIn("closed during GET", str(outcome))
        self.assertEqual(len(self.requests), 1, "not sent again")

    def test_close_ends_a_connect_and_a_scheme_probe_that_hang(self) -> None:
        # Found in review: close() came 10 s late during a connect, 5 s during a scheme probe.
        listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.addCleanup(listener.close)
        port, queued = listener.getsockname()[1], []
        for _ in range(3):  # the accept queue full: a new connection's SYN goes unanswered
            queued.append(socket.socket())
            self.addCleanup(queued[-1].close)
            queued[-1].setblocking(False)
            queued[-1].connect_ex(("127.0.0.1", port))
        client = self.client(f"http://127.0.0.1:{port}", timeout=30)
        connecting = lambda: bool(client._pool._connecting)  # noqa: E731
        self.assertIsInstance(
            self.closed_during(client, client.list_datasets, connecting), dc.ClientClosedError
        )
        url, seen = head_server(self, refuse_tls=True)  # a plain server holding OPTIONS *
        client = self.client(url.replace("http:", "https:"), timeout=30, max_retries=0)
        probed = lambda: len(seen) == 2  # noqa: E731
        self.assertIsInstance(
            self.closed_during(client, client.list_datasets, probed), dc.ClientClosedError
        )
        self.assertEqual(seen, ["TLS", "OPTIONS * HTTP/1.0"], "the probe was under way")
        # Found in review: wrap_socket moves the descriptor to the SSLSocket, so the socket held
        # was detached and a TLS handshake that hangs (a ClientHello never answered) ran on.
        url, seen = head_server(self)  # holds what it cannot read as a request's head
        client = self.client(url.replace("http:", "https:"), timeout=30, max_retries=0)
        outcome = self.closed_during(client, client.list_datasets, lambda: bool(seen))
        self.assertIsInstance(outcome, dc.ClientClosedError)
        self.assertEqual(seen, ["TLS"], "the handshake was under way")

    def test_close_closes_the_connections(self) -> None:
        self.server.default = reply(body=[])
        client = self.client()
        client.list_datasets()
        self.assertEqual(self.server.closed_connections, 0)
        client.close()
        wait_for(lambda: self.server.closed_connections == 1)


# Beyond one process: a client forked under a reading thread, pickled, copied, handed to other processes
class BeyondOneProcessTests(ServerTestCase):
    def test_close_ends_sixty_four_calls_in_flight_and_leaves_no_descriptor(self) -> None:
        # The short version of .ci/thread_stress.py's last phase.
        if not os.path.isdir("/proc/self/fd"):
            self.skipTest("no /proc/self/fd to count descriptors in")

        def until_the_client_closes(handler: Handler) -> None:
            select.select([handler.connection], [], [], 10)  # readable: the client's end closed
            handler.close_connection = True

        self.server.default = until_the_client_closes
        self.server.socket.listen(
            128
        )  # 64 connecting at once: none left to a 1 s SYN retransmission

        def sockets() -> set[str]:
            # Sockets alone (another descriptor may be opened for good by what runs first here), by
            # inode: one an earlier test left to a thread may close meanwhile, and is not counted.
            found = set()
            for name in os.listdir("/proc/self/fd"):
                with contextlib.suppress(OSError):  # closed since listed (the listing's, at least)
                    found.add(os.readlink(f"/proc/self/fd/{name}"))
            return {link for link in found if link.startswith("socket:")}

        descriptors = sockets()
        client = self.client(timeout=30)
        calls = (
            client.list_datasets,
            lambda: client.query("SELECT 1"),
            lambda: client.download("f", io.BytesIO()),
        )
        outcomes: list[object] = []
        threads = [
            threading.Thread(target=lambda n=n: outcomes.append(outcome_of(calls[n % 3])))
            for n in range(64)
        ]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(self.requests) == 64)
        client.close()
        for thread in threads:
            thread.join(10)
        self.assertEqual(
            {type(outcome) for outcome in outcomes} - {dc.NetworkError}, {dc.ClientClosedError}
        )
        self.assertEqual(len(outcomes), 64, "every call ended, long before its 30 s time-out")
        wait_for(lambda: sockets() <= descriptors)  # none of its own left: the server's ends too

    def test_fan_out_plans_one_export_a_month_clipped_and_without_dask_says_how_to_install(
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
        stderr = io.StringIO()
        with (
            mock.patch.dict(sys.modules, {"dask": None, "dask.distributed": None}),
            contextlib.redirect_stderr(stderr),
        ):
            status = fan_out.main([*argv, "--into", str(self.tmp())])
        self.assertEqual(
            (status, stderr.getvalue()),
            (2, 'fan_out.py needs Dask: pip install "dask[distributed]"\n'),
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
        modules = {"dask": types.SimpleNamespace(distributed=dask), "dask.distributed": dask}
        with (
            mock.patch.dict(sys.modules, modules),
            contextlib.redirect_stderr(io.StringIO()) as stderr,
            contextlib.redirect_stdout(io.StringIO()) as stdout,
        ):
            status = fan_out.main(argv)
        self.assertEqual(
            (status, stderr.getvalue(), stdout.getvalue()), (2, f"fan_out.py: {refused}\n", "")
        )
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

    def test_close_ends_a_download_whose_response_reads_to_the_connection_s_close(self) -> None:
        go_on = (
            threading.Event()
        )  # http.client lets go of the socket of a "Connection: close" response

        def trickle(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", "1000")
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(b"x" * 10)
            handler.wfile.flush()
            go_on.wait(10)

        self.script(trickle)
        client, outcome = (
            self.client(timeout=30),
            list[BaseException](),
        )  # not ended by its time-out

        def download() -> None:
            try:
                client.download("files/x", io.BytesIO())
            except dc.DatasetClientError as exc:
                outcome.append(exc)

        reading = threading.Thread(target=download)
        reading.start()
        self.addCleanup(reading.join, 10)
        self.addCleanup(go_on.set)
        # The request seen first: a read of the head, before the server read it, counts too.
        wait_for(lambda: bool(self.requests) and blocked_in_a_socket_read(reading))
        client.close()
        reading.join(5)
        self.assertEqual(
            [type(error) for error in outcome],
            [dc.ClientClosedError],
            "ended before the server went on",
        )
        self.assertEqual([r.path for r in self.requests], ["/api/v1/files/x"])

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


class HostileServerTests(ServerTestCase):
    def test_close_from_another_thread_ends_a_call_under_way(self) -> None:
        arrived = threading.Event()

        def stall(handler: Handler) -> None:
            arrived.set()
            hang(handler)

        self.script(stall)
        client = self.client(timeout=30)
        result: list[object] = []
        thread = threading.Thread(target=lambda: result.append(outcome_of(client.list_datasets)))
        thread.start()
        self.assertTrue(arrived.wait(5))
        client.close()
        thread.join(10)
        self.assertFalse(thread.is_alive(), "the call waited for its 30 s time-out")
        self.assertIsInstance(result[0], dc.ClientClosedError)
        self.assertIn("closed during GET", str(result[0]))
        self.assertEqual(len(self.requests), 1, "not retried")

    def test_close_from_another_thread_ends_a_download_and_leaves_nothing(self) -> None:
        for resume in (False, True):
            sent_some = threading.Event()

            def half_then_stall(handler: Handler, sent_some: threading.Event = sent_some) -> None:
                handler.send_response(200)
                handler.send_header("Content-Length", str(len(DATA)))
                handler.send_header("ETag", '"v1"')
                handler.end_headers()
                handler.wfile.write(DATA[:1_500_000])
                sent_some.set()
                hang(handler)

            self.script(half_then_stall)
            directory = self.tmp()
            client = self.client(timeout=30)
            seen = threading.Event()
            result: list[object] = []
            call = functools.partial(
                client.download,
                "files/x",
                directory / "out.bin",
                resume=resume,
                progress=lambda d, t, s=seen: d and s.set(),
            )
            download = functools.partial(
                lambda call, result: result.append(outcome_of(call)), call, result
            )
            thread = threading.Thread(target=download)
            thread.start()
            with self.subTest(resume=resume):
                self.assertTrue(sent_some.wait(5) and seen.wait(5))
                client.close()
                thread.join(10)
                self.assertFalse(thread.is_alive(), "the download waited for its time-out")
                self.assertIsInstance(result[0], dc.ClientClosedError)
                left = sorted(p.name for p in directory.iterdir())
                self.assertEqual(left, [".out.bin.part", ".out.bin.part.json"] if resume else [])


class DownloadTests(ServerTestCase):
    def assert_only(self, directory: Path, *names: str) -> None:
        self.assertEqual(
            sorted(p.name for p in directory.iterdir()), sorted(names), "a temporary file was left"
        )

    def test_download_to_a_path(self) -> None:
        self.script(serve_file(DATA))
        directory = self.tmp()
        seen: list[tuple[int, int | None]] = []
        self.client().download(
            "files/e1.csv",
            directory / "out.csv",
            sha256=DATA_SHA.upper(),
            progress=lambda d, t: seen.append((d, t)),
        )
        self.assertEqual((directory / "out.csv").read_bytes(), DATA)
        self.assert_only(directory, "out.csv")
        (request,) = self.requests
        self.assertEqual((request.method, request.path), ("GET", "/api/v1/files/e1.csv"))
        self.assertEqual(request.headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(request.headers["Accept-Encoding"], "identity")
        self.assertEqual(seen[-1], (len(DATA), len(DATA)))
        self.assertEqual([d for d, _ in seen], sorted(d for d, _ in seen))
        self.assertLessEqual(len(seen), len(DATA) // (256 * 1024) + 2, "chunks of at least 256 KiB")

    def test_a_body_without_a_length_ends_where_the_connection_closes(self) -> None:
        self.script(until_closed(DATA))
        directory = self.tmp()
        seen: list[tuple[int, int | None]] = []
        self.client().download(
            "files/x", directory / "out.bin", progress=lambda d, t: seen.append((d, t))
        )
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assert_only(directory, "out.bin")
        (request,) = self.requests
        self.assertEqual(
            (request.method, request.path, request.headers["Range"]),
            ("GET", "/api/v1/files/x", None),
        )
        self.assertEqual(seen[0], (0, None), "no length said")
        # Found while writing this test: the last call was (size, None), the total known by then not passed on.
        self.assertEqual(seen[-1], (len(DATA), len(DATA)), "the size, once the connection closed")

    def test_download_replaces_an_existing_file_and_keeps_umask_permissions(self) -> None:
        self.script(serve_file(DATA))
        target = self.tmp() / "out.bin"
        target.write_bytes(b"old")
        self.client().download("files/x", str(target))
        self.assertEqual(target.read_bytes(), DATA)
        umask = os.umask(0)
        os.umask(umask)
        self.assertEqual(target.stat().st_mode & 0o777, 0o666 & ~umask)

    def test_relative_and_absolute_download_urls(self) -> None:
        other = self.start_server()
        other.script.append(serve_file(b"abc"))
        self.script(serve_file(b"abc"), serve_file(b"abc"))
        client = self.client(headers={"X-Tenant": "t"})
        client.download("/files/root", io.BytesIO())
        client.download(self.server.url + "/abs/x?sig=1", io.BytesIO())
        client.download(other.url + "/bucket/x?X-Amz-Signature=abc", io.BytesIO())
        self.assertEqual([r.path for r in self.requests], ["/files/root", "/abs/x?sig=1"])
        self.assertEqual(self.requests[1].headers["Authorization"], f"Bearer {KEY}")
        (presigned,) = other.requests
        self.assertEqual(presigned.path, "/bucket/x?X-Amz-Signature=abc")
        self.assertNotIn("Authorization", presigned.headers)
        self.assertNotIn("X-Tenant", presigned.headers)

    def test_credentials_are_dropped_when_a_download_redirects_away(self) -> None:
        storage = self.start_server()
        storage.script.append(serve_file(DATA))
        self.script(reply(302, b"", {"Location": storage.url + "/bucket/e1?sig=x"}))
        out = io.BytesIO()
        self.client().download("files/e1", out)
        self.assertEqual(out.getvalue(), DATA)
        self.assertEqual(self.requests[0].headers["Authorization"], f"Bearer {KEY}")
        self.assertNotIn("Authorization", storage.requests[0].headers)

    def test_download_to_a_file_object_at_its_position(self) -> None:
        self.script(serve_file(b"payload"))
        out = io.BytesIO(b"header:")
        out.seek(0, io.SEEK_END)
        self.client().download("files/x", out)
        self.assertFalse(out.closed)
        self.assertEqual(out.getvalue(), b"header:payload")

    def test_short_body_leaves_nothing_and_keeps_the_old_file(self) -> None:
        self.script(cut(DATA, 1000, {"ETag": '"v1"'}))
        directory = self.tmp()
        (directory / "out.bin").write_bytes(b"precious")
        with self.assertRaises(dc.IncompleteResponseError) as caught:
            self.client(max_retries=0).download("files/x", directory / "out.bin")
        self.assertEqual((caught.exception.expected, caught.exception.received), (len(DATA), 1000))
        self.assertEqual((directory / "out.bin").read_bytes(), b"precious")
        self.assert_only(directory, "out.bin")

    def test_checksum_mismatch_leaves_nothing(self) -> None:
        self.script(serve_file(DATA))
        directory = self.tmp()
        (directory / "out.bin").write_bytes(b"precious")
        wrong = "0" * 64
        with self.assertRaises(dc.ChecksumMismatchError) as caught:
            self.client().download("files/x", directory / "out.bin", sha256=wrong)
        self.assertIn(wrong, str(caught.exception))
        self.assertIn(DATA_SHA, str(caught.exception))
        self.assertIsInstance(caught.exception, ValueError)
        self.assertEqual((directory / "out.bin").read_bytes(), b"precious")
        self.assert_only(directory, "out.bin")

    def test_file_system_error_and_ctrl_c_leave_nothing(self) -> None:
        directory = self.tmp()
        (directory / "out.bin").write_bytes(b"precious")
        client = self.client()
        self.script(serve_file(DATA))
        with file_size_limit(1024 * 1024), self.assertRaises(OSError) as caught:
            client.download("files/x", directory / "out.bin")
        self.assertNotIsInstance(caught.exception, dc.DatasetClientError)
        self.assertEqual(caught.exception.errno, errno.EFBIG)

        def interrupt(done: int, total: int | None) -> None:
            if done > 1_000_000:
                raise KeyboardInterrupt

        self.script(serve_file(DATA))
        with self.assertRaises(KeyboardInterrupt):
            client.download("files/x", directory / "out.bin", progress=interrupt)
        self.assertEqual((directory / "out.bin").read_bytes(), b"precious")
        self.assert_only(directory, "out.bin")
        self.assertEqual(len(self.requests), 2, "neither failure was retried")

    def test_not_enough_space_fails_before_writing(self) -> None:
        def huge(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", str(2**62))
            handler.end_headers()
            handler.wfile.write(b"x" * 1000)
            handler.close_connection = True

        self.script(huge)
        directory = self.tmp()
        with self.assertRaises(OSError) as caught:
            self.client(max_retries=0).download("files/huge", directory / "huge.bin")
        self.assertIn("not enough space", str(caught.exception))
        self.assert_only(directory)

    def test_missing_directory_fails_before_sending(self) -> None:
        with self.assertRaises(FileNotFoundError):
            self.client().download("files/x", self.tmp() / "missing" / "out.bin")
        self.assertEqual(self.requests, [])

    def test_two_downloads_to_one_path_at_once_use_temporary_files_of_their_own(self) -> None:
        look = self.serve_two_at_once()
        directory = self.tmp()
        client = self.client()
        threads = [
            threading.Thread(target=client.download, args=("files/x", directory / "out.bin"))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        temporary = look(directory)
        for thread in threads:
            thread.join(10)
        self.assertEqual(len(temporary), 2)
        self.assertTrue(
            all(name.startswith(".out.bin.") and name.endswith(".part") for name in temporary),
            temporary,
        )
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        self.assert_only(directory, "out.bin")

    def test_http_errors_on_download(self) -> None:
        self.script(reply(404, {"message": "expired"}))
        directory = self.tmp()
        with self.assertRaises(ServiceError) as caught:
            self.client().download("files/x", directory / "out.bin")
        self.assertEqual(
            str(caught.exception), f"404 Not Found: GET {self.server.url}/api/v1/files/x: expired"
        )
        self.assert_only(directory)


class ReadmeTests(unittest.TestCase):
    """The README stays a guide (short, the quick start near the top) and its API part cannot go stale."""

    def test_help_at_a_prompt_fits_80_columns_but_for_signatures(self) -> None:
        # Found by a new user: help(DatasetClient) broke words at 80 columns (docstrings at 100).
        shown = [("module", dc, 76)]
        for name in dc.__all__:
            public = getattr(dc, name)
            if isinstance(public, type):
                shown.append((name, public, 76))
                methods = [m for m in vars(public) if not m.startswith("_")]
                methods = [m for m in methods if inspect.isroutine(getattr(public, m))]
                shown += [(f"{name}.{m}", getattr(public, m), 72) for m in methods]
        for name, public, width in shown:  # help() indents a class's by 4, a method's by 8
            with self.subTest(name=name):
                lines = (inspect.getdoc(public) or "").splitlines()
                self.assertEqual([line for line in lines if len(line) > width], [])

    README = ROOT / "README.md"

    API_HEADING = "## The Python API"

    def api_part(self, text: str) -> tuple[str, str]:
        """The README's API part: its code blocks, and its prose (the rest), apart."""
        self.assertIn(f"\n{self.API_HEADING}\n", text)
        start = text.index(self.API_HEADING)
        end = text.find("\n## ", start + 1)
        part = text[start : end if end >= 0 else len(text)]
        pieces = part.split("```")
        return "\n".join(pieces[1::2]), "\n".join(pieces[0::2])

    def public_parameters(self) -> dict[str, list[str]]:
        """The public parameter names of the constructor and of every public method, by method."""
        import inspect

        methods = {"DatasetClient": DatasetClient.__init__}
        for name, member in inspect.getmembers(
            DatasetClient, inspect.isroutine
        ):  # from_profile too
            if not name.startswith("_"):
                methods[name] = member
        listed = {name: inspect.signature(method).parameters for name, method in methods.items()}
        return {name: [p for p in names if p != "self"] for name, names in listed.items()}

    def missing_from(self, text: str) -> list[str]:
        """Each public parameter (as method.name) not both in the API part's signatures and described in its prose."""
        code, prose = self.api_part(text)
        missing = []
        for method, names in self.public_parameters().items():
            if not re.search(rf"\b{method}\(", code):
                missing.append(f"{method}()")
            for name in names:
                if not re.search(rf"\b{name}\b", code) or f"`{name}`" not in prose:
                    missing.append(f"{method}.{name}")
        return missing

    def test_every_public_parameter_is_in_the_readmes_api_part(self) -> None:
        text = self.README.read_text(encoding="utf-8")
        parameters = self.public_parameters()
        self.assertIn("max_rate", parameters["download"], "the check sees the real signatures")
        self.assertIn("idempotency_key", parameters["create_export"])
        self.assertEqual(parameters["from_profile"], ["profile", "settings"])
        private = [
            f"{method}.{name}"
            for method, names in parameters.items()
            for name in names
            if name[0] == "_"
        ]
        self.assertEqual(private, [], "no public signature has a private parameter")
        self.assertEqual(self.missing_from(text), [])
        # The check fails when a parameter goes: removed from the signatures, or from the prose.
        self.assertIn(
            "download.max_rate", self.missing_from(re.sub(r"\bmax_rate=None, ", "", text))
        )
        self.assertIn(
            "create_export.idempotency_key",
            self.missing_from(text.replace("- `idempotency_key`:", "-")),
        )
        self.assertIn(
            "DatasetClient.base_url", self.missing_from(text.replace("`base_url`", "base_url"))
        )

    def test_the_readme_is_short_with_the_quick_start_near_the_top(self) -> None:
        text = self.README.read_text(encoding="utf-8")
        self.assertLess(len(text), 15_000)
        lines = text.splitlines()
        quick_start = next(
            i for i, line in enumerate(lines) if line.startswith("## ") and "Quick start" in line
        )
        self.assertLess(quick_start, 100)
        self.assertEqual(lines[quick_start + 2], "```python")
        for command in ("python3 examples/local_service.py --demo", "python3 -m unittest -v"):
            self.assertIn(f"\n{command} ", text, "the two set-up commands, as typed")
        self.assertIn("""\nalias dataset-client="python3 '$PWD/dataset_client.py'"\n""", text)
        self.assertTrue((ROOT / "docs" / "DESIGN.md").is_file())
        self.assertIn("(docs/DESIGN.md)", text)


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
        with self.assertRaisesRegex(ValueError, "kind must be one of"):
            local_service.write_parquet(io.BytesIO(), [("a", "float")], [])
        with self.assertRaisesRegex(ValueError, "compression"):
            local_service.write_parquet(io.BytesIO(), [("a", "int64")], [], compression="snappy")


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


if __name__ == "__main__":
    unittest.main()

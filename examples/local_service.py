"""A stand-in of the dataset service, standard library only, for trying the client offline.

    python examples/local_service.py                  # serve on 127.0.0.1:8765, print the export lines
    python examples/local_service.py --port 0         # any free port
    python examples/local_service.py --demo           # start in the background, tour every operation, exit

It serves deterministic sample data from an in-memory sqlite3 database:

    GET  /datasets        the datasets, with their columns, symbols and date ranges
    POST /query           {"sql": ...}: read-only SQL -> {"columns", "rows", "row_count", "truncated"}
    POST /exports         {"dataset", "symbols", "start_date", "end_date", "format"} -> the export
    GET  /files/NAME      an export's file, with Content-Length, ETag, Accept-Ranges and Range,
                          Repr-Digest (RFC 9530), and Content-Digest on each 206

Every request needs ``Authorization: Bearer <key>``. Errors are JSON ``{"message": ...}``.
Formats: parquet (the default; written by parquet_writer.py beside this file, standard
library only, read by pyarrow, DuckDB and Polars), csv and jsonl.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import datetime
import functools
import gzip
import hashlib
import http.server
import json
import math
import os
import random
import secrets
import shlex
import shutil
import socket
import socketserver
import sqlite3
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(
        0, os.path.dirname(os.path.abspath(__file__))
    )  # parquet_writer.py, beside this file
from parquet_writer import write_parquet

_AnyServer = TypeVar("_AnyServer", bound=socketserver.BaseServer)

SYMBOLS = ("AAPL", "AMZN", "GOOG", "JNJ", "JPM", "META", "MSFT", "NVDA", "TSLA", "V", "WMT", "XOM")
FIRST_DAY = datetime.date(2023, 1, 2)
LAST_DAY = datetime.date(2024, 12, 31)
MAX_QUERY_ROWS = 10_000
FORMATS = ("parquet", "csv", "jsonl")
PARQUET_KINDS = {"TEXT": "string", "DATE": "date", "REAL": "double", "INTEGER": "int64"}
CONTENT_TYPES = {
    ".parquet": "application/vnd.apache.parquet",
    ".csv": "text/csv",
    ".jsonl": "application/x-ndjson",
}
DATASETS: dict[str, dict[str, Any]] = {
    "daily_bars": {
        "description": "Daily open, high, low, close and volume per symbol, on weekdays.",
        "columns": {
            "date": "DATE",
            "symbol": "TEXT",
            "open": "REAL",
            "high": "REAL",
            "low": "REAL",
            "close": "REAL",
            "volume": "INTEGER",
        },
    },
    "trades": {
        "description": "Individual trades (a sample of eight a day per symbol).",
        "columns": {
            "date": "DATE",
            "time": "TEXT",
            "symbol": "TEXT",
            "price": "REAL",
            "size": "INTEGER",
        },
    },
}


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@functools.cache  # made once a process: services started in one process (the tests) share it
def _sample_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The daily bars and the trades, deterministic: the same data on every start."""
    rng = random.Random(20240101)
    days = [FIRST_DAY + datetime.timedelta(n) for n in range((LAST_DAY - FIRST_DAY).days + 1)]
    weekdays = [day.isoformat() for day in days if day.weekday() < 5]
    bars, trades = [], []
    for symbol in SYMBOLS:
        price = rng.uniform(20, 400)
        for day in weekdays:
            open_ = price
            close = max(1.0, open_ * (1 + rng.gauss(0, 0.02)))
            high = max(open_, close) * (1 + rng.random() * 0.01)
            low = min(open_, close) * (1 - rng.random() * 0.01)
            bars.append((day, symbol, round(open_, 2), round(high, 2), round(low, 2), round(close, 2),
                         rng.randrange(100_000, 5_000_000)))  # fmt: skip
            for seconds in sorted(rng.sample(range(9 * 3600 + 1800, 16 * 3600), 8)):
                at = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
                trades.append(
                    (day, at, symbol, round(rng.uniform(low, high), 2), rng.randrange(1, 500))
                )
            price = close
    return bars, trades


class Service:
    """The data and the operations, independent of HTTP."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self._database: sqlite3.Connection | None = None  # made on first use: see _data()
        self.files = tempfile.mkdtemp(prefix="dataset-service-")
        self.exports: dict[str, dict[str, Any]] = {}
        self.by_idempotency_key: dict[str, tuple[str, dict[str, Any]]] = {}
        self.exports_lock = threading.Lock()

    def close(self) -> None:
        if self._database is not None:
            self._database.close()
        shutil.rmtree(self.files, ignore_errors=True)

    def _data(self) -> sqlite3.Connection:
        """The sample database, made on first use (with ``self.lock`` held): a service only started and
        stopped never spends the 0.2 s its data takes to make."""
        if self._database is None:
            database = sqlite3.connect(":memory:", check_same_thread=False)
            for name, spec in DATASETS.items():
                columns = ", ".join(f"{column} {kind}" for column, kind in spec["columns"].items())
                database.execute(f"CREATE TABLE {name} ({columns})")
            bars, trades = _sample_rows()
            database.executemany("INSERT INTO daily_bars VALUES (?, ?, ?, ?, ?, ?, ?)", bars)
            database.executemany("INSERT INTO trades VALUES (?, ?, ?, ?, ?)", trades)
            database.commit()
            database.execute("PRAGMA query_only = ON")
            self._database = database
        return self._database

    def check_key(self, authorization: str | None) -> None:
        expected = f"Bearer {self.api_key}"
        if not authorization or not secrets.compare_digest(
            authorization.encode(), expected.encode()
        ):
            raise HTTPError(401, "missing or wrong API key", {"WWW-Authenticate": "Bearer"})

    def list_datasets(self) -> list[dict[str, Any]]:
        listing = []
        with self.lock:
            for name, spec in DATASETS.items():
                (rows,) = self._data().execute(f"SELECT count(*) FROM {name}").fetchone()
                listing.append({
                    "name": name,
                    "description": spec["description"],
                    "columns": [{"name": c, "type": t} for c, t in spec["columns"].items()],
                    "symbols": list(SYMBOLS),
                    "start_date": FIRST_DAY.isoformat(),
                    "end_date": LAST_DAY.isoformat(),
                    "rows": rows,
                })  # fmt: skip
        return listing

    def query(self, body: Any) -> dict[str, Any]:
        sql = body.get("sql") if isinstance(body, dict) else None
        if not isinstance(sql, str) or not sql.strip():
            raise HTTPError(422, 'the body must be {"sql": "<a SELECT statement>"}')
        with self.lock:
            database = self._data()
            database.set_authorizer(_read_only)
            try:
                cursor = database.execute(sql)
                rows = cursor.fetchmany(MAX_QUERY_ROWS + 1)
            except sqlite3.DatabaseError as exc:
                status = 403 if "not authorized" in str(exc) or "readonly" in str(exc) else 400
                raise HTTPError(status, f"query failed: {exc}") from None
            except sqlite3.Warning as exc:  # e.g. more than one statement
                raise HTTPError(400, f"query failed: {exc}") from None
            finally:
                database.set_authorizer(None)
        columns = [column[0] for column in cursor.description or ()]
        truncated = len(rows) > MAX_QUERY_ROWS
        rows = [[_json_value(value) for value in row] for row in rows[:MAX_QUERY_ROWS]]
        return {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}

    def create_export(
        self, body: Any, idempotency_key: str | None, base: str
    ) -> tuple[int, dict[str, Any]]:
        with self.exports_lock:  # one at a time: a key repeated at once must not create two exports
            if idempotency_key and idempotency_key in self.by_idempotency_key:
                previous_body, export = self.by_idempotency_key[idempotency_key]
                if previous_body != json.dumps(body, sort_keys=True):
                    raise HTTPError(422, "this Idempotency-Key was used with a different request")
                return 200, export
            export = self._write_export(body, base)
            if idempotency_key:
                self.by_idempotency_key[idempotency_key] = (
                    json.dumps(body, sort_keys=True),
                    export,
                )
            return 201, export

    def _write_export(self, body: Any, base: str) -> dict[str, Any]:
        dataset, symbols, start, end, file_format = _check_export(body)
        export_id = "exp_" + uuid.uuid4().hex[:12]
        name = f"{export_id}.{file_format}"
        path = os.path.join(self.files, name)
        columns = list(DATASETS[dataset]["columns"])
        marks = ", ".join("?" for _ in symbols)
        sql = (f"SELECT {', '.join(columns)} FROM {dataset} WHERE symbol IN ({marks}) "
               f"AND date BETWEEN ? AND ? ORDER BY date, symbol")  # fmt: skip
        with self.lock:
            rows = (
                self._data().execute(sql, [*symbols, start.isoformat(), end.isoformat()]).fetchall()
            )
        if file_format == "parquet":
            types = DATASETS[dataset]["columns"]
            write_parquet(
                path, [(column, PARQUET_KINDS[types[column]]) for column in columns], rows
            )
        else:
            with open(path, "w", encoding="utf-8", newline="") as out:
                if file_format == "csv":
                    writer = csv.writer(out)
                    writer.writerow(columns)
                    writer.writerows(rows)
                else:
                    for row in rows:
                        out.write(json.dumps(dict(zip(columns, row, strict=True))) + "\n")
        with open(path, "rb") as written:
            digest = hashlib.file_digest(written, "sha256").hexdigest()
        export = {
            "id": export_id,
            "status": "ready",
            "dataset": dataset,
            "symbols": symbols,
            "start_date": start.isoformat(),
            "end_date": end.isoformat(),
            "format": file_format,
            "rows": len(rows),
            "size": os.path.getsize(path),
            "sha256": digest,
            "download_url": f"{base}/files/{name}",
        }
        self.exports[name] = export
        return export

    def file_path(self, name: str) -> str:
        if name not in self.exports:
            raise HTTPError(404, f"no such file: {name}")
        return os.path.join(self.files, name)


def _json_value(value: Any) -> Any:
    """A value JSON can hold: a BLOB as hex text, an infinite or NaN float as text."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _read_only(
    action: int, arg1: str | None, arg2: str | None, database: str | None, source: str | None
) -> int:
    """sqlite authorizer: reading and selecting only."""
    allowed = (
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
    )
    return sqlite3.SQLITE_OK if action in allowed else sqlite3.SQLITE_DENY


def _check_export(body: Any) -> tuple[str, list[str], datetime.date, datetime.date, str]:
    if not isinstance(body, dict):
        raise HTTPError(422, "the body must be a JSON object")
    dataset = body.get("dataset")
    if dataset not in DATASETS:
        raise HTTPError(404, f"no such dataset: {dataset!r} (try one of {', '.join(DATASETS)})")
    symbols = body.get("symbols")
    if not isinstance(symbols, list) or not symbols or not all(isinstance(s, str) for s in symbols):
        raise HTTPError(422, "symbols must be a non-empty list of strings")
    unknown = sorted(set(symbols) - set(SYMBOLS))
    if unknown:
        raise HTTPError(422, f"unknown symbols: {', '.join(unknown)}")
    dates = []
    for field in ("start_date", "end_date"):
        try:
            dates.append(datetime.date.fromisoformat(str(body.get(field))[:10]))
        except ValueError:
            raise HTTPError(422, f"{field} must be a date, YYYY-MM-DD") from None
    if dates[0] > dates[1]:
        raise HTTPError(422, "start_date is after end_date")
    file_format = body.get("format", "parquet")
    if file_format not in FORMATS:
        raise HTTPError(422, f"unknown format {file_format!r}: use {', '.join(FORMATS)}")
    return dataset, list(dict.fromkeys(symbols)), dates[0], dates[1], file_format


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dataset-service/1"
    wbufsize = 64 * 1024  # headers and a small body in one write
    server: Server

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _handle(self) -> None:
        request_id = uuid.uuid4().hex[:16]
        service = self.server.service
        path = urllib.parse.urlsplit(self.path).path
        try:
            body = self._read_body()
            service.check_key(self.headers.get("Authorization"))
            if self.command == "GET" and path == "/datasets":
                self._send_json(200, service.list_datasets(), request_id)
            elif self.command == "POST" and path == "/query":
                self._send_json(200, service.query(_parse_json(body)), request_id)
            elif self.command == "POST" and path == "/exports":
                host = self.headers.get("Host")
                base = f"http://{host}" if host else self.server.base_url
                status, export = service.create_export(
                    _parse_json(body), self.headers.get("Idempotency-Key"), base
                )
                self._send_json(status, export, request_id)
            elif self.command == "GET" and path.startswith("/files/"):
                self._send_file(service.file_path(path[len("/files/") :]), request_id)
            else:
                raise HTTPError(404, f"no such endpoint: {self.command} {path}")
        except HTTPError as exc:
            self._send_json(exc.status, {"message": exc.message}, request_id, exc.headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1024 * 1024:
            self.close_connection = True
            raise HTTPError(413, "request body too large")
        return self.rfile.read(length) if length else b""

    def _send_json(
        self, status: int, payload: Any, request_id: str, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        gzipped = len(data) > 512 and "gzip" in self.headers.get("Accept-Encoding", "")
        if gzipped:
            data = gzip.compress(data, compresslevel=5)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Request-Id", request_id)
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_file(self, path: str, request_id: str) -> None:
        sha256 = self.server.service.exports[os.path.basename(path)]["sha256"]
        etag = '"' + sha256[:32] + '"'
        kind = CONTENT_TYPES.get(os.path.splitext(path)[1])
        with open(path, "rb") as file:
            send_file(
                self,
                file,
                os.fstat(file.fileno()).st_size,
                etag,
                content_type=kind,
                headers={"X-Request-Id": request_id},
                sha256=sha256,
                content_digest=True,
            )


_cuts_lock = threading.Lock()


def send_file(
    handler: http.server.BaseHTTPRequestHandler,
    file: BinaryIO,
    size: int,
    etag: str | None,
    *,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
    ranges: bool = True,
    cuts: list[int] | None = None,
    sending: Callable[[int], None] | None = None,
    sha256: str | None = None,
    content_digest: bool = False,
) -> None:
    """Answer a GET for a file: 200, 206 for one byte range (Range and If-Range, RFC 9110 14), or 416.

    Also used by the tests and the benchmarks. ``ranges=False`` ignores Range. Each offset in
    ``cuts`` ends the one response that reaches it there, then closes the connection (a cut
    transfer). ``sending`` is told how many body bytes go out, before they are sent. ``sha256``
    (the file's, hex) is sent as ``Repr-Digest``; ``content_digest`` sends each 206's own
    ``Content-Digest`` (RFC 9530), the sha-256 of the bytes it carries.
    """
    span = _requested_range(handler.headers.get("Range"), size) if ranges else None
    if span is not None and handler.headers.get("If-Range") not in (None, etag):
        span = None  # another version: the whole file
    if span == (size, size):
        handler.send_response(416)
        handler.send_header("Content-Range", f"bytes */{size}")
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return
    start, end = span or (0, size)
    stop = end
    with _cuts_lock:
        reached = [cut for cut in cuts or () if start < cut < end]
        if reached:
            stop = reached[0]
            cuts.remove(stop)  # type: ignore[union-attr]
    handler.send_response(206 if span else 200)
    extra = {"Content-Range": f"bytes {start}-{end - 1}/{size}"} if span else {}
    extra |= {"ETag": etag} if etag else {}
    extra |= {"Accept-Ranges": "bytes"} if ranges else {}
    extra |= {"Content-Type": content_type} if content_type else {}
    extra |= _digest_headers(file, (start, end) if span else None, sha256, content_digest)
    for name, value in {"Content-Length": str(end - start), **extra, **(headers or {})}.items():
        handler.send_header(name, value)
    handler.end_headers()
    if sending is not None:
        sending(stop - start)  # before sending: the client may finish before this thread resumes
    file.seek(start)
    while start < stop:
        chunk = file.read(min(stop - start, 1024 * 1024))
        if not chunk:
            break
        handler.wfile.write(chunk)
        start += len(chunk)
    if stop < end:
        handler.close_connection = True


def _digest_headers(
    file: BinaryIO, span: tuple[int, int] | None, sha256: str | None, content: bool
) -> dict[str, str]:
    """Repr-Digest (the file's ``sha256``), and a 206's Content-Digest (of ``span``, read from ``file``)."""
    headers = {"Repr-Digest": _digest_field(bytes.fromhex(sha256))} if sha256 else {}
    if span is not None and content:
        file.seek(span[0])
        headers["Content-Digest"] = _digest_field(
            hashlib.file_digest(_Slice(file, span[1] - span[0]), "sha256").digest()
        )
    return headers


def _digest_field(digest: bytes) -> str:
    """An RFC 9530 digest field's value for a sha-256 ``digest``."""
    return f"sha-256=:{base64.b64encode(digest).decode()}:"


class _Slice:
    """The next ``size`` bytes of ``file``, read as a file (for hashlib.file_digest)."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file, self.left = file, size

    def readinto(self, buffer: bytearray | memoryview) -> int:
        view = memoryview(buffer)[: self.left]
        count = self.file.readinto(view)  # type: ignore[attr-defined]
        self.left -= count or 0
        return count or 0

    def readable(self) -> bool:
        return True


def _requested_range(value: str | None, size: int) -> tuple[int, int] | None:
    """The bytes ``[start, end)`` one Range asks for, ``(size, size)`` when none can be served, or None."""
    unit, _, spec = (value or "").partition("=")
    first, dash, last = spec.strip().partition("-")
    if unit.strip().lower() != "bytes" or "," in spec or not dash or not (first + last).isdigit():
        return None  # absent, or not one plain range: the whole file (RFC 9110 14.2 allows it)
    if not first:  # a suffix: the last N bytes
        return (max(0, size - int(last)), size) if int(last) and size else (size, size)
    if int(first) >= size or (last and int(last) < int(first)):
        return size, size
    return int(first), min(int(last) + 1 if last else size, size)


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise HTTPError(400, "the body is not valid JSON") from None


class QuietServer(http.server.ThreadingHTTPServer):
    """A threading server that says nothing when a client hangs up (the benchmarks' too)."""

    daemon_threads = True
    # Many clients connecting at once (socketserver's default backlog is 5).
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that has its bytes may hang up; anything else, a traceback on stderr.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Server(QuietServer):
    def __init__(self, host: str, port: int, api_key: str, *, verbose: bool = False) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.verbose = verbose
        super().__init__((host, port), Handler)  # a port in use fails here
        try:
            self.service = Service(api_key)
        except BaseException:
            super().server_close()
            raise

    @property
    def base_url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def server_close(self) -> None:
        super().server_close()
        service: Service | None = getattr(
            self, "service", None
        )  # none yet when the port was in use
        if service is not None:
            service.close()


def running(
    host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
) -> contextlib.AbstractContextManager[Server]:
    """Serve in a background thread for the duration of a ``with`` block."""
    return serving(Server(host, port, api_key or secrets.token_urlsafe(24)))


@contextlib.contextmanager
def serving(server: _AnyServer) -> Iterator[_AnyServer]:
    """Run ``server`` in a background thread for the duration of a ``with`` block, then close it."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def demo() -> int:
    """Start the service on a free port and walk the client through every operation."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from dataset_client import DatasetClient, ServiceError

    for name in [name for name in os.environ if name.lower().endswith("_proxy")]:
        del os.environ[name]  # the service is on loopback: never go through a proxy for it
    with running() as server, DatasetClient(server.base_url, server.service.api_key) as client:
        print(f"service: {server.base_url}\n")
        print("client.list_datasets():")
        for dataset in client.list_datasets():
            print(
                f"  {dataset['name']}: {dataset['rows']} rows, {dataset['start_date']}..{dataset['end_date']}"
            )
        sql = "SELECT symbol, round(avg(close), 2) AS avg_close FROM daily_bars GROUP BY symbol ORDER BY 2 DESC LIMIT 3"
        result = client.query(sql)
        print(f"\nclient.query({sql!r}):\n  {result['columns']}")
        for row in result["rows"]:
            print(f"  {row}")
        selection = {
            "symbols": ["AAPL", "MSFT"],
            "start_date": datetime.date(2024, 1, 1),
            "end_date": datetime.date(2024, 3, 31),
        }
        with tempfile.TemporaryDirectory() as directory:
            for file_format in ("parquet", "csv"):
                export = client.create_export("daily_bars", **selection, format=file_format)  # type: ignore[arg-type]
                size = f"{export['rows']} rows, {export['size']} bytes"
                print(f"\nclient.create_export(..., format={file_format!r}): {size}")
                destination = os.path.join(directory, f"bars.{file_format}")
                client.download(export["download_url"], destination, sha256=export["sha256"])
                with open(destination, "rb") as downloaded:
                    data = downloaded.read()
                if file_format == "parquet":
                    parquet = data[:4] == data[-4:] == b"PAR1"
                    kind = "a Parquet file (PAR1 ... PAR1)" if parquet else "NOT PARQUET"
                    print(f"client.download(...): sha256 checked; {kind}")
                else:
                    lines = data.decode("utf-8").splitlines()
                    print(
                        f"client.download(...): sha256 checked; {len(lines) - 1} rows, the first:"
                    )
                    for line in lines[:3]:
                        print(f"  {line}")
        print("\nWhat errors look like:")
        calls: list[Callable[[], Any]] = [
            lambda: client.query("DELETE FROM daily_bars"),
            lambda: client.create_export(
                "daily_bars", symbols="ZZZ", start_date="2024-01-01", end_date="2024-01-31"
            ),
            lambda: _list_with_key(server.base_url, "wrong-key"),
        ]
        for call in calls:
            try:
                call()
            except ServiceError as error:
                print(f"  ServiceError: {error}")
    print("\ndemo finished")
    return 0


def _list_with_key(base_url: str, api_key: str) -> Any:
    from dataset_client import DatasetClient

    with DatasetClient(base_url, api_key) as client:
        return client.list_datasets()


def _stop_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, so that the temporary files go as on Ctrl-C."""
    import signal

    def interrupt(signal_number: int, frame: object) -> None:
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGTERM) != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, interrupt)


def _in_the_foreground() -> bool:
    """Whether this runs in the foreground of the terminal its stdin and stderr are, where Ctrl-C
    stops it; started with & (job control) it runs in a process group of its own, which is not the
    terminal's foreground one; without job control, its stdin is /dev/null."""
    try:
        return sys.stderr.isatty() and os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (AttributeError, OSError, ValueError):
        # No terminal (ENOTTY), a closed stdin, or a platform without process groups.
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="A stand-in of the dataset service, for trying the client offline."
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=8765, help="port (default: 8765; 0 picks a free one)"
    )
    parser.add_argument(
        "--api-key",
        help="the key clients must send (default: $DATASET_CLIENT_API_KEY, which ps does not show; else a random one)",
    )
    parser.add_argument(
        "--demo", action="store_true", help="start on a free port, tour every operation, exit"
    )
    parser.add_argument("--verbose", action="store_true", help="log each request on stderr")
    args = parser.parse_args(argv)
    if args.demo:
        return demo()
    api_key = args.api_key or os.environ.get("DATASET_CLIENT_API_KEY") or secrets.token_urlsafe(24)
    try:
        server = Server(args.host, args.port, api_key, verbose=args.verbose)
    except OSError as exc:
        print(
            f"local_service: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    _stop_on_sigterm()  # `kill %1` cleans up as Ctrl-C does
    try:  # from the first line printed on: whoever read it may stop the service at once
        # Quoted so that any shell can eval them, whatever the key holds.
        print(f"export DATASET_CLIENT_BASE_URL={shlex.quote(server.base_url)}")
        print(f"export DATASET_CLIENT_API_KEY={shlex.quote(server.service.api_key)}")
        proxies = urllib.request.getproxies_environment()
        if "http" in proxies:  # a proxy the shell sets must not stand between client and stand-in
            no_proxy = shlex.quote(",".join(filter(None, (args.host, proxies.get("no")))))
            print(f"export NO_PROXY={no_proxy} no_proxy={no_proxy}")
        sys.stdout.flush()
        stop = "Ctrl-C" if _in_the_foreground() else f"kill {os.getpid()}"
        print(f"serving on {server.base_url}; {stop} to stop", file=sys.stderr, flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

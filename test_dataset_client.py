"""Tests of the interface's operations: constructing a client, list_datasets, query,
create_export, download, close, and the errors they raise, against a scripted local
http.server on 127.0.0.1. Everything else is in tests/, by concern.

Run with ``python3 -m unittest`` (all of it, on every core) or ``python3 -m unittest
test_dataset_client`` (this module); pytest runs it too. Standard library only.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import gzip
import io
import json
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
import time
import unittest
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dataset_client as dc
from dataset_client import DatasetClient, ServiceError
from tests.support import (
    DATA,
    DATA_SHA,
    KEY,
    ROOT,
    Handler,
    ServerTestCase,
    blocked_in_a_socket_read,
    cut,
    drop,
    file_size_limit,
    free_port,
    hang,
    head_server,
    hold,
    outcome_of,
    recorded_sleeps,
    reply,
    reset,
    serve_file,
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
        # An absolute URL is sent as given, an empty ;parameter too (urljoin dropped it).
        client.download(self.server.url + "/abs/x;?sig=1", io.BytesIO())
        client.download(other.url + "/bucket/x?X-Amz-Signature=abc", io.BytesIO())
        self.assertEqual([r.path for r in self.requests], ["/files/root", "/abs/x;?sig=1"])
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
            all(name.startswith(".out.bin.part.") for name in temporary),
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


class CloseTests(ServerTestCase):
    """close(): a closed client refuses calls; close() from another thread ends whatever is
    under way (a call, a retry's wait, a connect, a probe, a download) and leaves nothing.
    """

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

    def test_close_closes_the_connections(self) -> None:
        self.server.default = reply(body=[])
        client = self.client()
        client.list_datasets()
        self.assertEqual(self.server.closed_connections, 0)
        client.close()
        wait_for(lambda: self.server.closed_connections == 1)

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


if __name__ == "__main__":
    unittest.main()

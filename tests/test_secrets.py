"""Secrets: the API key, extra headers' values and a proxy's password never shown (errors, reprs,
logs, frames, the command line), whatever form a server echoes them in; signed URLs' credentials
redacted in every text and sent unchanged.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import functools
import io
import json
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import traceback
import types
import urllib.parse as urllib_parse
import warnings
from collections.abc import Callable
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient, ServiceError
from tests import support
from tests.support import (
    DATA,
    EXPORT_V,
    KEY,
    SIGNED_QUERY,
    SIGNED_SHOWN,
    Handler,
    Respond,
    ServerTestCase,
    cut,
    echo_credentials,
    free_port,
    hang,
    outcome_of,
    reply,
    reset,
    serve_file,
    signed_values_in,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def frame_names(thread: threading.Thread) -> list[str]:
    """The names of the functions ``thread`` is in, innermost first."""
    frame, names = sys._current_frames().get(thread.ident or 0), []
    while frame is not None:
        frame, names = frame.f_back, [*names, frame.f_code.co_name]
    return names


# The files of the test's own frames: its module's and support's (outcome_of, the base cases).
OWN_FILES = (__file__, support.__file__)


def secrets_in_frames(error: BaseException, *secrets: str) -> list[str]:
    """Where a secret shows in the repr of a local of a frame below the test's own (``error``'s and its
    causes'), as traceback's capture_locals=True shows them (which must not fail), or in their fields."""
    found = []
    for summary in traceback.TracebackException.from_exception(error, capture_locals=True).stack:
        if summary.filename not in OWN_FILES:  # the test's own frames hold what it passed
            text = repr(summary.locals)
            found += [
                f"capture_locals {summary.name}: {secret}" for secret in secrets if secret in text
            ]
    chain, pending = [], [error]
    while pending:  # the causes and the contexts: a context is kept even when a cause is given
        exc = pending.pop()
        if any(exc is seen for seen in chain):
            continue
        chain.append(exc)
        pending += [linked for linked in (exc.__cause__, exc.__context__) if linked is not None]
        values = {
            f"{frame.f_code.co_name}: {name}": value
            for frame, _ in traceback.walk_tb(exc.__traceback__)
            if frame.f_code.co_filename not in OWN_FILES
            for name, value in frame.f_locals.items()
        }
        fields = (
            *exc.args,
            *vars(exc).values(),
            getattr(exc, "object", b""),
            getattr(exc, "doc", ""),
        )
        values.update(
            {f"{type(exc).__name__} field {number}": value for number, value in enumerate(fields)}
        )
        found += [
            f"{where} holds {secret}"
            for where, value in values.items()
            for secret in secrets
            if secret in repr(value)
        ]
    return found


S3_EXPIRED = b"""<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>AccessDenied</Code><Message>Request has expired</Message>
<X-Amz-Expires>60</X-Amz-Expires><Expires>2024-01-01T00:01:00Z</Expires>
<ServerTime>2024-01-01T09:00:00Z</ServerTime></Error>"""


class EchoedSecretTests(ServerTestCase):
    """Servers that echo credentials: the key, an extra header's value, a proxy password."""

    def assert_no_secret(self, text: str | bytes, *secrets: str) -> None:
        for secret in secrets:
            self.assertNotIn(
                secret.encode() if isinstance(text, (bytes, bytearray)) else secret, text
            )

    def test_an_echoed_key_and_header_are_redacted_everywhere_an_error_shows(self) -> None:
        tenant = "tenant-secret-0042"
        for status in (401, 500):
            with self.subTest(status=status):
                self.script(echo_credentials(status))
                client = self.client(headers={"X-Tenant-Key": tenant}, max_retries=0)
                error = outcome_of(client.list_datasets)
                assert isinstance(error, ServiceError)
                self.assertEqual(
                    self.requests[-1].headers["Authorization"], f"Bearer {KEY}", "the key was sent"
                )
                texts = [
                    str(error),
                    repr(error),
                    error.body,
                    error.message or "",
                    error.reason,
                    json.dumps(error.payload),
                    str(error.headers),
                    str(pickle.loads(pickle.dumps(error)).__dict__),
                    "".join(
                        traceback.TracebackException.from_exception(
                            error, capture_locals=True
                        ).format()
                    ),
                ]
                for text in texts:
                    self.assert_no_secret(text, KEY, tenant)
                self.assertIn("Bearer <redacted>", error.body)
                self.assertEqual(error.headers["X-Echo"], "Bearer <redacted>")
                self.assertEqual(error.payload["received"]["X-Tenant-Key"], "<redacted>")
                self.assertEqual(error.message, "bad credentials: Bearer <redacted>")

    def test_the_retry_warning_and_the_command_line_show_no_echoed_key(self) -> None:
        self.script(echo_credentials(503), echo_credentials(503))
        with self.assertLogs("dataset_client", level="WARNING") as logs:
            outcome_of(self.client(max_retries=1).list_datasets)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("<redacted>", logs.output[0])
        self.assert_no_secret("\n".join(logs.output), KEY)
        self.script(echo_credentials(401))
        stderr = io.StringIO()
        with (
            mock.patch.dict(os.environ, {"DATASET_CLIENT_API_KEY": KEY}),
            contextlib.redirect_stderr(stderr),
        ):
            status = cli.main(
                ["-q", "--base-url", self.server.url + "/api/v1", "--retries", "0", "datasets"]
            )
        self.assertEqual(status, 1)
        self.assertIn("<redacted>", stderr.getvalue())
        self.assert_no_secret(stderr.getvalue(), KEY)

    def test_a_result_echoing_the_key_is_printed_redacted(self) -> None:
        def echo(handler: Handler) -> None:
            reply(200, {"columns": ["seen"], "rows": [[handler.headers["Authorization"]]]})(handler)

        for output in ("json", "table", "csv"):
            self.script(echo)
            stdout, stderr = io.StringIO(), io.StringIO()
            with (
                mock.patch.dict(os.environ, {"DATASET_CLIENT_API_KEY": KEY}),
                contextlib.redirect_stdout(stdout),
                contextlib.redirect_stderr(stderr),
            ):
                status = cli.main(
                    [
                        "--base-url",
                        self.server.url + "/api/v1",
                        "--output",
                        output,
                        "query",
                        "SELECT 1",
                    ]
                )
            with self.subTest(output=output):
                self.assertEqual(status, 0, stderr.getvalue())
                self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
                self.assertIn("Bearer <redacted>", stdout.getvalue())
                self.assert_no_secret(stdout.getvalue() + stderr.getvalue(), KEY)

    def test_a_key_echoed_json_escaped_or_across_a_cut_is_redacted_whole(self) -> None:
        # Found in review: "/" written "\\/" (PHP's json_encode) was not matched; a key across the
        # 200-byte preview or the 64 KiB body limit was cut first and redacted after, leaking its start.
        key = "sk/live/4f9a2b7c1d0e"

        def escaped(handler: Handler) -> None:
            text = json.dumps({"message": "bad key", "sent": handler.headers["Authorization"]})
            reply(401, text.replace("/", "\\/").encode())(handler)

        def across_the_limit(handler: Handler) -> None:
            reply(
                500,
                ("a" * (64 * 1024 - 20) + handler.headers["Authorization"]).encode(),
                content_type="text/plain",
            )(handler)

        def across_the_preview(handler: Handler) -> None:
            reply(
                200,
                ("x" * 180 + handler.headers["Authorization"]).encode(),
                content_type="text/plain",
            )(handler)

        for respond in (escaped, across_the_limit, across_the_preview):
            with self.subTest(respond.__name__):
                self.script(respond)
                error = outcome_of(self.client(api_key=key, max_retries=0).list_datasets)
                assert isinstance(error, dc.DatasetClientError)
                body = error.body if isinstance(error, ServiceError) else ""
                for text in (str(error), body, repr(pickle.loads(pickle.dumps(error)).__dict__)):
                    for form in (key, key.replace("/", "\\/"), key[:9]):
                        self.assertNotIn(form, text)
                self.assertLessEqual(len(body), 64 * 1024)
                self.assertEqual(
                    self.requests[-1].headers["Authorization"], f"Bearer {key}", "sent, so echoed"
                )
                self.assertIn(
                    "<redacted>", str(error) + body, "the echo was there, and was redacted"
                )

    def test_a_body_that_is_not_utf8_keeps_no_key_in_the_errors_cause(self) -> None:
        def respond(handler: Handler) -> None:
            reply(
                200, b"{\x80" + handler.headers["Authorization"].encode(), content_type="text/plain"
            )(handler)  # not UTF-8

        self.script(respond)
        error = outcome_of(self.client().list_datasets)
        assert isinstance(error, dc.InvalidResponseError)
        chain: list[BaseException] = []
        cause: BaseException | None = error
        while cause is not None:
            chain.append(cause)
            cause = cause.__cause__ or cause.__context__
        for exc in chain:
            fields = [*exc.args, *vars(exc).values(), getattr(exc, "object", b"")]
            for value in fields:
                text = value if isinstance(value, (str, bytes)) else repr(value)
                self.assert_no_secret(text, KEY)

    def test_a_non_json_body_echoing_the_key_is_redacted(self) -> None:
        def respond(handler: Handler) -> None:
            reply(
                200,
                f"<html>{handler.headers['Authorization']}</html>".encode(),
                content_type="text/html",
            )(handler)

        self.script(respond)
        error = outcome_of(self.client().list_datasets)
        self.assertIsInstance(error, dc.InvalidResponseError)
        text = "".join(
            traceback.TracebackException.from_exception(error, capture_locals=True).format()
        )  # type: ignore[arg-type]
        self.assertIn("<redacted>", text)
        self.assert_no_secret(text, KEY)

    def test_a_proxy_password_echoed_back_is_redacted(self) -> None:
        # The scripted server is the proxy here: a plain-HTTP request goes to it with Proxy-Authorization.
        user, password = "alice", "proxy-pass-0099"
        proxy = f"http://{user}:{password}@127.0.0.1:{self.server.server_port}"
        with mock.patch.dict(os.environ, {"HTTP_PROXY": proxy, "NO_PROXY": ""}):
            client = self.client("http://data.example.invalid/api/v1", api_key=None, max_retries=0)
        self.script(echo_credentials(502))
        error = outcome_of(client.list_datasets)
        assert isinstance(error, ServiceError)
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.assertEqual(self.requests[0].headers["Proxy-Authorization"], f"Basic {basic}")
        for text in (str(error), error.body, error.reason, str(error.headers)):
            self.assert_no_secret(text, password, basic)
        self.assertIn("Basic <redacted>", error.body)

    def test_ctrl_c_while_a_large_post_is_sent_leaves_no_frame_holding_the_head(self) -> None:
        def hold_unread(
            handler: Handler,
        ) -> None:  # never reads the body: the client blocks sending it
            handler.server.stop.wait(10)
            handler.close_connection = True

        hold_unread.before_body = True  # type: ignore[attr-defined]
        self.script(hold_unread)
        client = self.client(max_retries=0)
        main = threading.main_thread()

        def ctrl_c_once_blocked_sending() -> (
            None
        ):  # the server holds the head, the client waits in send()
            with contextlib.suppress(AssertionError):
                wait_for(
                    lambda: (
                        bool(self.requests) and frame_names(main)[:2] == ["send", "_send_output"]
                    ),
                    10,
                )
                signal.pthread_kill(main.ident or 0, signal.SIGINT)

        # Python's own Ctrl-C, whatever the run inherited (a background job starts with SIGINT ignored).
        self.addCleanup(
            signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, signal.default_int_handler)
        )
        interrupter = threading.Thread(target=ctrl_c_once_blocked_sending)
        interrupter.start()
        self.addCleanup(interrupter.join, 10)
        error = outcome_of(lambda: client.query("SELECT '" + "x" * 16_000_000 + "'"))
        self.assertIsInstance(error, KeyboardInterrupt, repr(error))
        assert isinstance(error, KeyboardInterrupt)
        frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
        self.assertIn("query", [frame.f_code.co_name for frame in frames])
        for frame in (
            frames
        ):  # each local as text (16 MB of SQL searched, not repr'd: what a repr would show)
            for name, value in frame.f_locals.items():
                text = value if isinstance(value, (str, bytes, bytearray)) else repr(value)
                with self.subTest(frame=frame.f_code.co_name, local=name):
                    self.assert_no_secret(text, KEY)


class SecretTestCase(ServerTestCase):
    """The secrets tests' base: run_cli, the command line in this process with KEY set."""

    def run_cli(self, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        stdout, stderr = io.StringIO(), io.StringIO()
        with (
            mock.patch.dict(os.environ, {"DATASET_CLIENT_API_KEY": KEY, **(env or {})}),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            status = cli.main(["--base-url", self.server.url + "/api/v1", "--retries", "0", *argv])
        return status, stdout.getvalue(), stderr.getvalue()


class SecretInURLTests(SecretTestCase):
    """A key or a signed URL's credentials in a URL: shown redacted, sent unchanged."""

    def test_a_redirect_holding_the_key_is_logged_and_raised_redacted(self) -> None:
        # Found in review: the -v line and the DEBUG record showed "?token=KEY" as the server sent it.
        for final in (reply(200, []), reply(404, {"message": "gone"})):
            self.script(reply(302, b"", {"Location": f"/api/v1/datasets2?token={KEY}"}), final)
            with self.assertLogs("dataset_client", level="DEBUG") as logs:
                outcome = outcome_of(self.client(max_retries=0).list_datasets)
            self.assertEqual(
                self.requests[-1].path, f"/api/v1/datasets2?token={KEY}", "the key went, as told"
            )
            shown = "\n".join(logs.output) + (
                f"{outcome}{outcome.url}" if isinstance(outcome, ServiceError) else ""
            )
            self.assertIn("/api/v1/datasets2?token=<redacted>", shown)
            self.assertNotIn(KEY, shown)
        self.script(
            reply(302, b"", {"Location": f"/api/v1/datasets2?token={KEY}"}),
            reply(404, {"message": "gone"}),
        )
        status, _, err = self.run_cli("-v", "datasets")
        self.assertEqual(status, 1)
        self.assertIn("datasets2?token=<redacted>", err)
        self.assertNotIn(KEY, err)
        self.script(reply(302, b"", {"Location": f"/api/v1/datasets2?token={KEY}"}), reply(200, []))
        status, out, err = self.run_cli("-v", "datasets")
        self.assertEqual((status, out.strip()), (0, "[]"), err)
        self.assertIn("GET http://127.0.0.1", err)
        self.assertNotIn(KEY, err)

    def test_a_download_url_holding_the_key_names_no_file_and_is_shown_redacted(self) -> None:
        # Found in review: `export --download` created KEY.csv and printed its name; the retry line showed the URL.
        directory = self.tmp()
        export = {"id": "e1", "download_url": f"/api/v1/files/{KEY}.csv", "sha256": "0" * 64}
        self.script(reply(201, export))
        argv = [
            *EXPORT_V,
        ]
        status, out, err = self.run_cli(
            "-v", *argv, "--format", "csv", "--download", str(directory)
        )
        self.assertEqual(status, 1, err)
        self.assertEqual(
            [request.method for request in self.requests], ["POST"], "nothing downloaded"
        )
        self.assertEqual(list(directory.iterdir()), [])
        self.assertIn('"download_url": "/api/v1/files/<redacted>.csv"', out)
        self.assertIn("holds a secret", err)
        self.assertNotIn(KEY, out + err)
        self.script(reply(503, b"busy"), serve_file(DATA))
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            self.client(max_retries=1).download(
                f"files/{KEY}.csv", directory / "out.csv"
            )  # DEST given: fine
        self.assertEqual(self.requests[-1].path, f"/api/v1/files/{KEY}.csv")
        self.assertEqual((directory / "out.csv").read_bytes(), DATA)
        retried = [record.getMessage() for record in logs.records if record.levelname == "WARNING"]
        url = f"{self.server.url}/api/v1/files/<redacted>.csv"
        said = f"retrying in 0.0 s (1 attempt left): 503 Service Unavailable: GET {url}: busy"
        self.assertEqual(retried, [said])
        self.assertNotIn(KEY, "\n".join(logs.output))

    def test_signed_url_credentials_are_redacted_in_every_text_and_sent_unchanged(self) -> None:
        # Found in review: "403 Forbidden: GET http://h/x?...&X-Amz-Signature=816d...", a credential
        # that works until it expires (on a 404 or a 5xx, a working one), in errors and logs.
        storage = self.start_server()
        path = f"/bucket/exp.parquet?X-Amz-Date=20240101T000000Z&{SIGNED_QUERY}&X-Amz-Expires=60"
        url, shown = storage.url + path, storage.url + path.replace(SIGNED_QUERY, SIGNED_SHOWN)
        expired = reply(403, S3_EXPIRED, content_type="application/xml")
        storage.script.extend([reply(503, b"busy", content_type="text/plain"), expired])
        client, destination = self.client(max_retries=1), self.tmp() / "exp.parquet"
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            error = outcome_of(lambda: client.download(url, destination))
        assert isinstance(error, ServiceError), repr(error)
        received = [(r.path, r.headers["Authorization"]) for r in storage.requests]
        self.assertEqual(received, [(path, None)] * 2, "sent unchanged, and no key to the store")
        self.assertEqual(error.url, shown)
        reason = "AccessDenied: Request has expired (after 2 attempts)"
        self.assertEqual(str(error), f"403 Forbidden: GET {shown}: {reason}")
        self.assertEqual(dc._showable_url(url, client._secrets), shown)
        records = [f"{record.getMessage()} {record.args!r}" for record in logs.records]
        retried = f"retrying in 0.0 s (1 attempt left): 503 Service Unavailable: GET {shown}: busy"
        self.assertEqual(len([line for line in records if line.startswith(retried)]), 1)
        texts = [str(error), repr(error), repr(error.args), repr(vars(error)), *records]
        self.assertEqual(signed_values_in(texts), [])
        self.assertEqual(list(destination.parent.iterdir()), [])
        # A redirect to a signed URL, and one that cannot be reached, by a client with no key.
        self.script(reply(302, b"", {"Location": url}))
        storage.script.append(reply(404, b"<Error><Code>NoSuchKey</Code></Error>"))
        client = self.client(api_key=None, max_retries=0)
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            error = outcome_of(client.list_datasets)
        assert isinstance(error, ServiceError), repr(error)
        self.assertEqual((error.url, error.message), (shown, "NoSuchKey"))
        self.assertEqual(storage.requests[-1].path, path)
        unreachable = f"http://127.0.0.1:{free_port()}{path}"
        refused = outcome_of(lambda: client.download(unreachable, io.BytesIO()))
        assert isinstance(refused, dc.NetworkError), repr(refused)
        texts = [str(error), repr(error), *logs.output, str(refused), repr(refused), refused.url]
        self.assertEqual(signed_values_in(texts), [])
        self.assertIn("X-Amz-Signature=<redacted>", str(refused))
        # A result is data: its signed URL comes back whole, and names a file (it holds no secret).
        self.script(reply(201, {"download_url": url}))
        dates = {"start_date": "2024-01-02", "end_date": "2024-01-03"}
        self.assertEqual(client.create_export("bars", symbols="V", **dates), {"download_url": url})
        self.assertEqual(client._secrets.redact(url), url)

    def test_signed_parameters_are_redacted_however_their_names_are_spelled(self) -> None:
        # Found in review: X%2DAmz%2DSignature (what a server decodes to X-Amz-Signature) and %73ig
        # kept their values in errors and logs; a base_url with a signed query was shown whole.
        secrets = dc._Secrets(signed=True)
        for name in ("X%2DAmz%2DSignature", "x%2damz%2dsignature", "%73ig", "%53IG", "Si%67nature"):
            with self.subTest(name=name):
                url = f"https://s3.example/b/x?{name}=816d0123secret&X-Amz-Date=1"
                self.assertEqual(secrets.redact(url), url.replace("816d0123secret", "<redacted>"))
        self.assertEqual(secrets.redact("?sigma=1&design=2"), "?sigma=1&design=2", "names alone")
        # A URL in JSON from Go (& written \u0026), or nested in another URL's query (%26, %3D).
        for text in (
            '"u": "https://s/x?a=1\\u0026X-Amz-Signature=816d0123secret"',
            "%26sig%3D816d0123secret",
        ):
            with self.subTest(text=text):
                self.assertNotIn("816d0123secret", secrets.redact(text))
        base = "https://s3.example/b?X-Amz-Signature=816d0123secret&token=tok0123"
        with self.assertRaises(ValueError) as caught:
            DatasetClient(base)
        self.assertNotIn("816d0123secret", str(caught.exception))
        self.assertNotIn("tok0123", str(caught.exception))
        self.assertIn("X-Amz-Signature=<redacted>", str(caught.exception))


class SecretsInFramesTests(SecretTestCase):
    """No secret in a traceback's locals, an error's causes and contexts, or their fields."""

    def test_an_unknown_or_hostile_charset_is_read_as_utf8(self) -> None:
        # Found in review: charset=idna raised a bare UnicodeError (frames holding the key and the body);
        # the CLI exited 2 (a usage error) and a 503 was not retried.
        def echo(status: int, charset: str) -> Respond:
            def respond(handler: Handler) -> None:
                body = f"denied: {handler.headers['Authorization']}".encode()
                reply(status, body, content_type=f"text/plain; charset={charset}")(handler)

            return respond

        for charset in ("idna", "hex", "no-such-charset", "rot13"):
            with self.subTest(charset=charset):
                self.script(echo(503, charset), reply(200, {"ok": 1}))
                self.assertEqual(
                    self.client(max_retries=1).list_datasets(), {"ok": 1}, "the 503 was retried"
                )
                self.script(echo(401, charset))
                error = outcome_of(self.client(max_retries=0).list_datasets)
                assert isinstance(error, ServiceError), repr(error)
                self.assertEqual(error.body, "denied: Bearer <redacted>")
                self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
                self.assertEqual(secrets_in_frames(error, KEY), [])
        self.script(echo(401, "idna"))
        status, _, err = self.run_cli("datasets")
        self.assertEqual(status, 1, err)
        self.assertIn("401", err)
        self.assertNotIn(KEY, err)

    def test_a_body_that_is_not_json_or_not_utf8_leaves_no_key_in_causes_or_contexts(self) -> None:
        # Found in review: the UnicodeDecodeError replaced as the cause stayed as the context, body and all.
        for body in (b"{\x80 ", b"<html> ", b"[" * 100_000 + b" "):

            def respond(handler: Handler, body: bytes = body) -> None:
                reply(
                    200, body + handler.headers["Authorization"].encode(), content_type="text/plain"
                )(handler)

            with self.subTest(body=body[:8]):
                self.script(respond)
                error = outcome_of(self.client().list_datasets)
                assert isinstance(error, dc.InvalidResponseError), repr(error)
                self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
                self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_an_error_body_nested_600_deep_is_redacted_and_pickles(self) -> None:
        # Found in review: RecursionError out of _redact_error, with the secrets in its frames.
        def deep(handler: Handler) -> None:
            body = '{"a": ' * 600 + json.dumps(handler.headers["Authorization"]) + "}" * 600
            reply(400, body.encode())(handler)

        self.script(deep)
        error = outcome_of(self.client(max_retries=0).list_datasets)
        assert isinstance(error, ServiceError), repr(error)
        self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
        copy = pickle.loads(pickle.dumps(error))
        for payload in (error.payload, copy.payload):
            for _ in range(600):
                payload = payload["a"]
            self.assertEqual(payload, "Bearer <redacted>")
        self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_a_non_client_exception_escaping_leaves_no_secret_or_body_in_frames(self) -> None:
        # A bare exception from deep inside (here a Ctrl-C while an echoed 401 is read): no frame keeps them.
        self.script(echo_credentials(401))
        with mock.patch.object(dc, "_message_of", side_effect=KeyboardInterrupt):
            error = outcome_of(self.client(max_retries=0).list_datasets)
        assert isinstance(error, KeyboardInterrupt), repr(error)
        names = [frame.f_code.co_name for frame, _ in traceback.walk_tb(error.__traceback__)]
        self.assertIn("_service_error", names, "the frames that held the body were searched")
        self.assertEqual(secrets_in_frames(error, KEY, "bad credentials"), [])

    def test_a_failing_constructor_leaves_no_secret_in_its_frames(self) -> None:
        # Found in review: api_key in __init__'s frame, repr() of the half-built client raising (so
        # capture_locals crashed), a malformed HTTP_PROXY leaving its password in frames.
        tenant, password = "tenant-secret-0042", "proxy-pass-0099"
        cases: list[tuple[dict[str, object], dict[str, str]]] = [
            ({"timeout": "soon"}, {}),
            ({"headers": {"X-Tenant": tenant, "X-Bad": "a\nb"}}, {}),
            ({"base_url": "ftp://h"}, {}),
            ({}, {"HTTP_PROXY": f"http://alice:{password}@[::1"}),
            ({}, {"HTTPS_PROXY": f"http://alice:{password}@proxy]:3128"}),
        ]
        for options, env in cases:
            with self.subTest(options=options, env=env), mock.patch.dict(os.environ, env):
                arguments: dict[str, Any] = {
                    "base_url": self.server.url,
                    "api_key": KEY,
                    "headers": {"X-T": tenant},
                }
                arguments.update(options)
                error = outcome_of(functools.partial(DatasetClient, **arguments))
                assert isinstance(error, (TypeError, ValueError)), repr(error)
                self.assertEqual(secrets_in_frames(error, KEY, tenant, password), [])
                if env:
                    self.assertIn(f"{next(iter(env))} is not a valid proxy URL", str(error))

    def test_the_key_is_in_no_frames_locals(self) -> None:
        # What pytest --showlocals, traceback's capture_locals and error reporters print.
        big = (
            "SELECT '" + "x" * 8_000_000 + "'"
        )  # a body too large to send to a server that resets at once

        def reset_unread(handler: Handler) -> None:
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.close_connection = True

        faults: list[tuple[Respond | None, Callable[[DatasetClient], object]]] = [
            (reply(401, {"message": "bad key"}), lambda c: c.list_datasets()),
            (hang, lambda c: c.list_datasets()),
            (reply(200, b"not json", content_type="text/plain"), lambda c: c.query("SELECT 1")),
            (reset, lambda c: c.query("SELECT 1")),
            (cut(DATA, 1000), lambda c: c.download("files/x", io.BytesIO())),
            (None, lambda c: c.query(big)),
        ]
        reset_unread.before_body = True  # type: ignore[attr-defined]
        for fault, call in faults:
            self.script(fault or reset_unread)
            client = self.client(timeout=0.2, max_retries=0)
            error = outcome_of(lambda: call(client))  # noqa: B023
            with self.subTest(error=type(error).__name__):
                self.assertIsInstance(error, dc.DatasetClientError)
                assert isinstance(error, BaseException)
                chain, cause = [], error
                while cause is not None:  # the error and its causes, as a traceback prints them
                    chain.append(cause)
                    cause = cause.__cause__ or cause.__context__
                frames = [
                    frame for exc in chain for frame, _ in traceback.walk_tb(exc.__traceback__)
                ]
                library = [f for f in frames if f.f_code.co_filename == dc.__file__]
                self.assertTrue(library, "the library's own frames are among those searched")
                for frame in (
                    frames
                ):  # each local as text: 8 MB of SQL searched, not repr'd (what a repr would show)
                    for value in frame.f_locals.values():
                        text = value if isinstance(value, (str, bytes, bytearray)) else repr(value)
                        self.assertNotIn(
                            KEY.encode() if isinstance(text, (bytes, bytearray)) else KEY, text
                        )
            self.server.script.clear()


class RedactionTests(SecretTestCase):
    """What redaction covers: a client's attributes, the forms servers use, a proxy's password
    encoded; a key sent in clear is warned of once.
    """

    def test_a_clients_attributes_and_their_reprs_show_no_secret(self) -> None:
        # Found in review: vars(client) showed the key and the proxy password.
        tenant, password = "tenant-secret-0042", "proxy-pass-0099"
        proxy = f"http://alice:{password}@127.0.0.1:9"
        with mock.patch.dict(os.environ, {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy}):
            client = self.client(headers={"X-Tenant": tenant})
        client._secrets.redact("%41 \\u0041 &#65;")  # the patterns for the escaped forms made
        shown = [repr(client), repr(vars(client))]
        for value in vars(client).values():
            shown += [
                repr(value),
                *(repr(item) for item in getattr(value, "__dict__", {}).values()),
            ]
            shown += [
                repr(getattr(value, name, None)) for name in getattr(type(value), "__slots__", ())
            ]
        for handler in client._opener.handlers:
            shown += [repr(handler), *(repr(item) for item in vars(handler).values())]
        for secret in (
            KEY,
            tenant,
            password,
            base64.b64encode(f"alice:{password}".encode()).decode(),
        ):
            self.assertNotIn(secret, "\n".join(shown))
        copy = pickle.loads(pickle.dumps(client._secrets))
        self.assertEqual(copy.redact(f"a {KEY} b {tenant}"), "a <redacted> b <redacted>")

    def test_redaction_covers_the_forms_servers_use(self) -> None:
        # Found in review: lower-case hex, quote() with "/" kept, \u002f, HTML entities, base64 and header
        # names went unredacted.
        key = "sk/live+4f9a=2b7c-Z"
        quoted = urllib_parse.quote(key, safe="")
        forms = {
            "lower hex": quoted.lower().replace("sk", "sk").replace("%2f", "%2f"),
            "mixed hex": quoted.replace("%2F", "%2f"),
            "quote() with / kept": urllib_parse.quote(key),
            "\\u002f": key.replace("/", "\\u002f").replace("+", "\\u002B"),
            "&#47;": key.replace("/", "&#47;"),
            "&#x2f;": key.replace("/", "&#x2f;").replace("+", "&#X2B;"),
            "named entities": key.replace("/", "&sol;")
            .replace("+", "&plus;")
            .replace("=", "&equals;"),
            "base64": base64.b64encode(key.encode()).decode(),
            "base64 unpadded": base64.b64encode(key.encode()).decode().rstrip("="),
        }
        forms["lower hex"] = "sk" + quoted[2:].replace("%2F", "%2f").replace("%2B", "%2b").replace(
            "%3D", "%3d"
        )
        header = "X-Echo-" + base64.b64encode(key.encode()).decode().rstrip("=")

        def echo(handler: Handler) -> None:
            self.assertEqual(handler.headers["Authorization"], f"Bearer {key}")
            body = "\n".join(f"{name}: {form}" for name, form in forms.items()).encode()
            reply(401, body, {header: "1"}, content_type="text/plain")(handler)

        self.script(echo)
        error = outcome_of(self.client(api_key=key, max_retries=0).list_datasets)
        assert isinstance(error, ServiceError), repr(error)
        expected = "\n".join(f"{name}: <redacted>" for name in forms)
        self.assertEqual(error.body, expected)
        self.assertEqual(error.headers["X-Echo-<redacted>"], "1")
        self.assertNotIn(header, str(error.headers))

    def test_redact_copies_every_container_a_log_record_holds_and_refuses_the_rest(self) -> None:
        # The fourth review's second pass: a tuple, a set, a mapping that is not a dict came back
        # as they were, secrets and all: a logging filter's record.args (a tuple) was unredacted.
        client = self.client()
        signed = "https://s3.example/b/x?X-Amz-Signature=816d0123redact01"
        shown = "https://s3.example/b/x?X-Amz-Signature=<redacted>"
        named = collections.namedtuple("named", "a b")
        cases: list[tuple[object, object]] = [
            ((KEY, 3, None), ("<redacted>", 3, None)),
            ([(KEY, signed)], [("<redacted>", shown)]),
            ({KEY, "x"}, {"<redacted>", "x"}),
            (frozenset({(KEY, 1.5)}), frozenset({("<redacted>", 1.5)})),
            (types.MappingProxyType({"k": KEY}), {"k": "<redacted>"}),
            (collections.UserDict({KEY: [signed, True]}), {"<redacted>": [shown, True]}),
            ({"nested": ({"k": KEY},)}, {"nested": ({"k": "<redacted>"},)}),
            (named(KEY, 2), ("<redacted>", 2)),
        ]
        for value, expected in cases:
            with self.subTest(value=type(value).__name__):
                redacted = client.redact(value)
                self.assertEqual(redacted, expected)
                self.assertIs(type(redacted), type(expected))
        with mock.patch.dict(os.environ, {"DATASET_CLIENT_API_KEY": KEY}):
            environment = client.redact(os.environ)
        self.assertEqual(environment["DATASET_CLIENT_API_KEY"], "<redacted>")
        self.assertIsInstance(environment, dict)
        for refused in (
            ValueError(f"bad {KEY}"),
            memoryview(KEY.encode()),
            object(),
            [1, object()],
        ):
            refusal = "^cannot redact a (ValueError|memoryview|object):"
            with (
                self.subTest(refused=type(refused).__name__),
                self.assertRaisesRegex(TypeError, refusal),
            ):
                client.redact(refused)

    def test_a_proxy_password_is_redacted_in_base64_and_percent_encoded(self) -> None:
        user, password = "alice", "pa/ss:word-0099"
        proxy = f"http://{user}:{urllib_parse.quote(password, safe='')}@127.0.0.1:{self.server.server_port}"
        with mock.patch.dict(os.environ, {"HTTP_PROXY": proxy, "NO_PROXY": ""}):
            client = self.client("http://data.example.invalid/api/v1", api_key=None, max_retries=0)
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        forms = [password, urllib_parse.quote(password, safe="").lower(), basic, basic.rstrip("=")]
        self.script(reply(502, "\n".join(forms).encode(), content_type="text/plain"))
        error = outcome_of(client.list_datasets)
        assert isinstance(error, ServiceError), repr(error)
        self.assertEqual(self.requests[-1].headers["Proxy-Authorization"], f"Basic {basic}")
        self.assertEqual(error.body, "\n".join(["<redacted>"] * len(forms)))

    def test_a_key_over_plain_http_to_a_remote_host_is_warned_of_once(self) -> None:
        with mock.patch.dict(os.environ, {"HTTP_PROXY": self.server.url, "NO_PROXY": ""}):
            with self.assertLogs("dataset_client", level="WARNING") as logs:
                client = self.client("http://data.example.invalid/api/v1", max_retries=0)
                self.script(reply(200, []), reply(200, []))
                client.list_datasets()
                client.list_datasets()
            self.assertEqual(
                logs.output,
                [
                    "WARNING:dataset_client:the API key goes to data.example.invalid over plain http://:"
                    " it travels in clear (use https://)"
                ],
            )
            self.script(reply(200, []))
            status, out, err = self.run_cli(
                "--base-url", "http://data.example.invalid/api/v1", "datasets"
            )
        self.assertEqual((status, out.strip()), (0, "[]"), err)
        self.assertEqual(err.count("travels in clear"), 1, err)
        for base_url, key in [
            ("http://127.0.0.1:9", KEY),
            ("http://127.8.9.10:9", KEY),
            ("http://localhost:9", KEY),
            ("http://[::1]:9", KEY),
            ("https://data.example.invalid", KEY),
            ("http://data.example.invalid", None),
        ]:
            with (
                self.subTest(base_url=base_url),
                self.assertNoLogs("dataset_client", level="WARNING"),
            ):
                self.client(base_url, api_key=key)


class KeyReadFromAProfileTests(ServerTestCase):
    """Issue 36: a key read from a variable or a profile is wrapped the moment it is read; no frame
    (the library's, or tomllib's kept as a cause or context) holds it in clear when from_profile
    fails."""

    def setUp(self) -> None:
        super().setUp()
        for name in [name for name in os.environ if name.startswith("DATASET_CLIENT_")]:
            del os.environ[name]
        os.environ["HOME"] = str(self.tmp())
        os.environ.pop("XDG_CONFIG_HOME", None)
        self.server.default = reply(body=[])

    def config(self, text: str) -> None:
        config = self.tmp() / "config.toml"
        config.write_text(text)
        config.chmod(0o600)
        os.environ["DATASET_CLIENT_CONFIG"] = str(config)

    def failure(self, **settings: Any) -> BaseException:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            error = outcome_of(functools.partial(DatasetClient.from_profile, **settings))
        assert isinstance(error, Exception), repr(error)
        return error

    def test_the_reviews_five_ways_leave_no_key_in_any_frame(self) -> None:
        profile = f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n'
        cases: list[tuple[str, dict[str, str], str, dict[str, object]]] = [
            (
                "a variable's base_url without a scheme",
                {"DATASET_CLIENT_BASE_URL": "h:80", "DATASET_CLIENT_API_KEY": KEY},
                "",
                {},
            ),
            ("timeout = inf in the profile", {}, "timeout = inf\n", {}),
            ("a missing ca_bundle in the profile", {}, 'ca_bundle = "missing.pem"\n', {}),
            ("max_retries=-1 passed in", {}, "", {"max_retries": -1}),
            ("the profile's base_url without a scheme", {}, "", {"base_url": None}),
        ]
        for name, variables, more, settings in cases:
            with self.subTest(name):
                text = profile + more
                if "base_url" in settings:
                    text = f'[default]\nbase_url = "h:80"\napi_key = "{KEY}"\n'
                    settings = {}
                self.config(text)
                os.environ.update(variables)
                error = self.failure(**settings)
                for variable in variables:
                    del os.environ[variable]
                self.assertIsInstance(error, (ValueError, OSError))
                self.assertEqual(secrets_in_frames(error, KEY), [])
        self.assertEqual(self.requests, [])

    def test_a_key_in_a_variable_or_given_is_wrapped_too(self) -> None:
        self.config(f'[default]\nbase_url = "{self.server.url}"\ntimeout = inf\n')
        os.environ["DATASET_CLIENT_API_KEY"] = KEY
        self.assertEqual(secrets_in_frames(self.failure(), KEY), [])
        del os.environ["DATASET_CLIENT_API_KEY"]
        self.config(f'[default]\nbase_url = "{self.server.url}"\n')
        error = self.failure(api_key=KEY, timeout=-1)
        self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_every_spelling_of_the_key_in_the_file_is_wrapped(self) -> None:
        for spelling in ("api_key", "api-key", "apikey", "API_KEY", "Api-Key"):
            for value in (f'"{KEY}"', f'["{KEY}"]', f'{{ a = "{KEY}" }}'):
                with self.subTest(spelling=spelling, value=value):
                    self.config(
                        f'[default]\nbase_url = "{self.server.url}"\n{spelling} = {value}\n'
                        'timeout = "soon"\n'
                    )
                    error = self.failure()
                    self.assertIsInstance(error, ValueError)
                    self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_a_key_of_another_type_misspelt_or_outside_a_profile_is_in_no_frame(self) -> None:
        """The fourth review's second pass: an integer or float key, a misspelt one, one in a table
        inside a profile or in an array of tables, a key under -W error, headers passed in: each
        stayed in clear in _read_profile's or from_profile's frames when a later check failed."""
        good = f'[default]\nbase_url = "{self.server.url}"\n'
        number = "8472619305123"
        header = "tenant-secret-0042"
        cases: list[tuple[str, str, dict[str, Any]]] = [
            ("an integer key", good + f"api_key = {number}\n", {}),
            ("a float key", good + f"api_key = {number}.5\n", {}),
            ("a misspelt key", good + f'api_kye = "{KEY}"\ntimeout = inf\n', {}),
            (
                "a table in a profile",
                good + f'[default.sub]\napi_key = "{KEY}"\n',
                {"profile": "p"},
            ),
            ("an array of tables", f'[[prod]]\napi_key = "{KEY}"\n', {"profile": "other"}),
            ("headers passed in", good, {"headers": {"X-Tenant": header, "Bad Name": "v"}}),
            ("headers, a bad base_url", '[default]\nbase_url = "h"\n', {"headers": {"X": header}}),
        ]
        for name, text, settings in cases:
            for read in (DatasetClient.from_profile, DatasetClient.read_settings):
                with self.subTest(name, read=read.__name__):
                    self.config(text)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        error = outcome_of(functools.partial(read, **settings))
                    if read.__name__ == "read_settings" and not isinstance(error, Exception):
                        # Read without an error: what it returns shows none of them either.
                        for secret in (KEY, number, header):
                            self.assertNotIn(secret, repr(error))
                        continue
                    assert isinstance(error, Exception), repr(error)
                    self.assertEqual(secrets_in_frames(error, KEY, number, header), [])
                    # Emptied of its type, not dropped: the error still names the type given.
                    kind = {"an integer key": "an integer", "a float key": "a float"}.get(name)
                    if kind is not None:
                        self.assertIn(f"must be a non-empty string, not {kind}", str(error))
        self.config(good + f'tokn = "{KEY}"\n')
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            error = outcome_of(DatasetClient.from_profile)
        self.assertIsInstance(error, UserWarning)
        assert isinstance(error, UserWarning)
        self.assertEqual(secrets_in_frames(error, KEY), [])
        self.assertEqual(self.requests, [])

    def test_a_malformed_file_keeps_no_frame_of_tomllib_holding_its_text(self) -> None:
        # tomllib's frames hold the whole text (its key among it) in their locals: a
        # TOMLDecodeError kept as the context of the ValueError said instead showed it.
        for broken in ("broken = \n", "x = [" * 2000, 'x = "\\q"\n'):
            with self.subTest(broken=broken[:12]):
                self.config(f'[default]\napi_key = "{KEY}"\n{broken}')
                error = self.failure()
                self.assertIsInstance(error, ValueError)
                self.assertTrue(str(error).startswith("cannot read the config file "), error)
                self.assertIsNone(error.__context__)
                self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_the_key_read_still_goes_where_it_went(self) -> None:
        self.config(f'[default]\nbase_url = "{self.server.url}"\napi-key = "{KEY}"\n')
        with self.assertWarnsRegex(UserWarning, "^unknown key 'api-key' in "):
            client = DatasetClient.from_profile()
        with client:
            client.list_datasets()
        self.config(f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n')
        with DatasetClient.from_profile() as client:
            client.list_datasets()
            self.assertIsInstance(client._arguments["api_key"], dc._Secret)
        self.assertEqual(
            [request.headers["Authorization"] for request in self.requests], [None, f"Bearer {KEY}"]
        )


class KeyGivenToTheConstructorTests(ServerTestCase):
    """Issue 36's own pass: what else reads a key before wrapping it."""

    def test_headers_in_any_mapping_are_wrapped_before_any_check(self) -> None:
        tenant = "tenant-secret-0042"
        for headers in (
            types.MappingProxyType({"X-Tenant": tenant, "Bad Name": "x"}),
            collections.OrderedDict([("X-Tenant", tenant), ("X-Bad", "a\nb")]),
            collections.UserDict({"X-Tenant": tenant, "Content-Length": "1"}),
        ):
            with self.subTest(headers=type(headers).__name__):
                error = outcome_of(
                    functools.partial(DatasetClient, self.server.url, KEY, headers=headers)
                )
                self.assertIsInstance(error, ValueError)
                # The constructor's own argument is the caller's; every frame below it is not.
                assert isinstance(error, ValueError), repr(error)
                found = secrets_in_frames(error, KEY, tenant)
                self.assertEqual([where for where in found if "__init__" not in where], [])
                self.assertEqual(found, [])


# Signed URLs' credentials in the forms the fourth review found shown: the first parameter of a URL
# nested in another's query, once and twice encoded; GSON's and HTML's escapes of "=".
NESTED_SIGNED = {
    "X-Amz-Signature": "%3FX-Amz-Signature%3D816d0123nested01",
    "access_token": "%3Faccess_token%3Dya29nested02",
    "Policy": "%3FPolicy%3DeyJnested03%26Signature%3DZm9nested04",
    "twice": "%253FX-Amz-Signature%253D816d0123nested05",
    "twice, lower case": "%253fsig%253dr2BVnested06",
}
NESTED_VALUES = ["816d0123nested01", "ya29nested02", "eyJnested03", "Zm9nested04"]
NESTED_VALUES += ["816d0123nested05", "r2BVnested06"]


class NestedSignedUrlTests(ServerTestCase):
    def test_a_nested_signed_urls_first_parameter_is_redacted_once_or_twice_encoded(self) -> None:
        secrets = dc._Secrets(signed=True)
        for name, nested in NESTED_SIGNED.items():
            with self.subTest(name):
                url = f"https://app.example/login?next=https%3A%2F%2Fs3.example%2Fb%2Fx{nested}"
                shown = secrets.redact(url)
                self.assertEqual([value for value in NESTED_VALUES if value in shown], [])
                self.assertIn("<redacted>", shown)
        for text in ("?next=%3Fsigma%3D1", "%253Fdesign%253D2", "a=1&#61;"):
            self.assertEqual(secrets.redact(text), text, "names alone, and no credential")

    def test_gson_and_html_escapes_of_equals_are_redacted_in_an_error_body(self) -> None:
        storage = self.start_server()
        bodies = [
            '{"url": "https://s3.example/b/x?X-Amz-Date=1\\u0026X-Amz-Signature\\u003d816d0123nested01"}',
            '<a href="https://s3.example/b/x?a=1&amp;Signature&#61;Zm9nested04">',
            '<a href="https://s3.example/b/x?Policy&#x3D;eyJnested03&amp;b=2">',
            '{"url": "https://s3.example/b/x?sig\\u003Dr2BVnested06"}',
        ]
        for body in bodies:
            with self.subTest(body=body[:40]):
                storage.script.append(reply(403, body.encode(), content_type="text/plain"))
                error = outcome_of(
                    lambda: self.client(max_retries=0).download(storage.url + "/f", io.BytesIO())
                )
                assert isinstance(error, dc.ServiceError), repr(error)
                texts = [str(error), repr(error), error.body, repr(vars(error))]
                self.assertEqual([v for v in NESTED_VALUES for t in texts if v in t], [])

    def test_every_text_about_a_nested_signed_url_is_redacted(self) -> None:
        storage = self.start_server()
        path = f"/b/x?next=https%3A%2F%2Fs3.example%2Fb%2Fy{NESTED_SIGNED['Policy']}"
        path += f"&back={NESTED_SIGNED['twice']}"
        storage.script.append(reply(503, b"busy", content_type="text/plain"))
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            error = outcome_of(
                lambda: self.client(max_retries=0).download(storage.url + path, io.BytesIO())
            )
        assert isinstance(error, dc.ServiceError), repr(error)
        self.assertEqual(storage.requests[-1].path, path, "sent as given")
        texts = [str(error), repr(error), repr(error.args), error.url, *logs.output]
        self.assertEqual([v for v in NESTED_VALUES for t in texts if v in t], [])
        storage.script.append(reply(503, b"busy", content_type="text/plain"))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["--retries", "0", "download", storage.url + path, str(self.tmp())])
        self.assertEqual(status, 1, err.getvalue())
        self.assertEqual([v for v in NESTED_VALUES if v in err.getvalue()], [])

    def test_a_value_error_about_a_signed_download_url_shows_no_credential(self) -> None:
        signed = "X-Amz-Date=1&X-Amz-Signature=816d0123nested01&token=ya29nested02"
        for url in (
            f"https://s3.example/b/x?{signed} ",
            f"https://s3.example/b/x?{signed}\t",
            f"https:///b/x?{signed}",
            f"ftp://s3.example/b/x?{signed}",
            f"https://s3.example:99999/b/x?{signed}",
            f"https://s3.example/b/x?{signed}&\udc80",
            "https://s3.example/b/x?X-Amz-Signature=816d0123nested01&\udc80",
            "https://s3.example/b/\udc80?X-Amz-Signature=816d0123nested01",
        ):
            with self.subTest(url=url):
                error = outcome_of(functools.partial(self.client().download, url, io.BytesIO()))
                self.assertIsInstance(error, ValueError)
                self.assertEqual([v for v in NESTED_VALUES if v in str(error)], [], error)
        self.assertEqual(self.requests, [])


def _nested(url: str, times: int) -> str:
    """``url`` in the query of another, ``times`` deep, each level percent-encoded once more."""
    for _ in range(times):
        url = "https://r.example/?u=" + urllib_parse.quote(url, safe="")
    return url


# The fourth review's second pass: forms of a signed URL the redaction left in clear.
MORE_SIGNED = {
    "nested three times": _nested("https://s3.example/b/x?X-Amz-Signature=816d0123more01", 3),
    "nested four times, second": _nested("https://s3.example/b/x?a=1&sig=816d0123more02", 4),
    "a fragment's access_token": "https://app.example/cb#access_token=ya29more03&token_type=b",
    "a fragment's sig": "https://h.example/o#sig=816d0123more04",
    "JSON's \\/ in a value": '"https://h.example/o?sig=ab\\/816d0123more05"',
    "JSON's \\u0025": '"https://r/?u=https\\u00253A\\u00252F\\u00252Fb\\u00253Fsig\\u00253D816d0123more06"',
    "JavaScript's \\x3d": "https://h.example/o?sig\\x3d816d0123more07",
    "JavaScript's \\x26": "https://h.example/o?a=1\\x26sig=816d0123more08",
    "JavaScript's \\x3f": "https://h.example/o\\x3fsig=816d0123more09",
}
MORE_VALUES = [f"816d0123more0{n}" for n in (1, 2, 4, 5, 6, 7, 8, 9)] + ["ya29more03"]


class MoreSignedFormsTests(ServerTestCase):
    def test_every_form_the_second_pass_found_is_redacted(self) -> None:
        client = self.client()
        for name, text in MORE_SIGNED.items():
            with self.subTest(name):
                shown = client.redact(text)
                self.assertEqual([v for v in MORE_VALUES if v in shown], [], shown)
                self.assertIn("<redacted>", shown)
        for kept in ("see #section=2", "https://h.example/o#top", "a\\x3db"):
            self.assertEqual(client.redact(kept), kept, "no credential's name")

    def test_a_hostile_servers_reason_headers_body_and_location_show_none(self) -> None:
        nested = MORE_SIGNED["nested three times"]
        fragment = MORE_SIGNED["a fragment's access_token"]
        escaped = MORE_SIGNED["JSON's \\/ in a value"]
        body = f'{{"message": "denied: {fragment}", "u": {escaped}}}'

        def respond(connection: socket.socket) -> None:
            head = f"HTTP/1.1 403 Forbidden {nested}\r\nContent-Type: application/json\r\n"
            head += f"X-Debug: {fragment}\r\nContent-Length: {len(body)}\r\n\r\n"
            connection.sendall((head + body).encode())

        url = support.raw_server(self, respond)
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            error = outcome_of(self.client(url, max_retries=0).list_datasets)
        assert isinstance(error, dc.ServiceError), repr(error)
        texts = [str(error), repr(error), repr(error.args), error.reason, error.body]
        texts += [repr(error.payload), str(error.headers), repr(pickle.dumps(error)), *logs.output]
        self.assertEqual([t for v in MORE_VALUES for t in texts if v in t], [])

    def test_a_base_url_without_a_scheme_is_named_without_its_credential(self) -> None:
        for base_url in ("h.example/f?X-Amz-Signature=816d0123more01", "h/?sig=816d0123more02"):
            with self.subTest(base_url=base_url):
                error = outcome_of(functools.partial(DatasetClient, base_url))
                self.assertIsInstance(error, ValueError)
                self.assertIn("has no scheme", str(error))
                self.assertEqual([v for v in MORE_VALUES if v in str(error)], [], error)
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    self.assertEqual(cli.main(["--base-url", base_url, "datasets"]), 2)
                self.assertEqual([v for v in MORE_VALUES if v in err.getvalue()], [])
                self.assertIn("--base-url", err.getvalue())
        self.assertEqual(self.requests, [])


class RedirectLocalsTests(ServerTestCase):
    def test_a_keyless_clients_failed_redirect_keeps_no_signed_location_in_frames(self) -> None:
        # Issue 36: with no key, no secret was held, so the traceback stayed, and with it the
        # locals of _send_handling_redirects: the Location, signature and all.
        storage = self.start_server()
        signed = "X-Amz-Date=1&X-Amz-Signature=816d0123location01"
        unreachable = f"http://127.0.0.1:{free_port()}/b/x?{signed}"
        for location, answer in (
            (f"{storage.url}/b/x?{signed}", reply(404, b"<Error>NoSuchKey</Error>")),
            (f"{storage.url}/b/x?{signed}", reply(503, b"busy")),
            (unreachable, None),
        ):
            with self.subTest(location=location, answer=answer):
                if answer is not None:
                    storage.script.append(answer)
                self.script(reply(302, b"", {"Location": location}))
                client = self.client(api_key=None, max_retries=0)
                error = outcome_of(client.list_datasets)
                assert isinstance(error, dc.DatasetClientError), repr(error)
                self.assertEqual(secrets_in_frames(error, "816d0123location01"), [])
                # The fourth review's second pass: the pool's idle connection kept its last
                # response, whose url was the Location, reachable from a frame's self.
                self.assertEqual(texts_reachable(client, "816d0123location01"), [])


def texts_reachable(start: object, secret: str) -> list[str]:
    """The paths from ``start`` (through attributes, mappings and sequences) to a str holding
    ``secret`` in clear (a _Secret is the wrapper, not a leak); bounded by what is reachable."""
    found, seen, pending = [], set(), [("start", start)]
    while pending:
        path, value = pending.pop()
        if id(value) in seen or isinstance(value, (type, types.ModuleType, dc._Secret)):
            continue
        seen.add(id(value))
        if isinstance(value, str):
            found += [path] if secret in value else []
        elif isinstance(value, dict):
            pending += [(f"{path}[{key!r}]", item) for key, item in value.items()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending += [(f"{path}[{index}]", item) for index, item in enumerate(value)]
        elif hasattr(value, "__dict__"):
            pending.append((f"vars({path})", vars(value)))
    return found

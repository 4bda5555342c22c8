"""What the test modules share: the servers, the fault primitives, the base cases, the runner.

A test module imports what it needs from here, never from another test module (unittest would
run that module's tests twice), and ends its imports with `from tests.support import load_tests
as load_tests`: unittest's hook, which puts its tests in the one set of workers a run shares.
A helper that a second module needs moves here; one module's own stay in that module.

What it offers, in the order of its sections:

- Paths and the key: ROOT (the repository), CA_FILE and SERVER_CERT (tests_data/), KEY, PYCACHE
  (the byte-code cache of the Pythons the tests start), local_service (examples/local_service.py).
- The scripted server: ScriptedServer with its Handler; each request a Recorded (method, path,
  headers, body, connection); Respond, the type of what answers one.
- Fault primitives, each a Respond: reply, serve_file (ranges, cuts, digests), cut, hang, drop,
  reset, ignoring_ranges, until_closed, first_bytes_then_stall, part_ignoring_if_range,
  all_ranges_at_once, trickle, serve_parts (with digest_field), echo_credentials.
- Raw servers, for bytes http.server will not send: raw_server, and head_server with its
  answers (answer, hold, hang_up; Served, Answer); free_port, a port nothing listens on.
- A forward proxy (Proxy: absolute-form and CONNECT, request lines recorded); TLS:
  server_tls_context, trust_the_test_ca_alone.
- What is served: DATA and BIG (random, with their _SHA), SMALL; SIGNED, SIGNED_QUERY,
  SIGNED_SHOWN and signed_values_in (signed URLs' credentials); EXPORT_V (an export's argv).
- The base cases:
  ServerTestCase: a ScriptedServer a test (self.server, self.script(...), self.requests),
  the environment without this machine's proxy variables; self.client(...), self.tmp(),
  self.start_server(tls), self.start_proxy(), self.closed_during(...), self.download_big(...),
  self.serve_two_at_once(), self.hashed_directory(), self.run_cli(...) (main() in process).
  StandInTestCase: also the stand-in service a class (self.base_url, self.stand_in_client(),
  self.raw(...)), and the command line run in this process (self.run_main), in another
  (self.run_process) or on a pseudo-terminal (self.run_in_terminal); self.export_argv().
  ScriptedCommandLineTestCase: the command line against the scripted server, without this
  machine's PAGER, COLUMNS and the like: as a new user meets it.
- Helpers: outcome_of, wait_for, recorded_sleeps, file_size_limit, inherited_signals,
  import_or_skip, blocked_in_a_socket_read, run_within, part_threads, Verified,
  run_measuring_child (MEASURING_CHILD), RAW_CONTROL, NO_BYTECODE_HERE, assert_usage_errors,
  readme_alias.
- A second user for the tests that need one: other_user(), made once a process, removed as it ends.
- The runner: load_tests, SuiteOnEveryCore (forked workers taking tests from one queue).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import http.client
import http.server
import importlib
import importlib.util
import io
import json
import os
import re
import select
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
import urllib.parse as urllib_parse
import uuid
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient

# ------------------------------------------------------------------------------------------------
# Paths, the test key, the stand-in's module
# ------------------------------------------------------------------------------------------------


ROOT = Path(__file__).resolve().parent.parent
CA_FILE = str(ROOT / "tests_data" / "ca.pem")
SERVER_CERT = str(ROOT / "tests_data" / "server.pem")
KEY = "sk-test-0123456789-SECRET"
# The Pythons the tests start compile dataset_client once, into a cache of their own (never
# beside the sources): compiling it anew in each of them cost 46 ms a process.
PYCACHE = tempfile.mkdtemp(prefix="dataset-client-test-pycache-")
atexit.register(shutil.rmtree, PYCACHE, ignore_errors=True)


def _load_local_service() -> object:
    spec = importlib.util.spec_from_file_location(
        "local_service", ROOT / "examples" / "local_service.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


local_service: Any = _load_local_service()


# ------------------------------------------------------------------------------------------------
# The scripted server: it answers what each test scripts (ServerTestCase.script, or
# server.default), and records what it got (ServerTestCase.requests)
# ------------------------------------------------------------------------------------------------


Respond = Callable[["Handler"], None]


class Recorded:
    def __init__(
        self, method: str, path: str, headers: http.client.HTTPMessage, body: bytes, connection: int
    ):
        self.method, self.path, self.headers, self.body, self.connection = (
            method,
            path,
            headers,
            body,
            connection,
        )

    def json(self) -> object:
        return json.loads(self.body.decode("utf-8"))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle kept-alive connection ends by itself
    disable_nagle_algorithm = (
        True  # headers and body are two sends: no 40 ms delayed-ACK stall between them
    )
    server: ScriptedServer

    def setup(self) -> None:
        super().setup()
        self.handled = 0  # requests on this connection so far
        with self.server.lock:
            self.server.connections += 1
            self.connection_number = self.server.connections

    def handle_one(self) -> None:
        with self.server.lock:
            respond = self.server.script.pop(0) if self.server.script else self.server.default
        length = int(self.headers.get("Content-Length") or 0)
        unread = getattr(respond, "before_body", False)  # it answers before the body arrives
        self.body = body = self.rfile.read(length) if length and not unread else b""
        self.handled += 1
        with self.server.lock:
            self.server.requests.append(
                Recorded(self.command, self.path, self.headers, body, self.connection_number)
            )
        if respond is None:
            self.server.errors.append(f"no scripted response for {self.command} {self.path}")
            reply(500, b"no scripted response")(self)
        else:
            respond(self)

    do_GET = do_POST = do_PUT = do_HEAD = handle_one

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            pass
        except ssl.SSLError:
            self.server.tls_failures += 1
        except Exception as exc:  # fail the test, not the thread
            self.server.errors.append(repr(exc))

    def log_message(self, format: str, *args: object) -> None:
        pass


class ScriptedServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.tls = tls
        self.lock = threading.Lock()
        self.script: list[Respond] = []
        self.default: Respond | None = None
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self.connections = 0
        self.bytes_served = 0
        self.closed_connections = 0
        self.tls_failures = 0
        self.stop = threading.Event()

    def get_request(self) -> tuple[socket.socket, object]:
        sock, address = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # TLS handshakes refused by the client end up here

    def shutdown(self) -> None:
        """Stop serve_forever now: its wait is woken by a connection, not left to end its poll (10 ms a test)."""
        stopping = threading.Thread(target=super().shutdown)
        stopping.start()
        for _ in range(1000):  # a wake-up or two, until the loop has seen the request to stop
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.server_port), timeout=1).close()
            stopping.join(0.002)
            if not stopping.is_alive():
                return

    def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
        super().shutdown_request(request)  # counted once the socket is really closed, FIN sent
        with self.lock:
            self.closed_connections += 1

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.server_port}"


# ------------------------------------------------------------------------------------------------
# Fault primitives: what a scripted server answers, each a Respond
# ------------------------------------------------------------------------------------------------


def reply(
    status: int = 200,
    body: bytes | object = b"",
    headers: dict[str, str] | None = None,
    *,
    content_type: str = "application/json",
) -> Respond:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def respond(handler: Handler) -> None:
        handler.send_response(status)
        all_headers = {
            "Content-Type": content_type,
            "Content-Length": str(len(data)),
            **(headers or {}),
        }
        for name, value in all_headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    return respond


def serve_file(
    data: bytes,
    *,
    etag: str | None = '"v1"',
    ranges: bool = True,
    cuts: list[int] | None = None,
    digests: bool = False,
) -> Respond:
    """A static file with Range support (the stand-in's own code); each offset in ``cuts`` ends one response there.

    ``digests``: with the stand-in's Repr-Digest, and Content-Digest on each 206.
    """
    pending = list(cuts or [])
    sha256 = hashlib.sha256(data).hexdigest() if digests else None

    def respond(handler: Handler) -> None:
        def count(size: int) -> None:
            with handler.server.lock:
                handler.server.bytes_served += size

        local_service.send_file(
            handler,
            io.BytesIO(data),
            len(data),
            etag,
            ranges=ranges,
            cuts=pending,
            sending=count,
            sha256=sha256,
            content_digest=digests,
        )

    return respond


def cut(
    body: bytes, after: int, headers: dict[str, str] | None = None, status: int = 200
) -> Respond:
    """Announce the whole body, send ``after`` bytes of it, then close."""

    def respond(handler: Handler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body[:after])
        handler.wfile.flush()
        handler.close_connection = True

    return respond


def hang(handler: Handler) -> None:
    """Answer nothing until the test ends."""
    handler.server.stop.wait(10)
    handler.close_connection = True


def drop(handler: Handler) -> None:
    """Close the connection without answering."""
    handler.close_connection = True


def reset(handler: Handler) -> None:
    """Abort the connection with a TCP RST."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True


def ignoring_ranges(handler: Handler) -> None:
    """BIG with Accept-Ranges and a strong ETag, but always a 200: a server (or a CDN) that strips Range."""
    local_service.send_file(
        handler, io.BytesIO(BIG), len(BIG), '"v1"', ranges=False, headers={"Accept-Ranges": "bytes"}
    )


def until_closed(body: bytes) -> Respond:
    """A 200 with neither Content-Length nor chunking: the body ends where the connection closes."""

    def respond(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("ETag", '"v1"')
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True

    return respond


def first_bytes_then_stall(
    data: bytes, count: int, etag: str = '"v1"', rest_when: threading.Event | None = None
) -> Respond:
    """Serve ``data`` (or the range asked for), but only its first ``count`` bytes, then send nothing more.

    With ``rest_when``, the rest follows once that event is set.
    """

    def respond(handler: Handler) -> None:
        span = local_service._requested_range(handler.headers.get("Range"), len(data))
        start, end = span or (0, len(data))
        handler.send_response(206 if span else 200)
        handler.send_header("Content-Length", str(end - start))
        handler.send_header("ETag", etag)
        handler.send_header("Accept-Ranges", "bytes")
        if span:
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        handler.end_headers()
        handler.wfile.write(data[start : start + count])
        if rest_when is None:
            hang(handler)
        elif rest_when.wait(10):
            handler.wfile.write(data[start + count : end])

    return respond


def part_ignoring_if_range(data: bytes, start: int, etag: str) -> Respond:
    """A 206 of ``data`` from ``start`` on, whatever If-Range says: a server that splices versions for you."""

    def respond(handler: Handler) -> None:
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.send_header("ETag", etag)
        handler.end_headers()
        handler.wfile.write(data[start:])

    return respond


def all_ranges_at_once(respond: Respond, ranges: int = 3) -> Respond:
    """``respond``, once the ``ranges`` ranged requests have all arrived: all in flight at once."""
    together = threading.Barrier(ranges)

    def when_all_came(handler: Handler) -> None:
        if "Range" in handler.headers:
            together.wait(5)
        respond(handler)

    return when_all_came


def trickle(data: bytes, first: int, interval: float, *, at_most: int = 40) -> Respond:
    """Serve ``data`` (or the range asked for): its first ``first`` bytes at once, then a byte every
    ``interval`` seconds, ``at_most`` of them (until the client hangs up), then close."""

    def respond(handler: Handler) -> None:
        span = local_service._requested_range(handler.headers.get("Range"), len(data))
        start, end = span or (0, len(data))
        handler.send_response(206 if span else 200)
        handler.send_header("Content-Length", str(end - start))
        handler.send_header("ETag", '"v1"')
        handler.send_header("Accept-Ranges", "bytes")
        if span:
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        handler.end_headers()
        handler.wfile.write(data[start : start + first])
        handler.wfile.flush()
        handler.close_connection = True
        for position in range(start + first, min(end, start + first + at_most)):
            if handler.server.stop.wait(interval):
                break
            handler.wfile.write(
                data[position : position + 1]
            )  # a client that hung up: an error ends it
            handler.wfile.flush()

    return respond


def digest_field(data: bytes, algorithm: str = "sha-256", *, legacy: bool = False) -> str:
    """An RFC 9530 field value (``sha-256=:BASE64:``) of ``data``'s digest, or RFC 3230's (``SHA-256=BASE64``)."""
    encoded = base64.b64encode(hashlib.new(algorithm.replace("-", ""), data).digest()).decode()
    return f"{algorithm.upper()}={encoded}" if legacy else f"{algorithm}=:{encoded}:"


def serve_parts(
    data: bytes,
    *,
    headers: dict[str, str] | None = None,
    corrupt: list[int] | None = None,
    part_digest: Callable[[bytes], str] = digest_field,
) -> Respond:
    """``data`` with ranges and a strong ETag, ``headers`` on each response, each 206 with the Content-Digest
    of the right bytes (``part_digest(body)``); each offset in ``corrupt`` makes the next 206 starting there
    flip a bit of its body."""
    pending = list(corrupt or [])

    def respond(handler: Handler) -> None:
        span = local_service._requested_range(handler.headers.get("Range"), len(data))
        start, end = span or (0, len(data))
        body = data[start:end]
        sent = {
            "Content-Length": str(end - start),
            "ETag": '"v1"',
            "Accept-Ranges": "bytes",
            **(headers or {}),
        }
        if span:
            sent |= {
                "Content-Range": f"bytes {start}-{end - 1}/{len(data)}",
                "Content-Digest": part_digest(body),
            }
            with handler.server.lock:
                if start in pending:
                    pending.remove(start)
                    body = bytes([body[0] ^ 1]) + body[1:]
        handler.send_response(206 if span else 200)
        for name, value in sent.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return respond


def echo_credentials(status: int) -> Respond:
    """An error that repeats what the request carried, in its reason, a header and its JSON body."""

    def respond(handler: Handler) -> None:
        received = dict(handler.headers.items())
        authorization = received.get("Authorization", "") or received.get("Proxy-Authorization", "")
        body = json.dumps(
            {"message": f"bad credentials: {authorization}", "received": received}
        ).encode()
        handler.send_response(status, f"Denied {authorization}")
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("X-Echo", authorization)
        handler.end_headers()
        handler.wfile.write(body)

    return respond


# ------------------------------------------------------------------------------------------------
# Raw servers, for what http.server cannot send (a head's bytes, a hang-up at a chosen
# moment); a port nothing listens on
# ------------------------------------------------------------------------------------------------


def raw_server(test: unittest.TestCase, respond: Callable[[socket.socket], None]) -> str:
    """A server on a raw socket that runs ``respond`` for each connection; its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            if stop.is_set():  # the wake-up below
                connection.close()
                return
            with connection:
                connection.settimeout(5)
                with contextlib.suppress(OSError):
                    connection.recv(65536)
                    respond(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        with contextlib.suppress(OSError):  # wake accept() up
            socket.create_connection(listener.getsockname(), timeout=1).close()
        thread.join(5)
        listener.close()

    test.addCleanup(close)
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


Served = tuple[str, list[str]]  # a head_server's URL, and what arrived
Answer = Callable[[str, socket.socket], bool]  # answers a request; True: the connection stays


def head_server(test: unittest.TestCase, *answers: Answer, refuse_tls: bool = False) -> Served:
    """A raw server that reads a request's whole head before it answers, as most servers do: a
    TLS ClientHello (no blank line) is never answered (closed at once with ``refuse_tls``). Each
    request takes the next of ``answers`` (then: held). Returns its URL and what arrived: each
    request's first line, "TLS" for a ClientHello. A thread a connection, all ended by the test."""
    listener = socket.create_server(("127.0.0.1", 0))
    pending, seen, connections = list(answers), [], []

    def serve(connection: socket.socket) -> None:
        head: str | None = ""
        buffered = b""
        with connection, contextlib.suppress(OSError):
            while head is not None:
                head, buffered = read_head(connection, buffered, seen, refuse_tls)
                if head is not None and not (pending.pop(0) if pending else hold)(head, connection):
                    return

    def accept() -> None:
        with contextlib.suppress(OSError):
            for _ in range(50):  # bounded
                connection, _ = listener.accept()
                connection.settimeout(10)
                connections.append(connection)
                threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()

    def close() -> None:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # accept() ends
        listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)  # a held one ends

    test.addCleanup(close)
    return f"http://127.0.0.1:{listener.getsockname()[1]}", seen


def read_head(
    connection: socket.socket, buffered: bytes, seen: list[str], refuse_tls: bool
) -> tuple[str | None, bytes]:
    """head_server's reading of a head (None: the connection is over), noted in ``seen``."""
    while b"\r\n\r\n" not in buffered:
        chunk = connection.recv(65536)
        buffered += chunk
        if buffered.startswith(b"\x16"):
            seen.append("TLS")
            if not refuse_tls:
                hold("", connection)
            return None, b""
        if not chunk:
            return None, b""
    head, _, rest = buffered.partition(b"\r\n\r\n")
    seen.append(head.decode("latin-1").partition("\r\n")[0])
    return head.decode("latin-1"), rest


def hold(head: str, connection: socket.socket) -> bool:
    """Answer nothing until the client goes (or the test ends)."""
    while connection.recv(65536):
        pass
    return False


def hang_up(head: str, connection: socket.socket) -> bool:
    """Close the connection without answering."""
    return False


def answer(status: int, body: bytes = b"[]", headers: str = "") -> Answer:
    def respond(head: str, connection: socket.socket) -> bool:
        reason = http.client.responses[status]
        length = f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n"
        connection.sendall(f"HTTP/1.1 {status} {reason}\r\n{length}{headers}\r\n".encode() + body)
        return "Connection: close" not in headers

    return respond


def free_port() -> int:
    """A port nothing listens on (bound, then let go): for connections that must be refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------------------------------------------
# A forward proxy (absolute-form requests and CONNECT); TLS
# ------------------------------------------------------------------------------------------------


class Proxy(socketserver.ThreadingTCPServer):
    """A tiny forward proxy: absolute-form HTTP requests and CONNECT tunnels. Records request lines."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.lines: list[str] = []
        self.proxy_authorizations: list[str | None] = []
        self.required: str | None = (
            None  # a Proxy-Authorization value: without it, the refusal below
        )
        self.refusal = b"407 Proxy Authentication Required"


class ProxyHandler(socketserver.StreamRequestHandler):
    server: Proxy

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            head += chunk
        header_block, _, rest = head.partition(b"\r\n\r\n")
        lines = header_block.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ")
        self.server.lines.append(lines[0])
        auth = [
            line.split(":", 1)[1].strip()
            for line in lines[1:]
            if line.lower().startswith("proxy-authorization:")
        ]
        self.server.proxy_authorizations.append(auth[0] if auth else None)
        if self.server.required is not None and (auth[0] if auth else None) != self.server.required:
            self.request.sendall(
                b"HTTP/1.1 "
                + self.server.refusal
                + b'\r\nProxy-Authenticate: Basic realm="corp"\r\n'
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            return
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            parts = urllib_parse.urlsplit(target)
            upstream = socket.create_connection((parts.hostname, parts.port or 80))
            kept = [line for line in lines[1:] if not line.lower().startswith("proxy-")]
            path = parts.path + ("?" + parts.query if parts.query else "")
            upstream.sendall(
                f"{method} {path} HTTP/1.1\r\n".encode()
                + "\r\n".join(kept).encode("latin-1")
                + b"\r\n\r\n"
                + rest
            )
        _relay(self.request, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    try:
        sockets = [a, b]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            readable, _, _ = select.select(sockets, [], [], 0.5)
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                (b if sock is a else a).sendall(data)
    except OSError:
        pass
    finally:
        b.close()


def server_tls_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(SERVER_CERT)
    return context


def trust_the_test_ca_alone() -> None:
    """In the (patched) environment: the test CA is the store, not this machine's (slow to load)."""
    for variable in ("SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        os.environ.pop(variable, None)
    os.environ["SSL_CERT_FILE"] = CA_FILE


# ------------------------------------------------------------------------------------------------
# What the servers serve: files, signed URLs, an export's arguments
# ------------------------------------------------------------------------------------------------


DATA = os.urandom(3 * 1024 * 1024 + 123)


DATA_SHA = hashlib.sha256(DATA).hexdigest()


BIG = os.urandom(8 * 1024 * 1024 + 4321)


BIG_SHA = hashlib.sha256(BIG).hexdigest()


SMALL = DATA[:200_000]  # one stream: a small file is enough


# Credential parameters of signed URLs (S3, GCS, CloudFront, Azure, OAuth), any case, with values.
SIGNED = {
    "X-Amz-Credential": "AKIAEXAMPLE0001%2F20240101%2Fus-east-1%2Fs3%2Faws4_request",
    "X-Amz-Security-Token": "FwoGZXIvYXdzEJr%2F%2Fsession0002",
    "X-Amz-Signature": "816d0123456789abcdef0003",
    "x-goog-credential": "svc%40project.iam0004",
    "X-GOOG-SIGNATURE": "a1b2c3d4e5f60005",
    "Policy": "eyJTdGF0ZW1lbnQiOiJ0006",
    "Signature": "Zm9vYmFy~0007-",
    "Key-Pair-Id": "APKAEXAMPLE0008",
    "sig": "r%2BVW0009%3D",
    "Token": "tok0010",
    "access_token": "ya29.a0011",
}


SIGNED_QUERY = "&".join(f"{name}={value}" for name, value in SIGNED.items())
SIGNED_SHOWN = "&".join(f"{name}=<redacted>" for name in SIGNED)


def signed_values_in(texts: list[str]) -> list[str]:
    """The values of SIGNED (as sent, and decoded) that show in ``texts``."""
    values = [form for value in SIGNED.values() for form in (value, urllib_parse.unquote(value))]
    return [value for value in values for text in texts if value in text]


EXPORT_V = ["export", "trades", "--symbols", "V", "--start", "2024-01-02", "--end", "2024-01-03"]


# ------------------------------------------------------------------------------------------------
# The base cases: a scripted server a test (ServerTestCase); the stand-in service a class
# and the command line run in this process or another (StandInTestCase); the command line
# against the scripted server, as a new user meets it (ScriptedCommandLineTestCase)
# ------------------------------------------------------------------------------------------------


class ServerTestCase(unittest.TestCase):
    def setUp(self) -> None:
        # This machine sets proxy variables: the tests choose their own environment.
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        env["NO_PROXY"] = "127.0.0.1,localhost"
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
        patcher = mock.patch.dict(os.environ, env, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.server = self.start_server()

    def closed_during(
        self, client: DatasetClient, call: Callable[[], object], waits: Callable[[], bool]
    ) -> object:
        """close() from another thread once ``call`` waits (``waits()``, then a moment): its
        outcome, ended within 4 s (what each test stops would take 5 s or more)."""
        outcome: list[object] = []
        thread = threading.Thread(target=lambda: outcome.append(outcome_of(call)), daemon=True)
        thread.start()
        wait_for(waits, 20)
        time.sleep(0.3)
        client.close()
        thread.join(4)
        self.assertFalse(thread.is_alive(), "close() did not end the wait")
        return outcome[0]

    def start_server(self, tls: ssl.SSLContext | None = None) -> ScriptedServer:
        server = ScriptedServer(tls)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        thread.start()

        def stop() -> None:
            server.stop.set()
            server.shutdown()
            server.server_close()
            thread.join(5)
            self.assertEqual(server.errors, [], "the server thread failed")

        self.addCleanup(stop)
        return server

    def client(
        self, base_url: str | None = None, api_key: str | None = KEY, **options: object
    ) -> DatasetClient:
        options.setdefault("timeout", 5)
        options.setdefault("backoff_factor", 0.001)
        client = DatasetClient(base_url or self.server.url + "/api/v1", api_key, **options)  # type: ignore[arg-type]
        self.addCleanup(client.close)  # cleanups run last-in first-out: before the server stops
        return client

    def serve_two_at_once(self) -> Callable[[Path], list[str]]:
        """Serve DATA once two requests have arrived; the function returned waits for them, lists a
        directory then (their temporary files are made before they send), and lets them go on."""
        both_sent, looked = threading.Barrier(3), threading.Event()

        def respond(handler: Handler) -> None:
            both_sent.wait(10)
            looked.wait(10)
            serve_file(DATA)(handler)

        def look(directory: Path) -> list[str]:
            both_sent.wait(10)
            names = sorted(path.name for path in directory.iterdir())
            looked.set()
            return names

        self.server.default = respond
        return look

    def script(self, *responses: Respond) -> None:
        self.server.script.extend(responses)

    def download_big(self, destination: Path, **options: Any) -> list[tuple[int, int | None]]:
        """Download BIG (files/big) to ``destination`` on 4 connections, its sha256 checked; check that it is
        whole and alone in its directory. Returns what progress was given."""
        seen: list[tuple[int, int | None]] = []
        self.client().download(
            "files/big",
            destination,
            connections=4,
            sha256=BIG_SHA,
            progress=lambda d, t: seen.append((d, t)),
            **options,
        )
        self.assertEqual(destination.read_bytes(), BIG)
        self.assertEqual(sorted(p.name for p in destination.parent.iterdir()), [destination.name])
        return seen

    @property
    def requests(self) -> list[Recorded]:
        return self.server.requests

    def tmp(self) -> Path:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        return Path(directory.name)

    def start_proxy(self) -> Proxy:
        """A forwarding proxy (Proxy, below) on a free port, stopped when the test ends."""
        proxy = Proxy()
        thread = threading.Thread(
            target=proxy.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        thread.start()

        def stop() -> None:
            proxy.shutdown()
            proxy.server_close()

        self.addCleanup(stop)
        return proxy

    def hashed_directory(self) -> Path:
        """A directory holding the test CA under its subject hash, as `openssl rehash` names it."""
        if shutil.which("openssl") is None:
            self.skipTest("openssl is not installed: it names the files of a hashed CA directory")
        name = subprocess.run(
            ["openssl", "x509", "-hash", "-noout", "-in", CA_FILE],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        directory = self.tmp()
        shutil.copy(CA_FILE, directory / f"{name}.0")
        return directory

    def run_cli(self, *argv: str) -> tuple[int, str]:
        """The command line in this process: its exit status and stderr (stdout must stay empty)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(list(argv))
        self.assertEqual(out.getvalue(), "")
        return status, err.getvalue()


class TerminalOutput(io.StringIO):
    def isatty(self) -> bool:
        return True


class QuickStandIn(local_service.Server):  # type: ignore[misc,name-defined]
    """The stand-in, polling every 10 ms: its shutdown waits for a poll (100 ms a class, in each worker)."""

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        super().serve_forever(min(poll_interval, 0.01))


def quick_stand_in(api_key: str) -> contextlib.AbstractContextManager[Any]:
    """local_service.running(api_key=api_key), stopped at once."""
    return local_service.serving(QuickStandIn("127.0.0.1", 0, api_key))  # type: ignore[no-any-return]


class StandInTestCase(ServerTestCase):
    @classmethod
    def setUpClass(cls) -> None:  # one service per class: building the sample takes a moment
        running = quick_stand_in("stand-in-key")
        cls.service = running.__enter__()
        cls.addClassCleanup(running.__exit__, None, None, None)
        cls.base_url: str = cls.service.base_url

    def stand_in_client(self, api_key: str | None = "stand-in-key") -> DatasetClient:
        return self.client(self.base_url, api_key)

    def raw(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ):  # type: ignore[no-untyped-def]
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.service.server_address[1], timeout=5
        )
        self.addCleanup(connection.close)
        connection.request(
            method, path, body, {"Authorization": "Bearer stand-in-key", **(headers or {})}
        )
        response = connection.getresponse()
        return response, response.read()

    cli_unset: tuple[str, ...] = (
        "DATASET_CLIENT_",
    )  # the variables run_main leaves out of the environment

    def cli_environment(
        self, key: str | None = "stand-in-key", base_url: str | None = None
    ) -> dict[str, str]:
        """The DATASET_CLIENT_ variables run_main sets unless given others: the stand-in's URL, ``key`` (None: none)."""
        environment = {"DATASET_CLIENT_BASE_URL": base_url or self.base_url}
        if key is not None:
            environment["DATASET_CLIENT_API_KEY"] = key
        return environment

    def run_main(
        self,
        *argv: str,
        environment: dict[str, str] | None = None,
        stdin: str = "",
        terminal: bool = False,
        stdout: Any = None,
        **stand_in: str | None,
    ) -> tuple[int, str, str]:
        """main() in process: its status, stdout and stderr. The environment is this one less the variables
        starting with ``cli_unset``, an empty HOME, and ``environment`` (default: ``cli_environment(**stand_in)``);
        ``terminal``: stdout says it is a terminal; ``stdout``: that stream instead (then the second value is empty)."""
        if environment is None:
            environment = self.cli_environment(**stand_in)
        kept = {k: v for k, v in os.environ.items() if not k.startswith(self.cli_unset)}
        out, err = (TerminalOutput() if terminal else io.StringIO()), io.StringIO()
        with (
            mock.patch.dict(
                os.environ, {**kept, "HOME": str(self.tmp()), **environment}, clear=True
            ),
            mock.patch.object(sys, "stdin", io.StringIO(stdin)),
            contextlib.redirect_stdout(out if stdout is None else stdout),
            contextlib.redirect_stderr(err),
        ):
            status = cli.main(list(argv))
        return status, out.getvalue(), err.getvalue()

    def run_process(
        self, *argv: str, key: str | None = "stand-in-key", base_url: str | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        environment["DATASET_CLIENT_BASE_URL"] = base_url if base_url is not None else self.base_url
        if key is not None:
            environment["DATASET_CLIENT_API_KEY"] = key
        return subprocess.run(
            [sys.executable, "-m", "dataset_client", *argv],
            env=environment,
            cwd=ROOT,
            capture_output=True,
            timeout=60,
            check=False,
        )

    def run_in_terminal(
        self,
        argv: list[str],
        columns: int,
        on_screen: Callable[[str], None] | None = None,
        variables: dict[str, str] | None = None,
        directory: Path = ROOT,
    ) -> tuple[int, str]:
        """The command run on a pseudo-terminal (stdout and stderr) of ``columns`` columns: its status, all it drew.

        ``on_screen`` is given all drawn so far, each time more is; the process is ``self.in_terminal``;
        ``variables``: set on top of the others (a pager, say); ``directory``: where it runs (this
        tree's module imported wherever that is)."""
        fcntl, pty, termios = (import_or_skip(self, name) for name in ("fcntl", "pty", "termios"))

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        environment |= {
            "DATASET_CLIENT_BASE_URL": self.base_url,
            "DATASET_CLIENT_API_KEY": "stand-in-key",
            "TERM": "xterm",
            "DATASET_CLIENT_PAGER": "",  # output taller than the screen is drawn, not paged (that is tested apart)
            "PYTHONPATH": str(ROOT),
            **(variables or {}),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "dataset_client", *argv],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            env=environment,
            cwd=directory,
        )
        self.addCleanup(process.kill)
        self.in_terminal = process
        os.close(slave)
        drawn = b""
        deadline = time.monotonic() + 30
        while (
            time.monotonic() < deadline
            and select.select([master], [], [], deadline - time.monotonic())[0]
        ):
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not data:
                break
            drawn += data
            if on_screen is not None:
                on_screen(drawn.decode("utf-8", errors="replace"))
        os.close(master)
        return process.wait(10), drawn.decode()

    def export_argv(self, *more: str) -> list[str]:
        return [
            *EXPORT_V,
            *more,
        ]


class ScriptedCommandLineTestCase(StandInTestCase):
    """The command line against the scripted server (``self.server``, at /api, with KEY), not the
    stand-in, and without this machine's XDG_CONFIG_HOME, PAGER, LESS, COLUMNS and LINES: what a
    new user at a terminal meets, scripted by the test.
    """

    cli_unset = ("DATASET_CLIENT_", "XDG_CONFIG_HOME", "PAGER", "LESS", "COLUMNS", "LINES")

    def cli_environment(self, key: str | None = KEY, base_url: str | None = None) -> dict[str, str]:
        """The scripted server's: this class scripts what a new user meets."""
        return super().cli_environment(key, base_url or self.server.url + "/api")


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def outcome_of(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the exception it raised."""
    try:
        return call()
    except BaseException as exc:  # the test looks at it
        return exc


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@contextlib.contextmanager
def recorded_sleeps() -> Iterator[list[float]]:
    """The client's waits between retries (which close() ends), recorded instead of slept."""
    sleeps: list[float] = []
    with mock.patch.object(dc._ConnectionPool, "sleep", lambda pool, wait: sleeps.append(wait)):
        yield sleeps


@contextlib.contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """Writes past ``size`` bytes fail with EFBIG, as on a full disk: a real error from the file system."""
    import resource

    handler = signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # else the kernel's signal ends the process
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


@contextlib.contextmanager
def inherited_signals(action: Any, *names: str) -> Iterator[None]:
    """Set signals to ``action`` in this process while a child is started, for the child to inherit.

    SIG_DFL: as in a terminal, whatever the test run inherited (a background job ignores SIGINT,
    nohup SIGHUP); SIG_IGN: as nohup starts a command. A handler becomes SIG_DFL across exec.
    """
    previous = {
        name: signal.signal(getattr(signal, name), action)
        for name in names
        if hasattr(signal, name)
    }
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def import_or_skip(test: unittest.TestCase, name: str) -> Any:
    """The module ``name``, or the test skipped saying the platform has none (fcntl, pty, termios: not Windows)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        test.skipTest(f"this platform has no {name}")


def blocked_in_a_socket_read(thread: threading.Thread) -> bool:
    """True when ``thread`` waits in socket.SocketIO.readinto (under a BufferedReader, its lock held)."""
    frame = sys._current_frames().get(thread.ident or 0)
    return (
        frame is not None
        and frame.f_code.co_name == "readinto"
        and frame.f_code.co_filename == socket.__file__
    )


def run_within(seconds: float, call: Callable[[], object]) -> tuple[object, float]:
    """What ``call`` returned or raised (see outcome_of) and the seconds it took, run in a thread
    of its own; still running after ``seconds``: "still running", its thread (a daemon) left
    behind, for the test to fail, not hang."""
    outcome: list[object] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: outcome.append(outcome_of(call)), daemon=True)
    thread.start()
    thread.join(seconds)
    return (outcome[0] if outcome else "still running"), time.monotonic() - started


def part_threads() -> list[str]:
    """The names of the client's threads still running."""
    names = [thread.name for thread in threading.enumerate()]
    return [name for name in names if name.startswith("dataset-client")]


class Verified:
    """A progress callable with the ``verified`` list the CLI's progress line has: the checks that passed
    (given to ``download`` as ``verified=progress.verified.append``; ``**hooks()``: both)."""

    def __init__(self) -> None:
        self.verified: list[str] = []
        self.seen: list[tuple[int, int | None]] = []

    def hooks(self) -> dict[str, Any]:
        return {"progress": self, "verified": self.verified.append}

    def __call__(self, done: int, total: int | None) -> None:
        self.seen.append((done, total))


# The start of a child Python that measures its own memory (this process's peak may have been raised
# by an earlier test), from /proc/self/status, under RLIMIT_AS so that an unbounded read fails loudly.
MEASURING_CHILD = (
    "import resource, sys, dataset_client as dc\n"
    "def status(key):\n"
    "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key)) * 1024\n"
    "def peak_growth(call):\n"
    "    open('/proc/self/clear_refs', 'w').write('5')  # the peak starts again from here\n"
    "    before = status('VmRSS:')\n"
    "    try:\n"
    "        outcome = call()\n"
    "    except dc.DatasetClientError as error:\n"
    "        outcome = error\n"
    "    return status('VmHWM:') - before, outcome\n"
    "resource.setrlimit(resource.RLIMIT_AS, (status('VmSize:') + 512 * 2**20,) * 2)\n"
    "client = dc.DatasetClient(sys.argv[1], timeout=10, max_retries=0)\n"
)


def run_measuring_child(test: unittest.TestCase, code: str, base_url: str) -> list[str]:
    """The lines ``code`` printed, run after MEASURING_CHILD (``client`` on ``base_url``, ``peak_growth(call)``)."""
    if not os.path.exists("/proc/self/clear_refs"):
        test.skipTest("needs Linux's /proc/self/status and clear_refs")
    result = subprocess.run(
        [sys.executable, "-c", MEASURING_CHILD + code, base_url],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    test.assertEqual(result.returncode, 0, result.stderr.decode()[-2000:])
    return result.stdout.decode().splitlines()


RAW_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f]"
)  # what must not reach a terminal (a newline may)


NO_BYTECODE_HERE = {"PYTHONPYCACHEPREFIX": PYCACHE}  # a checkout's __pycache__ left alone


def assert_usage_errors(test: Any, *cases: tuple[str, str]) -> list[str]:
    """Each command line (its words split at spaces) exits 2 with nothing on stdout, the last
    line of its stderr the error ``text``; their stderrs."""
    errors = []
    for words, text in cases:
        with test.subTest(argv=words):
            status, out, err = test.run_main(*words.split())
            test.assertEqual((status, out), (2, ""))
            command = r"dataset-client( download| export)?"
            test.assertRegex(err.splitlines()[-1], rf"^{command}: error: {re.escape(text)}$")
            errors.append(err)
    return errors


def readme_alias() -> str:
    """The README's alias line, as a user pastes it (its comment left off)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^alias dataset-client=.*?(?=\s+#|$)", readme, re.M)
    assert found is not None, "the README shows an alias"
    return found[0]


# ------------------------------------------------------------------------------------------------
# A second user (useradd) for the tests that need one; removed when the run ends
# ------------------------------------------------------------------------------------------------


_OTHER_USER: list[tuple[str, int, int]] = []


def _user_command(*argv: str) -> bool:
    """useradd or userdel, again while another process (a parallel test worker) holds the lock."""
    for _ in range(100):
        done = subprocess.run(argv, capture_output=True)
        if done.returncode == 0 or b"lock" not in done.stderr:
            return done.returncode == 0
        time.sleep(0.05)
    return False


def other_user() -> tuple[str, int, int] | None:
    """A real second user (name, uid, gid), made once per process with useradd and removed as it
    ends (remove_other_user); None where that cannot be."""
    if not _OTHER_USER:
        import pwd

        name = f"dctest{os.getpid()}{uuid.uuid4().hex[:6]}"  # a pid is used again
        if os.geteuid() != 0 or not shutil.which("useradd"):
            return None
        options = ("--system", "--no-create-home", "--shell", "/usr/sbin/nologin")
        if not _user_command("useradd", *options, name):
            return None
        entry = pwd.getpwnam(name)
        _OTHER_USER.append((name, entry.pw_uid, entry.pw_gid))
    return _OTHER_USER[0]


def remove_other_user() -> None:
    """userdel the second user this process made: at exit, and as a test worker ends (os._exit,
    no atexit: each worker's user was left behind, until useradd ran out of system uids)."""
    while _OTHER_USER:
        _user_command("userdel", _OTHER_USER.pop()[0])


atexit.register(remove_other_user)


# ------------------------------------------------------------------------------------------------
# The runner
# ------------------------------------------------------------------------------------------------


# The README's command on every core: `python -m unittest` (discovery) runs every module's tests
# in one set of forked processes, two per core (most tests wait on sockets, deadlines and child
# processes, not on a core), each taking the next few tests from a queue, and reports each outcome
# as it comes. Named classes or tests (`python -m unittest tests.test_retries.RetryTests`) and
# pytest run in one process as usual. DATASET_CLIENT_TEST_PROCESSES=1 turns it off.
class ChildFailure(Exception):
    """A failure or error in a worker process, carrying the worker's own traceback text."""


class Reported:
    """A test as the parent reports it: the worker's description of it."""

    failureException = AssertionError

    def __init__(self, name: str, description: str | None) -> None:
        self.name, self.description = name, description

    def __str__(self) -> str:
        return self.name

    def id(self) -> str:
        return self.name

    def shortDescription(self) -> str | None:
        return self.description


class OutcomeWriter(unittest.TestResult):
    """A worker's result: each test as one JSON line on a pipe, with its outcomes (its failed
    subtests' included: counted as one test, as a run in one process counts it)."""

    def __init__(self, pipe: Any) -> None:
        super().__init__()
        self.pipe, self.outcomes = pipe, None  # None: outside a test (a setUpClass that failed)

    def startTest(self, test: Any) -> None:
        super().startTest(test)
        self.outcomes = []

    def stopTest(self, test: Any) -> None:
        super().stopTest(test)
        self.send(test, self.outcomes or [])
        self.outcomes = None

    def send(self, test: Any, outcomes: list[dict[str, Any]]) -> None:
        line = {"name": str(test), "description": test.shortDescription(), "outcomes": outcomes}
        self.pipe.write(json.dumps(line) + "\n")
        self.pipe.flush()

    def note(self, test: Any, outcome: str, detail: str = "", subtest: Any = None) -> None:
        noted = {"outcome": outcome, "detail": detail, "subtest": subtest and str(subtest)}
        if self.outcomes is None:  # no test around it: a line of its own
            self.send(test, [noted])
        else:
            self.outcomes.append(noted)

    def addSuccess(self, test: Any) -> None:
        self.note(test, "success")

    def addSkip(self, test: Any, reason: str) -> None:
        self.note(test, "skip", reason)

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self.note(test, "expected_failure", self._exc_info_to_string(err, test))  # type: ignore[attr-defined]

    def addUnexpectedSuccess(self, test: Any) -> None:
        self.note(test, "unexpected_success")

    def addFailure(self, test: Any, err: Any) -> None:
        self.note(test, "failure", self._exc_info_to_string(err, test))  # type: ignore[attr-defined]

    def addError(self, test: Any, err: Any) -> None:
        self.note(test, "error", self._exc_info_to_string(err, test))  # type: ignore[attr-defined]

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            detail = self._exc_info_to_string(err, test)  # type: ignore[attr-defined]
            self.note(test, "failure" if failed else "error", detail, subtest)


def replay(line: dict[str, Any], result: unittest.TestResult) -> None:
    """One worker's test, reported to the runner's own result as if run here."""
    test: Any = Reported(line["name"], line["description"])
    result.startTest(test)
    for noted in line["outcomes"]:
        outcome, detail = noted["outcome"], noted["detail"]
        subject: Any = test
        if noted["subtest"] is not None:  # a failed subtest: a failure of its own, in this test
            subject = Reported(noted["subtest"], None)
            subject.test_case = test
        if outcome == "success":
            result.addSuccess(test)
        elif outcome == "skip":
            result.addSkip(test, detail)
        elif outcome == "expected_failure":
            result.addExpectedFailure(test, (ChildFailure, ChildFailure(detail), None))
        elif outcome == "unexpected_success":
            result.addUnexpectedSuccess(test)
        else:
            add = result.addFailure if outcome == "failure" else result.addError
            add(subject, (ChildFailure, ChildFailure("\n" + detail), None))
    result.stopTest(test)


class TakenTests(unittest.TestSuite):
    """A worker's tests: the chunks it takes from the queue, one at a time, until the queue is empty."""

    _cleanup = False  # tests come from the queue, not from a list to drop them from

    def __init__(self, chunks: list[list[unittest.TestCase]], queue: int) -> None:
        super().__init__()
        self.chunks, self.queue = chunks, queue

    def __iter__(self) -> Iterator[unittest.TestCase]:
        while record := os.read(
            self.queue, 4
        ):  # 4 bytes a read: no other worker can take half of one
            yield from self.chunks[struct.unpack("!I", record)[0]]


class SuiteOnEveryCore(unittest.TestSuite):
    """Runs its tests in ``processes`` forked workers, each taking the next few tests (in the module's
    order, so that a class's tests mostly run together) from a shared queue whenever it is free."""

    def __init__(self, tests: unittest.TestSuite, processes: int) -> None:
        super().__init__()
        self.queued: list[unittest.TestCase] = []
        self.chunks: list[list[unittest.TestCase]] = []
        self.processes, self.started = processes, False
        self.take(tests)

    def take(self, tests: unittest.TestSuite) -> None:
        """Queue ``tests`` too (another module's, from the same discovery)."""
        self.queued += iterate_tests(tests)

    def cut_into_chunks(self) -> None:
        """The queue in chunks of six tests, fewer once it runs low (a chunk at most half of each
        worker's share of what is left): the last tests are taken one or two at a time, so that
        no worker is still on a chunk of six when the others have nothing left to take."""
        start = 0
        while start < len(self.queued):
            left = len(self.queued) - start
            size = max(1, min(6, left // (2 * self.processes)))
            self.chunks.append(self.queued[start : start + size])
            start += size

    def run(self, result: unittest.TestResult, debug: bool = False) -> unittest.TestResult:
        self.started = True
        self.cut_into_chunks()
        queue, feed = (
            os.pipe()
        )  # each record a chunk's index; written whole (under PIPE_BUF) before any fork
        os.write(feed, b"".join(struct.pack("!I", index) for index in range(len(self.chunks))))
        os.close(feed)
        workers = {}
        for _ in range(self.processes):
            read, write = os.pipe()
            pid = os.fork()
            if (
                pid == 0
            ):  # the worker: what it takes, then out without atexit (the parent's clean-ups)
                os.close(read)
                os._exit(self.run_taken(queue, os.fdopen(write, "w")))
            os.close(write)
            workers[pid] = os.fdopen(read)
        os.close(queue)
        try:
            self.report(workers, result)
        finally:
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        return result

    def run_taken(self, queue: int, pipe: Any) -> int:
        try:
            TakenTests(self.chunks, queue).run(OutcomeWriter(pipe))
            pipe.close()
            return 0
        except BaseException:  # anything: the parent says a worker failed
            traceback.print_exc()
            return 1
        finally:
            remove_other_user()  # what atexit does in one process

    def report(self, workers: dict[int, Any], result: unittest.TestResult) -> None:
        pipes = dict(workers)
        while pipes:
            readable, _, _ = select.select(list(pipes.values()), [], [])
            for pipe in readable:
                line = pipe.readline()
                if line:
                    replay(json.loads(line), result)
                    continue
                pid = next(pid for pid, each in pipes.items() if each is pipe)
                del pipes[pid]
                pipe.close()
                _, status = os.waitpid(pid, 0)
                workers.pop(pid)
                if status != 0:
                    failure = (
                        ChildFailure,
                        ChildFailure(f"a test worker ended with status {status:#x}"),
                        None,
                    )
                    result.addError(Reported(f"worker {pid}", None), failure)  # type: ignore[arg-type]


def iterate_tests(suite: unittest.TestSuite | unittest.TestCase) -> Iterator[unittest.TestCase]:
    if isinstance(suite, unittest.TestCase):
        yield suite
        return
    for each in suite:
        yield from iterate_tests(each)


# By loader: the modules one discovery loads share one set of workers.
_pools: weakref.WeakKeyDictionary[unittest.TestLoader, SuiteOnEveryCore] = (
    weakref.WeakKeyDictionary()
)


def load_tests(
    loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None
) -> unittest.TestSuite:
    """unittest's hook, called for discovery (`python -m unittest`): the suite on every core, the
    tests of the modules loaded after the first one queued in the same workers (each module's
    load_tests is this one):
    no wait for the last of one module's tests before the next module's start."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    processes = int(os.environ.get("DATASET_CLIENT_TEST_PROCESSES", min(2 * cores, 8)))
    if processes < 2 or not hasattr(os, "fork"):
        return tests
    pool = _pools.get(loader)
    if pool is not None and not pool.started and pool.processes == processes:
        pool.take(tests)
        return unittest.TestSuite()
    _pools[loader] = pool = SuiteOnEveryCore(tests, processes)
    return pool

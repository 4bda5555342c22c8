"""Tests for dataset_client, against scripted local servers on 127.0.0.1.

Run with ``python -m unittest -v`` (or pytest). Standard library only.
"""

from __future__ import annotations

import atexit
import base64
import concurrent.futures
import contextlib
import copy
import csv
import datetime
import errno
import functools
import gzip
import hashlib
import http.client
import http.server
import importlib
import importlib.util
import inspect
import io
import itertools
import json
import multiprocessing
import os
import pickle
import re
import select
import shutil
import signal
import socket
import socketserver
import ssl
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import tracemalloc
import types
import unittest
import urllib.parse as urllib_parse
import uuid
import warnings
import weakref
import zlib
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient, ServiceError

HERE = Path(__file__).resolve().parent
CA_FILE = str(HERE / "tests_data" / "ca.pem")
SERVER_CERT = str(HERE / "tests_data" / "server.pem")
KEY = "sk-test-0123456789-SECRET"
# The Pythons the tests start compile dataset_client once, into a cache of their own (never
# beside the sources): compiling it anew in each of them cost 46 ms a process.
PYCACHE = tempfile.mkdtemp(prefix="dataset-client-test-pycache-")
atexit.register(shutil.rmtree, PYCACHE, ignore_errors=True)

Respond = Callable[["Handler"], None]


def _load_local_service() -> object:
    spec = importlib.util.spec_from_file_location(
        "local_service", HERE / "examples" / "local_service.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


local_service: Any = _load_local_service()


# ---------------------------------------------------------------------------
# The fixture: a server that answers what each test scripts and records what it got
# ---------------------------------------------------------------------------


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


def trust_the_test_ca_alone() -> None:
    """In the (patched) environment: the test CA is the store, not this machine's (slow to load)."""
    for variable in ("SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        os.environ.pop(variable, None)
    os.environ["SSL_CERT_FILE"] = CA_FILE


def all_ranges_at_once(respond: Respond, ranges: int = 3) -> Respond:
    """``respond``, once the ``ranges`` ranged requests have all arrived: all in flight at once."""
    together = threading.Barrier(ranges)

    def when_all_came(handler: Handler) -> None:
        if "Range" in handler.headers:
            together.wait(5)
        respond(handler)

    return when_all_came


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
        _wait_for(waits, 20)
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


# ---------------------------------------------------------------------------
# Helpers the tests share
# ---------------------------------------------------------------------------


def outcome_of(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the exception it raised."""
    try:
        return call()
    except BaseException as exc:  # the test looks at it
        return exc


def email_date(timestamp: float) -> str:
    import email.utils

    return email.utils.formatdate(timestamp, usegmt=True)


def free_port() -> int:
    """A port nothing listens on (bound, then let go): for connections that must be refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


def ignored_signals(pid: int) -> set[int]:
    """The signals a (Linux) process ignores, from /proc/PID/status."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def waiting(pid: int) -> bool:
    """True when every thread of (Linux) process ``pid`` sleeps, as a download's do once the bytes sent so far
    are written and counted; elsewhere, True."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    states = []
    for task in tasks:
        with (
            contextlib.suppress(OSError),
            open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as stat_file,
        ):
            states.append(stat_file.read().rsplit(")", 1)[1].split()[0])
    return all(state in "SD" for state in states)


@contextlib.contextmanager
def recorded_sleeps() -> Iterator[list[float]]:
    """The client's waits between retries (which close() ends), recorded instead of slept."""
    sleeps: list[float] = []
    with mock.patch.object(dc._ConnectionPool, "sleep", lambda pool, wait: sleeps.append(wait)):
        yield sleeps


def frame_names(thread: threading.Thread) -> list[str]:
    """The names of the functions ``thread`` is in, innermost first."""
    frame, names = sys._current_frames().get(thread.ident or 0), []
    while frame is not None:
        frame, names = frame.f_back, [*names, frame.f_code.co_name]
    return names


def _wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


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
        cwd=HERE,
        capture_output=True,
        timeout=60,
    )
    test.assertEqual(result.returncode, 0, result.stderr.decode()[-2000:])
    return result.stdout.decode().splitlines()


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


# ---------------------------------------------------------------------------
# Importing the module: Python 3.10 or older
# ---------------------------------------------------------------------------


class OldPythonTests(unittest.TestCase):
    """Python 3.10 or older: a clear ImportError, and one line from the command line, exit status 2."""

    EXPECTED = "dataset_client needs Python 3.11 or later; this is Python {}"

    def run_python(self, python: str, code: str) -> subprocess.CompletedProcess[str]:
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(HERE),
        }
        return subprocess.run(
            [python, "-c", code],
            cwd=HERE,
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


# ---------------------------------------------------------------------------
# The client: its construction and the arguments it takes
# ---------------------------------------------------------------------------


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

    def test_https_to_a_plain_http_server_says_so_and_is_not_retried(self) -> None:
        trust_the_test_ca_alone()  # the store need not be the system's: no handshake gets that far
        self.server.default = reply(body=[])
        url = self.server.url.replace("http://", "https://")
        with self.assertRaises(dc.NetworkError) as caught:  # the probe spends the back-off
            self.client(url + "/api/v1", max_retries=2, backoff_factor=0.5).list_datasets()
        port = self.server.server_port
        self.assertEqual(
            str(caught.exception),
            f"GET https://127.0.0.1:{port}/api/v1/datasets: the server answered in plain HTTP, not HTTPS (TLS):"
            f" use http://127.0.0.1:{port}/api/v1/datasets instead",
        )
        self.assertEqual(caught.exception.attempts, 1)
        self.assertEqual(
            self.server.connections, 2, "the handshake, then one probe; never the request again"
        )
        self.assertEqual(self.requests, [], "the probe (OPTIONS *) is no request of the service's")
        copy = pickle.loads(pickle.dumps(caught.exception))
        self.assertEqual((type(copy), str(copy)), (type(caught.exception), str(caught.exception)))
        status, err = self.run_cli("--base-url", url, "--retries", "2", "datasets")
        self.assertEqual(status, 3)
        self.assertIn(
            f": the server answered in plain HTTP, not HTTPS (TLS): use http://127.0.0.1:{port}/datasets",
            err,
        )
        self.assertEqual(self.server.connections, 4, "the command line: one more of each")

    def test_http_to_a_tls_server_says_so_and_is_not_retried(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body=[])
        url = tls.url.replace("https://", "http://")
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url + "/api/v1", max_retries=2).create_export(
                "daily_bars", symbols="AAPL", start_date="2024-01-02", end_date="2024-01-05"
            )
        port = tls.server_port
        self.assertEqual(
            str(caught.exception),
            f"POST http://127.0.0.1:{port}/api/v1/exports: the server answered in HTTPS (TLS), not plain HTTP:"
            f" use https://127.0.0.1:{port}/api/v1/exports instead",
        )
        self.assertEqual(caught.exception.attempts, 1)
        self.assertEqual(tls.connections, 2, "the request's, then a handshake that sends nothing")
        self.assertEqual(tls.requests, [])

    def test_a_plain_server_that_drops_a_request_is_still_retried(self) -> None:
        self.script(drop, reply(body=["ok"]))
        self.assertEqual(self.client().list_datasets(), ["ok"])
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"] * 2)

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

    def run_cli(self, *argv: str) -> tuple[int, str]:
        """The command line in this process: its exit status and stderr (stdout must stay empty)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(list(argv))
        self.assertEqual(out.getvalue(), "")
        return status, err.getvalue()

    def test_a_tls_server_refusing_the_handshake_is_no_wrong_scheme(self) -> None:
        # nginx on its TLS port: a handshake it refuses gets an alert, plain HTTP gets "HTTP/1.1 400".
        trust_the_test_ca_alone()  # the handshake fails before any certificate
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        listener.settimeout(5)
        received: list[bytes] = []

        def serve() -> None:
            with contextlib.suppress(OSError):
                for _ in range(3):
                    connection, _ = listener.accept()
                    with connection:
                        received.append(connection.recv(65536)[:1])
                        if (
                            received[-1] == b"\x16"
                        ):  # a ClientHello: a fatal handshake_failure alert
                            connection.sendall(b"\x15\x03\x03\x00\x02\x02\x28")
                        else:
                            connection.sendall(
                                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
                            )

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        url = f"https://127.0.0.1:{listener.getsockname()[1]}"
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url, max_retries=2).list_datasets()
        thread.join(5)
        self.assertNotIsInstance(caught.exception, dc._WrongSchemeError)
        self.assertIn(
            f"GET {url}/datasets: could not connect: [SSL: SSLV3_ALERT_HANDSHAKE_FAILURE]",
            str(caught.exception),
        )
        self.assertEqual(caught.exception.attempts, 3, "retried as any failed handshake")
        self.assertEqual(received, [b"\x16"] * 3, "three handshakes, no probe in plain HTTP")

    def test_the_plain_http_probe_is_bounded_as_a_whole_not_per_byte(self) -> None:
        # Found in review2: "HTTP/" a byte at a time, each just within the time-out, made the probe last
        # five time-outs, past the call's deadline. The socket and clock are stand-ins: no time passes.
        now = [0.0]

        class Trickling:  # each byte arrives 0.4 time-outs after the one before
            def __init__(self) -> None:
                self.sent, self.waits, self.timeout = b"", 0, 1.0

            def __enter__(self) -> Trickling:
                return self

            def __exit__(self, *exc_info: object) -> None:
                pass

            def sendall(self, data: bytes) -> None:
                self.sent += data

            def settimeout(self, timeout: float) -> None:
                self.timeout = timeout

            def recv(self, size: int) -> bytes:
                self.waits += 1
                if self.timeout < 0.4:
                    raise TimeoutError("timed out")
                now[0] += 0.4
                return b"HTTP/"[self.waits - 1 : self.waits]

        sock = Trickling()
        with (
            mock.patch.object(dc, "_connect_within", return_value=sock),
            mock.patch.object(
                dc, "time", mock.Mock(monotonic=lambda: now[0])
            ),  # this module's clock alone
            self.assertRaises(TimeoutError),
        ):
            dc._speaks_plain_http("127.0.0.1", 443, 1.0, lambda sock: None)
        self.assertEqual(sock.sent, b"OPTIONS * HTTP/1.0\r\n\r\n")
        self.assertEqual(
            sock.waits, 3, "two bytes in time, the third past the probe's one time-out"
        )

    def test_a_plain_server_that_hangs_up_on_a_first_request_costs_only_the_back_off(self) -> None:
        # Issue 30: a 503-then-200 call took 5.4 s, not 0.4 s: the probe's ClientHello, which has no
        # blank line, held by a server waiting for a request's head, for 5 s before the retry.
        url, seen = head_server(self, hang_up, answer(503), answer(200, b'["ok"]'))
        started = time.monotonic()
        self.assertEqual(self.client(url, backoff_factor=0.1).list_datasets(), ["ok"])
        elapsed = time.monotonic() - started
        self.assertEqual([line for line in seen if line != "TLS"], ["GET /datasets HTTP/1.1"] * 3)
        self.assertLessEqual(seen.count("TLS"), 1, "one probe at most: the origin never answered")
        self.assertLess(elapsed, 0.1 + 0.2 + 1, "the probe spends the back-off (0.3 s at most)")

    def test_the_scheme_probe_ends_by_the_deadline(self) -> None:
        # Issue 30: deadline=3 ended at 5.8 s, the probe waiting min(timeout, 5 s) after a hang-up.
        def late_hang_up(head: str, connection: socket.socket) -> bool:
            time.sleep(0.3)
            return False

        url, seen = head_server(self, late_hang_up)
        probes, speaks_tls = [], dc._speaks_tls

        def recorded(host: str, port: int, timeout: float, hold: Any) -> bool:
            probes.append(time.monotonic() + timeout)  # when its wait would end
            return speaks_tls(host, port, timeout, hold)

        started = time.monotonic()
        with mock.patch.object(dc, "_speaks_tls", recorded):
            error = outcome_of(self.client(url, deadline=0.5, max_retries=0).list_datasets)
        self.assertIsInstance(error, dc.RequestTimeoutError)
        self.assertRegex(str(error), r"^GET \S+/datasets: the deadline of 0\.5 s was reached")
        self.assertEqual(len(probes), 1)
        self.assertLessEqual(probes[0], started + 0.5 + 0.05, "its wait ends by the deadline")
        self.assertLess(time.monotonic() - started, 0.5 + 1)
        self.assertEqual(seen, ["GET /datasets HTTP/1.1", "TLS"])
        # A back-off past the deadline is not waited for: nor is it spent probing.
        url, seen = head_server(self, hang_up)
        started = time.monotonic()
        client = self.client(url, deadline=1, backoff_factor=10)
        self.assertIsInstance(outcome_of(client.list_datasets), dc.RequestTimeoutError)
        self.assertLess(time.monotonic() - started, 0.5, "at once")
        self.assertEqual(seen, ["GET /datasets HTTP/1.1"])

    def test_the_scheme_probe_runs_once_per_origin_and_never_once_it_answered(self) -> None:
        url, seen = head_server(self, hang_up, hang_up, answer(200), refuse_tls=True)
        self.assertEqual(self.client(url, backoff_factor=0.1).list_datasets(), [])
        request = "GET /datasets HTTP/1.1"
        self.assertEqual(seen, [request, "TLS", request, request])
        # An origin that answered in its scheme: a later new connection's hang-up is a plain retry.
        closing = answer(200, headers="Connection: close\r\n")
        url, seen = head_server(self, closing, hang_up, answer(200))
        client = self.client(url, backoff_factor=0.1)
        self.assertEqual((client.list_datasets(), client.list_datasets()), ([], []))
        self.assertEqual(seen, [request] * 3, "no probe")

    def test_a_failing_part_or_ctrl_c_starts_no_probe(self) -> None:
        # Issue 30: the parts whose connections a failing part (or Ctrl-C) shut probed for 5 s.
        for raised in (RuntimeError("the progress callback failed"), KeyboardInterrupt()):
            with self.subTest(raised=type(raised).__name__):
                self.stop_a_parallel_download(raised)

    def stop_a_parallel_download(self, raised: BaseException) -> None:
        """A download on two connections whose first part raises ``raised`` (from its progress
        callback) while the second part's request waits for its answer."""
        ranged = threading.Event()

        def whole(head: str, connection: socket.socket) -> bool:
            fields = f'Content-Length: {4 * 1024 * 1024}\r\nAccept-Ranges: bytes\r\nETag: "v1"\r\n'
            connection.sendall(f"HTTP/1.1 200 OK\r\n{fields}\r\n".encode())
            ranged.wait(5)
            connection.sendall(bytes(1024 * 1024))  # a chunk: the progress callback is called
            return hold(head, connection)

        def part(head: str, connection: socket.socket) -> bool:
            ranged.set()
            return hold(head, connection)

        def progress(done: int, total: int | None) -> None:
            if done:
                raise raised

        url, seen = head_server(self, whole, part)
        out = self.tmp() / "out.bin"
        started = time.monotonic()
        client = self.client()
        url += "/f"
        error = outcome_of(lambda: client.download(url, out, connections=2, progress=progress))
        self.assertIs(error, raised)
        self.assertLess(time.monotonic() - started, 2, "the part stopped at once")
        self.assertEqual(seen, ["GET /f HTTP/1.1"] * 2, "no probe")
        self.assertEqual(list(out.parent.iterdir()), [])


# ---------------------------------------------------------------------------
# The operations on the wire: list_datasets, query, create_export (and their arguments)
# ---------------------------------------------------------------------------


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


class BytesPath:
    """A path-like object whose path is bytes."""

    def __fspath__(self) -> bytes:
        return b"out.bin"


def _python_version() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])


# ---------------------------------------------------------------------------
# The request path: errors, and the secrets a server echoes into them
# ---------------------------------------------------------------------------


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
            cwd=HERE,
            timeout=30,
        )
        self.assertEqual((done.stdout, done.stderr), ("[{'name': 'daily_bars'}]\n[]\n", ""))
        self.assertEqual([(r.method, r.path) for r in self.requests], [("GET", "/datasets")])


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


class HostileServerSecretTests(ServerTestCase):
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
                _wait_for(
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


# ---------------------------------------------------------------------------
# The request path: redirects
# ---------------------------------------------------------------------------


def secrets_in_frames(error: BaseException, *secrets: str) -> list[str]:
    """Where a secret shows in the repr of a local of a frame below the test's own (``error``'s and its
    causes'), as traceback's capture_locals=True shows them (which must not fail), or in their fields."""
    found = []
    for summary in traceback.TracebackException.from_exception(error, capture_locals=True).stack:
        if summary.filename != __file__:  # the test's own frames hold what it passed
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
            if frame.f_code.co_filename != __file__
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
EXPORT_V = ["export", "trades", "--symbols", "V", "--start", "2024-01-02", "--end", "2024-01-03"]
SIGNED_QUERY = "&".join(f"{name}={value}" for name, value in SIGNED.items())
SIGNED_SHOWN = "&".join(f"{name}=<redacted>" for name in SIGNED)
S3_EXPIRED = b"""<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>AccessDenied</Code><Message>Request has expired</Message>
<X-Amz-Expires>60</X-Amz-Expires><Expires>2024-01-01T00:01:00Z</Expires>
<ServerTime>2024-01-01T09:00:00Z</ServerTime></Error>"""


def signed_values_in(texts: list[str]) -> list[str]:
    """The values of SIGNED (as sent, and decoded) that show in ``texts``."""
    values = [form for value in SIGNED.values() for form in (value, urllib_parse.unquote(value))]
    return [value for value in values for text in texts if value in text]


class SecondReviewSecretTests(ServerTestCase):
    """Issue 23's second review: no key in a URL shown, in a traceback's locals, in any form a server echoes."""

    def run_cli(self, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        stdout, stderr = io.StringIO(), io.StringIO()
        with (
            mock.patch.dict(os.environ, {"DATASET_CLIENT_API_KEY": KEY, **(env or {})}),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            status = cli.main(["--base-url", self.server.url + "/api/v1", "--retries", "0", *argv])
        return status, stdout.getvalue(), stderr.getvalue()

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
        self.assertFalse(client._secrets.found_in(url))

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


class RedirectTests(ServerTestCase):
    def test_same_origin_redirect_keeps_credentials(self) -> None:
        self.script(reply(302, b"", {"Location": "/api/v2/datasets"}), reply(body=["d"]))
        self.assertEqual(self.client(headers={"X-Tenant": "t1"}).list_datasets(), ["d"])
        second = self.requests[1]
        self.assertEqual(second.path, "/api/v2/datasets")
        self.assertEqual(second.headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(second.headers["X-Tenant"], "t1")
        self.assertEqual(self.server.connections, 1, "the redirect's connection was reused")

    def test_credentials_never_follow_a_redirect_to_another_origin(self) -> None:
        other = self.start_server()
        other.script.append(reply(302, b"", {"Location": self.server.url + "/api/v1/back"}))
        self.script(
            reply(307, b"", {"Location": other.url + "/elsewhere"}), reply(body={"ok": True})
        )
        client = self.client(headers={"X-Tenant": "t1"})
        self.assertEqual(client.query("SELECT 1"), {"ok": True})
        (elsewhere,) = other.requests
        self.assertEqual((elsewhere.method, elsewhere.path), ("POST", "/elsewhere"))
        self.assertEqual(elsewhere.json(), {"sql": "SELECT 1"})
        self.assertNotIn("Authorization", elsewhere.headers)
        self.assertNotIn("X-Tenant", elsewhere.headers)
        self.assertEqual(elsewhere.headers["Accept"], "application/json")
        back = self.requests[1]
        self.assertEqual(back.path, "/api/v1/back")
        self.assertNotIn(
            "Authorization", back.headers, "once it left the origin, the key stays off"
        )

    def test_method_on_each_redirect_status(self) -> None:
        for status, method, has_body in (
            (301, "GET", False),
            (302, "GET", False),
            (303, "GET", False),
            (307, "POST", True),
            (308, "POST", True),
        ):
            self.server.requests.clear()
            self.script(reply(status, b"", {"Location": "/api/v1/next"}), reply(body={}))
            with self.subTest(status=status):
                self.client().query("SELECT 1")
                self.assertEqual(self.requests[1].method, method)
                self.assertEqual(bool(self.requests[1].body), has_body)
                self.assertEqual("Content-Type" in self.requests[1].headers, has_body)

    def test_redirect_to_other_schemes_is_refused(self) -> None:
        for location in ("ftp://127.0.0.1/x", "file:///etc/passwd", "data:,x"):
            self.script(reply(302, b"", {"Location": location}))
            with (
                self.subTest(location=location),
                self.assertRaisesRegex(dc.InvalidResponseError, "redirect"),
            ):
                self.client().list_datasets()

    def test_redirect_loop_stops(self) -> None:
        self.server.default = reply(302, b"", {"Location": "/api/v1/datasets"})
        with self.assertRaises(ServiceError) as caught:
            self.client().list_datasets()
        self.assertEqual(caught.exception.status, 302)
        self.assertIn("redirects", str(caught.exception))
        self.assertEqual(len(self.requests), 11)

    def test_a_3xx_left_is_an_error(self) -> None:
        self.script(reply(304, b""), reply(300, b"{}"))
        client = self.client()
        for status in (304, 300):
            with self.assertRaises(ServiceError) as caught:
                client.list_datasets()
            self.assertEqual(caught.exception.status, status)


# ---------------------------------------------------------------------------
# The request path: retries
# ---------------------------------------------------------------------------


class RetryTests(ServerTestCase):
    def test_get_retries_retryable_statuses(self) -> None:
        for status in (429, 502, 503, 504):
            self.server.requests.clear()
            self.script(reply(status, {}), reply(body=["ok"]))
            with self.subTest(status=status), recorded_sleeps() as sleeps:
                self.assertEqual(self.client().list_datasets(), ["ok"])
                self.assertEqual(len(self.requests), 2)
                self.assertEqual(len(sleeps), 1)

    def test_get_does_not_retry_other_errors(self) -> None:
        for status in (400, 401, 404, 500, 501):
            self.server.requests.clear()
            self.script(reply(status, {}))
            with self.subTest(status=status), self.assertRaises(ServiceError):
                self.client().list_datasets()
            self.assertEqual(len(self.requests), 1)

    def test_posts_retry_only_what_was_not_acted_on(self) -> None:
        for status, retried in ((429, True), (503, True), (502, False), (504, False), (500, False)):
            self.server.requests.clear()
            self.script(reply(status, {}), reply(body={"ok": True}))
            with self.subTest(status=status):
                client = self.client()
                if retried:
                    self.assertEqual(client.query("SELECT 1"), {"ok": True})
                else:
                    with self.assertRaises(ServiceError):
                        client.query("SELECT 1")
                    self.server.script.clear()
                self.assertEqual(len(self.requests), 2 if retried else 1)

    def test_posts_are_not_retried_after_a_reset_or_timeout(self) -> None:
        for fault in (reset, drop, hang):
            self.server.requests.clear()
            self.script(fault, reply(body={}))
            with self.subTest(fault=fault.__name__), self.assertRaises(dc.DatasetClientError):
                self.client(timeout=0.15).query("SELECT 1")
            self.server.script.clear()
            self.assertEqual(len(self.requests), 1)

    def test_get_retries_transport_failures(self) -> None:
        self.script(reset, hang, cut(b'{"a": 1}', 3), reply(body={"a": 1}))
        with recorded_sleeps() as sleeps:
            self.assertEqual(self.client(timeout=0.15, max_retries=3).list_datasets(), {"a": 1})
        self.assertEqual(len(self.requests), 4)
        self.assertEqual(len(sleeps), 3)

    def test_failure_to_connect_is_retried_for_any_method(self) -> None:
        client = self.client(f"http://127.0.0.1:{free_port()}", max_retries=2)
        with self.assertRaises(dc.NetworkError) as caught:
            client.query("SELECT 1")
        self.assertEqual(caught.exception.attempts, 3)
        self.assertIn("(after 3 attempts)", str(caught.exception))

    def test_exhausted_retries_raise_the_last_failure(self) -> None:
        self.script(
            reply(503, {"message": "a"}), reply(503, {"message": "b"}), reply(503, {"message": "c"})
        )
        client = self.client(max_retries=2, backoff_factor=1.0)
        with recorded_sleeps() as sleeps, self.assertRaises(ServiceError) as caught:
            client.list_datasets()
        self.assertEqual(
            str(caught.exception),
            f"503 Service Unavailable: GET {self.server.url}/api/v1/datasets: c (after 3 attempts)",
        )
        self.assertEqual(len(self.requests), 3)
        # exponential back-off with jitter: in [d/2, d] for d = 1, 2
        self.assertTrue(0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0, sleeps)

    def test_max_retries_zero_disables_retries(self) -> None:
        self.script(reply(503, {}), reply(body=[]))
        with self.assertRaises(ServiceError):
            self.client(max_retries=0).list_datasets()
        self.assertEqual(len(self.requests), 1)
        self.server.script.clear()

    def test_retry_after(self) -> None:
        when = email_date(time.time() + 30)
        self.script(
            reply(429, {}, {"Retry-After": "7"}),
            reply(503, {}, {"Retry-After": when}),
            reply(body=[]),
        )
        with recorded_sleeps() as sleeps:
            self.client(max_retries=3).list_datasets()
        self.assertEqual(sleeps[0], 7.0)
        self.assertTrue(25 <= sleeps[1] <= 30, sleeps)

    def test_retry_after_over_a_minute_is_not_waited_for(self) -> None:
        self.script(reply(503, {}, {"Retry-After": "120"}), reply(body=[]))
        with recorded_sleeps() as sleeps, self.assertRaises(ServiceError) as caught:
            self.client().list_datasets()
        self.assertEqual(caught.exception.retry_after, 120.0)
        self.assertEqual((sleeps, len(self.requests)), ([], 1))
        self.server.script.clear()

    def test_idempotency_key_is_kept_across_retries(self) -> None:
        self.script(reply(503, {}), reply(429, {}), reply(201, {"id": "e1"}))
        client = self.client(max_retries=2)
        self.assertEqual(
            client.create_export("d", symbols="A", start_date="2024-01-01", end_date="2024-01-02"),
            {"id": "e1"},
        )
        keys = {r.headers["Idempotency-Key"] for r in self.requests}
        self.assertEqual(len(self.requests), 3)
        self.assertEqual(len(keys), 1)

    def test_each_retry_says_why_how_long_and_how_many_are_left(self) -> None:
        # Issue 30: "retrying GET URL in 0.93 s (attempt 1 failed: ...)" said not what was left.
        self.script(reply(503, {}), reply(502, {"message": "upstream down"}), reply(body=[]))
        with (
            recorded_sleeps() as sleeps,
            mock.patch.object(dc.random, "uniform", lambda low, high: high),  # no jitter
            self.assertLogs("dataset_client", level="WARNING") as logs,
        ):
            self.client(backoff_factor=1.0, max_retries=3).list_datasets()
        url = f"{self.server.url}/api/v1/datasets"
        self.assertEqual(
            [record.getMessage() for record in logs.records],
            [
                f"retrying in 1.0 s (3 attempts left): 503 Service Unavailable: GET {url}",
                f"retrying in 2.0 s (2 attempts left): 502 Bad Gateway: GET {url}: upstream down",
            ],
        )
        self.assertEqual(sleeps, [1.0, 2.0])
        self.assertEqual(len(self.requests), 3)

    def test_a_download_that_cannot_connect_again_never_says_it_resumes(self) -> None:
        # Issue 30: "resuming at 1.4 MiB" was said before each attempt, though none connected.
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"

        def serve_once() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                fields = f'Content-Length: {len(DATA)}\r\nAccept-Ranges: bytes\r\nETag: "v1"\r\n'
                connection.sendall(f"HTTP/1.1 200 OK\r\n{fields}\r\n".encode() + DATA[:1_500_000])
                listener.close()  # before the cut: every later connect is refused

        thread = threading.Thread(target=serve_once, daemon=True)
        thread.start()
        out = self.tmp() / "out.bin"
        with (
            self.assertLogs("dataset_client", level="INFO") as logs,
            self.assertRaises(dc.NetworkError) as caught,
        ):
            self.client(max_retries=2).download(url, out, resume=True)
        thread.join(5)
        self.assertEqual(caught.exception.attempts, 3)
        cut_off = f"connection closed after 1500000 of {len(DATA)} bytes"
        refused = "could not connect: [Errno 111] Connection refused"
        self.assertEqual(
            [record.getMessage() for record in logs.records],
            [
                f"retrying in 0.0 s (2 attempts left): GET {url}: {cut_off}",
                f"retrying in 0.0 s (1 attempt left): GET {url}: {refused}",
            ],
        )
        kept = (out.parent / ".out.bin.part").stat().st_size
        self.assertEqual(kept, 1_500_000, "kept for the next run")
        # A retry that gets its bytes back says it resumes, once, after the retry's line.
        self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}), serve_file(DATA))
        with self.assertLogs("dataset_client", level="INFO") as logs:
            self.client().download("files/x", out)
        self.assertEqual(out.read_bytes(), DATA)
        resumed = f"resuming at 1.4 MiB of 3.0 MiB after an interruption, GET {self.server.url}"
        said = [record.getMessage() for record in logs.records]
        self.assertEqual(said[1:], [resumed + "/api/v1/files/x"], "after the retry's line")


# ---------------------------------------------------------------------------
# The request path: connections kept, forked and closed; and a hostile server's answers, never silently
# wrong (framing, bodies, redirects, a POST's retries, resumed parts, the key in no frame)
# ---------------------------------------------------------------------------


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

    def test_audit_hooks_see_each_request_as_urllib_shows_it(self) -> None:
        # Without a proxy the client hands requests to its pool itself: the opener's event stays.
        self.server.default = reply(body=[])
        program = (
            "import sys, dataset_client as dc\n"
            "sys.addaudithook(lambda event, args: event == 'urllib.Request' and print(args[::3]))\n"
            f"dc.DatasetClient({self.server.url + '/api'!r}).query('SELECT 1')\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", program], cwd=HERE, capture_output=True, text=True, timeout=60
        )
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        self.assertEqual(done.stdout, f"('{self.server.url}/api/query', 'POST')\n")
        self.assertEqual(self.requests[-1].method, "POST")

    def test_many_calls_one_connection(self) -> None:
        self.server.default = reply(body=[1])
        client = self.client()
        for _ in range(20):
            client.list_datasets()
            client.query("SELECT 1")
        client.download("files/x", io.BytesIO())
        self.assertEqual(len(self.requests), 41)
        self.assertEqual(self.server.connections, 1)

    def test_connection_closed_by_the_server_while_idle_is_replaced(self) -> None:
        def reply_then_close(handler: Handler) -> None:
            reply(body=[1])(handler)
            handler.close_connection = True  # closes without saying so

        self.script(reply_then_close, reply(body=[2]), reply(body=[3]))
        client = self.client(max_retries=0)
        self.assertEqual(client.list_datasets(), [1])
        _wait_for(lambda: self.server.closed_connections == 1)
        self.assertEqual(
            client.query("SELECT 1"), [2]
        )  # a POST: it must not be sent on the dead one
        self.assertEqual(client.list_datasets(), [3])
        self.assertEqual(self.server.connections, 2)
        self.assertEqual(len(self.requests), 3)

    def test_stale_connection_is_retried_once_for_get(self) -> None:
        self.script(reply(body=[1]), drop, reply(body=[2]))
        client = self.client(max_retries=0)
        self.assertEqual(client.list_datasets(), [1])
        self.assertEqual(client.list_datasets(), [2])
        self.assertEqual(self.server.connections, 2)

    def test_connection_close_is_honoured(self) -> None:
        self.server.default = reply(body=[], headers={"Connection": "close"})
        client = self.client()
        client.list_datasets()
        client.list_datasets()
        self.assertEqual(self.server.connections, 2)

    def test_informational_responses_are_skipped(self) -> None:
        def early_hints(handler: Handler) -> None:
            handler.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
            reply(body={"ok": 1})(handler)

        self.script(early_hints, reply(body={"ok": 2}))
        client = self.client()
        self.assertEqual(client.list_datasets(), {"ok": 1})
        self.assertEqual(client.list_datasets(), {"ok": 2})
        self.assertEqual(self.server.connections, 1, "a 1xx leaves the connection reusable")

    def test_threads_share_one_client(self) -> None:
        def echo(handler: Handler) -> None:
            reply(body={"path": handler.path})(handler)

        self.server.default = echo
        client = self.client()
        results: list[bool] = []

        def work(n: int) -> None:
            for _ in range(15):
                results.append(client.query(f"SELECT {n}") == {"path": "/api/v1/query"})

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(results, [True] * 90)
        self.assertEqual(
            sorted(r.json()["sql"] for r in self.requests),
            sorted(f"SELECT {n}" for n in range(6) for _ in range(15)),
        )
        self.assertLessEqual(self.server.connections, 6)

    def test_close_closes_the_connections(self) -> None:
        self.server.default = reply(body=[])
        client = self.client()
        client.list_datasets()
        self.assertEqual(self.server.closed_connections, 0)
        client.close()
        _wait_for(lambda: self.server.closed_connections == 1)


# Beyond one process: a client forked under a reading thread, pickled, copied, handed to other processes
class BeyondOneProcessTests(ServerTestCase):
    def test_fork_while_another_thread_reads_a_response_returns_at_once_in_the_child(self) -> None:
        body, go_on = b"x" * 1000, threading.Event()

        def trickle(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body[:10])
            handler.wfile.flush()
            go_on.wait(10)
            handler.wfile.write(body[10:])

        self.script(trickle, reply(body=["after"]))
        client, sink = self.client(), io.BytesIO()
        reading = threading.Thread(target=client.download, args=("files/x", sink))
        reading.start()
        self.addCleanup(reading.join, 10)
        self.addCleanup(go_on.set)
        _wait_for(
            lambda: _blocked_in_a_socket_read(reading)
        )  # its buffered reader's lock is held now
        pid = _fork_quietly()
        if pid == 0:  # the child: leave at once, never returning into the test runner
            os._exit(0)
        self.assertEqual(
            _wait_for_child(pid, 5), 0, "the child hung in fork() on the reading thread's lock"
        )
        go_on.set()
        reading.join(10)
        self.assertEqual(sink.getvalue(), body, "the parent's read went on, its socket left open")
        self.assertEqual(client.list_datasets(), ["after"])
        self.assertEqual([r.connection for r in self.requests], [1, 1])

    def test_a_pickled_or_copied_client_has_the_same_settings_and_connections_of_its_own(
        self,
    ) -> None:
        def echo(handler: Handler) -> None:
            reply(body={"connection": handler.connection_number})(handler)

        self.server.default = echo
        client = self.client(
            timeout=7, max_retries=3, headers={"X-Team": "blue"}, user_agent="fan/1", deadline=60
        )
        self.assertEqual(client.list_datasets(), {"connection": 1})
        ways = {
            "pickle": lambda c: pickle.loads(pickle.dumps(c)),
            "copy": copy.copy,
            "deepcopy": copy.deepcopy,
        }
        for number, (way, make) in enumerate(ways.items(), start=2):
            with self.subTest(way=way):
                other = make(client)
                self.addCleanup(other.close)
                self.assertIsInstance(other, DatasetClient)
                self.assertIsNot(other._pool, client._pool)
                self.assertEqual(
                    other.list_datasets(), {"connection": number}, "a connection of its own"
                )
                sent = self.requests[-1].headers
                self.assertEqual(
                    (
                        sent["Authorization"],
                        sent["X-Team"],
                        sent["User-Agent"],
                        self.requests[-1].path,
                    ),
                    (f"Bearer {KEY}", "blue", "fan/1", "/api/v1/datasets"),
                )
                settings = (
                    other.base_url,
                    other._timeout,
                    other._max_retries,
                    other._backoff_factor,
                    other._deadline,
                )
                self.assertEqual(settings, (self.server.url + "/api/v1", 7.0, 3, 0.001, 60.0))
                self.assertNotIn(KEY, repr(vars(other)))
        self.assertEqual(client.list_datasets(), {"connection": 1}, "the original kept its own")
        self.assertEqual(self.server.connections, 4)

    def test_a_closed_client_pickles_and_copies_closed(self) -> None:
        client = self.client()
        client.close()
        for other in (pickle.loads(pickle.dumps(client)), copy.copy(client), copy.deepcopy(client)):
            with self.assertRaises(dc.ClientClosedError):
                other.list_datasets()
            self.assertEqual(
                repr(other), f"<DatasetClient {self.server.url + '/api/v1'!r} (closed)>"
            )
        self.assertEqual((self.requests, self.server.connections), ([], 0))

    def test_a_caller_s_ssl_context_cannot_be_pickled_but_is_shared_by_copies(self) -> None:
        context = ssl.create_default_context(cafile=CA_FILE)
        client = self.client(ssl_context=context)
        message = (
            "a DatasetClient given an ssl_context cannot be pickled (an SSLContext cannot): pass"
            " ca_bundle=FILE instead of the context, or build the client in the worker"
        )
        with self.assertRaisesRegex(TypeError, f"^{re.escape(message)}$"):
            pickle.dumps(client)
        for other in (copy.copy(client), copy.deepcopy(client)):
            self.addCleanup(other.close)
            self.assertIs(other._pool._ssl_context, context)

    def use_an_empty_system_store(self) -> None:
        """No CA but the test's (and no 0.2 s a context spent loading the system's hundreds)."""
        for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            os.environ.pop(name, None)
        os.environ["SSL_CERT_FILE"] = str(self.tmp() / "none.pem")
        os.environ["SSL_CERT_DIR"] = str(self.tmp())

    def test_ca_bundle_trusts_its_file_or_directory_and_survives_pickling(self) -> None:
        self.use_an_empty_system_store()
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        with self.assertRaises(dc.NetworkError):  # the test CA is in no store but the bundle
            self.client(tls.url, max_retries=0).list_datasets()
        bundles = [CA_FILE, Path(CA_FILE)]
        if shutil.which("openssl"):
            bundles.append(self.hashed_directory())
        for bundle in bundles:
            with self.subTest(bundle=bundle):
                client = self.client(tls.url, ca_bundle=bundle)
                self.assertEqual(client.list_datasets(), {"tls": True})
                unpickled = pickle.loads(pickle.dumps(client))
                self.addCleanup(unpickled.close)
                self.assertEqual(unpickled.list_datasets(), {"tls": True})
        self.assertEqual([r.path for r in tls.requests], ["/datasets"] * 2 * len(bundles))

    def test_a_client_unpickled_without_its_ca_bundle_fails_at_its_first_request(self) -> None:
        # Found in review3: unpickling ran the constructor, so a worker without the bundle raised in
        # pickle.loads; Dask's worker logged the pickle (key included) and left the cluster.
        self.use_an_empty_system_store()
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        bundle = self.tmp() / "corp.pem"
        shutil.copy(CA_FILE, bundle)
        pickled = pickle.dumps(self.client(tls.url, ca_bundle=bundle))
        bundle.rename(bundle.with_suffix(".away"))  # as a worker without it sees it
        unpickled = pickle.loads(pickled)
        self.addCleanup(unpickled.close)
        passed_on = pickle.loads(pickle.dumps(unpickled))  # to another worker: still named
        self.addCleanup(passed_on.close)
        named = f"^ca_bundle names {re.escape(str(bundle))}, which is not a file or directory of"
        for client in (unpickled, passed_on):
            with self.assertRaisesRegex(FileNotFoundError, named):
                client.list_datasets()
        self.assertEqual((tls.requests, tls.connections), ([], 0))
        bundle.with_suffix(".away").rename(bundle)
        self.assertEqual(unpickled.list_datasets(), {"tls": True}, "read once it is there")
        self.assertEqual(passed_on.list_datasets(), {"tls": True})
        self.assertEqual([r.headers["Authorization"] for r in tls.requests], [f"Bearer {KEY}"] * 2)
        missing = self.tmp() / "missing.pem"
        with self.assertRaisesRegex(FileNotFoundError, re.escape(f"ca_bundle names {missing},")):
            DatasetClient(tls.url, KEY, ca_bundle=missing)  # made here: at construction

    def test_an_unreadable_ca_bundle_is_its_readers_error_at_construction_naming_it(self) -> None:
        self.use_an_empty_system_store()
        missing, not_pem = self.tmp() / "corp.pem", self.tmp() / "notes.txt"
        not_pem.write_text("no certificate here\n")
        with self.assertRaisesRegex(
            FileNotFoundError, f"^ca_bundle names {re.escape(str(missing))}, which is not a"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle=missing)
        with self.assertRaisesRegex(
            ssl.SSLError, f"^ca_bundle names {re.escape(str(not_pem))}, which is not a"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle=str(not_pem))
        with self.assertRaisesRegex(
            FileNotFoundError, "^ca_bundle is empty: name a file or directory of PEM CA"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle="")
        with self.assertRaisesRegex(
            TypeError, r"^ca_bundle must be a path \(str or os.PathLike\), not bytes$"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle=CA_FILE.encode())  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "^ca_bundle and ssl_context cannot both be given"):
            DatasetClient(
                self.server.url, KEY, ca_bundle=CA_FILE, ssl_context=ssl.create_default_context()
            )
        self.assertEqual(self.requests, [])

    def test_a_process_pool_s_workers_use_the_client_on_connections_of_their_own(self) -> None:
        # fork here (fast); .ci/process_checks.py runs spawn and forkserver too.
        def echo(handler: Handler) -> None:
            answer = {
                "sql": json.loads(handler.body)["sql"],
                "connection": handler.connection_number,
            }
            reply(body=answer)(handler)

        self.server.default = echo
        client = self.client()
        self.assertEqual(
            client.query("SELECT 'parent'"), {"sql": "SELECT 'parent'", "connection": 1}
        )
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", DeprecationWarning
            )  # 3.12+: fork() with threads running
            context = multiprocessing.get_context("fork")
            with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
                answers = list(
                    pool.map(client.query, [f"SELECT {n}" for n in range(4)], timeout=30)
                )
        self.assertEqual([answer["sql"] for answer in answers], [f"SELECT {n}" for n in range(4)])
        self.assertEqual(
            sorted(answer["connection"] for answer in answers), [2, 3, 4, 5], "a connection each"
        )
        self.assertEqual(client.query("SELECT 'parent again'")["connection"], 1)
        self.assertEqual({r.headers["Authorization"] for r in self.requests}, {f"Bearer {KEY}"})

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
        _wait_for(lambda: len(self.requests) == 64)
        client.close()
        for thread in threads:
            thread.join(10)
        self.assertEqual(
            {type(outcome) for outcome in outcomes} - {dc.NetworkError}, {dc.ClientClosedError}
        )
        self.assertEqual(len(outcomes), 64, "every call ended, long before its 30 s time-out")
        _wait_for(lambda: sockets() <= descriptors)  # none of its own left: the server's ends too

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

    def test_no_form_of_the_key_shows_in_vars_of_a_client_made_or_unpickled(self) -> None:
        key = (
            "sk/test+0123456789"  # percent-encoded and JSON-escaped ("\\/") forms are redacted too
        )
        self.script(reply(400, {"message": f"bad key {key} sk%2Ftest%2B0123456789"}))
        client = self.client(api_key=key, headers={"X-Token": "header-secret"})
        for made in (client, pickle.loads(pickle.dumps(client))):
            self.addCleanup(made.close)
            shown = repr(vars(made))
            for form in (key, "sk%2Ftest%2B0123456789", "sk\\/test+0123456789", "header-secret"):
                self.assertNotIn(form, shown)
        with self.assertRaises(dc.ServiceError) as caught:
            client.list_datasets()
        self.assertIn(
            ": bad key <redacted> <redacted>",
            str(caught.exception),
            "still redacted where it is echoed",
        )
        self.assertEqual(self.requests[0].headers["Authorization"], f"Bearer {key}")

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
        _wait_for(lambda: bool(self.requests) and _blocked_in_a_socket_read(reading))
        client.close()
        reading.join(5)
        self.assertEqual(
            [type(error) for error in outcome],
            [dc.ClientClosedError],
            "ended before the server went on",
        )
        self.assertEqual([r.path for r in self.requests], ["/api/v1/files/x"])

    def test_a_relative_ca_bundle_is_found_by_a_copy_unpickled_in_another_directory(self) -> None:
        self.use_an_empty_system_store()
        here, elsewhere = self.tmp(), self.tmp()
        shutil.copy(CA_FILE, here / "corp.pem")
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        with contextlib.chdir(here):
            client = self.client(tls.url, ca_bundle="corp.pem")
        pickled = pickle.dumps(client)
        with contextlib.chdir(elsewhere):  # a process pool's or Dask's worker, started elsewhere
            unpickled = pickle.loads(pickled)
            self.addCleanup(unpickled.close)
            self.assertEqual(
                unpickled.list_datasets(),
                {"tls": True},
                "the copy trusts the bundle from elsewhere",
            )
        self.assertEqual(
            [r.path for r in tls.requests], ["/datasets"], "the server saw the copy's request"
        )
        self.assertEqual(
            unpickled._pool._ssl_context.cert_store_stats()["x509_ca"], 1, "the test CA alone"
        )
        self.assertTrue(os.path.isabs(unpickled._arguments["ca_bundle"]))
        self.assertTrue(os.path.samefile(unpickled._arguments["ca_bundle"], here / "corp.pem"))

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
    spec = importlib.util.spec_from_file_location(name, HERE / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _blocked_in_a_socket_read(thread: threading.Thread) -> bool:
    """True when ``thread`` waits in socket.SocketIO.readinto (under a BufferedReader, its lock held)."""
    frame = sys._current_frames().get(thread.ident or 0)
    return (
        frame is not None
        and frame.f_code.co_name == "readinto"
        and frame.f_code.co_filename == socket.__file__
    )


def _fork_quietly() -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads running
        return os.fork()


def _wait_for_child(pid: int, seconds: float) -> int | None:
    """The child's exit status, or None (and the child killed) when it has not ended in ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


class HostileServerTests(ServerTestCase):
    def test_any_number_of_dead_idle_connections_end_in_a_fresh_one(self) -> None:
        # Three kept-alive connections a NAT dropped: they still poll as open, then reset on the next request.
        together = threading.Barrier(3)

        def respond(handler: Handler) -> None:
            if handler.connection_number > 3:
                reply(body=["fresh"])(handler)
            elif handler.handled == 1:
                together.wait(5)  # three calls at once: three connections in the pool afterwards
                reply(body=["warm"])(handler)
            else:
                reset(handler)

        self.server.default = respond
        client = self.client(max_retries=0)
        threads = [threading.Thread(target=client.list_datasets) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        self.assertEqual(client.list_datasets(), ["fresh"])
        self.assertEqual(
            client.query("SELECT 1"), ["fresh"], "a POST never meets the other dead ones"
        )
        self.assertEqual(self.server.connections, 4)
        self.assertIn(self.requests[3].connection, (1, 2, 3))  # a dead one, reset
        self.assertEqual([r.connection for r in self.requests[4:]], [4, 4])

    def test_a_forked_child_never_uses_its_parents_connections(self) -> None:
        def echo(handler: Handler) -> None:
            reply(
                body={
                    "sql": json.loads(handler.body)["sql"],
                    "connection": handler.connection_number,
                }
            )(handler)

        self.server.default = echo
        client = self.client()
        self.assertEqual(
            client.query("SELECT 'parent'"), {"sql": "SELECT 'parent'", "connection": 1}
        )
        reader, writer = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", DeprecationWarning
            )  # 3.12+: fork() with threads running
            pid = os.fork()
        if (
            pid == 0
        ):  # the child: report what it got and leave, never returning into the test runner
            status = 1
            try:
                os.write(writer, json.dumps(client.query("SELECT 'child'")).encode())
                client.close()
                status = 0
            finally:
                os._exit(status)
        os.close(writer)
        with os.fdopen(reader, "rb") as pipe:
            child = json.loads(pipe.read() or b"null")
        self.assertEqual(os.waitpid(pid, 0)[1], 0)
        self.assertEqual(
            child,
            {"sql": "SELECT 'child'", "connection": 2},
            "the child opened a connection of its own",
        )
        again = client.query("SELECT 'parent again'")
        self.assertEqual(
            again,
            {"sql": "SELECT 'parent again'", "connection": 1},
            "the child's close() left it alone",
        )
        self.assertEqual(self.server.connections, 2)

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

    def test_a_post_a_redirect_turned_into_a_get_is_never_sent_again(self) -> None:
        for after_redirect in ("503", "refused"):
            self.server.requests.clear()
            target = (
                "/api/v1/result"
                if after_redirect == "503"
                else f"http://127.0.0.1:{free_port()}/result"
            )
            self.script(
                reply(303, b"", {"Location": target}),
                reply(503, {"message": "busy"}),
                reply(body={}),
            )
            with self.subTest(after_redirect=after_redirect), recorded_sleeps() as sleeps:
                with self.assertRaises(dc.DatasetClientError) as caught:
                    self.client(max_retries=3).query("SELECT 1")
                self.assertEqual([r.method for r in self.requests if r.method == "POST"], ["POST"])
                self.assertEqual(caught.exception.method, "GET")
                self.assertEqual((caught.exception.attempts, sleeps), (1, []))
            self.server.script.clear()

    def test_a_post_answered_307_then_503_is_retried(self) -> None:
        # 307 keeps the POST and a 503 says it was not acted on: the whole call is safe to repeat.
        self.script(reply(307, b"", {"Location": "/api/v1/q2"}), reply(503, {}))
        self.script(reply(307, b"", {"Location": "/api/v1/q2"}), reply(body={"ok": True}))
        with recorded_sleeps() as sleeps:
            self.assertEqual(self.client().query("SELECT 1"), {"ok": True})
        self.assertEqual(
            [(r.method, r.path) for r in self.requests],
            [("POST", "/api/v1/query"), ("POST", "/api/v1/q2")] * 2,
        )
        self.assertEqual(len(sleeps), 1)

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

    def test_malformed_or_credentialed_redirects_are_invalid_responses(self) -> None:
        for location in (
            "http://127.0.0.1:99999/x",
            "http://127.0.0.1:port/x",
            "http://[::1/x",
            "http://" + "a" * 64 + ".example/x",
            "http://exa\x80mple.test/x",
            "http://exa%80mple.test/x",
            f"http://user:pw@127.0.0.1:{self.server.server_port}/x",
        ):
            self.server.requests.clear()
            self.script(reply(302, b"", {"Location": location}))
            with (
                self.subTest(location=location),
                self.assertRaises(dc.InvalidResponseError) as caught,
            ):
                self.client().list_datasets()
            self.assertIn("redirect", str(caught.exception))
            self.assertNotIn("pw@", str(caught.exception))
            self.assertEqual(len(self.requests), 1, "neither followed nor retried")

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


# ---------------------------------------------------------------------------
# The request path: proxies, TLS, NO_PROXY, certificates
# ---------------------------------------------------------------------------


INVISIBLE = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u200c\u200d\u2060\ufeff\u2028\u2029"
RAW_INVISIBLE = re.compile(f"[{INVISIBLE}\ud800-\udfff]")  # what must not reach a terminal either


class SecondReviewHostileTextTests(ServerTestCase):
    """Server text never ends in a bare exception, nothing invisible reaches the terminal, and the user's
    own extreme settings get a clear error (the contract's second review)."""

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
                "a\\ud800\r\nx\\udfffy\r\n",
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
        self.assertEqual(out.split("\r\n")[1], f"{text},1")
        self.script(reply(403, {"message": text}))
        status, out, err = self.cli("datasets")
        self.assertEqual(status, 1)
        self.assertIsNone(RAW_INVISIBLE.search(err), repr(err))
        self.assertIn("denied\\u202e :ko\\u202a", err)
        self.assertTrue(
            err.endswith("\\u2060\\ufeff\n"), err[-40:]
        )  # the separators: whitespace in one line

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


class ProxyAndTLSTests(ServerTestCase):
    def test_http_proxy_and_no_proxy(self) -> None:
        proxy = self.start_proxy()
        os.environ["HTTP_PROXY"] = f"http://user:pa%40ss@127.0.0.1:{proxy.server_address[1]}"
        os.environ["NO_PROXY"] = ""
        self.script(reply(body=["via proxy"]), reply(body=["via proxy"]))
        client = self.client()
        self.assertEqual(client.list_datasets(), ["via proxy"])
        self.assertEqual(client.list_datasets(), ["via proxy"])
        self.assertEqual(proxy.lines[0], f"GET {self.server.url}/api/v1/datasets HTTP/1.1")
        self.assertEqual(proxy.proxy_authorizations[0], "Basic dXNlcjpwYUBzcw==")  # user:pa@ss
        self.assertEqual(self.requests[0].headers["Authorization"], f"Bearer {KEY}")
        self.assertNotIn("Proxy-Authorization", self.requests[0].headers)
        os.environ["NO_PROXY"] = " localhost , 127.0.0.1 ,"  # stray whitespace and an empty entry
        self.script(reply(body=["direct"]))
        self.assertEqual(self.client().list_datasets(), ["direct"])
        self.assertEqual(len(self.requests), 3)
        self.assertEqual(
            len(proxy.lines), 1, "one kept-alive connection to the proxy, none for the bypass"
        )

    def test_empty_proxy_variables_are_ignored(self) -> None:
        os.environ.update({"HTTP_PROXY": "", "HTTPS_PROXY": "", "NO_PROXY": ""})
        self.script(reply(body=[]))
        self.assertEqual(self.client().list_datasets(), [])

    def test_tls_with_a_given_context(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        context = ssl.create_default_context(cafile=CA_FILE)
        client = self.client(tls.url + "/api", ssl_context=context)
        self.assertEqual(client.list_datasets(), {"tls": True})
        self.assertEqual(client.list_datasets(), {"tls": True})
        self.assertEqual(tls.connections, 1)

    def test_tls_with_ssl_cert_file(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        os.environ["SSL_CERT_FILE"] = CA_FILE
        self.assertEqual(self.client(tls.url + "/api").list_datasets(), {"tls": True})
        (request,) = tls.requests
        self.assertEqual((request.method, request.path), ("GET", "/api/datasets"))
        self.assertEqual(request.headers["Authorization"], f"Bearer {KEY}")

    def test_untrusted_certificate_is_refused_and_not_retried(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={})
        os.environ.pop("SSL_CERT_FILE", None)
        os.environ.pop("SSL_CERT_DIR", None)
        system_only = ssl.create_default_context()  # the system's CAs: not the test CA
        with self.assertRaisesRegex(dc.NetworkError, "certificate verification failed") as caught:
            self.client(tls.url + "/api", ssl_context=system_only).list_datasets()
        self.assertEqual(caught.exception.attempts, 1)
        self.assertTrue(
            caught.exception.certificate
        )  # a field, for callers (and the CLI) to act on
        self.assertTrue(pickle.loads(pickle.dumps(caught.exception)).certificate)
        self.assertEqual(tls.requests, [])
        _wait_for(lambda: tls.tls_failures == 1)

    def test_https_through_a_connect_tunnel(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tunnel": True})
        proxy = self.start_proxy()
        os.environ["HTTPS_PROXY"] = f"http://127.0.0.1:{proxy.server_address[1]}"
        os.environ["NO_PROXY"] = "example.invalid"
        client = self.client(
            tls.url + "/api", ssl_context=ssl.create_default_context(cafile=CA_FILE)
        )
        self.assertEqual(client.list_datasets(), {"tunnel": True})
        self.assertEqual(client.list_datasets(), {"tunnel": True})
        self.assertEqual(len(proxy.lines), 1)
        self.assertRegex(proxy.lines[0], rf"^CONNECT 127\.0\.0\.1:{tls.server_port} HTTP/1\.[01]$")
        self.assertEqual(tls.requests[0].headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(tls.connections, 1)


class NoProxyTests(ServerTestCase):
    """NO_PROXY as requests and curl read it: each form checked by what the proxy received, or did not."""

    def setUp(self) -> None:
        super().setUp()
        self.proxy = self.start_proxy()
        os.environ["HTTP_PROXY"] = f"http://127.0.0.1:{self.proxy.server_address[1]}"

    def route(self, no_proxy: str, host: str = "127.0.0.1") -> str:
        """How one GET to the fixture server, named ``host``, went with this NO_PROXY: 'proxy' or 'direct'."""
        os.environ["NO_PROXY"] = no_proxy
        proxied, received = len(self.proxy.lines), len(self.requests)
        self.script(reply(body=["ok"]))
        url = f"http://{host}:{self.server.server_port}/api"
        self.assertEqual(self.client(url).list_datasets(), ["ok"])
        self.assertEqual(len(self.requests), received + 1)
        if len(self.proxy.lines) == proxied:
            return "direct"
        self.assertEqual(self.proxy.lines[-1], f"GET {url}/datasets HTTP/1.1")
        return "proxy"

    def assert_routes(self, host: str, expected: dict[str, str]) -> None:
        for no_proxy, route in expected.items():
            with self.subTest(no_proxy=no_proxy, host=host):
                self.assertEqual(self.route(no_proxy, host), route)

    def test_cidr_blocks_and_ip_addresses(self) -> None:
        self.assert_routes(
            "127.0.0.1",
            {
                "127.0.0.0/8": "direct",
                "10.0.0.0/8, 127.0.0.0/30": "direct",
                "127.0.0.1/8": "direct",  # host bits set: taken as its network, as requests does
                "127.0.0.2/31": "proxy",
                "10.0.0.0/8": "proxy",
                "::/0": "proxy",  # a v6 block never holds a v4 address
                "127.0.0.1": "direct",
                "127.0.0.10": "proxy",  # an address, never a string prefix
                "127.0.0": "proxy",
            },
        )

    def test_host_and_port(self) -> None:
        port = self.server.server_port
        self.assert_routes(
            "127.0.0.1", {f"127.0.0.1:{port}": "direct", f"127.0.0.1:{port + 1}": "proxy"}
        )
        self.assert_routes(
            "localhost", {f"localhost:{port}": "direct", f"LOCALHOST:{port + 1}": "proxy"}
        )

    def test_star_names_leading_dots_spaces_and_case(self) -> None:
        self.assert_routes("127.0.0.1", {"*": "direct", " * ": "direct", "example.com,*": "direct"})
        self.assert_routes(
            "localhost",
            {
                "LocalHost": "direct",
                ".localhost": "direct",  # a leading dot: the domain and its subdomains
                " example.com ,\tLOCALHOST. , ": "direct",
                "example.com localhost": "direct",  # blanks separate entries, as in curl
                "host": "proxy",  # a suffix of the name, not of its domain
                "calhost, .host": "proxy",
                "127.0.0.1": "proxy",  # no name is resolved to match an address (as requests, curl)
            },
        )

    def test_decisions_for_hosts_not_on_this_machine(self) -> None:
        rules = dc._NoProxy(
            " 10.0.0.0/8, FD00::/8 ,.corp.example, Internal.Example:8443, [fe80::1]:8080, 192.0.2.7 "
        )
        expected = {
            ("http", "10.1.2.3"): True,
            ("http", "10.1.2.3:8080"): True,
            ("http", "11.0.0.1"): False,
            ("https", "[fd12:3456::1]"): True,
            ("https", "[fe00::1]"): False,
            ("https", "a.b.corp.example"): True,
            ("https", "CORP.example"): True,
            ("https", "notcorp.example"): False,
            ("https", "internal.example:8443"): True,
            ("https", "internal.example"): False,  # port 443
            ("http", "[fe80::1]:8080"): True,
            ("http", "[fe80::1]"): False,  # port 80
            ("http", "192.0.2.7"): True,
            ("http", "192.0.2.70"): False,
            ("http", "host:notaport"): False,
        }
        for (scheme, host), bypass in expected.items():
            with self.subTest(scheme=scheme, host=host):
                self.assertIs(rules.matches(scheme, host), bypass)


class ProxyAuthenticationTests(ServerTestCase):
    """A proxy that wants credentials (407): one attempt, a message that says what to do, never the password."""

    PASSWORD = "s3cret@pa:ss"

    def setUp(self) -> None:
        super().setUp()
        self.proxy = self.start_proxy()
        self.proxy.required = self.basic(self.PASSWORD)
        self.where = f"127.0.0.1:{self.proxy.server_address[1]}"
        os.environ["NO_PROXY"] = ""

    def basic(self, password: str) -> str:
        """The Proxy-Authorization a client sends for alice and ``password``."""
        return "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()

    def proxy_url(self, password: str | None) -> str:
        credentials = "" if password is None else f"alice:{urllib_parse.quote(password, safe='')}@"
        return f"http://{credentials}{self.where}"

    def refused(self, url: str, **options: object) -> dc.NetworkError:
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url, max_retries=3, **options).list_datasets()
        error = caught.exception
        self.assertEqual(error.attempts, 1, "a 407 is not retried")
        self.assertEqual(len(self.proxy.lines), 1)
        shown = [
            str(error),
            repr(error),
            *traceback.TracebackException.from_exception(error, capture_locals=True).format(),
        ]
        for secret in (
            self.PASSWORD,
            urllib_parse.quote(self.PASSWORD, safe=""),
            self.proxy.required or "",
        ):
            self.assertNotIn(secret.split(" ")[-1], "".join(shown))
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((str(copy), repr(copy.__cause__)), (str(error), repr(error.__cause__)))
        return error

    def advice(self, variable: str) -> str:
        return (
            f"set {variable}=http://USER:PASSWORD@{self.where} (USER and PASSWORD percent-encoded, @ as %40,"
            f" : as %3A). Only Basic proxy authentication is spoken: for an NTLM or Kerberos proxy, run a local"
            f" relay such as cntlm or px and point {variable} at it"
        )

    def test_missing_credentials_over_plain_http(self) -> None:
        os.environ["HTTP_PROXY"] = self.proxy_url(None)
        url = self.server.url + "/api"
        error = self.refused(url)
        self.assertEqual(
            str(error),
            f"GET {url}/datasets via proxy {self.where} (NO_PROXY bypasses it): 407 Proxy Authentication Required:"
            f" the proxy wants credentials; HTTP_PROXY has none: {self.advice('HTTP_PROXY')}",
        )
        self.assertEqual(self.proxy.lines, [f"GET {url}/datasets HTTP/1.1"])
        self.assertEqual(self.requests, [])

    def test_wrong_credentials_over_plain_http(self) -> None:
        os.environ["HTTP_PROXY"] = self.proxy_url("wrong" + self.PASSWORD)
        error = self.refused(self.server.url + "/api")
        self.assertIn(
            "407 Proxy Authentication Required: the proxy refused the credentials in HTTP_PROXY:",
            str(error),
        )
        self.assertEqual(
            self.proxy.proxy_authorizations, [self.basic("wrong" + self.PASSWORD)], "sent once"
        )
        self.assertEqual(self.requests, [])

    def test_missing_and_wrong_credentials_through_connect(self) -> None:
        tls = self.start_server(server_tls_context())
        url = tls.url + "/api"
        context = ssl.create_default_context(cafile=CA_FILE)
        os.environ["HTTPS_PROXY"] = self.proxy_url(None)
        error = self.refused(url, ssl_context=context)
        self.assertEqual(
            str(error),
            f"GET {url}/datasets via proxy {self.where} (NO_PROXY bypasses it): 407 Proxy Authentication Required:"
            f" the proxy wants credentials; HTTPS_PROXY has none: {self.advice('HTTPS_PROXY')}",
        )
        self.assertRegex(
            self.proxy.lines[0], rf"^CONNECT 127\.0\.0\.1:{tls.server_port} HTTP/1\.[01]$"
        )
        self.proxy.lines.clear()
        os.environ["HTTPS_PROXY"] = self.proxy_url(self.PASSWORD + "x")
        error = self.refused(url, ssl_context=context)
        self.assertIn(
            "the proxy refused the credentials in HTTPS_PROXY: set HTTPS_PROXY=http://USER:",
            str(error),
        )
        self.assertEqual(
            self.proxy.proxy_authorizations,
            [None, self.basic(self.PASSWORD + "x")],
            "each sent once",
        )
        self.assertEqual(tls.requests, [])

    def test_a_connect_refused_with_401_is_the_same_error(self) -> None:
        tls = self.start_server(server_tls_context())
        self.proxy.refusal = b"401 Unauthorized"  # what tinyproxy 1.11 answers to wrong credentials
        os.environ["HTTPS_PROXY"] = self.proxy_url("wrong")
        error = self.refused(
            tls.url + "/api", ssl_context=ssl.create_default_context(cafile=CA_FILE)
        )
        self.assertIn(
            ": 401 Unauthorized: the proxy refused the credentials in HTTPS_PROXY: set HTTPS_PROXY=",
            str(error),
        )
        self.assertEqual(self.proxy.proxy_authorizations, [self.basic("wrong")])

    def test_right_credentials_over_plain_http_and_through_connect(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tunnel": True})
        self.script(reply(body=["plain"]))
        os.environ["HTTP_PROXY"] = os.environ["HTTPS_PROXY"] = self.proxy_url(self.PASSWORD)
        self.assertEqual(self.client().list_datasets(), ["plain"])
        context = ssl.create_default_context(cafile=CA_FILE)
        self.assertEqual(
            self.client(tls.url + "/api", ssl_context=context).list_datasets(), {"tunnel": True}
        )
        self.assertEqual(self.proxy.proxy_authorizations, [self.proxy.required] * 2)
        self.assertRegex(
            self.proxy.lines[1], rf"^CONNECT 127\.0\.0\.1:{tls.server_port} HTTP/1\.[01]$"
        )
        for request in (*self.requests, *tls.requests):
            self.assertNotIn("Proxy-Authorization", request.headers)
            self.assertEqual(request.headers["Authorization"], f"Bearer {KEY}")


def make_lenient_ca(directory: Path) -> tuple[str, str]:
    """With openssl: a CA whose basicConstraints is not critical (as many TLS-inspecting proxies'), and a
    certificate (and key) it signed for 127.0.0.1 only. Returns their two PEM file names."""
    (directory / "ca.cnf").write_text(
        "[req]\ndistinguished_name = dn\nx509_extensions = ext\nprompt = no\n[dn]\nCN = lenient test CA\n"
        "[ext]\nbasicConstraints = CA:TRUE\nkeyUsage = keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n"
    )
    (directory / "server.ext").write_text(
        "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n"
        "authorityKeyIdentifier = keyid\nsubjectKeyIdentifier = hash\n"
    )
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    sign = ["-days", "3650", "-extfile", "server.ext", "-out", "server.crt"]
    for command in (
        [
            "req",
            "-x509",
            "-config",
            "ca.cnf",
            *key,
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "3650",
        ],
        [
            "req",
            "-new",
            *key,
            "-keyout",
            "server.key",
            "-subj",
            "/CN=127.0.0.1",
            "-out",
            "server.csr",
        ],
        [
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "7",
            *sign,
        ],
    ):
        subprocess.run(
            ["openssl", *command], cwd=directory, check=True, capture_output=True, timeout=60
        )
    chain = directory / "server.pem"
    chain.write_text(
        (directory / "server.crt").read_text() + (directory / "server.key").read_text()
    )
    return str(directory / "ca.pem"), str(chain)


class CertificateTrustTests(ServerTestCase):
    """What the default TLS context trusts (as requests does), and what a verification failure says."""

    def setUp(self) -> None:
        super().setUp()
        for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            os.environ.pop(name, None)
        self.tls = self.start_server(server_tls_context())
        self.tls.default = reply(body={"tls": True})

    def assert_trusted(self, **options: object) -> None:
        self.assertEqual(
            self.client(self.tls.url + "/api", **options).list_datasets(), {"tls": True}
        )
        self.assertEqual(self.tls.requests[-1].path, "/api/datasets")

    def refusal(self, url: str | None = None, **options: object) -> str:
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url or self.tls.url + "/api", max_retries=2, **options).list_datasets()
        self.assertEqual(caught.exception.attempts, 1)
        self.assertEqual(self.tls.requests, [])
        return str(caught.exception)

    def test_requests_ca_bundle_file_is_trusted(self) -> None:
        os.environ["REQUESTS_CA_BUNDLE"] = CA_FILE
        self.assert_trusted()
        self.assertEqual(self.tls.requests[0].headers["Authorization"], f"Bearer {KEY}")

    def test_curl_ca_bundle_hashed_directory_is_trusted(self) -> None:
        os.environ["CURL_CA_BUNDLE"] = str(self.hashed_directory())
        self.assert_trusted()

    def test_requests_ca_bundle_wins_over_curl_ca_bundle(self) -> None:
        os.environ["REQUESTS_CA_BUNDLE"] = CA_FILE
        os.environ["CURL_CA_BUNDLE"] = str(
            self.tmp() / "missing.pem"
        )  # not read: requests reads one of the two
        self.assert_trusted()

    def test_bundle_is_added_to_the_system_store(self) -> None:
        system = len(ssl.create_default_context().get_ca_certs())
        os.environ["REQUESTS_CA_BUNDLE"] = CA_FILE
        certificates = dc._default_ssl_context().get_ca_certs()
        self.assertEqual(len(certificates), system + 1)
        self.assertIn(
            ((("commonName", "dataset-client test CA"),),), [c["subject"] for c in certificates]
        )

    def test_missing_bundle_is_an_error_naming_the_variable(self) -> None:
        missing = str(self.tmp() / "corp-ca.pem")
        for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            with self.subTest(variable=variable), mock.patch.dict(os.environ, {variable: missing}):
                with self.assertRaises(ValueError) as caught:
                    self.client(self.tls.url + "/api").list_datasets()
                self.assertEqual(
                    str(caught.exception),
                    f"{variable} names {missing}, which is not a file or directory of PEM CA certificates:"
                    " No such file or directory",
                )
        self.assertEqual(self.tls.requests, [])
        self.assertEqual(self.tls.connections, 0)

    def test_failure_says_what_was_trusted_and_how_to_add_a_ca(self) -> None:
        empty = self.tmp()
        os.environ["REQUESTS_CA_BUNDLE"] = str(empty)
        message = self.refusal()
        paths = ssl.get_default_verify_paths()
        store = ", ".join(path for path in (paths.cafile, paths.capath) if path) or "none found"
        self.assertEqual(
            message,
            f"GET {self.tls.url}/api/datasets: TLS certificate verification failed: unable to get local issuer"
            f" certificate; trusted: the system's CA store ({store}), {empty} from REQUESTS_CA_BUNDLE; to trust"
            " another CA: REQUESTS_CA_BUNDLE=FILE (added to the system store) or SSL_CERT_FILE=FILE (in place of"
            " its file), ca_bundle=FILE or ssl_context= in code",
        )
        os.environ["SSL_CERT_FILE"] = str(HERE / "README.md")  # no CA in it
        self.assertIn(
            f"trusted: the system's CA store ({HERE / 'README.md'} from SSL_CERT_FILE",
            self.refusal(),
        )

    def test_a_context_made_for_a_ca_bundle_names_it_by_the_librarys_keyword(self) -> None:
        missing = str(self.tmp() / "corp.pem")
        with self.assertRaisesRegex(
            FileNotFoundError, f"^ca_bundle names {re.escape(missing)}, which is not a file"
        ):
            dc._default_ssl_context(missing)
        self.assert_trusted(ssl_context=dc._default_ssl_context(CA_FILE))
        self.tls.requests.clear()
        empty = self.tmp()
        message = self.refusal(ssl_context=dc._default_ssl_context(str(empty)))
        self.assertIn(
            f"), {empty} from ca_bundle; to trust another CA: REQUESTS_CA_BUNDLE=FILE", message
        )

    def use_no_system_store(self) -> None:
        os.environ["SSL_CERT_FILE"] = str(self.tmp() / "none.pem")  # the test CA alone, and faster
        os.environ["SSL_CERT_DIR"] = str(self.tmp())

    def test_a_relative_ca_bundle_is_made_absolute_once_a_later_chdir_changes_nothing(self) -> None:
        # Found in review3: OpenSSL looks a hashed directory up at each handshake, so a relative one
        # followed the process's working directory (another user's CA under the same name, trusted).
        self.use_no_system_store()
        here, elsewhere = self.tmp(), self.tmp()
        shutil.copy(CA_FILE, here / "corp.pem")
        shutil.copytree(self.hashed_directory(), here / "corp.d")
        (elsewhere / "corp.d").mkdir()  # what is there once the process has moved: no CA
        (elsewhere / "corp.pem").write_text("not a certificate\n")
        for name in ("corp.pem", "corp.d"):
            with self.subTest(bundle=name):
                with contextlib.chdir(here):
                    client = self.client(self.tls.url + "/api", ca_bundle=name)
                with contextlib.chdir(elsewhere):
                    self.assertEqual(client.list_datasets(), {"tls": True})
                    self.assertEqual(client._arguments["ca_bundle"], str(here / name))
                    trusted = dc._trusted_by_default[client._pool._ssl_context]
                    self.assertTrue(trusted.endswith(f", {here / name} from ca_bundle"), trusted)
        self.assertEqual(len(self.tls.requests), 2)

    def test_a_bundle_others_can_write_is_a_warning_naming_it(self) -> None:
        self.use_no_system_store()
        bundle, directory = self.tmp() / "corp.pem", self.hashed_directory()
        shutil.copy(CA_FILE, bundle)
        modes = ((bundle, 0o664), (bundle, 0o646), (directory, 0o777), (directory, 0o1777))
        for path, mode in modes:
            with self.subTest(path=path.name, mode=oct(mode)):
                path.chmod(mode)
                with self.assertLogs("dataset_client", level="WARNING") as logs:
                    self.assert_trusted(ca_bundle=path)
                self.assertEqual(
                    [record.getMessage() for record in logs.records],
                    [
                        f"ca_bundle {path} is writable by group or others, who could have any server"
                        " trusted (chmod go-w)"
                    ],
                )
                self.assertTrue(logs.records[0].lasting, "the CLI shows it whole")
                path.chmod(0o755 if path.is_dir() else 0o644)
                with self.assertNoLogs("dataset_client", level="WARNING"):
                    self.assert_trusted(ca_bundle=path)
        os.environ["REQUESTS_CA_BUNDLE"] = str(bundle)
        bundle.chmod(0o666)
        with self.assertLogs("dataset_client", level="WARNING") as logs:
            self.assert_trusted()
        named = logs.records[0].getMessage().partition(" is ")[0]
        self.assertEqual(named, f"REQUESTS_CA_BUNDLE {bundle}")

    def test_a_bundle_another_user_owns_is_a_warning_naming_it(self) -> None:
        # Found in review: a teammate renamed their CA over the user's 0644 bundle in a 2775 team
        # directory; trusted without a word, it sent the key to their server.
        self.use_no_system_store()
        bundle = self.tmp() / "corp.pem"
        shutil.copy(CA_FILE, bundle)
        me = owner = os.geteuid()
        theirs: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if me == 0:
            os.chown(bundle, owner := 4243, 4243)
        else:  # this user, seen as another one
            theirs = mock.patch.object(dc.os, "geteuid", return_value=me + 1)
        with theirs, self.assertLogs("dataset_client", level="WARNING") as logs:
            self.assert_trusted(ca_bundle=bundle)
        said = f"ca_bundle {bundle} is owned by another user (uid {owner}), who could have any"
        self.assertEqual([r.getMessage() for r in logs.records], [said + " server trusted"])
        os.chown(bundle, me, -1)  # the user's own (root's, as root): no word
        with self.assertNoLogs("dataset_client", level="WARNING"):
            self.assert_trusted(ca_bundle=bundle)

    def test_a_bundle_that_is_no_regular_file_or_directory_is_refused_before_any_read(self) -> None:
        # Found in review3: a FIFO held the constructor 6 s past deadline=1 (until a writer came).
        fifo, reads = self.tmp() / "ca.pem", list[bytes]()
        os.mkfifo(fifo)
        writer = os.open(fifo, os.O_RDWR)  # a writer there, writing nothing yet: a reader waits
        read, write = os.pipe()  # as bash's <(cat ca.pem) gives it
        self.addCleanup(os.close, read)
        with open(write, "wb") as writing:
            writing.write(Path(CA_FILE).read_bytes())
        reason = "which is not a file or directory of PEM CA certificates: a FIFO, device or socket"
        reason += " is never read"
        for path in (str(fifo), f"/dev/fd/{read}", "/dev/zero"):
            outcome = list[BaseException]()

            def make(path: str = path, outcome: list[BaseException] = outcome) -> None:
                try:
                    DatasetClient(self.tls.url, KEY, ca_bundle=path, deadline=1)
                except OSError as exc:
                    outcome.append(exc)

            with self.subTest(path=path):
                making = threading.Thread(target=make, daemon=True)
                making.start()
                making.join(2)  # the deadline and a second
                if making.is_alive():  # let it go: the writer gone is its end of file
                    os.close(writer)
                    writer = os.open(fifo, os.O_RDWR)
                    making.join(5)
                refused = [(OSError, f"ca_bundle names {path}, {reason}")]
                self.assertEqual([(type(error), str(error)) for error in outcome], refused)
        reads.append(os.read(read, 10))
        os.close(writer)
        self.assertEqual(reads, [Path(CA_FILE).read_bytes()[:10]], "the pipe was left unread")
        os.environ["CURL_CA_BUNDLE"] = str(fifo)
        with self.assertRaises(ValueError) as caught:
            self.client(self.tls.url).list_datasets()
        self.assertEqual(str(caught.exception), f"CURL_CA_BUNDLE names {fifo}, {reason}")
        self.assertEqual((self.tls.requests, self.tls.connections), ([], 0))

    def test_given_context_is_used_exactly_as_given(self) -> None:
        os.environ["REQUESTS_CA_BUNDLE"] = str(
            self.tmp() / "missing.pem"
        )  # would be an error if it were read
        context = ssl.create_default_context(cafile=CA_FILE)
        flags = context.verify_flags
        self.assert_trusted(ssl_context=context)
        self.assertEqual(context.verify_flags, flags)
        self.tls.requests.clear()
        message = self.refusal(ssl_context=ssl.create_default_context())
        self.assertTrue(
            message.endswith(
                "unable to get local issuer certificate; trusted: the ssl_context given, as given"
                " (add a CA with its load_verify_locations(FILE))"
            ),
            message,
        )

    def test_lenient_ca_is_accepted_and_names_and_unknown_cas_are_still_refused(self) -> None:
        if shutil.which("openssl") is None:
            self.skipTest(
                "openssl is not installed: it makes the CA with a basicConstraints not marked critical"
            )
        ca, chain = make_lenient_ca(self.tmp())
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(chain)
        self.tls = self.start_server(server_context)
        self.tls.default = reply(body={"tls": True})
        os.environ["SSL_CERT_FILE"] = ca
        self.assert_trusted()  # Python 3.13+'s default context (VERIFY_X509_STRICT) refuses this CA
        os.environ["REQUESTS_CA_BUNDLE"] = ca
        self.assert_trusted()
        self.tls.requests.clear()
        wrong_name = (
            f"https://localhost:{self.tls.server_port}/api"  # the certificate is for 127.0.0.1 only
        )
        self.assertRegex(
            self.refusal(wrong_name),
            r"verification failed: Hostname mismatch, [^;]*'localhost'\.?$",
        )
        os.environ.pop("SSL_CERT_FILE")
        os.environ.pop("REQUESTS_CA_BUNDLE")
        self.assertIn(
            "unable to get local issuer certificate; trusted: the system's CA store", self.refusal()
        )
        strict = ssl.create_default_context(cafile=ca)
        strict.verify_flags |= (
            ssl.VERIFY_X509_STRICT
        )  # a caller's own context keeps what it asks for
        self.assertIn("TLS certificate verification failed", self.refusal(ssl_context=strict))


# ---------------------------------------------------------------------------
# Downloads: to a path or a file object; odd destinations (a device, a FIFO, a long name, a stuck stream)
# ---------------------------------------------------------------------------


DATA = os.urandom(3 * 1024 * 1024 + 123)


DATA_SHA = hashlib.sha256(DATA).hexdigest()


def until_closed(body: bytes) -> Respond:
    """A 200 with neither Content-Length nor chunking: the body ends where the connection closes."""

    def respond(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("ETag", '"v1"')
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True

    return respond


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


# ---------------------------------------------------------------------------
# Downloads: a cut transfer resumed
# ---------------------------------------------------------------------------


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

    def test_progress_resets_the_retry_count(self) -> None:
        cuts = list(range(100_000, len(DATA), 1_100_000))  # more than a chunk (1 MiB) between cuts
        self.server.default = serve_file(DATA, cuts=cuts)
        out = io.BytesIO()
        self.client(max_retries=1).download("files/x", out)
        self.assertEqual(out.getvalue(), DATA)
        self.assertEqual(len(self.requests), len(cuts) + 1)

    def test_a_server_trickling_a_byte_per_attempt_exhausts_the_retries(self) -> None:
        # Each attempt brings one more byte: progress, but less than a chunk, so no new retries.
        self.server.default = serve_file(DATA, cuts=list(range(1, 50)))
        with self.assertRaises(dc.IncompleteResponseError) as caught:
            self.client(max_retries=2).download("files/x", io.BytesIO())
        self.assertEqual(caught.exception.attempts, 3)
        self.assertEqual(
            [r.headers["Range"] for r in self.requests],
            [None, "bytes=1-", "bytes=2-"],
            "what each attempt asked",
        )

    def test_no_progress_exhausts_the_retries(self) -> None:
        self.server.default = serve_file(DATA, ranges=False, cuts=[1000] * 10)
        with self.assertRaises(dc.IncompleteResponseError) as caught:
            self.client(max_retries=2).download("files/x", io.BytesIO())
        self.assertEqual(caught.exception.attempts, 3)


# ---------------------------------------------------------------------------
# Downloads: resuming across runs, and parallel ranged requests
# ---------------------------------------------------------------------------


BIG = os.urandom(8 * 1024 * 1024 + 4321)


BIG_SHA = hashlib.sha256(BIG).hexdigest()


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
            cwd=HERE,
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


class ParallelDownloadTests(ServerTestCase):
    def test_parts_are_fetched_at_once_each_with_its_range_and_validator(self) -> None:
        self.server.default = all_ranges_at_once(serve_file(BIG))
        seen = self.download_big(self.tmp() / "big.bin")
        quarter = len(BIG) // 4
        self.assertEqual(
            sorted((r.headers["Range"] or "", r.headers["If-Range"] or "") for r in self.requests),
            [
                ("", ""),
                (f"bytes={quarter}-{2 * quarter - 1}", '"v1"'),
                (f"bytes={2 * quarter}-{len(BIG) * 3 // 4 - 1}", '"v1"'),
                (f"bytes={len(BIG) * 3 // 4}-", '"v1"'),
            ],
        )
        self.assertEqual(self.server.connections, 4)
        self.assertEqual(
            [d for d, _ in seen], sorted(d for d, _ in seen), "progress never goes back"
        )
        self.assertEqual(seen[-1], (len(BIG), len(BIG)))
        self.assertTrue(all(t == len(BIG) for _, t in seen[1:]))

    def download_on_a_fake_clock(self, connections: int, rate: int) -> tuple[float, list[float]]:
        """Download BIG with ``max_rate``; the limiter's waits advance its clock instead of sleeping.

        Returns the time the download took on that clock, and the waits asked for.
        """
        offset = [0.0]
        waits: list[float] = []
        real_monotonic = time.monotonic

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            offset[0] += seconds

        out = self.tmp() / "big.bin"
        with (
            mock.patch.object(dc.time, "monotonic", lambda: real_monotonic() + offset[0]),
            mock.patch.object(dc.time, "sleep", sleep),
        ):
            started = dc.time.monotonic()
            self.client().download("files/big", out, connections=connections, max_rate=rate)
            elapsed = dc.time.monotonic() - started
        self.assertEqual(out.read_bytes(), BIG)
        return elapsed, waits

    def test_max_rate_caps_the_whole_download_on_one_and_on_several_connections(self) -> None:
        # No timing assertion: without the cap the download would end at once on the fake clock.
        rate = 4 * 1024 * 1024
        for connections in (1, 4):
            with self.subTest(connections=connections):
                self.server.requests.clear()
                self.server.default = serve_file(BIG)
                elapsed, waits = self.download_on_a_fake_clock(connections, rate)
                self.assertGreaterEqual(elapsed, len(BIG) / rate * 0.999, "faster than the cap")
                self.assertLessEqual(
                    max(waits), 2 * (rate / 8) / rate + 0.5, "waits stay short: small reads"
                )
                ranged = [r for r in self.requests if "Range" in r.headers]
                self.assertEqual(len(ranged), 3 if connections == 4 else 0)

    def test_max_rate_is_checked_before_anything_is_sent(self) -> None:
        bad: list[tuple[object, type[Exception]]] = [(0, ValueError), (-1, ValueError)]
        for rate, error in [*bad, (float("nan"), ValueError), ("1M", TypeError)]:
            with self.subTest(rate=rate), self.assertRaisesRegex(error, "max_rate"):
                self.client().download("files/big", io.BytesIO(), max_rate=rate)  # type: ignore[arg-type]
        self.assertEqual(self.requests, [])

    def test_a_wrong_digest_over_parts_leaves_nothing(self) -> None:
        for resume in (False, True):
            self.server.default = serve_file(BIG)
            directory = self.tmp()
            with self.subTest(resume=resume), self.assertRaises(dc.ChecksumMismatchError) as caught:
                self.client().download(
                    "files/big",
                    directory / "big.bin",
                    connections=3,
                    sha256="0" * 64,
                    resume=resume,
                )
            self.assertIn(BIG_SHA, str(caught.exception))
            self.assertEqual(list(directory.iterdir()), [])

    def test_a_part_cut_midway_is_resumed_alone(self) -> None:
        cut_at = len(BIG) * 3 // 4 + 100_000  # inside the last part
        whole, ranged = serve_file(BIG), serve_file(BIG, cuts=[cut_at])
        self.server.default = lambda handler: (ranged if "Range" in handler.headers else whole)(
            handler
        )
        out = self.tmp() / "big.bin"
        self.client(max_retries=1).download("files/big", out, connections=4, sha256=BIG_SHA)
        self.assertEqual(out.read_bytes(), BIG)
        bounds = [len(BIG) * index // 4 for index in range(5)]
        whole_parts = [
            f"bytes={start}-{end - 1}" for start, end in itertools.pairwise(bounds[1:-1])
        ]
        expected = [
            "",
            *whole_parts,
            f"bytes={bounds[3]}-",
            f"bytes={cut_at}-",
        ]  # the cut part alone, from the cut
        self.assertEqual(sorted(r.headers["Range"] or "" for r in self.requests), sorted(expected))

    def test_a_server_that_ignores_ranges_gets_one_stream(self) -> None:
        for etag, ranges in (('"v1"', False), ('W/"weak"', True), (None, True)):
            self.server.requests.clear()
            self.server.default = serve_file(BIG, etag=etag, ranges=ranges)
            out = self.tmp() / "big.bin"
            with self.subTest(etag=etag, ranges=ranges):
                self.client().download("files/big", out, connections=4, sha256=BIG_SHA)
                self.assertEqual(out.read_bytes(), BIG)
                self.assertEqual(len(self.requests), 1)

    def test_a_file_that_changes_during_the_download_starts_over_whole(self) -> None:
        new = bytes(reversed(BIG))
        versions = iter(
            [serve_file(BIG)]
        )  # the first answer is the old file; everything after, the new

        def respond(handler: Handler) -> None:
            next(versions, serve_file(new, etag='"v2"'))(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        self.client().download(
            "files/big", out, connections=3, sha256=hashlib.sha256(new).hexdigest()
        )
        self.assertEqual(out.read_bytes(), new)
        plain = [r for r in self.requests if r.headers["Range"] is None]
        self.assertEqual(len(plain), 2, "started over with a whole request")

    def test_a_part_of_another_version_or_range_is_never_spliced(self) -> None:
        def wrong(kind: str) -> Respond:
            def respond(handler: Handler) -> None:
                if "Range" not in handler.headers:
                    return serve_file(BIG)(handler)
                start, end = local_service._requested_range(handler.headers["Range"], len(BIG))
                if kind == "range":
                    start += 1  # not the bytes asked for
                handler.send_response(206)
                handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(BIG)}")
                handler.send_header("Content-Length", str(end - start))
                handler.send_header("ETag", '"v2"' if kind == "etag" else '"v1"')
                handler.end_headers()
                handler.wfile.write(BIG[start:end])

            return respond

        for kind, error in (("etag", "changed on the server"), ("range", "Content-Range")):
            self.server.default = wrong(kind)
            directory = self.tmp()
            with self.subTest(kind), self.assertRaisesRegex(dc.InvalidResponseError, error):
                self.client().download("files/big", directory / "big.bin", connections=3)
            self.assertEqual(list(directory.iterdir()), [])

    def test_each_parts_progress_is_kept_and_resumed(self) -> None:
        self.server.default = first_bytes_then_stall(
            BIG, 1_300_000
        )  # of each part: one whole chunk, and a bit
        directory = self.tmp()
        client = self.client(timeout=30)
        counted = (
            threading.Event()
        )  # 4 MiB: the four parts' first chunks, kept (progress comes after)
        download = functools.partial(
            client.download,
            "files/big",
            directory / "out.bin",
            connections=4,
            resume=True,
            progress=lambda done, total: done >= 4 * 1024 * 1024 and counted.set(),
        )
        worker = threading.Thread(target=outcome_of, args=(download,))
        worker.start()
        self.assertTrue(counted.wait(10))
        client.close()
        worker.join(10)
        self.assertEqual(
            sorted(p.name for p in directory.iterdir()), [".out.bin.part", ".out.bin.part.json"]
        )
        starts = sorted(
            int(r.headers["Range"].split("=")[1].split("-")[0]) for r in self.requests[1:]
        )
        starts = [
            0,
            *starts,
        ]  # where each part begins: the whole file's request, then each ranged one

        self.server.requests.clear()
        self.server.bytes_served = 0
        self.server.default = serve_file(BIG)
        self.download_big(directory / "out.bin", resume=True)
        resumed = sorted(int(r.headers["Range"].split("=")[1].split("-")[0]) for r in self.requests)
        kept = [at - start for start, at in zip(starts, resumed, strict=True)]
        # A whole chunk each, and what close() let through after it (the socket's last bytes).
        self.assertTrue(all(1024 * 1024 <= done <= 1_300_000 for done in kept), kept)
        self.assertEqual(
            self.server.bytes_served, len(BIG) - sum(kept), "each part goes on from what it kept"
        )


# ---------------------------------------------------------------------------
# Downloads in shared directories: links and planted files, the lock file, the state file
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Downloads checked by the server's own digest; parallel into pipes and file objects (issue 24)
# ---------------------------------------------------------------------------


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


SMALL = DATA[:200_000]  # one stream: a small file is enough


SMALL_SHA = hashlib.sha256(SMALL).hexdigest()


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


def big(start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of BIG."""
    return BIG[start:end]


def pattern(start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file of any size: DATA's first MiB and a byte, over and over."""
    period = 1024 * 1024 + 1
    first = start % period
    return (DATA[:period] * ((first + end - start) // period + 1))[first : first + end - start]


def serve_chunked_parts(
    read: Callable[[int, int], bytes], size: int, digests: bool = True
) -> Respond:
    """A file of ``size`` bytes (``read(start, end)`` gives them), ranges, a strong ETag, served
    as some servers do: a 200 with a Content-Length, each 206 chunked, with no length (with its
    Content-Digest when ``digests``). Past 256 MiB, a 200 is cut."""
    mib = 1024 * 1024

    def respond(handler: Handler) -> None:
        span = local_service._requested_range(handler.headers.get("Range"), size)
        start, end = span or (0, size)
        headers = {"ETag": '"v1"', "Accept-Ranges": "bytes"}
        if span is None:
            headers["Content-Length"] = str(size)
        else:
            headers |= {"Content-Range": f"bytes {start}-{end - 1}/{size}"}
            headers |= {"Transfer-Encoding": "chunked"}
            headers |= {"Content-Digest": digest_field(read(start, end))} if digests else {}
        handler.send_response(206 if span else 200)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.close_connection = span is None
        with contextlib.suppress(OSError):  # the client hung up: it reads a part of a 200 only
            for offset in range(start, min(end, start + 256 * mib), mib):
                piece = read(offset, min(end, offset + mib))
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if span else piece)
            if span:
                handler.wfile.write(b"0\r\n\r\n")

    return respond


class Checking:
    """A binary stream that cannot seek, for a file too large to keep: it counts the bytes
    written, and notes where they first differ from ``read(start, end)``."""

    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self.read, self.size, self.wrong = read, 0, None

    def write(self, data: bytes) -> int:
        if self.wrong is None and data != self.read(self.size, self.size + len(data)):
            self.wrong = self.size
        self.size += len(data)
        return len(data)

    def seekable(self) -> bool:
        return False


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


class Recorder:
    """A binary stream that cannot seek: what was written to it, in order."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def seekable(self) -> bool:
        return False


class ParallelIntoStreamsTests(ServerTestCase):
    def pieces(self, size: int, connections: int) -> list[int]:
        """Where the parts of a download of ``size`` bytes into a stream start."""
        count = -(-size // (min(64, connections) * 1024 * 1024 // connections))
        return [size * index // count for index in range(count)]

    def ranged(self) -> list[str]:
        return [r.headers["Range"] for r in self.requests if "Range" in r.headers]

    def test_a_stream_in_parts_is_cut_into_no_more_parts_than_a_bound_whatever_the_size_announced(
        self,
    ) -> None:
        # Found in reread: a server announcing 2**62 bytes (with Accept-Ranges and a strong ETag) had
        # 2**42 parts listed at once for a stream: memory until MemoryError, before a byte was written.
        target, limit = dc._StreamTarget(io.BytesIO()), 2 * dc._CHUNK_SIZE
        buffer = dc._ReorderBuffer(target, limit, lambda _: None, lambda: None)
        self.assertEqual(
            buffer.part_count(10 * dc._CHUNK_SIZE, 2, 2), 10, "a part a chunk, as before"
        )
        self.assertEqual(buffer.part_count(2**62, 2, 2), dc._ReorderBuffer.max_parts)

    def test_parts_are_fetched_at_once_into_a_file_object_and_written_in_order(self) -> None:
        self.server.default = all_ranges_at_once(serve_file(DATA, digests=True))
        out, progress = io.BytesIO(b"head"), Verified()
        out.seek(4)
        self.client().download(
            "files/x",
            out,
            connections=4,
            sha256=DATA_SHA,
            **progress.hooks(),
        )
        self.assertEqual(out.getvalue(), b"head" + DATA)
        starts = self.pieces(len(DATA), 4)
        self.assertEqual(len(starts), 4)
        self.assertEqual(
            sorted(self.ranged()),
            sorted(
                [f"bytes={a}-{b - 1}" for a, b in itertools.pairwise(starts[1:])]
                + [f"bytes={starts[-1]}-"]
            ),
        )
        self.assertEqual(
            [d for d, _ in progress.seen], sorted(d for d, _ in progress.seen), "never goes back"
        )
        self.assertEqual(progress.seen[-1], (len(DATA), len(DATA)))
        self.assertEqual(progress.verified, ["sha256", "Repr-Digest (sha-256)"])

    def test_a_reader_that_stops_reading_stops_the_fetching_and_memory_stays_bounded(self) -> None:
        self.server.default = serve_file(DATA, digests=True)
        buffers: list[Any] = []
        real_init = dc._ReorderBuffer.__init__

        def init(buffer: Any, *args: Any) -> None:
            real_init(buffer, *args)
            buffers.append(buffer)

        starts = self.pieces(len(DATA), 2)
        read_end, write_end = os.pipe()
        go, received = threading.Event(), bytearray()

        def read() -> None:
            with open(read_end, "rb", buffering=0) as pipe:
                go.wait(10)
                while chunk := pipe.read(65536):
                    received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        self.addCleanup(reader.join, 10)
        outcome: list[object] = []
        with (
            mock.patch.object(dc._ReorderBuffer, "__init__", init),
            open(write_end, "wb", buffering=0) as pipe,
        ):
            download = threading.Thread(
                target=lambda: outcome.append(
                    outcome_of(lambda: self.client().download("files/x", pipe, connections=2))
                )
            )
            download.start()
            self.addCleanup(go.set)
            # The first part fills the pipe; the second waits in the buffer; the third waits for room, its request sent.
            piece = starts[2] - starts[1]
            _wait_for(
                lambda: len(self.requests) == 3 and bool(buffers) and buffers[0].buffered == piece
            )
            time.sleep(0.05)  # were it not stopped, it would go on within this
            self.assertEqual(
                (len(self.requests), buffers[0].buffered), (3, piece), "the fetching stopped"
            )
            go.set()
            download.join(10)
        reader.join(10)
        self.assertEqual(outcome, [None])
        self.assertEqual(bytes(received), DATA)
        (buffer,) = buffers
        self.assertEqual(buffer.limit, 2 * 1024 * 1024, "2 connections: two chunks")
        self.assertLessEqual(buffer.peak, buffer.limit)
        self.assertEqual(len(self.ranged()), len(starts) - 1)

    def test_ctrl_c_ends_a_download_into_a_pipe_whose_reader_stopped_reading(self) -> None:
        # The reader takes 3 MiB, then neither reads nor closes: every write into the pipe blocks. Only the
        # caller's thread writes into a stream, so the Ctrl-C it gets interrupts that write.
        data = BIG + BIG[: 4 * 1024 * 1024]
        self.server.default = serve_file(data, digests=True)
        self.addCleanup(
            signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, signal.default_int_handler)
        )
        read_end, write_end = os.pipe()
        received, stopped, ended = bytearray(), threading.Event(), threading.Event()

        def read_then_stop() -> None:
            while len(received) < 3 * 1024 * 1024:
                received.extend(os.read(read_end, 65536))
            stopped.set()

        def interrupt_then_free() -> None:
            stopped.wait(10)
            time.sleep(0.5)  # the writes block by now (and if not yet, the Ctrl-C still comes)
            signal.pthread_kill(main, signal.SIGINT)
            if not ended.wait(
                5
            ):  # a thread still blocked in a write: let it go, for the test to fail, not hang
                freed.append(True)
                os.close(read_end)

        main, freed = threading.get_ident(), []
        helpers = [
            threading.Thread(target=read_then_stop),
            threading.Thread(target=interrupt_then_free),
        ]
        for helper in helpers:
            helper.start()
        with open(write_end, "wb", buffering=0) as pipe:
            outcome = outcome_of(lambda: self.client().download("files/x", pipe, connections=4))
            ended.set()
        for helper in helpers:
            helper.join(10)
        if not freed:
            os.close(read_end)
        self.assertEqual(
            freed, [], "5 s after Ctrl-C a thread was still blocked writing into the pipe"
        )
        self.assertIsInstance(outcome, KeyboardInterrupt)
        self.assertEqual(
            [t.name for t in threading.enumerate() if t.name.startswith("dataset-client")], []
        )

    def test_a_part_with_a_wrong_content_digest_is_held_and_never_written(self) -> None:
        starts = self.pieces(len(DATA), 3)
        for flips in (1, 2):
            with self.subTest(flips=flips):
                self.server.requests.clear()
                self.server.default = serve_parts(DATA, corrupt=[starts[1]] * flips)
                out = Recorder()
                outcome = outcome_of(
                    functools.partial(self.client().download, "files/x", out, connections=3)
                )
                self.assertEqual(self.ranged().count(f"bytes={starts[1]}-{starts[2] - 1}"), 2)
                if flips == 1:
                    self.assertIsNone(outcome)
                    self.assertEqual(bytes(out.data), DATA)
                else:
                    self.assertIsInstance(outcome, dc.ChecksumMismatchError)
                    self.assertEqual(
                        bytes(out.data), DATA[: starts[1]], "the bad bytes were never written"
                    )

    def test_a_part_that_cannot_be_held_and_mismatches_is_the_error(self) -> None:
        # One stream into a file object: a resumed 206's bytes go on as they come, so its Content-Digest
        # can only be checked after them: a mismatch is the error, never a second copy appended.
        self.script(cut(SMALL, 100_000, {"ETag": '"v1"', "Accept-Ranges": "bytes"}))
        self.server.default = serve_parts(SMALL, corrupt=[100_000])
        out = Recorder()
        with self.assertRaises(dc.ChecksumMismatchError) as caught:
            self.client().download("files/x", out)
        where = f"{self.server.url}/api/v1/files/x (bytes 100000-{len(SMALL) - 1})"
        self.assertIn(f"Content-Digest (sha-256) mismatch for {where}: ", str(caught.exception))
        self.assertEqual([r.headers.get("Range") for r in self.requests], [None, "bytes=100000-"])
        self.assertEqual(len(out.data), len(SMALL))

    def test_a_server_that_ignores_ranges_gets_one_stream(self) -> None:
        self.server.default = ignoring_ranges
        out, progress = Recorder(), Verified()
        self.client().download(
            "files/big",
            out,
            connections=4,
            sha256=BIG_SHA,
            **progress.hooks(),
        )
        self.assertEqual(bytes(out.data), BIG)
        self.assertEqual(progress.seen[-1], (len(BIG), len(BIG)))
        self.assertEqual([d for d, _ in progress.seen], sorted(d for d, _ in progress.seen))

    def test_close_ends_parts_still_connecting(self) -> None:
        # Found in review: a server that accepts no connection after the first GET's; close()
        # (or Ctrl-C) came 20-28 s late: the parts' sockets, still connecting, were out of reach.
        listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.addCleanup(listener.close)
        port, queued = listener.getsockname()[1], list[socket.socket]()
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\nAccept-Ranges: bytes\r\n"

        def serve() -> None:
            connection, _ = listener.accept()
            self.addCleanup(connection.close)
            connection.recv(65536)
            for _ in range(3):  # the accept queue full from now on: a SYN goes unanswered
                queued.append(socket.socket())
                self.addCleanup(queued[-1].close)
                queued[-1].setblocking(False)
                queued[-1].connect_ex(("127.0.0.1", port))
            with contextlib.suppress(OSError):
                connection.sendall(head + b'ETag: "v1"\r\n\r\n' + bytes(1024 * 1024))

        threading.Thread(target=serve, daemon=True).start()
        client, out = self.client(f"http://127.0.0.1:{port}", timeout=30), self.tmp() / "out"
        download = functools.partial(client.download, "files/x", out, connections=2)
        waits = lambda: len(queued) == 3  # noqa: E731  (the parts connect from then on)
        self.assertIsInstance(self.closed_during(client, download, waits), dc.ClientClosedError)
        self.assertEqual(part_threads(), [])
        self.assertEqual(list(out.parent.iterdir()), [], "nothing left")

    def test_a_cut_part_is_resumed_from_its_own_offset(self) -> None:
        starts = self.pieces(len(DATA), 3)
        whole, ranged = (
            serve_file(DATA),
            serve_file(DATA, cuts=[starts[2] + 1000]),
        )  # a part is cut, not the first
        self.server.default = lambda handler: (ranged if "Range" in handler.headers else whole)(
            handler
        )
        out = Recorder()
        self.client().download("files/x", out, connections=3, sha256=DATA_SHA)
        self.assertEqual(bytes(out.data), DATA)
        self.assertIn(f"bytes={starts[2] + 1000}-{starts[3] - 1}", self.ranged())

    # Found in the third review (issue 30): a 200 announcing 64 GiB (Accept-Ranges, a strong ETag),
    # its 206s chunked with a Content-Digest. A stream is cut into 2**14 parts at most: here 4 MiB
    # each, twice the buffer of 2 connections. A part's bytes were held for its digest as though
    # they fitted (a length not said counted as 0), and the rest of the part waited for room that
    # only their release would make: three threads waited for ever, past deadline=5 and close().
    HUGE = 2**36

    def test_parts_larger_than_the_buffer_in_chunked_206s_end_at_the_deadline(self) -> None:
        self.server.default = serve_chunked_parts(pattern, self.HUGE)
        out, client = Checking(pattern), self.client()
        download = functools.partial(client.download, "files/x", out, connections=2)
        outcome, took = run_within(2, functools.partial(download, deadline=1))
        self.assertIsInstance(outcome, dc.RequestTimeoutError)
        self.assertIn("the deadline of 1 s was reached", str(outcome))
        self.assertLess(took, 2)
        self.assertEqual(part_threads(), [])
        self.assertGreater(out.size, 8 * 1024 * 1024, "the parts flowed")
        self.assertIsNone(out.wrong)
        ranges = [r.headers["Range"] for r in self.requests[:2]]
        self.assertEqual(ranges, [None, "bytes=4194304-8388607"])
        self.assertEqual(self.requests[1].headers["If-Range"], '"v1"')

    def test_close_ends_a_download_in_parts_larger_than_the_buffer(self) -> None:
        self.server.default = serve_chunked_parts(pattern, self.HUGE)
        out, client, closed = Checking(pattern), self.client(), []

        def close_once_parts_are_fetched() -> None:
            _wait_for(lambda: out.size >= 4 * 1024 * 1024 and len(self.requests) >= 3)
            time.sleep(0.3)  # by now the threads waited on each other, and for ever
            closed.append(time.monotonic())
            client.close()

        closer = threading.Thread(target=close_once_parts_are_fetched)
        closer.start()
        self.addCleanup(closer.join, 10)
        outcome, _ = run_within(6, lambda: client.download("files/x", out, connections=2))
        ended = time.monotonic()
        self.assertIsInstance(outcome, dc.ClientClosedError)
        self.assertLess(ended - closed[0], 1, "ended promptly")
        self.assertEqual(part_threads(), [])
        self.assertIsNone(out.wrong)

    def test_a_failing_part_ends_a_download_in_parts_larger_than_the_buffer(self) -> None:
        served, out = serve_chunked_parts(pattern, self.HUGE), Checking(pattern)

        def respond(handler: Handler) -> None:
            if not handler.headers.get("Range", "").startswith("bytes=8388608-"):
                return served(handler)
            _wait_for(lambda: out.size >= 4 * 1024 * 1024)  # the others wait (they did for ever)
            reply(403, {"error": "no"})(handler)  # the third part: refused

        self.server.default = respond
        outcome, _ = run_within(6, lambda: self.client().download("files/x", out, connections=3))
        self.assertIsInstance(outcome, ServiceError)
        self.assertEqual(getattr(outcome, "status", None), 403)
        self.assertEqual(part_threads(), [])
        self.assertIn("bytes=8388608-12582911", self.ranged())

    def test_a_buffer_that_waits_on_itself_still_ends_at_the_deadline_and_on_close(self) -> None:
        # The rule behind the hang above, whatever else goes wrong: no wait in the buffer (a
        # part's for room, the writer's for the bytes at its position) outlives the deadline or
        # close(). The hang made again: parts twice the buffer, held as though they fitted.
        self.server.default = serve_chunked_parts(big, len(BIG))
        held = mock.patch.object(dc._ReorderBuffer, "can_hold", return_value=True)
        with held, mock.patch.object(dc._ReorderBuffer, "max_parts", 2):
            for ender in ("deadline", "close"):
                with self.subTest(ender=ender):
                    client, ends = self.client(), {"deadline": 0.5} if ender == "deadline" else {}
                    if ender == "close":
                        threading.Timer(0.5, client.close).start()
                    download = functools.partial(client.download, "files/big", Recorder(), **ends)
                    outcome, took = run_within(2, functools.partial(download, connections=2))
                    ended = dc.RequestTimeoutError if ender == "deadline" else dc.ClientClosedError
                    self.assertIsInstance(outcome, ended)
                    self.assertLess(took, 1.5)
                    self.assertEqual(part_threads(), [])

    def test_chunked_206s_are_written_whole_parts_larger_than_the_buffer_too(self) -> None:
        for most, digests in itertools.product((2, dc._ReorderBuffer.max_parts), (True, False)):
            capped = mock.patch.object(dc._ReorderBuffer, "max_parts", most)
            with self.subTest(max_parts=most, digests=digests), capped:
                self.server.requests.clear()
                self.server.default = serve_chunked_parts(big, len(BIG), digests)
                out, verified, client = Recorder(), [], self.client()
                download = functools.partial(client.download, "files/big", out, connections=2)
                checks = {"sha256": BIG_SHA, "verified": verified.append}
                outcome, _ = run_within(10, functools.partial(download, **checks))
                self.assertIsNone(outcome)
                self.assertEqual((bytes(out.data), verified), (BIG, ["sha256"]))
                starts = [0, len(BIG) // 2] if most == 2 else self.pieces(len(BIG), 2)
                expected = [f"bytes={a}-{b - 1}" for a, b in itertools.pairwise(starts[1:])]
                self.assertEqual(sorted(self.ranged()), sorted([*expected, f"bytes={starts[-1]}-"]))


class SharedDirectoryTests(ServerTestCase):
    """Downloads into directories other people can write to: real links, real second users."""

    def user(self) -> tuple[str, int, int]:
        user = other_user()
        if user is None:
            self.skipTest("needs root and useradd to make a second user")
        return user

    def shared(self, mode: int) -> Path:
        directory = self.tmp()
        directory.chmod(mode)  # 0o1777 as /tmp; 0o777 as a team's group-writable directory
        return directory

    def victim_file(self) -> Path:
        notes = self.tmp() / "notes.txt"
        notes.write_text("the victim's notes")
        return notes

    def plant(
        self,
        path: Path,
        user: tuple[str, int, int],
        *,
        link_to: Path | None = None,
        data: bytes = b"",
    ) -> None:
        """A file or link that ``user`` owns, as if that user had made it."""
        if link_to is not None:
            subprocess.run(
                ["runuser", "-u", user[0], "--", "ln", "-s", str(link_to), str(path)], check=True
            )
        else:
            path.write_bytes(data)
            os.chown(path, user[1], user[2])
            path.chmod(0o666)

    def test_a_link_another_user_owns_is_refused_sticky_or_not(self) -> None:
        # Issue 30: in a 2775 team directory a teammate's link at data.csv to ~/notes.txt made the
        # download replace notes.txt; so did a 1777 directory owner's link. The kernel follows both.
        user, cases = self.user(), ("/tmp", "team", "team", "the link's owner's")
        for mode, whose in zip((0o1777, 0o2775, 0o777, 0o1777), cases, strict=True):
            with self.subTest(mode=oct(mode), directory=whose):
                shared, notes = self.shared(mode), self.victim_file()
                if whose != "/tmp":
                    os.chown(shared, user[1] if whose == "the link's owner's" else -1, user[2])
                self.plant(shared / "data.csv", user, link_to=notes)
                with self.assertRaises(PermissionError) as caught:
                    self.client().download("files/x", shared / "data.csv", sha256=DATA_SHA)
                self.assertEqual(caught.exception.filename, str(shared / "data.csv"))
                said = "refusing to follow a symbolic link another user made"
                self.assertIn(said, str(caught.exception))
                self.assertEqual(notes.read_text(), "the victim's notes")
                self.assertEqual(self.requests, [], "refused before any request")
                self.assertEqual([p.name for p in shared.iterdir()], ["data.csv"])

    def test_a_directory_link_another_user_owns_on_the_way_is_refused(self) -> None:
        # Found in review: a teammate's link team/drop -> ~victim made team/drop/notes.txt replace
        # the victim's notes. The user's own links on the way are followed, as before.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])  # a team directory: the teammate's group may write there
        self.plant(shared / "drop", user, link_to=notes.parent)
        (shared / "mine").symlink_to(shared / "drop")  # the user's own, through the teammate's
        for via in ("drop", "mine", "drop/../drop", "mine/."):
            with self.subTest(via=via), self.assertRaises(PermissionError) as caught:
                self.client().download("files/x", f"{shared}/{via}/notes.txt", sha256=DATA_SHA)
            self.assertEqual(caught.exception.filename, str(shared / "drop"))
            said = "refusing to follow a symbolic link another user made"
            self.assertIn(said, str(caught.exception))
        self.assertEqual(notes.read_text(), "the victim's notes")
        self.assertEqual(self.requests, [], "refused before any request")
        (shared / "own").symlink_to(notes.parent)
        self.script(serve_file(DATA))
        self.client().download("files/x", shared / "own" / "new.csv")
        self.assertEqual((notes.parent / "new.csv").read_bytes(), DATA)

    def test_a_directory_swapped_for_a_link_after_the_walk_gets_nothing_replaced(self) -> None:
        # Found in review: a teammate swapping team/box for a link to ~victim between the client's
        # walk and its making the file replaced the victim's notes (0.1% of tries, in a loop).
        # Issue 35: every side file is made in the directory walked to, held: the download ends
        # there, wherever the teammate moved it.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])
        (box := shared / "box").mkdir()
        create, swapped = dc._Directory.create, list[str]()

        def swapping(directory: Any, name: str, mode: int = 0o600) -> int:
            if not swapped:  # the first file the download makes: box goes, the link comes
                swapped.append(name)
                box.rename(shared / "box.away")
                self.plant(box, user, link_to=notes.parent)
            return create(directory, name, mode)  # type: ignore[no-any-return]

        self.script(serve_file(DATA))
        with mock.patch.object(dc._Directory, "create", swapping):
            self.client().download("files/x", box / "notes.txt")
        self.assertEqual(swapped, [".notes.txt.1.part"])
        self.assertEqual(notes.read_text(), "the victim's notes")
        self.assertEqual(sorted(p.name for p in notes.parent.iterdir()), ["notes.txt"])
        self.assertEqual((shared / "box.away" / "notes.txt").read_bytes(), DATA)
        self.assertEqual([p.name for p in (shared / "box.away").iterdir()], ["notes.txt"])

    def test_a_directory_link_is_refused_whatever_the_link_at_the_end_says(self) -> None:
        # Found in review: team/box -> ~victim/dots (a teammate's), and there the victim's own
        # data.bin -> ~victim/precious: the end link's absolute target skipped the walk of team/box.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])
        (dots := notes.parent / "dots").mkdir()
        (dots / "data.bin").symlink_to(notes)  # absolute
        self.plant(shared / "box", user, link_to=dots)
        with self.assertRaises(PermissionError) as caught:
            self.client().download("files/x", shared / "box" / "data.bin", sha256=DATA_SHA)
        self.assertEqual(caught.exception.filename, str(shared / "box"))
        self.assertEqual((notes.read_text(), self.requests), ("the victim's notes", []))

    def test_a_directory_missing_at_the_walk_is_never_replaced_by_path(self) -> None:
        # Found in review: team/box missing when the walk looked, a teammate's link to ~victim
        # there when the file was made: the commit went by path and replaced the victim's notes.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])
        look, planted = dc._link_target, list[bool]()

        def planting(directory: Any, name: str, shown: str) -> str | None:
            target = look(directory, name, shown)
            if not planted:  # right after the walk found box missing: the teammate's link comes
                planted.append(True)
                self.plant(shared / "box", user, link_to=notes.parent)
            return target

        self.script(serve_file(DATA))
        with (
            mock.patch.object(dc, "_link_target", planting),
            self.assertRaises(OSError) as caught,
        ):
            self.client().download("files/x", shared / "box" / "notes.txt")
        self.assertEqual(planted, [True])
        self.assertEqual(caught.exception.errno, errno.ENOENT)
        self.assertEqual(notes.read_text(), "the victim's notes")
        self.assertEqual(sorted(p.name for p in notes.parent.iterdir()), ["notes.txt"])

    def test_the_users_own_links_and_roots_are_followed(self) -> None:
        me = os.geteuid()  # 4242 below: a user who is not root, the link root's (as /dev/stdout is)
        for mode, user in ((0o1777, me), (0o2775, me), (0o1777, 4242 if me == 0 else me)):
            with self.subTest(mode=oct(mode), user=user), mock.patch.object(dc.os, "geteuid") as id:
                id.return_value = user
                shared, notes = self.shared(mode), self.victim_file()
                (shared / "report.csv").symlink_to(notes)
                self.script(serve_file(DATA))
                self.client().download("files/x", shared / "report.csv")
                self.assertEqual(notes.read_bytes(), DATA, "the file the link names is replaced")
                self.assertTrue((shared / "report.csv").is_symlink())
                self.assertEqual(sorted(p.name for p in notes.parent.iterdir()), ["notes.txt"])

    def test_a_link_renamed_over_the_users_own_as_it_is_read_is_not_followed(self) -> None:
        # A teammate's link renamed over the user's own between the client's look and its read.
        user = self.user()
        if not dc._O_PATH:
            self.skipTest("without O_PATH the link is looked at, then read by its name")
        shared, notes, own = self.shared(0o2775), self.victim_file(), self.tmp() / "own.csv"
        os.chown(shared, -1, user[2])  # the teammate's group: they can write there
        (shared / "data.csv").symlink_to(own)
        self.plant(shared / "theirs", user, link_to=notes)
        read = os.readlink

        def renamed_over_it_first(path: Any, *args: Any, **kwargs: Any) -> Any:
            if os.path.lexists(shared / "theirs"):
                os.replace(shared / "theirs", shared / "data.csv")
            return read(path, *args, **kwargs)

        self.script(serve_file(DATA))
        with mock.patch.object(dc.os, "readlink", renamed_over_it_first):
            self.client().download("files/x", shared / "data.csv")
        self.assertFalse(os.path.lexists(shared / "theirs"), "renamed")
        self.assertEqual((own.read_bytes(), notes.read_text()), (DATA, "the victim's notes"))

    def test_links_planted_at_the_side_files_names_are_never_followed(self) -> None:
        user = self.user()
        # The partial file, its state, and a save of the state that kill -9 cut short (which is cleaned up).
        for name in (".out.bin.part", ".out.bin.part.json", ".out.bin.part.json.0123abcd.tmp"):
            with self.subTest(name):
                shared, notes = self.shared(0o777), self.victim_file()
                self.plant(shared / name, user, link_to=notes)
                self.script(serve_file(DATA))
                self.client().download("files/x", shared / "out.bin", resume=True)
                self.assertEqual(notes.read_text(), "the victim's notes")
                self.assertEqual((shared / "out.bin").read_bytes(), DATA)
                self.assertEqual(
                    sorted(p.name for p in shared.iterdir()), sorted([name, "out.bin"])
                )

    def test_a_planted_partial_file_and_forged_state_are_left_alone(self) -> None:
        user = self.user()
        shared = self.shared(0o1777)
        url = self.server.url + "/api/v1/files/x"
        forged = {"url": url, "validator": '"v1"', "total": 4, "parts": [[0, 4, 4]]}
        self.plant(shared / ".out.bin.part", user, data=b"EVIL")
        self.plant(shared / ".out.bin.part.json", user, data=json.dumps(forged).encode())
        self.script(serve_file(DATA))
        self.client().download("files/x", shared / "out.bin", resume=True)
        self.assertEqual((shared / "out.bin").read_bytes(), DATA)
        self.assertEqual(len(self.requests), 1, "the forged 'complete' state sent no request")
        self.assertIsNone(self.requests[0].headers["Range"])
        self.assertEqual(
            (shared / ".out.bin.part").read_bytes(),
            b"EVIL",
            "nothing written into the planted file",
        )
        self.assertEqual(
            sorted(p.name for p in shared.iterdir()),
            [".out.bin.part", ".out.bin.part.json", "out.bin"],
        )
        own = self.tmp()  # the control: the same files, this user's own, are taken up (their last byte asked again)
        (own / ".out.bin.part").write_bytes(b"EVIL")
        (own / ".out.bin.part.json").write_text(json.dumps(forged))
        self.server.default = serve_file(
            DATA
        )  # a 206 of another size: the file changed, it starts over
        self.client().download("files/x", own / "out.bin", resume=True)
        self.assertEqual(self.requests[1].headers["Range"], "bytes=3-")

    def test_a_planted_world_writable_partial_file_never_receives_the_download(self) -> None:
        user = self.user()
        shared = self.shared(0o1777)
        self.plant(shared / ".out.bin.part", user)
        self.script(first_bytes_then_stall(DATA, 1_500_000))
        with self.assertRaises(dc.RequestTimeoutError):
            self.client(timeout=0.1, max_retries=0).download(
                "files/x", shared / "out.bin", resume=True
            )
        self.assertEqual(
            (shared / ".out.bin.part").read_bytes(), b"", "the other user could read it"
        )

    def test_a_partial_file_another_process_commits_as_this_one_opens_it_is_left_alone(
        self,
    ) -> None:
        # Found in review: the lock was taken on a .part another process had just renamed over the
        # destination; with no state beside it, this download truncated and rewrote the finished file.
        directory = self.tmp()
        destination = directory / "out.bin"
        (directory / ".out.bin.part").write_bytes(DATA)  # the other process's, complete
        take_the_lock = dc._FileTarget._lock

        def committed_first(target: Any, fd: int) -> bool:
            os.replace(
                directory / ".out.bin.part", destination
            )  # the other process's commit lands now
            return take_the_lock(target, fd)  # type: ignore[no-any-return]

        self.script(cut(DATA, 1000, {"ETag": '"v1"'}))
        with (
            mock.patch.object(dc._FileTarget, "_lock", committed_first),
            self.assertRaises(dc.IncompleteResponseError),
        ):
            self.client(max_retries=0).download("files/x", destination, resume=True)
        self.assertEqual(
            destination.read_bytes(), DATA, "the finished file is left exactly as it was"
        )
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])

    def test_a_file_renamed_over_the_temporary_file_is_never_committed(self) -> None:
        # Issue 30: a teammate's file renamed over .data.csv.*.part was committed: the call, given
        # the right sha256= (of the bytes the client wrote), returned normally, data.csv theirs.
        user = self.user()
        for resume in (False, True):
            with self.subTest(resume=resume):
                self.server.requests.clear()
                shared = self.shared(0o2775)
                destination, theirs = shared / "data.csv", shared / "theirs.csv"
                destination.write_text("the victim's earlier data")
                self.plant(theirs, user, data=b"the teammate's rows")

                def swap(done: int, total: int | None, planted: Path = theirs) -> None:
                    for temporary in planted.parent.glob(".data.csv*.part"):
                        if planted.exists():
                            os.replace(planted, temporary)

                self.script(serve_file(DATA))
                fetch = self.client().download
                with self.assertRaises(PermissionError) as caught:
                    fetch("files/x", destination, sha256=DATA_SHA, resume=resume, progress=swap)
                self.assertFalse(theirs.exists(), "the rename took place")
                self.assertEqual(caught.exception.filename, str(destination))
                said = "another file was put in place of the temporary file: not committed"
                self.assertIn(said, str(caught.exception))
                self.assertEqual(destination.read_text(), "the victim's earlier data")
                self.assertEqual(len(self.requests), 1)
                self.assertEqual([p.name for p in shared.iterdir()], ["data.csv"])

    def test_a_file_renamed_over_the_temporary_as_it_is_committed_is_not_left_there(self) -> None:
        # The rename landing between the client's check and its rename: the check after finds it.
        user, replace = self.user(), os.replace
        for owner in ("a teammate", "the user"):
            with self.subTest(swapped_in_file_of=owner):
                shared = self.shared(0o2775)
                destination, theirs = shared / "data.csv", shared / "theirs.csv"
                if owner == "a teammate":
                    self.plant(theirs, user, data=b"their rows")
                else:
                    theirs.write_text("own")

                def renamed_over_it_first(
                    source: Any, target: Any, planted: Path = theirs, **at: Any
                ) -> None:
                    if Path(target).name == "data.csv":  # the commit: checked, not yet renamed
                        replace(planted, planted.parent / Path(source).name)
                    replace(source, target, **at)

                self.script(serve_file(DATA))
                with mock.patch.object(dc.os, "replace", renamed_over_it_first):
                    outcome = outcome_of(
                        lambda d=destination: self.client().download("files/x", d, sha256=DATA_SHA)  # type: ignore[misc]
                    )
                said = "another file was put in place of the temporary file and moved into place: "
                if owner == "a teammate":
                    self.assertIsInstance(outcome, PermissionError)
                    self.assertIn(said + "removed", str(outcome))
                    self.assertEqual(list(shared.iterdir()), [], "their file is not left there")
                else:
                    # Issue 35: the user's own file there, this download's linked nowhere: as
                    # another download's commit after this one (the last to commit wins).
                    self.assertIsNone(outcome)
                    self.assertEqual(destination.read_text(), "own")
                    self.assertEqual([p.name for p in shared.iterdir()], ["data.csv"])

    def test_a_fifo_swapped_for_a_link_once_looked_at_never_gets_the_links_target_written(
        self,
    ) -> None:
        # Found in review: a destination found to be a FIFO was then opened "wb" (create, truncate,
        # following links): swapped for a link in between, the link's target was truncated and written.
        # The walk looks once at the destination, in its directory: the other user's move right after.
        shared, notes = self.shared(0o1777), self.victim_file()
        destination = shared / "out.bin"
        os.mkfifo(destination)
        looks: list[str] = []
        lstat = os.lstat

        def look_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            status = lstat(path, *args, **kwargs)
            if str(path) in (str(destination), destination.name) and not looks:
                looks.append(str(path))
                destination.unlink()
                destination.symlink_to(notes)
            return status

        self.script(serve_file(DATA))
        with mock.patch.object(os, "lstat", look_then_swap):
            outcome = outcome_of(lambda: self.client().download("files/x", destination, deadline=5))
        self.assertEqual(looks, ["out.bin"])
        self.assertIsInstance(outcome, OSError)
        self.assertEqual(notes.read_text(), "the victim's notes", f"the download: {outcome!r}")

    def test_dev_stdout_and_other_magic_links_are_written_through(self) -> None:
        self.script(serve_file(b"through /dev/stdout\n"))
        code = "import sys, dataset_client as dc\ndc.DatasetClient(sys.argv[1]).download('files/x', '/dev/stdout')\n"
        done = subprocess.run(
            [sys.executable, "-c", code, self.server.url], cwd=HERE, capture_output=True, timeout=30
        )
        self.assertEqual((done.returncode, done.stdout), (0, b"through /dev/stdout\n"), done.stderr)

    def test_the_state_file_is_made_private(self) -> None:
        directory = self.tmp()
        modes: list[int] = []

        def look(done: int, total: int | None) -> None:
            state = directory / ".out.bin.part.json"
            if state.exists():
                modes.append(state.stat().st_mode & 0o777)

        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "out.bin", resume=True, progress=look)
        self.assertTrue(modes)
        self.assertEqual(
            set(modes), {0o600}, "the state holds the URL, which may carry a signature"
        )

    def test_a_temporary_file_left_by_kill_9_is_removed_by_the_next_download(self) -> None:
        fcntl = import_or_skip(self, "fcntl")
        code = (
            "import sys, dataset_client as dc\n"
            "with dc.DatasetClient(sys.argv[1], timeout=30, max_retries=0) as client:\n"
            "    client.download('files/x', sys.argv[2])\n"
        )
        for case, respond in (
            ("with bytes", first_bytes_then_stall(DATA, 1_500_000)),
            ("empty", hang),
        ):
            with self.subTest(
                killed=case
            ):  # empty: killed while waiting for the answer, before any write
                self.script(respond)
                directory, asked = self.tmp(), len(self.requests)
                arguments = [self.server.url + "/api/v1", str(directory / "out.bin")]
                process = subprocess.Popen([sys.executable, "-c", code, *arguments])
                self.addCleanup(process.kill)
                # Only the .part is looked at: the file made before it, under another name, may be gone by then.
                # Its request must have arrived too: else the next download got the scripted answer.
                empty = case == "empty"
                _wait_for(
                    lambda d=directory, e=empty, n=asked: (  # type: ignore[misc]
                        len(self.requests) > n
                        and any(
                            p.suffix == ".part" and (e or p.stat().st_size > 0) for p in d.iterdir()
                        )
                    ),
                    10,
                )
                process.kill()
                process.wait(10)
                (left,) = directory.iterdir()
                self.assertEqual(left.name, ".out.bin.1.part")
                # Another download's, in progress: held, kept.
                busy = directory / ".out.bin.2.part"
                busy.write_bytes(b"")
                with busy.open("rb") as held:
                    fcntl.flock(held.fileno(), fcntl.LOCK_EX)
                    self.script(serve_file(DATA))
                    self.client().download("files/x", directory / "out.bin")
                self.assertEqual(
                    sorted(p.name for p in directory.iterdir()), [busy.name, "out.bin"]
                )


class SecondReviewFileTests(ServerTestCase):
    """The second review's file-system findings: planted FIFOs, descriptors as streams, the CLI's skip,
    the config file's owner, the sweep's names, the lock without flock. In-process; a real second user
    is .ci/second_user_checks.py's."""

    STRANGER = 4242  # a uid no one here has: files "another user" made (chown needs root)

    def as_stranger(self, path: Path) -> Path:
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user")
        os.chown(path, self.STRANGER, self.STRANGER, follow_symlinks=False)
        return path

    def sticky(self) -> Path:
        directory = self.tmp()
        directory.chmod(0o1777)
        return directory

    def cli(self, *argv: str, environment: dict[str, str] | None = None) -> tuple[int, str]:
        """main() with no DATASET_CLIENT_ variables but ``environment``; (exit status, stderr)."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        err = io.StringIO()
        with (
            mock.patch.dict(
                os.environ, {**kept, "HOME": str(self.tmp()), **(environment or {})}, clear=True
            ),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(err),
        ):
            status = cli.main(list(argv))
        return status, err.getvalue()

    def read_fifo(self, fifo: Path) -> Callable[[], bytes]:
        """Start a reader of ``fifo``; the function returned ends it and gives what it read (also a cleanup)."""
        received = bytearray()
        reader = threading.Thread(target=lambda: received.extend(fifo.read_bytes()), daemon=True)
        reader.start()

        def finish() -> bytes:
            # A writer's open and close let the reader, waiting in open(), read to the end. Until
            # the reader is in open(), a non-blocking writer's open fails (ENXIO): tried again.
            deadline = time.monotonic() + 10
            while reader.is_alive() and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                reader.join(0.01)
            return bytes(received)

        self.addCleanup(finish)
        return finish

    def test_a_fifo_another_user_planted_in_a_sticky_directory_is_refused(self) -> None:
        shared = self.sticky()
        os.mkfifo(shared / "report.csv", 0o622)
        self.as_stranger(shared / "report.csv")
        received = self.read_fifo(shared / "report.csv")  # the other user, waiting for it
        with self.assertRaises(PermissionError) as caught:
            self.client().download("files/x", shared / "report.csv")
        self.assertEqual(caught.exception.filename, str(shared / "report.csv"))
        self.assertEqual(received(), b"")
        self.assertIn(
            "a FIFO another user made in a sticky world-writable directory", str(caught.exception)
        )
        self.assertEqual(self.requests, [], "refused before any request")

    def test_fifos_the_kernel_would_let_the_user_open_are_written(self) -> None:
        for case in ("own, sticky", "another's, not sticky", "the directory owner's, sticky"):
            with self.subTest(case):
                directory = self.tmp()
                directory.chmod(0o777 if "not sticky" in case else 0o1777)
                fifo = directory / "out.bin"
                os.mkfifo(fifo)
                if case != "own, sticky":
                    self.as_stranger(fifo)
                if "owner" in case:
                    os.chown(directory, self.STRANGER, self.STRANGER)
                received = self.read_fifo(fifo)
                self.script(serve_file(b"through the FIFO"))
                self.client().download("files/x", fifo)
                self.assertEqual(received(), b"through the FIFO")
                self.assertEqual([p.name for p in directory.iterdir()], ["out.bin"])

    def test_a_fifo_whose_reader_goes_away_is_a_failed_download(self) -> None:
        # Found in this pass: the CLI took the FIFO's broken pipe for stdout's `| head` and exited 0.
        fifo = self.tmp() / "out.bin"
        os.mkfifo(fifo)

        def read_a_little() -> None:
            with fifo.open("rb") as reading:
                reading.read(1000)

        reader = threading.Thread(target=read_a_little, daemon=True)
        reader.start()
        self.script(serve_file(DATA))
        status, err = self.cli("download", self.server.url + "/files/x", str(fifo))
        reader.join(10)
        self.assertEqual(
            (status, err),
            (
                1,
                f"dataset-client: error: cannot write {fifo}: its reader went away (Broken pipe)\n",
            ),
        )
        self.assertEqual(len(self.requests), 1)

    def test_descriptors_are_streams_written_at_their_position(self) -> None:
        # Found in review: `download URL /dev/stdout >> t.log` resolved /dev/stdout to t.log and replaced it.
        log = self.tmp() / "t.log"
        log.write_bytes(b"earlier lines\n")
        inode = log.stat().st_ino
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)  # as the shell's >> opens it
        self.addCleanup(os.close, fd)
        link = self.tmp() / "to-the-log"
        link.symlink_to(f"/dev/fd/{fd}")
        descriptors = link.with_name("descriptors")
        descriptors.symlink_to("/proc/self/fd")  # a link to their directory
        expected = b"earlier lines\n"
        names = (
            f"/dev/fd/{fd}",
            f"/proc/self/fd/{fd}",
            f"/proc/{os.getpid()}/fd/{fd}",
            str(link),
            f"{descriptors}/{fd}",
        )
        for name in names:
            with self.subTest(name):
                self.script(serve_file(b"appended\n"))
                self.client().download("files/x", name)
                expected += b"appended\n"
                self.assertEqual(log.read_bytes(), expected)
                self.assertEqual(
                    log.stat().st_ino, inode, "the log itself, never a file moved over it"
                )
                self.assertEqual([p.name for p in log.parent.iterdir()], ["t.log"])
        with self.assertRaises(
            OSError
        ) as caught:  # no such descriptor: an OSError, never an OverflowError
            self.client().download("files/x", "/dev/fd/" + "9" * 30)
        self.assertEqual(caught.exception.errno, errno.EBADF)
        self.assertEqual(
            len(self.requests), len(names), "nothing asked for a descriptor there is not"
        )

    def test_the_clis_skip_trusts_only_the_users_own_file(self) -> None:
        # Found in review: another user's file with the expected sha256 was trusted (and left as it was).
        directory = self.tmp()
        theirs = directory / "out.bin"
        theirs.write_bytes(DATA)
        self.as_stranger(theirs)
        self.script(serve_file(DATA))
        status, err = self.cli(
            "download", self.server.url + "/files/x", str(theirs), "--sha256", DATA_SHA
        )
        self.assertEqual(status, 0, err)
        self.assertNotIn("already has the expected sha256", err)
        self.assertEqual(len(self.requests), 1, "downloaded")
        self.assertEqual(theirs.stat().st_uid, os.geteuid(), "the user's own file now")
        status, err = self.cli(
            "download", self.server.url + "/files/x", str(theirs), "--sha256", DATA_SHA
        )
        self.assertEqual(
            (status, err), (0, f"{theirs} already has the expected sha256: not downloaded again\n")
        )
        self.assertEqual(len(self.requests), 1, "the control: the user's own file is trusted")

    def test_the_clis_skip_never_follows_a_link_the_download_refuses(self) -> None:
        shared, notes = self.sticky(), self.tmp() / "notes.bin"
        notes.write_bytes(DATA)  # the user's own, with the expected sha256
        (shared / "out.bin").symlink_to(notes)
        self.as_stranger(shared / "out.bin")
        status, err = self.cli(
            "download", self.server.url + "/files/x", str(shared / "out.bin"), "--sha256", DATA_SHA
        )
        self.assertEqual(status, 1, err)
        self.assertIn("refusing to follow a symbolic link another user made", err)
        self.assertEqual(self.requests, [])
        self.assertEqual(notes.read_bytes(), DATA)

    def test_a_skipped_download_leaves_no_partial_files(self) -> None:
        # Found in review: after the file was downloaded some other way, the -c partial files stayed for good.
        directory = self.tmp()
        url = self.server.url + "/files/x"
        (directory / ".out.bin.part").write_bytes(DATA[:1000])
        state = {
            "url": url,
            "validator": '"v1"',
            "total": len(DATA),
            "parts": [[0, len(DATA), 1000]],
        }
        (directory / ".out.bin.part.json").write_text(json.dumps(state))
        (directory / "out.bin").write_bytes(DATA)
        status, err = self.cli(
            "download", url, str(directory / "out.bin"), "--sha256", DATA_SHA, "-c"
        )
        self.assertEqual(
            (status, err),
            (0, f"{directory / 'out.bin'} already has the expected sha256: not downloaded again\n"),
        )
        self.assertEqual(self.requests, [])
        self.assertEqual([p.name for p in directory.iterdir()], ["out.bin"])

    def config_file(self, *, mode: int = 0o600) -> Path:
        config = self.tmp() / "config.toml"
        config.write_text(f'[default]\nbase_url = "{self.server.url}/api/v1"\napi_key = "{KEY}"\n')
        config.chmod(mode)
        return config

    def test_a_config_file_another_user_owns_or_can_write_is_refused(self) -> None:
        # Found in review: whoever could write the file set base_url, and the key went there.
        theirs = self.as_stranger(self.config_file())
        link = self.tmp() / "config.toml"
        link.symlink_to(theirs)
        writable = self.config_file(mode=0o620)
        self.server.default = reply(body=[])
        for path, said in (
            (
                theirs,
                f"{theirs} is owned by another user (uid {self.STRANGER}): not used; a copy of your own with"
                f" mode 600 works: install -m 600 {theirs} ~/dataset-client.toml and set"
                " DATASET_CLIENT_CONFIG=~/dataset-client.toml",
            ),
            (link, f"{link} is owned by another user (uid {self.STRANGER})"),
            (
                writable,
                f"{writable} is writable by group or others: not used; run chmod go-w {writable}",
            ),
        ):
            with self.subTest(str(path)):
                status, err = self.cli("datasets", environment={"DATASET_CLIENT_CONFIG": str(path)})
                self.assertEqual(status, 2, err)
                self.assertIn(said, err)
                self.assertEqual(self.requests, [], "nothing sent where that file says")
        status, err = self.cli(
            "datasets", environment={"DATASET_CLIENT_CONFIG": str(self.config_file())}
        )
        self.assertEqual(status, 0, err)
        self.assertEqual(
            self.requests[0].headers["Authorization"],
            f"Bearer {KEY}",
            "the control: the user's own",
        )

    def test_the_sweep_removes_only_the_names_the_client_makes(self) -> None:
        # Found in review: a download to notes.txt removed .notes.txt.from-laptop1.part (its length matched).
        import_or_skip(self, "fcntl")
        directory = self.tmp()
        # Issue 35: the names a download probes for (no listing); the earlier scheme's random names
        # (.NAME.<12 hex>.part, .NAME.part.json.<8 hex>.tmp) are looked for no more.
        users = [
            ".notes.txt.from-laptop1.part",
            ".notes.txt.0123456789AB.part",
            ".notes.txt.part.json.laptop-1.tmp",
            ".notes.txt.0123456789ab.part",
            ".notes.txt.part.json.0123abcd.tmp",
            ".notes.txt.4.part",
            ".notes.txt.01.part",
        ]
        for resume in (False, True):
            with self.subTest(resume=resume):
                directory = self.tmp()
                for name in [*users, *(f".notes.txt.{n}.part" for n in (1, 2, 3))]:
                    (directory / name).write_bytes(b"kept")
                if resume:  # a save of the state that kill -9 cut short
                    (directory / ".notes.txt.part.json.tmp").write_bytes(b"{")
                self.script(serve_file(DATA))
                self.client().download("files/x", directory / "notes.txt", resume=resume)
                left = sorted(p.name for p in directory.iterdir())
                self.assertEqual(left, sorted([*users, "notes.txt"]))

    def test_an_empty_or_garbled_lock_is_abandoned_once_it_is_a_few_seconds_old(self) -> None:
        # Found in review: an empty lock (a process killed before it wrote) was never taken over, and
        # a pid too large for os.kill raised OverflowError.
        directory = self.tmp()
        lock = directory / ".out.bin.part.lock"
        for content in (b"", b"12ab", b"9" * 40, b"0", b"-5", b"\xff7"):
            with (
                self.subTest(content=content),
                dc._FileTarget(dc._walk_to(str(directory / "out.bin")), resume=False) as target,
            ):
                lock.write_bytes(content)
                self.assertFalse(
                    target._lock_with_a_file(), "young: a process may be writing it now"
                )
                self.assertEqual(lock.read_bytes(), content)
                os.utime(lock, (time.time() - 60, time.time() - 60))
                self.assertTrue(target._lock_with_a_file())
                self.assertEqual(lock.read_text(), str(os.getpid()))
                target._unlock()
            self.assertEqual([p.name for p in directory.iterdir()], [])

    def test_a_file_not_of_the_announced_size_is_not_committed_and_the_error_has_both_sizes(
        self,
    ) -> None:
        # Issue 27: the sizes as fields (like IncompleteResponseError's), so that no one parses the message.
        directory = self.tmp()
        with dc._FileTarget(dc._walk_to(str(directory / "out.bin")), resume=False) as target:
            target.write_at(0, b"abc")
            with self.assertRaises(dc.InvalidResponseError) as caught:
                target.commit(5)
        self.assertEqual((caught.exception.received, caught.exception.expected), (3, 5))
        self.assertIn("has 3 bytes where the server announced 5", str(caught.exception))
        self.assertEqual(list(directory.iterdir()), [], "not moved into place, nothing left")
        self.assertIsNone(dc.InvalidResponseError("x").received)

    def test_three_take_overs_of_one_abandoned_lock_make_one_holder_in_any_interleaving(
        self,
    ) -> None:
        # Found in review: A and B both judged a lock abandoned; B moved it away and made its own; A then
        # moved B's live lock away, C created one in the gap, and two processes wrote one .part.
        judge, take_over = dc._abandoned_lock, dc._take_over_abandoned_lock
        for pause in (1, 2):  # A paused after its first look, or after its claim and second look
            with self.subTest(pause_after_look=pause):
                directory = self.tmp()
                lock = directory / ".out.bin.part.lock"
                lock.write_text("4194303")  # a process that is gone
                looks: list[str] = []
                others: list[bool] = []
                held = dc._Directory(None, str(directory))

                def look_then_let_the_others_run(
                    at_: Any,
                    name: str,
                    at: int = pause,
                    seen: list[str] = looks,
                    done: list[bool] = others,
                ) -> os.stat_result | None:
                    status = judge(at_, name)
                    seen.append(name)
                    if len(seen) == at and not done:  # A has looked: B, then C, take their turn
                        done.append(take_over(at_, name))
                        done.append(take_over(at_, name))
                    return status

                with (
                    mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
                    mock.patch.object(dc, "_abandoned_lock", look_then_let_the_others_run),
                ):
                    first = take_over(held, lock.name)
                self.assertEqual([first, *others].count(True), 1, f"A {first}, B and C {others}")
                self.assertEqual(
                    first, pause == 2, "the claim's holder goes on; without it, the first to claim"
                )
                self.assertEqual(lock.read_text(), str(os.getpid()))
                self.assertEqual(
                    [p.name for p in directory.iterdir()], [lock.name], "no claim or new file left"
                )

    def test_a_config_file_that_is_no_regular_file_or_too_large_is_refused_without_waiting(
        self,
    ) -> None:
        # Found in review2: a FIFO as the config file (one's own, or planted where DATASET_CLIENT_CONFIG
        # points) made every command wait in open() for a writer; a huge file was read whole.
        import_or_skip(self, "fcntl")
        fifo, huge, directory = self.tmp() / "fifo.toml", self.config_file(), self.tmp()
        os.mkfifo(fifo, 0o600)
        with huge.open("a") as file:
            file.write("# " + "x" * (1024 * 1024) + "\n")
        self.server.default = reply(body=[])
        for path, said in (
            (fifo, f"{fifo} is not a regular file: not used"),
            (huge, f"{huge} is larger than 1.0 MiB: not used"),
            (directory, f"cannot read the config file {directory}: Is a directory"),
        ):
            with self.subTest(str(path)):
                outcome: list[tuple[int, str]] = []
                environment = {"DATASET_CLIENT_CONFIG": str(path)}
                run = threading.Thread(
                    target=lambda seen, env: seen.append(self.cli("datasets", environment=env)),
                    args=(outcome, environment),
                    daemon=True,
                )
                run.start()
                run.join(10)
                if (
                    run.is_alive()
                ):  # waiting in open(): a writer's open and close lets it read an empty file
                    os.close(os.open(fifo, os.O_WRONLY))
                    run.join(10)
                self.assertEqual(len(outcome), 1)
                status, err = outcome[0]
                self.assertEqual((status, err), (2, f"dataset-client: error: {said}\n"))
                self.assertEqual(self.requests, [], "nothing sent")

    def test_a_descriptor_named_with_a_trailing_slash_is_the_same_stream(self) -> None:
        # Found in review2: "download URL /dev/fd/1/" was "invalid literal for int() with base 10: ''", exit 2.
        log = self.tmp() / "t.log"
        log.write_bytes(b"earlier lines\n")
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        self.addCleanup(os.close, fd)
        for name in (f"/dev/fd/{fd}/", f"/proc/self/fd/{fd}//"):
            with self.subTest(name):
                self.script(serve_file(b"appended\n"))
                self.client().download("files/x", name)
        self.assertEqual(log.read_bytes(), b"earlier lines\n" + b"appended\n" * 2)
        self.assertEqual([p.name for p in log.parent.iterdir()], ["t.log"])
        self.assertEqual(len(self.requests), 2)


class LockFileTests(ServerTestCase):
    """Without flock (Windows), ``.NAME.part.lock`` holds the downloading process's id."""

    def test_a_stale_lock_taken_over_by_another_download_meanwhile_is_left_to_it(self) -> None:
        # Found in review: two downloads both found the lock abandoned; the second removed the lock the
        # first had just made, and both wrote into one partial file.
        directory = self.tmp()
        lock = directory / ".out.bin.part.lock"
        lock.write_text("4194303")  # a process that is gone
        judge = dc._abandoned_lock
        looks: list[str] = []

        def another_takes_it_over_meanwhile(at: Any, name: str) -> os.stat_result | None:
            status = judge(at, name)
            if (
                not looks
            ):  # right after this download's look: the other one replaces it with its own
                lock.with_name("other").write_text(str(os.getpid()))
                os.replace(lock.with_name("other"), lock)
            looks.append(name)
            return status

        with (
            mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
            mock.patch.object(dc, "_abandoned_lock", another_takes_it_over_meanwhile),
            dc._FileTarget(dc._walk_to(str(directory / "out.bin")), resume=False) as target,
        ):
            self.assertFalse(target._lock_with_a_file(), "the other download's lock was taken")
        self.assertEqual(
            lock.read_text(), str(os.getpid()), "the other download's lock is in place"
        )
        self.assertEqual(sorted(p.name for p in directory.iterdir()), [".out.bin.part.lock"])

    def test_a_lock_left_by_a_process_that_is_gone_is_taken_over(self) -> None:
        directory = self.tmp()
        (directory / ".out.bin.part.lock").write_text("4194303")
        with (
            mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
            dc._FileTarget(dc._walk_to(str(directory / "out.bin")), resume=False) as target,
        ):
            self.assertTrue(target._lock_with_a_file())
            self.assertEqual((directory / ".out.bin.part.lock").read_text(), str(os.getpid()))
            target._unlock()
        self.assertEqual(list(directory.iterdir()), [])


class StateFileTests(ServerTestCase):
    """A crafted or damaged state is discarded: the download starts over, and the next run too is fine."""

    def prepare(self, state: object, *, raw: bytes | None = None) -> Path:
        directory = self.tmp()
        (directory / ".out.bin.part").write_bytes(DATA[:1000])
        (directory / ".out.bin.part.json").write_bytes(
            raw if raw is not None else json.dumps(state).encode()
        )
        return directory

    def test_states_that_do_not_hold_are_discarded(self) -> None:
        url = self.server.url + "/api/v1/files/x"
        good = {
            "url": url,
            "validator": '"v1"',
            "total": len(DATA),
            "parts": [[0, len(DATA), 1000]],
        }
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


# ---------------------------------------------------------------------------
# Downloads: hostile responses, and faults of the server or the caller
# ---------------------------------------------------------------------------


class HostileResponseTests(ServerTestCase):
    """Responses that never end, never answer, or end in the middle of their head."""

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
                part = f"bytes={len(BIG) // 4}-{len(BIG) // 2 - 1}"
                self.assertIn("bytes=100000-" if connections == 1 else part, ranges)

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

    def test_a_cut_head_on_a_parts_request_is_retried(self) -> None:
        def respond(handler: Handler) -> None:
            if "Range" in handler.headers and not getattr(handler.server, "cut_once", False):
                handler.server.cut_once = True  # type: ignore[attr-defined]
                handler.wfile.write(b"HTTP/1.1 206 Partial Content\r\nContent-Ra")
                handler.close_connection = True
                return
            serve_file(BIG)(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        self.client().download("files/big", out, connections=2, sha256=BIG_SHA)
        self.assertEqual(out.read_bytes(), BIG)
        ranges = [r.headers["Range"] for r in self.requests if r.headers["Range"]]
        self.assertEqual(len(ranges), 2, "the cut one was asked again")
        self.assertEqual(ranges[0], ranges[1], "for the same range")

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


def ignoring_ranges(handler: Handler) -> None:
    """BIG with Accept-Ranges and a strong ETag, but always a 200: a server (or a CDN) that strips Range."""
    local_service.send_file(
        handler, io.BytesIO(BIG), len(BIG), '"v1"', ranges=False, headers={"Accept-Ranges": "bytes"}
    )


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
                    _wait_for(joined_after_ctrl_c, 10)
            write_at(target, offset, data)

        def ctrl_c(number: int, frame: Any) -> None:  # Python's own handler, saying when it ran
            interrupted.set()
            raise KeyboardInterrupt

        def interrupt_once_joining() -> None:
            with contextlib.suppress(AssertionError):
                _wait_for(lambda: len(held) == 3 and main_joins(None), 10)
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
                _wait_for(
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
                _wait_for(lambda: len([r for r in self.requests if r.headers["Range"]]) == 2, 10)
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
        self.assertTrue(asked[:restart], "the kept parts asked for first")
        self.assertLessEqual(
            set(asked[:restart]),
            {(range_, '"v1"') for range_ in kept},
            "each from where it stopped",
        )
        self.assertTrue(all(if_range == '"v2"' for _, if_range in asked[restart + 1 :]), asked)

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


# ---------------------------------------------------------------------------
# Never hung: deadline and min_rate
# ---------------------------------------------------------------------------


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


class DeadlineTests(ServerTestCase):
    def assert_deadline_reached(
        self, error: object, seconds: float, attempts: int = 1
    ) -> dc.RequestTimeoutError:
        self.assertIsInstance(error, dc.RequestTimeoutError)
        assert isinstance(error, dc.RequestTimeoutError)
        self.assertEqual((error.deadline, error.attempts), (seconds, attempts))
        said = "(after 1 attempt)" if attempts == 1 else f"(after {attempts} attempts)"
        ended = "was reached|comes before .*: not waited for"
        self.assertRegex(str(error), rf"the deadline of {seconds:g} s ({ended}) {re.escape(said)}$")
        return error

    def assert_no_thread_left(self) -> None:
        names = [thread.name for thread in threading.enumerate()]
        self.assertFalse([name for name in names if name.startswith("dataset-client")], names)

    def test_a_server_that_never_answers_ends_the_call_at_its_deadline(self) -> None:
        hung_up: list[bool] = []

        def never_answer(connection: socket.socket) -> None:  # the request has been read
            with contextlib.suppress(TimeoutError):
                hung_up.append(connection.recv(1) == b"")  # the client's close, long before 5 s
            hung_up.append(False)

        base_url = raw_server(self, never_answer)
        client = self.client(base_url + "/api/v1", timeout=30, deadline=0.3)
        error = outcome_of(
            client.list_datasets
        )  # a 30 s timeout would fail the suite's time budget first
        self.assert_deadline_reached(error, 0.3)
        said = (
            f"GET {base_url}/api/v1/datasets: the deadline of 0.3 s was reached (after 1 attempt)"
        )
        self.assertEqual(str(error), said)
        _wait_for(lambda: len(hung_up) == 2)
        self.assertEqual(
            hung_up[0], True, "the client hung up: it did not wait for its 30 s time-out"
        )
        self.assertEqual(len(hung_up), 2, "one attempt: no retry once the deadline is reached")
        self.assertIsNone(error.retry_after)  # type: ignore[union-attr]

    def test_a_head_trickled_a_byte_at_a_time_ends_at_the_deadline(self) -> None:
        sent: list[int] = []  # bytes of the head sent when the client hung up

        def trickle_the_head(connection: socket.socket) -> None:
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Slow: " + b"a" * 40 + b"\r\n\r\n[]"
            for index in range(
                len(head)
            ):  # a byte every 0.05 s: no receive waits long; the whole head 3.5 s
                try:
                    connection.sendall(head[index : index + 1])
                except OSError:
                    break
                time.sleep(0.05)
            sent.append(index)

        base_url = raw_server(self, trickle_the_head)
        error = outcome_of(
            self.client(base_url + "/api/v1", timeout=30, deadline=0.3, max_retries=0).list_datasets
        )
        self.assert_deadline_reached(error, 0.3)
        _wait_for(lambda: bool(sent))
        # 0.3 s is some 6 bytes; half the head's 90 leaves a loaded machine room (a timing margin, not a measure).
        self.assertLess(
            sent[0], 45, "the client hung up at its deadline, long before the head's end"
        )

    def test_a_body_trickled_a_byte_every_0_2_s_ends_at_the_deadline_and_leaves_its_partial_file(
        self,
    ) -> None:
        data = os.urandom(5000)
        self.script(trickle(data, 1000, 0.2))
        out = self.tmp() / "out.bin"
        error = outcome_of(
            lambda: self.client(timeout=5).download(
                "/files/x", out, deadline=0.3, resume=True, sha256=hashlib.sha256(data).hexdigest()
            )
        )
        self.assert_deadline_reached(error, 0.3)
        self.assert_no_thread_left()  # the sha256 thread ended with the call
        self.assertEqual(
            [(r.path, r.headers["Range"]) for r in self.requests], [("/files/x", None)]
        )
        kept = (out.parent / ".out.bin.part").read_bytes()
        self.assertFalse(out.exists())
        self.assertGreaterEqual(len(kept), 1000, "the bytes received before the deadline are kept")
        self.assertEqual(kept, data[: len(kept)])
        self.assertLess(
            len(kept), 1000 + 40, "ended by the deadline, not by the end of the trickle"
        )
        self.script(serve_file(data))  # and the next run continues from there
        self.client().download(
            "/files/x", out, resume=True, sha256=hashlib.sha256(data).hexdigest()
        )
        self.assertEqual(out.read_bytes(), data)
        self.assertEqual(self.requests[1].headers["Range"], f"bytes={len(kept)}-")

    def test_a_name_lookup_that_hangs_ends_at_the_deadline(self) -> None:
        # Issue 30: a 1 s deadline, a 10 s call: getaddrinfo, which has no time-out, hung.
        released, real = threading.Event(), socket.getaddrinfo
        self.addCleanup(released.set)
        asked: list[str] = []

        def hanging(host: Any, port: Any, *options: Any) -> Any:  # a name server that never answers
            if host != "hangs.example" or (len(options) > 3 and options[3] & socket.AI_NUMERICHOST):
                return real(host, port, *options)  # no lookup: an address, or AI_NUMERICHOST
            asked.append(host)
            released.wait(3)  # bounded: the unfixed client waits this long
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

        started = time.monotonic()
        with mock.patch.object(dc.socket, "getaddrinfo", hanging):
            error = outcome_of(self.client("http://hangs.example/api", deadline=0.5).list_datasets)
        self.assertLess(time.monotonic() - started, 0.5 + 1)
        self.assertEqual(asked, ["hangs.example"])
        self.assertIsInstance(error, dc.RequestTimeoutError)
        reached = "the deadline of 0.5 s was reached (after 1 attempt)"
        self.assertEqual(str(error), f"GET http://hangs.example/api/datasets: {reached}")
        self.assertRegex(str(error.__cause__), r": timed out connecting$")
        released.set()  # the lookup's thread, left to the resolver, ends when it gives up

        def looking_up() -> bool:
            return any(t.name.startswith("dataset_client: looking") for t in threading.enumerate())

        _wait_for(lambda: not looking_up())

    def test_a_deadline_never_lengthens_a_wait_nor_hides_a_cut_body(self) -> None:
        def head_then_silence(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", "10")
            handler.end_headers()
            handler.wfile.write(b"[1")
            handler.wfile.flush()
            hang(handler)

        self.script(cut(b"[1, 2, 3]\n", 5), head_then_silence)
        with self.assertLogs("dataset_client", "WARNING") as logs:
            error = outcome_of(self.client(timeout=0.1, deadline=5, max_retries=1).list_datasets)
        self.assertEqual(
            logs.records[0].getMessage(),
            f"retrying in 0.0 s (1 attempt left): GET {self.server.url}/api/v1/datasets:"
            " connection closed after 5 of 10 bytes",
        )
        self.assertIsInstance(error, dc.RequestTimeoutError)
        assert isinstance(error, dc.RequestTimeoutError)
        self.assertIsNone(error.deadline, "its 0.1 s time-out ended it, long before the deadline")
        self.assertEqual(
            str(error),
            f"GET {self.server.url}/api/v1/datasets: timed out waiting for data (after 2 attempts)",
        )
        self.assertEqual([r.path for r in self.requests], ["/api/v1/datasets"] * 2)

    def test_a_retry_after_longer_than_the_deadline_is_not_waited_for(self) -> None:
        self.script(reply(503, {"message": "busy"}, {"Retry-After": "5"}))
        with recorded_sleeps() as sleeps:
            error = outcome_of(self.client(deadline=1).list_datasets)
        self.assert_deadline_reached(error, 1)
        assert isinstance(error, dc.RequestTimeoutError)
        self.assertEqual(sleeps, [], "not waited for")
        self.assertEqual(error.retry_after, 5.0)
        self.assertIn(
            "comes before the retry in 5 s that Retry-After asks for: not waited for", str(error)
        )
        self.assertIsInstance(error.__cause__, ServiceError)
        self.assertEqual(len(self.requests), 1)
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((copy.retry_after, copy.deadline, str(copy)), (5.0, 1.0, str(error)))

    def test_a_back_off_longer_than_the_deadline_is_not_waited_for(self) -> None:
        self.script(reply(502), reply(200, []))
        with recorded_sleeps() as sleeps:
            self.assertEqual(self.client(deadline=0.5, backoff_factor=0.001).list_datasets(), [])
        self.assertEqual(len(sleeps), 1, "a short back-off is waited for")
        self.script(reply(502), reply(200, []))
        with recorded_sleeps() as sleeps:
            error = outcome_of(
                self.client(deadline=0.5, backoff_factor=4, max_retries=5).list_datasets
            )
        self.assert_deadline_reached(error, 0.5)
        self.assertEqual(sleeps, [], "a back-off of 2 s or more is not waited for")
        self.assertIsNone(error.retry_after)  # type: ignore[union-attr]
        self.assertIn(
            "the deadline of 0.5 s comes before the next retry: not waited for", str(error)
        )
        self.assertEqual(len(self.requests), 3, "the 200 is never asked for")

    def test_the_deadline_and_min_rate_are_checked_like_timeout(self) -> None:
        for value, error in (
            (0, ValueError),
            (-1, ValueError),
            (float("nan"), ValueError),
            ("1", TypeError),
        ):
            with self.subTest(value=value):
                with self.assertRaisesRegex(error, "^deadline must be"):
                    DatasetClient(self.server.url, deadline=value)  # type: ignore[arg-type]
                for name in ("deadline", "min_rate"):
                    with self.assertRaisesRegex(error, f"^{name} must be"):
                        self.client().download("/files/x", io.BytesIO(), **{name: value})
        self.assertEqual(self.requests, [], "nothing sent")

    def test_a_parallel_download_with_a_silent_part_ends_at_its_deadline_with_every_thread(
        self,
    ) -> None:
        quarter = len(BIG) // 4

        def respond(handler: Handler) -> None:
            if handler.headers.get("Range", "").startswith(f"bytes={2 * quarter}-"):
                first_bytes_then_stall(BIG, 1000)(handler)  # then silent until the test ends
            else:
                serve_file(BIG)(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        client = self.client(timeout=30, deadline=0.4)
        error = outcome_of(
            lambda: client.download("files/big", out, connections=4, sha256=BIG_SHA, resume=True)
        )
        self.assert_deadline_reached(error, 0.4)
        self.assert_no_thread_left()
        self.assertEqual(len(self.requests), 4, "each part asked once")
        names = sorted(path.name for path in out.parent.iterdir())
        self.assertEqual(names, [".big.bin.part", ".big.bin.part.json"], "what resume=True keeps")
        parts = json.loads((out.parent / ".big.bin.part.json").read_text())["parts"]
        self.assertEqual(
            [done for _, _, done in parts][2], 1000, "the silent part's bytes are kept"
        )
        self.server.default = serve_file(BIG)
        client.download(
            "files/big", out, connections=4, sha256=BIG_SHA, resume=True
        )  # within 0.4 s once more
        self.assertEqual(out.read_bytes(), BIG)
        self.assertIn(
            f"bytes={2 * quarter + 1000}-{len(BIG) * 3 // 4 - 1}",
            [r.headers["Range"] for r in self.requests],
        )

    def test_a_connection_a_deadline_shortened_gets_the_whole_timeout_back_for_the_next_call(
        self,
    ) -> None:
        self.script(reply(200, []), reply(200, []))
        client = self.client(timeout=5)
        self.assertEqual(client.download("/files/x", io.BytesIO(), deadline=0.5), None)
        (connection,) = [c for idle in client._pool._idle.values() for c in idle]
        self.assertLessEqual(connection.sock.gettimeout(), 0.5)
        self.assertEqual(client.list_datasets(), [])
        self.assertEqual(connection.sock.gettimeout(), 5.0, "not the 0.5 s the download left it")
        self.assertEqual(
            [(r.path, r.connection) for r in self.requests],
            [("/files/x", 1), ("/api/v1/datasets", 1)],
        )

    def test_a_stalled_part_is_fetched_again_from_its_offset_while_the_others_go_on(self) -> None:
        quarter = len(BIG) // 4
        stalled = [0]

        def respond(handler: Handler) -> None:
            if handler.headers.get("Range", "").startswith(f"bytes={quarter}-") and not stalled[0]:
                stalled[0] += 1
                trickle(BIG, 1000, 0.04)(handler)  # 25 B/s, a byte well within each wait's time-out
            else:
                serve_file(BIG)(handler)

        self.server.default = respond
        out = self.tmp() / "big.bin"
        self.client(timeout=0.3).download(
            "files/big", out, connections=4, sha256=BIG_SHA, min_rate=64 * 1024
        )
        self.assertEqual(out.read_bytes(), BIG)
        ranges = [r.headers["Range"] or "" for r in self.requests]
        again = [
            r
            for r in ranges
            if r.startswith("bytes=") and quarter < int(r[6:].split("-")[0]) < 2 * quarter
        ]
        self.assertEqual(len(again), 1, ranges)
        start = int(again[0][6:].split("-")[0])
        # Cut after about 0.3 s of trickle (8 bytes), not when the 40 bytes the server trickles ran out.
        self.assertTrue(
            quarter + 1000 <= start < quarter + 1030, f"from where it stalled: {again[0]}"
        )
        self.assertEqual(len(ranges), 5, "the other parts were fetched once")
        self.assert_no_thread_left()

    def test_a_connection_below_min_rate_is_resumed_and_one_that_always_is_says_its_rate(
        self,
    ) -> None:
        data = os.urandom(200_000)
        self.script(trickle(data, 50_000, 0.03), serve_file(data))
        out = self.tmp() / "out.bin"
        self.client(timeout=0.2).download("/files/x", out, min_rate=1024 * 1024)
        self.assertEqual(out.read_bytes(), data)
        start = int((self.requests[1].headers["Range"] or "=-")[6:].split("-")[0])
        # Cut after about 0.2 s of trickle (7 bytes), not when the 40 bytes the server trickles ran out.
        self.assertTrue(50_000 <= start < 50_030, self.requests[1].headers["Range"])
        self.assertEqual(self.requests[1].headers["If-Range"], '"v1"')
        self.script(
            trickle(data, 1000, 0.03), trickle(data, 1000, 1)
        )  # the second silent past its time-out
        error = outcome_of(
            lambda: self.client(timeout=0.2, max_retries=1).download(
                "/x", out, min_rate=1024 * 1024
            )
        )
        self.assertIsInstance(error, dc.RequestTimeoutError)
        rate = r"stalled at [\d.]+ (B|KiB)/s over 0\.\d s, below the 1\.0 MiB/s of min_rate"
        self.assertRegex(str(error), rf"^GET {self.server.url}/x: {rate} \(after 2 attempts\)$")
        self.assertEqual(
            [r.headers["Range"] is None for r in self.requests[2:]], [True, False], "resumed once"
        )
        self.assertEqual(out.read_bytes(), data, "the file already there is untouched")

    def test_the_command_line_s_max_time_and_speed_limit_are_exit_3_naming_them(self) -> None:
        self.server.default = hang
        err = io.StringIO()
        with (
            contextlib.redirect_stderr(err),
            mock.patch.dict(os.environ, {"DATASET_CLIENT_BASE_URL": self.server.url}),
        ):
            status = cli.main(["datasets", "--max-time", "0.15", "--timeout", "30"])
        self.assertEqual(status, 3)
        said = f"GET {self.server.url}/datasets: --max-time 0.15 was reached (after 1 attempt)"
        self.assertEqual(err.getvalue(), f"dataset-client: error: {said}\n")
        self.assertEqual([r.path for r in self.requests], ["/datasets"])
        self.server.default = trickle(os.urandom(100_000), 1000, 0.03)
        out = self.tmp() / "out.bin"
        err = io.StringIO()
        argv = [
            "download",
            f"{self.server.url}/files/x",
            str(out),
            "--speed-limit",
            "1M",
            "--timeout",
            "0.15",
        ]
        with contextlib.redirect_stderr(err):
            status = cli.main([*argv, "--retries", "0", "-q"])
        self.assertEqual(status, 3)
        self.assertRegex(
            err.getvalue(),
            rf"^dataset-client: error: GET {self.server.url}/files/x: stalled at [\d.]+ (B|KiB)/s over 0\.\d s, "
            r"below the 1\.0 MiB/s of --speed-limit; with -c, the partial file is kept [^\n]*\n$",
        )
        self.assertEqual([r.path for r in self.requests], ["/datasets", "/files/x"])

    def test_a_pipe_whose_reader_stopped_reading_ends_at_the_deadline_or_on_close(self) -> None:
        # Found in the third review (issue 30): a reader that neither reads nor closes held the
        # write into the pipe for ever, whatever the deadline. A raw pipe on one connection; a
        # buffered one (as sys.stdout.buffer is) on four; and close() from another thread.
        self.server.default = serve_file(BIG)
        cases = ((1, 0, "deadline"), (4, -1, "deadline"), (4, 0, "close"))
        for connections, buffering, ender in cases:
            with self.subTest(connections=connections, ender=ender):
                self.server.requests.clear()
                client, read_end, write_end = self.client(), *os.pipe()
                received, options = bytearray(), {"connections": connections}
                if ender == "deadline":
                    options["deadline"] = 0.5
                else:
                    threading.Timer(0.5, client.close).start()
                pipe = open(write_end, "wb", buffering=buffering)  # noqa: SIM115 -- closed below
                with contextlib.suppress(BrokenPipeError), pipe:
                    download = functools.partial(client.download, "files/big", pipe, **options)
                    outcome, took = run_within(2, download)
                    os.set_blocking(read_end, False)
                    with contextlib.suppress(BlockingIOError):
                        while piece := os.read(read_end, 65536):
                            received += piece
                    os.close(read_end)  # a write still blocked (the test fails) ends now
                if ender == "deadline":
                    self.assertIsInstance(outcome, dc.RequestTimeoutError)
                    self.assertIn("the deadline of 0.5 s was reached", str(outcome))
                else:
                    self.assertIsInstance(outcome, dc.ClientClosedError)
                self.assertLess(took, 1.5)
                self.assertEqual(part_threads(), [])
                self.assertEqual(bytes(received), BIG[: len(received)])
                self.assertGreater(len(received), 0)
                self.assertIsNone(self.requests[0].headers["Range"])

    def test_stalls_count_as_attempts_though_each_brought_a_mib(self) -> None:
        # Found in the third review (issue 30): each attempt brought a MiB or more, then stalled;
        # that reset the count of retries: with max_retries=2, 9 attempts in 12 s, and no end.
        self.server.default = first_bytes_then_stall(BIG, 1536 * 1024)
        out, client = self.tmp() / "big.bin", self.client(timeout=0.2, max_retries=2)
        error = outcome_of(lambda: client.download("files/big", out, min_rate=16 * 1024 * 1024))
        self.assertIsInstance(error, dc.RequestTimeoutError)
        rate = r"stalled at [\d.]+ (KiB|MiB)/s over 0\.\d s, below the 16\.0 MiB/s of min_rate"
        url = f"{self.server.url}/api/v1/files/big"
        self.assertRegex(str(error), rf"^GET {url}: {rate} \(after 3 attempts\)$")
        ranges = [r.headers["Range"] for r in self.requests]
        self.assertEqual(ranges, [None, "bytes=1572864-", "bytes=3145728-"])
        self.assertEqual(list(out.parent.iterdir()), [])

    def test_a_stall_measured_with_a_body_s_last_bytes_is_no_error_once_the_body_is_whole(
        self,
    ) -> None:
        # Found in review2: --limit-rate below --speed-limit per connection (-n 4): a part whose last bytes
        # came with a stall got the stall from its check for bytes past its Content-Range, was fetched
        # again as "Range: bytes=4718592-4718591", and the download failed with an InvalidResponseError.
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        with theirs:
            theirs.sendall(
                b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-2/3\r\nContent-Length: 3\r\n\r\nabc"
            )
        response = dc._PooledResponse(ours, method="GET")
        response.method, response.url = "GET", "http://127.0.0.1/files/x"
        self.addCleanup(response.close)
        response.begin()
        now = [0.0]
        with mock.patch.object(
            dc, "time", mock.Mock(monotonic=lambda: now[0])
        ):  # this module's clock alone
            watch = dc._Watch(1.0, None, min_rate=1000.0)
            watch.take(response)
            now[0] = 5.0  # 3 bytes in 5 s: below min_rate, measured as the last bytes arrive
            self.assertEqual(response.read(3), b"abc")
            self.assertEqual(
                response.read(1), b"", "the body is whole: nothing past it, and no stall to report"
            )
        self.assertEqual(response.length, 0)


# ---------------------------------------------------------------------------
# The command line: against the stand-in service and scripted servers; as a new user meets it
# ---------------------------------------------------------------------------


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
            cwd=HERE,
            capture_output=True,
            timeout=60,
            check=False,
        )

    def run_in_terminal(
        self, argv: list[str], columns: int, on_screen: Callable[[str], None] | None = None
    ) -> tuple[int, str]:
        """The command run on a pseudo-terminal (stdout and stderr) of ``columns`` columns: its status, all it drew.

        ``on_screen`` is given all drawn so far, each time more is; the process is ``self.in_terminal``."""
        fcntl, pty, termios = (import_or_skip(self, name) for name in ("fcntl", "pty", "termios"))

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        environment |= {
            "DATASET_CLIENT_BASE_URL": self.base_url,
            "DATASET_CLIENT_API_KEY": "stand-in-key",
            "TERM": "xterm",
            "DATASET_CLIENT_PAGER": "",  # output taller than the screen is drawn, not paged (that is tested apart)
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "dataset_client", *argv],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            env=environment,
            cwd=HERE,
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

    README = HERE / "README.md"
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
        self.assertTrue((HERE / "docs" / "DESIGN.md").is_file())
        self.assertIn("(docs/DESIGN.md)", text)


# ---------------------------------------------------------------------------
# The stand-in service (examples/local_service.py), its Parquet writer, and the stand-in as a process
# ---------------------------------------------------------------------------


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
                [sys.executable, str(HERE / "examples" / "local_service.py"), *argv],
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
            done = subprocess.run(tour, cwd=HERE, capture_output=True, timeout=60)
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
        argv = [sys.executable, str(HERE / "examples" / "local_service.py"), "--port", "0"]
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


# --------------------------------------------------------------------------------------
# The README's command on every core: `python -m unittest` (discovery) runs both modules' tests
# in one set of forked processes, two per core (most tests wait on sockets, deadlines and child
# processes, not on a core), each taking the next few tests from a queue, and reports each outcome
# as it comes. Named tests (`python -m unittest test_dataset_client.SomeTests`) and pytest run in
# one process as usual. DATASET_CLIENT_TEST_PROCESSES=1 turns it off.
# --------------------------------------------------------------------------------------


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
        self.chunks: list[list[unittest.TestCase]] = []
        self.processes, self.started = processes, False
        self.take(tests)

    def take(self, tests: unittest.TestSuite) -> None:
        """Queue ``tests`` too (another module's, from the same discovery), six to a chunk."""
        ordered = list(iterate_tests(tests))
        self.chunks += [ordered[start : start + 6] for start in range(0, len(ordered), 6)]

    def run(self, result: unittest.TestResult, debug: bool = False) -> unittest.TestResult:
        self.started = True
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
    tests of a module loaded after this one (test_dataset_client_cli) queued in the same workers:
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


if __name__ == "__main__":
    unittest.main()

"""A seeded, time-bounded chaos soak of ``DatasetClient.download()``.

``python3 benchmarks/soak.py [--repo PATH] [--seed N] [--seconds S] [--trials N] [--quick]``
``python3 benchmarks/soak.py --replay SEED:TRIAL [--repo PATH]`` (one trial, its full log)

An origin (``http.server`` on 127.0.0.1, files served by the stand-in's ``send_file``: ETag,
Last-Modified, Accept-Ranges, Range, If-Range) sits behind a relay (raw sockets, 127.0.0.1)
that picks a fault for each request from a seeded RNG: cuts, resets, stalls past the
client's time-out, trickles, a flipped bit, a lying or duplicated Content-Length, forged,
weak or missing validators, a stripped Range or If-Range, the file changing during a run,
a response head cut before its blank line, 1xx floods, a 503, and ``kill -9`` of the
downloading process (each run is a child process importing ``dataset_client`` from
``--repo``). A trial is a series of runs to one destination (the same ``resume``,
``connections`` and ``sha256`` for all), some with faults, then up to two clean runs (a
healthy server, no faults), stopping at the first success. After each run it checks:

WRONG    a committed file whose bytes are no version the server had during that run, or a
         destination that changed although the download failed
STUCK    both clean runs failed (a resume that cannot succeed against a healthy server)
HEALTHY  one clean run failed without a reason (a resume after a network-corrupted partial
         may fail its sha256 once); the second succeeded
LEFT     anything beside the destination after a success or a failure without resume; with
         resume, anything but ``.NAME.part`` and ``.NAME.part.json`` after a failure
UNCLEAN  an error that is no ``DatasetClientError`` (a bare TypeError, a traceback)
HUNG     a run that did not end within RUN_LIMIT seconds

In half the trials the origin also states its digests: ``Repr-Digest`` with each file and
``Content-Digest`` on each 206 (the stand-in's), which the client checks with or without a
``sha256``. A bit flipped by the network (and a 200 shorter than the file, sent only when a
sha256 or digests are given) can only be caught by ``sha256`` or a digest: it is counted
apart, caught or missed, and a file that differs from the server's only where the network
flipped bits is not WRONG when neither was given; where a digest was sent it is WRONG.
Exit status: 0 when no trial had a finding, 1 otherwise. Nothing is left behind: the
servers are shut down and the temporary directories removed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import email.utils
import hashlib
import http.server
import importlib.util
import io
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

HERE = Path(__file__).resolve().parent
TIMEOUT = 1.0  # the client's time-out in a run with faults: a stall costs this much; a trickle's gaps are 0.2 s
CLEAN_TIMEOUT = 5.0  # in a clean run, where nothing stalls: a busy machine is no finding
STALL = 2.5  # how long a stalled response stays silent (past TIMEOUT), unless the run ends first
RUN_LIMIT = 40.0  # a run taking longer is HUNG
MAX_FAULTY_RUNS = 4
CLEAN_RUNS = 2
SIZES = (0, 1, 517, 16_384, 70_001, 600_000, 2_400_000, 4_500_000)
BIG_SIZES = (2_400_000, 3_300_000, 4_500_000)  # parts of at least 1 MiB: 2 to 4 of them
LOG_LINES = 30  # of one run's requests, in a trial's log
PREVIOUS = b"the previous contents of the destination\n"

CHILD = r"""
import json, os, signal, sys
sys.path.insert(0, sys.argv[1])
import dataset_client as dc
job = json.loads(sys.argv[2])
kill_at = job["kill_at"]

def progress(done, total):
    if done >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

settings = {"timeout": job["timeout"], "max_retries": job["max_retries"], "backoff_factor": 0.01}
try:
    client = dc.DatasetClient(job["base"], **settings)
except TypeError:  # a version without backoff_factor
    del settings["backoff_factor"]
    client = dc.DatasetClient(job["base"], **settings)
options = {"sha256": job["sha256"], "resume": job["resume"], "connections": job["connections"]}
if kill_at is not None:
    options["progress"] = progress
try:
    with client:
        client.download(job["url"], job["destination"], **options)
except dc.DatasetClientError as error:
    outcome = {"outcome": "error", "type": type(error).__name__, "message": str(error)[:400]}
except BaseException as error:
    outcome = {"outcome": "unclean", "type": type(error).__name__, "message": str(error)[:400]}
else:
    outcome = {"outcome": "ok"}
print(json.dumps(outcome), flush=True)
"""


def _load_local_service() -> Any:
    spec = importlib.util.spec_from_file_location(
        "local_service", HERE.parent / "examples" / "local_service.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------
# The origin: one file at a time, in versions
# ---------------------------------------------------------------------------


@dataclass
class Version:
    index: int
    data: bytes
    etag: str
    last_modified: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


class Store:
    """The file a trial downloads: every version it had, the last one served."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.digests = False  # the origin sends Repr-Digest and each 206's Content-Digest
        self.versions: list[Version] = []
        self.name = "t0"
        self.seed = ""
        self.size = 0

    def start(self, seed: str, size: int) -> None:
        with self.lock:
            self.seed, self.size, self.versions = seed, size, []
        self.bump()

    def bump(self) -> int:
        """A new version of the file (new bytes, new ETag, a later Last-Modified)."""
        with self.lock:
            index = len(self.versions)
            data = random.Random(f"{self.seed}:v{index}").randbytes(self.size)
            etag = f'"v{index}-{hashlib.sha256(data).hexdigest()[:12]}"'
            modified = email.utils.formatdate(1_700_000_000 + 3600 * index, usegmt=True)
            self.versions.append(Version(index, data, etag, modified))
            return index

    def current(self) -> Version:
        with self.lock:
            return self.versions[-1]

    def by_etag(self, etag: str | None) -> int | None:
        with self.lock:
            return next((version.index for version in self.versions if version.etag == etag), None)


def start_origin(store: Store) -> http.server.ThreadingHTTPServer:
    local_service = _load_local_service()

    class Origin(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            version = store.current()  # a response in flight keeps its version
            headers = {"Last-Modified": version.last_modified}
            digest = version.sha256 if store.digests else None
            local_service.send_file(
                self,
                io.BytesIO(version.data),
                len(version.data),
                version.etag,
                headers=headers,
                sha256=digest,
                content_digest=store.digests,
            )

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(
                sys.exc_info()[1], OSError
            ):  # the relay hung up: a fault it was told to make
                super().handle_error(
                    request, client_address
                )  # anything else is a bug of the origin's: shown

    server = Server(("127.0.0.1", 0), Origin)
    threading.Thread(target=server.serve_forever, name="soak-origin", daemon=True).start()
    return server


# ---------------------------------------------------------------------------
# The relay: a fault per request
# ---------------------------------------------------------------------------

FAULTS = (
    "cut",  # the body cut at a random offset, connection closed
    "reset",  # the same with a TCP reset
    "reset_before",  # a reset before any response
    "stall",  # part of the body, then silence past the client's time-out
    "stall_head",  # no response at all
    "trickle",  # the body a few bytes at a time for a second, then the rest
    "trickle_cut",  # a few bytes at a time, then closed
    "flip",  # one bit of the body flipped
    "length_more",  # Content-Length larger than the body, closed after the body
    "length_less",  # Content-Length smaller than the body (206; a 200 only with sha256)
    "short_range",  # a 206 whose Content-Range ends before what was asked
    "etag_forged",  # another strong ETag
    "etag_weak",  # the ETag made weak
    "etag_missing",  # no ETag (Last-Modified kept)
    "validators_missing",  # neither ETag nor Last-Modified
    "strip_range",  # Range and If-Range removed from the request: a 200
    "strip_if_range",  # If-Range removed: a 206 even from another version
    "change_during",  # the file changes on the server while this body is sent
    "head_cut",  # the response head cut before its blank line
    "dup_length",  # two different Content-Length headers
    "dup_length_same",  # the same Content-Length twice
    "interim_few",  # 1 to 3 interim responses (100, 103) first
    "interim_flood",  # 150 interim responses first
    "busy",  # 503 with Retry-After: 0
    "kill",  # kill -9 of the downloading process at a random byte of this body
)


LAWFUL = frozenset(("trickle", "interim_few"))  # on any response: slow, or interim responses first
# A server that always does this one: ignores Range, sends no ETag or a weak one, or no validator.
LAWFUL_WHEN_STICKY = frozenset(("strip_range", "etag_missing", "etag_weak", "validators_missing"))


class Stop(Exception):
    """The relay ends this connection (a fault that closes it, or the run is over)."""


@dataclass
class Fault:
    kind: str
    at: float  # where in the body, as a fraction of it
    detail: str = ""

    def offset(self, length: int) -> int:
        return min(length - 1, int(self.at * length)) if length > 0 else 0


@dataclass
class RunPlan:
    """What the relay does to one run's requests."""

    rng: random.Random
    probability: float = 0.0  # that a request gets a fault
    sticky: str | None = None  # every request gets this fault
    change_before: bool = False  # the file changes on the server before the run
    progress_kill_at: int | None = None  # the child kills itself when this many bytes are done
    relay_kill_at: int | None = (
        None  # the relay kills the child after this many body bytes of the run
    )
    log: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)  # the faults it got

    @property
    def clean(self) -> bool:
        return (
            self.probability == 0 and self.progress_kill_at is None and self.relay_kill_at is None
        )

    @property
    def healthy(self) -> bool:
        """Nothing went wrong in the run but what a server may lawfully do: a correct client succeeds."""
        if self.progress_kill_at is not None or self.relay_kill_at is not None:
            return False
        lawful = LAWFUL | (LAWFUL_WHEN_STICKY if self.sticky else frozenset())
        return all(kind in lawful for kind in self.applied)


@dataclass
class Exchange:
    """One request and its response, as the relay forwards it."""

    client: socket.socket
    upstream: BinaryIO
    request: bytes
    status: int = 0
    head_lines: list[bytes] = field(default_factory=list)  # status line, then header lines
    length: int = 0
    start: int = 0  # the body's first byte in the file
    version: int | None = None

    def header(self, name: str) -> str | None:
        prefix = name.lower().encode() + b":"
        line = next((line for line in self.head_lines[1:] if line.lower().startswith(prefix)), None)
        return None if line is None else line.partition(b":")[2].strip().decode("latin-1")

    def set_header(self, name: str, value: str | None) -> None:
        prefix = name.lower().encode() + b":"
        self.head_lines = [line for line in self.head_lines if not line.lower().startswith(prefix)]
        if value is not None:
            self.head_lines.append(f"{name}: {value}".encode("latin-1"))

    def head(self) -> bytes:
        return b"".join(line + b"\r\n" for line in self.head_lines) + b"\r\n"


def _read_head(reader: BinaryIO) -> list[bytes] | None:
    """The lines of a message head, without their CRLF; None at end of stream."""
    lines: list[bytes] = []
    while True:
        line = reader.readline(65537)
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            return lines
        lines.append(line.rstrip(b"\r\n"))
        if len(lines) > 200:
            raise Stop


def _without(request: list[bytes], *names: str) -> list[bytes]:
    prefixes = tuple(name.lower().encode() + b":" for name in names)
    return [line for line in request if not line.lower().startswith(prefixes)]


class Relay:
    """Forwards the client's requests to the origin, with a fault on some of them."""

    def __init__(self, origin: tuple[str, int], store: Store) -> None:
        self.origin = origin
        self.store = store
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.plan = RunPlan(random.Random(0))
        self.child: subprocess.Popen[bytes] | None = None
        self.run_over = threading.Event()
        self.sockets: set[socket.socket] = set()
        self.body_sent = 0  # this run's body bytes, all connections together
        self.relay_kill_at: int | None = None
        self.generation = 0  # of runs: a connection of an earlier run does nothing more
        self.connection = threading.local()  # its generation
        self.flips: list[tuple[int, int, int]] = []  # this trial's: (version, offset, mask)
        self.lies = 0  # this trial's 200s shorter than the file
        self.sha256_given = False
        self.faults: collections.Counter[str] = collections.Counter()
        self.closed = False
        threading.Thread(target=self._accept, name="soak-relay", daemon=True).start()

    def begin_run(self, plan: RunPlan) -> None:
        with self.lock:
            self.plan, self.relay_kill_at, self.body_sent = plan, plan.relay_kill_at, 0
            self.generation += 1
        self.run_over.clear()

    def end_run(self) -> None:
        self.run_over.set()
        with self.lock:
            sockets, self.sockets = list(self.sockets), set()
        for sock in sockets:
            _close(sock)

    def close(self) -> None:
        self.closed = True
        self.end_run()
        _close(self.listener)

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.sockets.add(client)
            threading.Thread(
                target=self._serve, args=(client,), name="soak-relay-connection", daemon=True
            ).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        self.connection.generation = self.generation
        try:
            upstream = socket.create_connection(self.origin)
            with self.lock:
                self.sockets.add(upstream)
            requests, responses = client.makefile("rb"), upstream.makefile("rb")
            while (request := _read_head(requests)) is not None:
                self._exchange(client, upstream, responses, request)
        except (OSError, Stop, ValueError):
            pass
        finally:
            _close(client)
            if upstream is not None:
                _close(upstream)

    def _check_current(self) -> None:
        if self.connection.generation != self.generation:
            raise Stop  # the run it belongs to is over

    def _next_fault(self) -> Fault | None:
        with self.lock:
            self._check_current()
            plan = self.plan
            if plan.sticky is None and plan.rng.random() >= plan.probability:
                return None
            return Fault(plan.sticky or plan.rng.choice(FAULTS), plan.rng.random())

    def _exchange(
        self,
        client: socket.socket,
        upstream: socket.socket,
        responses: BinaryIO,
        request: list[bytes],
    ) -> None:
        fault = self._next_fault()
        kind = fault.kind if fault else ""
        if kind in ("reset_before", "stall_head", "busy"):
            return self._answer_alone(client, fault, request)  # type: ignore[arg-type]
        if kind == "strip_range":
            request = _without(request, "Range", "If-Range")
        elif kind == "strip_if_range":
            request = _without(request, "If-Range")
        upstream.sendall(b"".join(line + b"\r\n" for line in request) + b"\r\n")
        exchange = self._response(client, responses, request)
        if (
            fault is not None
            and kind == "length_less"
            and exchange.status == 200
            and not self.sha256_given
        ):
            fault.kind = "cut"  # a shorter 200 is a lie only a sha256 can catch
        self._record(fault, exchange)
        handler = getattr(self, f"_fault_{fault.kind}", None) if fault else None
        if handler is None:
            client.sendall(exchange.head())
            return self._forward(exchange, exchange.length)
        return handler(exchange, fault)  # type: ignore[no-any-return]

    def _response(
        self, client: socket.socket, responses: BinaryIO, request: list[bytes]
    ) -> Exchange:
        head = _read_head(responses)
        if not head:
            raise Stop
        exchange = Exchange(client, responses, b"\r\n".join(request), head_lines=head)
        exchange.status = int(head[0].split()[1])
        exchange.length = int(exchange.header("Content-Length") or 0)
        content_range = exchange.header("Content-Range") or ""
        if exchange.status == 206 and content_range.startswith("bytes "):
            exchange.start = int(content_range[6:].partition("-")[0])
        exchange.version = self.store.by_etag(exchange.header("ETag"))
        return exchange

    def _record(self, fault: Fault | None, exchange: Exchange) -> None:
        asked = next(
            (
                line.decode("latin-1")
                for line in exchange.request.split(b"\r\n")
                if line.lower().startswith(b"range:")
            ),
            "",
        )
        answer = f"{exchange.status} {exchange.header('Content-Range') or ''} v{exchange.version}".replace(
            "  ", " "
        )
        with self.lock:
            what = f"{fault.kind}@{fault.at:.2f}" if fault else "ok"
            self.plan.log.append(f"GET {asked or 'whole'} -> {answer}: {what}")
            if fault:
                self.faults[fault.kind] += 1
                self.plan.applied.append(fault.kind)

    def _answer_alone(self, client: socket.socket, fault: Fault, request: list[bytes]) -> None:
        with self.lock:
            self.plan.log.append(f"GET {request[0][:60]!r}: {fault.kind}")
            self.faults[fault.kind] += 1
            self.plan.applied.append(fault.kind)
        if fault.kind == "busy":
            client.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n"
            )
            return
        if fault.kind == "stall_head":
            self.run_over.wait(STALL)
        _reset(client)
        raise Stop

    def _forward(
        self, exchange: Exchange, count: int, change: Callable[[bytes, int], bytes] | None = None
    ) -> None:
        """Send the next ``count`` body bytes from the origin to the client (``change`` may alter them)."""
        sent = 0
        while sent < count:
            data = exchange.upstream.read(min(65536, count - sent))
            if not data:
                raise Stop
            data = data if change is None else change(data, sent)
            kill_now = False
            with self.lock:
                self._check_current()
                if (
                    self.relay_kill_at is not None
                    and self.body_sent + len(data) >= self.relay_kill_at
                ):
                    data, kill_now = data[: max(0, self.relay_kill_at - self.body_sent)], True
                self.body_sent += len(data)
            exchange.client.sendall(data)
            sent += len(data)
            if kill_now:
                self._kill_child()
                raise Stop

    def _kill_child(self) -> None:
        with self.lock:
            child, self.relay_kill_at = self.child, None
            self.plan.log.append(f"  kill -9 after {self.body_sent} body bytes of this run")
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)

    # The faults, one method each (``_fault_`` + its name): each sends the response its way.

    def _fault_cut(self, exchange: Exchange, fault: Fault) -> None:
        exchange.client.sendall(exchange.head())
        self._forward(exchange, fault.offset(exchange.length))
        raise Stop

    def _fault_reset(self, exchange: Exchange, fault: Fault) -> None:
        exchange.client.sendall(exchange.head())
        self._forward(exchange, fault.offset(exchange.length))
        _reset(exchange.client)
        raise Stop

    def _fault_stall(self, exchange: Exchange, fault: Fault) -> None:
        exchange.client.sendall(exchange.head())
        self._forward(exchange, fault.offset(exchange.length))
        self.run_over.wait(STALL)
        raise Stop

    def _fault_trickle(self, exchange: Exchange, fault: Fault, *, then_cut: bool = False) -> None:
        exchange.client.sendall(exchange.head())
        rng = random.Random(fault.at)
        ends = time.monotonic() + 1.0
        sent = 0
        while sent < exchange.length and time.monotonic() < ends and not self.run_over.is_set():
            piece = min(exchange.length - sent, rng.randint(1, 64))
            self._forward(exchange, piece)
            sent += piece
            time.sleep(rng.uniform(0.05, 0.2))  # each gap well within the client's time-out
        if then_cut:
            raise Stop
        self._forward(exchange, exchange.length - sent)

    def _fault_trickle_cut(self, exchange: Exchange, fault: Fault) -> None:
        self._fault_trickle(exchange, fault, then_cut=True)

    def _fault_flip(self, exchange: Exchange, fault: Fault) -> None:
        where = fault.offset(exchange.length)
        mask = 1 << int(fault.at * 997) % 8

        def flip(data: bytes, offset: int) -> bytes:
            if not offset <= where < offset + len(data):
                return data
            changed = bytearray(data)
            changed[where - offset] ^= mask
            if exchange.version is not None:
                with self.lock:
                    self.flips.append((exchange.version, exchange.start + where, mask))
            return bytes(changed)

        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length, flip)

    def _fault_length_more(self, exchange: Exchange, fault: Fault) -> None:
        exchange.set_header("Content-Length", str(exchange.length + 1 + int(fault.at * 5000)))
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)
        raise Stop

    def _fault_length_less(self, exchange: Exchange, fault: Fault) -> None:
        shorter = fault.offset(exchange.length)
        if exchange.status == 200:
            with self.lock:
                self.lies += 1
        exchange.set_header("Content-Length", str(shorter))
        exchange.client.sendall(exchange.head())
        self._forward(exchange, shorter)
        raise Stop  # the rest would be taken for the next response

    def _fault_short_range(self, exchange: Exchange, fault: Fault) -> None:
        content_range = exchange.header("Content-Range")
        if exchange.status != 206 or content_range is None or exchange.length < 2:
            return self._fault_cut(exchange, fault)
        shorter = max(1, fault.offset(exchange.length))
        total = content_range.rpartition("/")[2]
        exchange.set_header(
            "Content-Range", f"bytes {exchange.start}-{exchange.start + shorter - 1}/{total}"
        )
        exchange.set_header("Content-Length", str(shorter))
        exchange.client.sendall(exchange.head())
        self._forward(exchange, shorter)
        raise Stop

    def _fault_etag_forged(self, exchange: Exchange, fault: Fault) -> None:
        exchange.set_header("ETag", f'"forged-{int(fault.at * 1e6)}"')
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)

    def _fault_etag_weak(self, exchange: Exchange, fault: Fault) -> None:
        etag = exchange.header("ETag")
        exchange.set_header("ETag", None if etag is None else "W/" + etag)
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)

    def _fault_etag_missing(self, exchange: Exchange, fault: Fault) -> None:
        exchange.set_header("ETag", None)
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)

    def _fault_validators_missing(self, exchange: Exchange, fault: Fault) -> None:
        exchange.set_header("ETag", None)
        exchange.set_header("Last-Modified", None)
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)

    def _fault_change_during(self, exchange: Exchange, fault: Fault) -> None:
        exchange.client.sendall(exchange.head())
        self._forward(exchange, fault.offset(exchange.length))
        with self.lock:
            self._check_current()
        version = self.store.bump()
        with self.lock:
            self.plan.log.append(f"  the file changed on the server: now v{version}")
        self._forward(exchange, exchange.length - fault.offset(exchange.length))

    def _fault_head_cut(self, exchange: Exchange, fault: Fault) -> None:
        head = exchange.head()
        if (
            fault.at < 0.5
        ):  # after a whole header line: nothing looks cut but the missing blank line
            lines = exchange.head_lines[: 1 + int(fault.at * 2 * len(exchange.head_lines))]
            exchange.client.sendall(b"".join(line + b"\r\n" for line in lines))
        else:  # within a line
            exchange.client.sendall(head[: max(1, int((fault.at - 0.5) * 2 * (len(head) - 2)))])
        raise Stop

    def _fault_dup_length(self, exchange: Exchange, fault: Fault) -> None:
        exchange.head_lines.append(f"Content-Length: {exchange.length + 7}".encode())
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)
        raise Stop  # the framing is ambiguous: nothing more on this connection

    def _fault_dup_length_same(self, exchange: Exchange, fault: Fault) -> None:
        exchange.head_lines.append(f"Content-Length: {exchange.length}".encode())
        exchange.client.sendall(exchange.head())
        self._forward(exchange, exchange.length)

    def _fault_interim_few(self, exchange: Exchange, fault: Fault) -> None:
        interim = (
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        )
        count = 1 + int(fault.at * 3)
        exchange.client.sendall(
            b"".join(interim[index % 2] for index in range(count)) + exchange.head()
        )
        self._forward(exchange, exchange.length)

    def _fault_interim_flood(self, exchange: Exchange, fault: Fault) -> None:
        interim = (
            b"HTTP/1.1 100 Continue\r\n\r\n"
            if fault.at < 0.5
            else b"HTTP/1.1 103 Early Hints\r\n\r\n"
        )
        exchange.client.sendall(interim * 150 + exchange.head())
        self._forward(exchange, exchange.length)
        raise Stop

    def _fault_kill(self, exchange: Exchange, fault: Fault) -> None:
        with self.lock:
            self.relay_kill_at = self.body_sent + fault.offset(exchange.length)
        exchange.client.sendall(exchange.head())
        if exchange.length == 0:
            self._kill_child()
            raise Stop
        self._forward(exchange, exchange.length)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# ---------------------------------------------------------------------------
# Trials: runs to one destination, then the checks
# ---------------------------------------------------------------------------

FINDINGS = ("WRONG", "STUCK", "HEALTHY", "LEFT", "UNCLEAN", "HUNG")


@dataclass
class Trial:
    """One destination downloaded by a series of runs, all drawn from ``seed:number``."""

    seed: int
    number: int
    size: int
    resume: bool
    connections: int
    sha256: bool
    max_retries: int
    previous: bytes | None  # what is at the destination before the first run
    runs: list[RunPlan]
    digests: bool = False  # the origin states its digests

    @property
    def name(self) -> str:
        return f"{self.seed}:{self.number}"

    def describe(self) -> str:
        previous = "an existing destination" if self.previous is not None else "no destination yet"
        return (
            f"{self.size} bytes, resume={self.resume}, connections={self.connections}, sha256={self.sha256}, "
            f"digests={self.digests}, max_retries={self.max_retries}, {previous}"
        )


def draw_trial(seed: int, number: int) -> Trial:
    rng = random.Random(f"{seed}:{number}")
    connections = rng.choice((1, 1, 2, 4))
    size = rng.choice(BIG_SIZES) if connections > 1 and rng.random() < 0.7 else rng.choice(SIZES)
    previous = PREVIOUS * rng.randint(1, 50) if rng.random() < 0.5 else None
    resume, sha256, max_retries = rng.random() < 0.6, rng.random() < 0.5, rng.choice((0, 1, 2, 3))
    runs: list[RunPlan] = []
    for index in range(rng.randint(1, MAX_FAULTY_RUNS)):
        plan = RunPlan(random.Random(f"{seed}:{number}:{index}"))
        mode = rng.random()
        if mode < 0.15:
            plan.sticky, plan.probability = rng.choice(FAULTS[:-1]), 1.0
        else:
            plan.probability = rng.choice((0.2, 0.4, 0.7, 1.0))
        plan.change_before = index > 0 and rng.random() < 0.2
        kill = rng.random()
        if (
            kill < 0.12
        ):  # the child kills itself once this much is written: at the end, before the rename
            plan.progress_kill_at = size if rng.random() < 0.5 else rng.randint(1, max(1, size))
        plan.relay_kill_at = rng.randint(0, max(0, size - 1)) if 0.12 <= kill < 0.24 else None
        runs.append(plan)
    for index in range(CLEAN_RUNS):
        plan = RunPlan(random.Random(f"{seed}:{number}:clean{index}"))
        plan.change_before = (
            index == 0 and plan.rng.random() < 0.25
        )  # a healthy server's file may change
        runs.append(plan)
    digests = (
        random.Random(f"{seed}:{number}:digests").random() < 0.5
    )  # its own draw: the rest stays as it was
    return Trial(
        seed, number, size, resume, connections, sha256, max_retries, previous, runs, digests
    )


@dataclass
class World:
    """The servers, shared by every trial, and where the trials' directories go."""

    repo: str  # where the copy of dataset_client.py is
    root: str
    store: Store
    origin: http.server.ThreadingHTTPServer
    relay: Relay
    commit: str  # of the checkout the copy was taken from, when it is one


@contextlib.contextmanager
def world(repo: str) -> Iterator[World]:
    """The servers, and a copy of ``repo``'s dataset_client.py: the checkout may change during the soak."""
    root = tempfile.mkdtemp(prefix="dataset-client-soak-")
    module = os.path.join(root, "module")
    os.mkdir(module)
    shutil.copy(os.path.join(repo, "dataset_client.py"), module)
    commit = _commit(repo)  # as the copy was taken
    check = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {module!r}); import dataset_client",
        ]
    )
    if check.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        sys.exit(f"{repo}/dataset_client.py does not import: nothing to soak")
    store = Store()
    origin = start_origin(store)
    relay = Relay(("127.0.0.1", origin.server_address[1]), store)
    try:
        yield World(module, root, store, origin, relay, commit)
    finally:
        relay.close()
        origin.shutdown()
        origin.server_close()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Outcome:
    """What happened in one trial."""

    trial: Trial
    findings: list[str] = field(default_factory=list)  # "KIND: what"
    log: list[str] = field(default_factory=list)
    succeeded: bool = False
    caught: int = 0  # network corruption caught by sha256 or a digest (as a ChecksumMismatchError)
    missed: int = 0  # network corruption committed (no sha256 given)
    runs: int = 0

    def find(self, kind: str, what: str) -> None:
        self.findings.append(f"{kind}: {what}")
        self.log.append(f"  ** {kind}: {what}")


def run_child(world: World, trial: Trial, plan: RunPlan, destination: str) -> dict[str, Any]:
    version = world.store.current()
    job = {
        "base": f"http://127.0.0.1:{world.relay.port}/",
        "url": f"http://127.0.0.1:{world.relay.port}/files/{trial.number}.bin",
        "destination": destination,
        "timeout": CLEAN_TIMEOUT if plan.clean else TIMEOUT,
        "max_retries": trial.max_retries,
        "sha256": version.sha256 if trial.sha256 else None,
        "resume": trial.resume,
        "connections": trial.connections,
        "kill_at": plan.progress_kill_at,
    }
    environment = {
        key: value for key, value in os.environ.items() if not key.lower().endswith("_proxy")
    }
    environment |= {"NO_PROXY": "127.0.0.1,localhost", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-I", "-c", CHILD, world.repo, json.dumps(job)]
    world.relay.sha256_given = trial.sha256 or trial.digests  # what can catch a shorter 200
    world.relay.begin_run(plan)  # before the child can connect
    child = subprocess.Popen(
        command, cwd=world.root, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    world.relay.child = child
    try:
        stdout, stderr = child.communicate(timeout=RUN_LIMIT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"outcome": "hung"}
    finally:
        if child.poll() is None:  # interrupted: the child goes too
            child.kill()
            child.wait()
        world.relay.end_run()
        world.relay.child = None
    if child.returncode == -signal.SIGKILL:
        return {"outcome": "killed"}
    lines = stdout.decode(errors="replace").strip().splitlines()
    if child.returncode != 0 or not lines:
        return {
            "outcome": "unclean",
            "type": f"exit {child.returncode}",
            "message": stderr.decode(errors="replace")[-400:],
        }
    return {**json.loads(lines[-1]), "sha256": job["sha256"]}


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None


def _only_flips(data: bytes, version: Version, flips: list[tuple[int, int, int]]) -> bool:
    """``data`` is ``version`` except where the network flipped a bit of it."""
    if len(data) != len(version.data):
        return False
    restored = bytearray(data)
    for index, offset, _ in flips:
        if index == version.index and offset < len(restored):
            restored[offset] = version.data[offset]
    return bytes(restored) == version.data


def run_trial(world: World, trial: Trial) -> Outcome:
    outcome = Outcome(trial, log=[f"trial {trial.name}: {trial.describe()}"])
    world.store.start(trial.name, trial.size)
    world.store.digests = trial.digests
    world.relay.flips, world.relay.lies = [], 0
    directory = tempfile.mkdtemp(prefix=f"trial{trial.number}-", dir=world.root)
    destination = os.path.join(directory, "export.bin")
    if trial.previous is not None:
        with open(destination, "wb") as file:
            file.write(trial.previous)
    state = {"destination": trial.previous}
    failures: list[tuple[RunPlan, dict[str, Any]]] = []
    try:
        for index, plan in enumerate(trial.runs):
            if plan.change_before:
                plan.log.append(
                    f"  the file changed on the server before this run: now v{world.store.bump()}"
                )
            first = world.store.current().index
            result = run_child(world, trial, plan, destination)
            valid = world.store.versions[first:]
            outcome.runs += 1
            outcome.log.append(
                f"run {index + 1} ({_describe_run(plan)}): {_describe_result(result)}"
            )
            outcome.log.extend("    " + line for line in plan.log[:LOG_LINES])
            if len(plan.log) > LOG_LINES:
                outcome.log.append(f"    ... and {len(plan.log) - LOG_LINES} more")
            check_run(world, outcome, result, valid, destination, state)
            if result["outcome"] == "ok":
                outcome.succeeded = True
                break
            failures.append((plan, result))
        judge_failures(world, outcome, failures)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return outcome


def _describe_run(plan: RunPlan) -> str:
    what = ["clean"] if plan.clean else []
    if not plan.clean:
        what.append(
            f"every request: {plan.sticky}"
            if plan.sticky
            else f"a fault on {plan.probability:.0%} of requests"
        )
    if plan.change_before:
        what.append("the file changed before it")
    if plan.progress_kill_at is not None:
        what.append(f"kill -9 by itself once {plan.progress_kill_at} bytes are done")
    if plan.relay_kill_at is not None:
        what.append(f"kill -9 after {plan.relay_kill_at} body bytes")
    return ", ".join(what)


def _describe_result(result: dict[str, Any]) -> str:
    if result["outcome"] in ("error", "unclean"):
        return f"{result['outcome']}: {result['type']}: {result['message']}"
    return str(result["outcome"])


def check_run(
    world: World,
    outcome: Outcome,
    result: dict[str, Any],
    valid: list[Version],
    destination: str,
    state: dict[str, Any],
) -> None:
    """The checks after one run: the destination's bytes, what is beside it, how it ended."""
    kind = result["outcome"]
    if kind == "hung":
        outcome.find("HUNG", f"run {outcome.runs} did not end within {RUN_LIMIT:.0f} s")
    if kind == "unclean":
        outcome.find("UNCLEAN", f"run {outcome.runs}: {result['type']}: {result['message']}")
    if (
        kind == "error"
        and result["type"] == "ChecksumMismatchError"
        and (world.relay.flips or world.relay.lies)
    ):
        outcome.caught += 1
    data = _read(destination)
    if kind == "ok":
        check_committed(world, outcome, data, valid, result["sha256"])
    elif data != state["destination"]:
        if kind in ("killed", "hung") and any(data == version.data for version in valid):
            outcome.log.append("    (killed after the file was committed)")
        else:
            shown = "absent" if data is None else f"{len(data)} bytes"
            outcome.find(
                "WRONG",
                f"run {outcome.runs} failed ({kind}) but the destination changed (now {shown})",
            )
    state["destination"] = data
    if kind not in ("killed", "hung"):
        mismatch = (
            kind == "error" and result["type"] == "ChecksumMismatchError"
        )  # not resumable: nothing kept
        check_left(
            outcome,
            destination,
            resumable=outcome.trial.resume and kind != "ok" and not mismatch,
            after=kind,
        )


def check_committed(
    world: World, outcome: Outcome, data: bytes | None, valid: list[Version], sha256: str | None
) -> None:
    if data is None:
        outcome.find("WRONG", f"run {outcome.runs} succeeded but nothing is at the destination")
    elif sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        outcome.find(
            "WRONG",
            f"run {outcome.runs} committed {len(data)} bytes whose sha256 is not the one given",
        )
    elif any(data == version.data for version in valid):
        return
    elif outcome.trial.digests and any(
        _only_flips(data, version, world.relay.flips) for version in valid
    ):
        outcome.find(
            "WRONG",
            f"run {outcome.runs} committed the bits the network flipped, the server's digest sent",
        )
    elif not outcome.trial.sha256 and any(
        _only_flips(data, version, world.relay.flips) for version in valid
    ):
        outcome.missed += 1
        outcome.log.append("    (committed with the bits the network flipped: no sha256 was given)")
    else:
        versions = world.store.versions
        older = [f"v{version.index}" for version in versions if version.data == data]
        flipped = [
            f"v{version.index}"
            for version in versions
            if _only_flips(data, version, world.relay.flips)
        ]
        served = ", ".join(f"v{version.index} ({len(version.data)} bytes)" for version in valid)
        what = f"it is the older {older[0]}" if older else "no version the server ever had"
        what = (
            f"it is {flipped[0]} with the bits the network flipped"
            if flipped and not older
            else what
        )
        outcome.find(
            "WRONG",
            f"run {outcome.runs} committed {len(data)} bytes, {what}; the server had {served}",
        )


def check_left(outcome: Outcome, destination: str, *, resumable: bool, after: str) -> None:
    directory, name = os.path.split(destination)
    allowed = {name, f".{name}.part", f".{name}.part.json"} if resumable else {name}
    extra = sorted(set(os.listdir(directory)) - allowed)
    if extra:
        now = time.time()
        files = [(name, os.lstat(os.path.join(directory, name))) for name in extra]
        shown = [
            f"{name} ({found.st_size} bytes, {now - found.st_mtime:.1f} s old)"
            for name, found in files
        ]
        outcome.find("LEFT", f"after run {outcome.runs} ({after}): {', '.join(shown)}")


def judge_failures(
    world: World, outcome: Outcome, failures: list[tuple[RunPlan, dict[str, Any]]]
) -> None:
    """A run against a healthy server fails only for a sha256 over a partial the network corrupted."""
    clean = [result for plan, result in failures if plan.clean]
    if len(clean) >= CLEAN_RUNS:
        outcome.find("STUCK", f"{len(clean)} clean runs failed: {_describe_result(clean[-1])}")
    corrupted = world.relay.flips or world.relay.lies
    for plan, result in failures:
        mismatch = result["outcome"] == "error" and result["type"] == "ChecksumMismatchError"
        if plan.healthy and not (mismatch and corrupted and outcome.trial.resume):
            lawful = ", ".join(sorted(set(plan.applied))) or "none came"
            what = "clean" if plan.clean else f"its faults all lawful: {lawful}"
            outcome.find(
                "HEALTHY",
                f"a run against a healthy server ({what}) failed: {_describe_result(result)}",
            )


# ---------------------------------------------------------------------------
# The soak: trials until the time or the count runs out, then the summary
# ---------------------------------------------------------------------------


@dataclass
class Tally:
    """The figures of a soak."""

    commit: str = ""
    trials: int = 0
    runs: int = 0
    faults: collections.Counter[str] = field(default_factory=collections.Counter)  # tried, by kind
    hit: collections.Counter[str] = field(
        default_factory=collections.Counter
    )  # tried in a trial with a finding
    findings: collections.Counter[str] = field(
        default_factory=collections.Counter
    )  # trials with each
    caught: int = 0
    missed: int = 0
    with_digests: int = 0  # trials whose origin stated its digests
    flips_with_digests: int = 0  # bits flipped on the way in those trials
    failed: list[Outcome] = field(default_factory=list)

    def add(self, outcome: Outcome, faults: collections.Counter[str]) -> None:
        self.trials += 1
        self.runs += outcome.runs
        self.faults += faults
        self.caught += outcome.caught
        self.missed += outcome.missed
        self.with_digests += outcome.trial.digests
        if outcome.findings:
            self.hit += faults
            self.failed.append(outcome)
            self.findings.update({finding.partition(":")[0] for finding in outcome.findings})


def trial_faults(
    world: World, trial: Trial, outcome: Outcome, before: collections.Counter[str]
) -> collections.Counter[str]:
    """The faults this trial tried: the relay's, and the kills and changes of its plans."""
    faults = world.relay.faults - before
    ran = trial.runs[: outcome.runs]
    faults["kill_at_progress"] += sum(plan.progress_kill_at is not None for plan in ran)
    faults["change_between"] += sum(plan.change_before for plan in ran)
    return +faults


def soak(arguments: argparse.Namespace) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + arguments.seconds
    with world(arguments.repo) as here:
        tally.commit = here.commit
        for number in range(arguments.trials):
            if time.monotonic() >= deadline:
                break
            trial = draw_trial(arguments.seed, number)
            before = collections.Counter(here.relay.faults)
            outcome = run_trial(here, trial)
            tally.add(outcome, trial_faults(here, trial, outcome, before))
            tally.flips_with_digests += len(here.relay.flips) if trial.digests else 0
            if outcome.findings or arguments.verbose:
                print("\n".join(outcome.log), flush=True)
            if tally.trials % 25 == 0:
                print(
                    f"... {tally.trials} trials, {len(tally.failed)} with findings",
                    file=sys.stderr,
                    flush=True,
                )
    return tally


def print_summary(tally: Tally, arguments: argparse.Namespace, seconds: float) -> None:
    tried = sum(tally.faults.values())
    survived = tried - sum(tally.hit.values())
    print(
        f"\n== chaos soak of {arguments.repo}/dataset_client.py{tally.commit}: seed {arguments.seed}, {seconds:.0f} s"
    )
    print(
        f"{tally.trials} trials, {tally.runs} runs (child processes), {len(tally.failed)} trials with a finding\n"
    )
    print("| fault | tried | in a trial with a finding |")
    print("|---|---|---|")
    for kind, count in sorted(tally.faults.items()):
        print(f"| {kind} | {count} | {tally.hit[kind]} |")
    print(f"| **all** | **{tried}** | **{tried - survived}** |\n")
    print(
        "| faults tried | survived | WRONG | STUCK | LEFT BEHIND | HEALTHY fail | UNCLEAN | HUNG |"
    )
    print("|---|---|---|---|---|---|---|---|")
    counts = " | ".join(
        str(tally.findings[kind])
        for kind in ("WRONG", "STUCK", "LEFT", "HEALTHY", "UNCLEAN", "HUNG")
    )
    print(f"| {tried} | {survived} | {counts} |\n")
    print("(WRONG ... HUNG: trials with at least one such finding.)")
    print(
        f"network corruption (flipped bits, short 200s with sha256 or digests): caught by sha256 or a digest {tally.caught}, ",
        end="",
    )
    print(
        f"committed unnoticed without sha256 {tally.missed} (not the client's fault: nothing can tell)"
    )
    print(
        f"the origin stated its digests in {tally.with_digests} trials: {tally.flips_with_digests} bits flipped there "
        "(one committed would be a WRONG above)"
    )
    for outcome in tally.failed:
        findings = "; ".join(outcome.findings)
        print(
            f"  replay: python3 benchmarks/soak.py --repo {arguments.repo} --replay {outcome.trial.name}  # {findings}"
        )


def _commit(repo: str) -> str:
    """`` (commit abc1234)`` when ``repo`` is a git checkout (``, with changes`` when the file differs from it)."""
    try:
        head = subprocess.run(
            ["git", "-C", repo, "log", "-1", "--format=%h"], capture_output=True, text=True
        )
        changed = subprocess.run(
            ["git", "-C", repo, "diff", "--quiet", "HEAD", "--", "dataset_client.py"],
            capture_output=True,
        )
    except OSError:
        return ""
    if head.returncode != 0 or not head.stdout.strip():
        return ""
    return f" (commit {head.stdout.strip()}{', with changes' if changed.returncode else ''})"


def replay(arguments: argparse.Namespace) -> int:
    seed, _, number = arguments.replay.partition(":")
    trial = draw_trial(int(seed), int(number))
    with world(arguments.repo) as here:
        outcome = run_trial(here, trial)
    print("\n".join(outcome.log))
    print("findings:", "; ".join(outcome.findings) or "none")
    return 1 if outcome.findings else 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--repo", default=str(HERE.parent), help="the checkout whose dataset_client.py is soaked"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--seconds", type=float, default=1200.0, help="no trial starts after this (default 1200)"
    )
    parser.add_argument(
        "--trials", type=int, default=600, help="at most this many trials (default 600)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="trials for 60 seconds (the last may take longer)"
    )
    parser.add_argument(
        "--replay", metavar="SEED:TRIAL", help="run one trial again and print its log"
    )
    parser.add_argument("--verbose", action="store_true", help="print every trial's log")
    arguments = parser.parse_args(argv)
    arguments.repo = os.path.abspath(arguments.repo)
    if not os.path.isfile(os.path.join(arguments.repo, "dataset_client.py")):
        parser.error(f"--repo: no dataset_client.py in {arguments.repo}")
    signal.signal(
        signal.SIGTERM, _interrupted
    )  # servers shut down, directories removed, as for Ctrl-C
    if arguments.replay:
        return replay(arguments)
    if arguments.quick:
        arguments.seconds = min(arguments.seconds, 60.0)
    started = time.monotonic()
    tally = soak(arguments)
    print_summary(tally, arguments, time.monotonic() - started)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the servers are shut down and the directories removed by then
        sys.exit("interrupted")

"""One client, sixty-four threads: mixed calls and downloads for a few seconds under
``sys.setswitchinterval(1e-6)`` (how races that the GIL hides are flushed out on a GIL build),
then ``close()`` with 64 calls in flight.

Each response must reach its own caller (queries, exports and files carry the caller's own
token), no exception but the documented ones may escape, nothing may deadlock, and after
``close()`` no socket, file descriptor or thread of the client may be left. Then 64 calls are
left waiting on a server that never answers and ``close()`` from the main thread must end
them all at once (ClientClosedError or NetworkError), long before their 60 s time-out.

    python3 .ci/thread_stress.py [--seconds 5] [--threads 64]

The server runs in a process of its own (``--serve``), so that this process's descriptors and
threads are the client's alone. Standard library only. Exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
import http.server
import io
import json
import os
import random
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import local_service  # type: ignore[import-not-found]  # its send_file answers Range requests

import dataset_client as dc  # after the paths above

KEY = "sk-thread-stress-0123456789"


def content(token: str) -> bytes:
    """The file served for ``token``: its own bytes, 32 KiB to 288 KiB."""
    digest = hashlib.sha256(token.encode()).digest()
    return digest * (1024 + digest[0] * 32)


# ---------------------------------------------------------------------------
# The server (a process of its own)
# ---------------------------------------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def do_GET(self) -> None:
        if self.path.startswith("/hang"):
            self.hang()
        elif self.path == "/waiting":
            self.answer({"waiting": self.server.waiting})
        elif self.path.startswith("/files/"):
            data = content(self.path.removeprefix("/files/"))
            local_service.send_file(self, io.BytesIO(data), len(data), '"v1"')
        else:
            self.answer({"datasets": ["bars"]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.startswith("/hang"):
            self.hang()
        elif self.path == "/query":
            self.answer({"sql": body["sql"]})
        else:
            token = body["symbols"][0]
            sha256 = hashlib.sha256(content(token)).hexdigest()
            self.answer({"id": token, "download_url": f"files/{token}", "sha256": sha256})

    def answer(self, value: object) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def hang(self) -> None:
        """Answer nothing until the client closes the connection (at most 60 s)."""
        with self.server.lock:
            self.server.waiting += 1
        try:
            select.select([self.connection], [], [], 60)  # readable: the client closed it
        finally:
            with self.server.lock:
                self.server.waiting -= 1
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 64 threads connecting at once: no SYN dropped, no 1 s retransmission

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.waiting = 0


def serve() -> int:
    """Serve until stdin closes; print the port first."""
    server = Server()
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    print(server.server_port, flush=True)
    sys.stdin.read()
    server.shutdown()
    return 0


# ---------------------------------------------------------------------------
# The client's side
# ---------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: collections.Counter[str] = collections.Counter()
        self.documented: collections.Counter[str] = collections.Counter()
        self.problems: list[str] = []
        self.bytes = 0


def one_call(
    client: dc.DatasetClient, kind: str, token: str, directory: str, rng: random.Random
) -> int:
    """Make one call of ``kind`` carrying ``token``; check that its answer is this caller's; bytes received."""
    if kind == "datasets":
        check(client.list_datasets() == {"datasets": ["bars"]}, kind, token)
    elif kind == "query":
        check(client.query(f"SELECT '{token}'") == {"sql": f"SELECT '{token}'"}, kind, token)
    elif kind == "export":
        export = client.create_export(
            "bars", symbols=[token], start_date="2024-01-01", end_date="2024-01-31"
        )
        check(export["id"] == token, kind, token)
        path = os.path.join(directory, f"{token}.bin")
        client.download(
            export["download_url"], path, sha256=export["sha256"], connections=rng.choice((1, 2, 4))
        )
        with open(path, "rb") as file:
            data = file.read()
        os.remove(path)
        check(data == content(token), kind, token)
        return len(data)
    else:
        sink = io.BytesIO()
        client.download(f"files/{token}", sink)
        check(sink.getvalue() == content(token), kind, token)
        return len(sink.getvalue())
    return 0


def check(condition: bool, kind: str, token: str) -> None:
    if not condition:
        raise AssertionError(f"{kind} for {token}: another caller's answer")


def work(client: dc.DatasetClient, index: int, until: float, directory: str, tally: Tally) -> None:
    rng = random.Random(index)
    number = 0
    while time.monotonic() < until:
        number += 1
        kind = rng.choice(("datasets", "query", "export", "download"))
        try:
            received = one_call(client, kind, f"t{index}-{number}", directory, rng)
        except dc.DatasetClientError as exc:  # documented: counted, shown
            with tally.lock:
                tally.documented[f"{type(exc).__name__}: {exc}"[:200]] += 1
            if isinstance(exc, dc.ClientClosedError):
                return
            continue
        except BaseException:
            with tally.lock:
                tally.problems.append(traceback.format_exc())
            return
        with tally.lock:
            tally.calls[kind] += 1
            tally.bytes += received


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def settled(before: set[threading.Thread]) -> set[threading.Thread]:
    """The threads beyond ``before`` once the client's have had a moment to end (at most 5 s)."""
    for _ in range(500):
        extra = set(threading.enumerate()) - before
        if not extra:
            return extra
        time.sleep(0.01)
    return extra


def mixed_calls(
    url: str, threads: int, seconds: float, close_after: float | None = None
) -> list[str]:
    """``threads`` threads of mixed calls for ``seconds`` (or closed under them after ``close_after``);
    then close() and count what is left: threads, descriptors, files."""
    tally = Tally()
    threads_before, fds_before = set(threading.enumerate()), open_descriptors()
    client = dc.DatasetClient(url, KEY, timeout=30)
    with tempfile.TemporaryDirectory(prefix="thread-stress-") as directory:
        started = time.monotonic()
        workers = [
            threading.Thread(target=work, args=(client, n, started + seconds, directory, tally))
            for n in range(threads)
        ]
        for worker in workers:
            worker.start()
        if close_after is not None:
            time.sleep(close_after)
            client.close()  # from another thread, downloads to files under way
        for worker in workers:
            worker.join(seconds + 120)
        elapsed = time.monotonic() - started
        stuck = [worker for worker in workers if worker.is_alive()]
        client.close()
        left = sorted(os.listdir(directory))
    problems = list(tally.problems)
    if stuck:
        frames = sys._current_frames()
        stacks = "".join("".join(traceback.format_stack(frames[w.ident or 0])) for w in stuck[:3])
        problems.append(
            f"deadlock: {len(stuck)} threads still in a call after {elapsed:.0f} s\n{stacks}"
        )
    extra_threads, fds_after = settled(threads_before), open_descriptors()
    if extra_threads or fds_after != fds_before or left:
        problems.append(
            f"left after close(): threads {extra_threads}, fds {fds_before} -> {fds_after}, files {left}"
        )
    calls = sum(tally.calls.values())
    if close_after is None and set(tally.calls) != {"datasets", "query", "export", "download"}:
        problems.append(
            f"not every kind of call succeeded once: {dict(tally.calls)}"
        )  # else it checked nothing
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(tally.calls.items()))
    print(
        f"{'closed after ' if close_after else ''}{calls} calls ({kinds}; "
        f"{tally.bytes / 2**20:.0f} MiB) on {threads} threads in {elapsed:.1f} s under switchinterval"
        f" {sys.getswitchinterval():g}: {len(tally.problems)} undocumented exceptions or misrouted answers,"
        f" {sum(tally.documented.values())} documented errors"
    )
    print(
        f"after close(): fds {fds_before} before, {fds_after} after; threads {len(threads_before)} before,"
        f" {len(threads_before) + len(extra_threads)} after"
    )
    for error, count in tally.documented.most_common(5):
        print(f"  documented, {count}x: {error}")
    return problems


def waiting_on_server(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/waiting")
        return int(json.loads(connection.getresponse().read())["waiting"])
    finally:
        connection.close()


def close_in_flight(url: str, port: int, threads: int) -> list[str]:
    """Phase two: ``threads`` calls waiting on a server that never answers; close() must end them at once."""
    client = dc.DatasetClient(url + "/hang", KEY, timeout=60)
    outcomes: list[str] = []
    calls = (
        client.list_datasets,
        lambda: client.query("SELECT 1"),
        lambda: client.download("file", io.BytesIO()),
    )

    def call(n: int) -> None:
        try:
            calls[n % 3]()
            outcomes.append("answered")
        except (dc.ClientClosedError, dc.NetworkError) as exc:
            outcomes.append(type(exc).__name__)
        except BaseException as exc:
            outcomes.append(f"undocumented {exc!r}")

    workers = [threading.Thread(target=call, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for _ in range(3000):  # every call has reached the server (at most 30 s)
        if waiting_on_server(port) >= threads:
            break
        time.sleep(0.01)
    started = time.monotonic()
    client.close()
    for worker in workers:
        worker.join(120)
    seconds = time.monotonic() - started
    ended = collections.Counter(outcomes)
    print(
        f"close() with {threads} calls in flight: {len(outcomes)} ended in {seconds:.2f} s ({dict(ended)})"
    )
    problems = []
    if len(outcomes) != threads or set(ended) - {"ClientClosedError", "NetworkError"}:
        problems.append(f"close() in flight: {dict(ended)} of {threads}")
    if seconds > 10:  # their time-out is 60 s: promptly means far less
        problems.append(f"close() took {seconds:.1f} s to end the calls in flight")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve()
    for name in [name for name in os.environ if name.lower().endswith("_proxy")]:
        del os.environ[name]
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    command = [sys.executable, __file__, "--serve"]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        try:
            sys.setswitchinterval(1e-6)
            problems = mixed_calls(url, args.threads, args.seconds)
            problems += mixed_calls(url, args.threads, 60, close_after=min(1.0, args.seconds))
            problems += close_in_flight(url, port, args.threads)
        finally:
            sys.setswitchinterval(0.005)
            server.stdin.close()
            server.wait(30)
    for problem in problems:
        print(problem)
    print("thread stress: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

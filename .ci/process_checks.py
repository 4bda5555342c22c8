"""A client handed to process pools under each start method: spawn, forkserver (3.14's default on
Linux) and fork. Each pool's workers get the client pickled, call the service on connections of
their own (the server sees new connections from other ports; the parent's kept one is left alone),
and each answer comes back to its own task. A client whose ca_bundle is missing where it is
unpickled fails at its task's first request, naming the bundle (never in the worker's unpickling,
which breaks the pool).

    python3 .ci/process_checks.py

Standard library only; one local server on 127.0.0.1, stopped at the end. Exits 1 on a failure.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the spawned workers inherit sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import local_service  # type: ignore[import-not-found]  # its serving(): a server in a thread

import dataset_client as dc  # after the paths above

KEY = "sk-process-checks-0123456789"
TASKS = 6


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers each query with its SQL, the connection's number and its client port; counts connections."""

    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1
            self.number = self.server.connections

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = {"sql": body["sql"], "connection": self.number, "port": self.client_address[1]}
        with self.server.lock:
            self.server.seen.append((answer, self.headers["Authorization"]))
        data = json.dumps(answer).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        self.wfile.write(head.encode() + data)  # one write: head and body in one segment

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Echo)
        self.lock = threading.Lock()
        self.connections = 0
        self.seen: list[tuple[dict[str, object], str]] = []


def check(method: str, client: dc.DatasetClient, server: Server) -> list[str]:
    """Run TASKS queries in a 2-worker pool started by ``method``; what went wrong, if anything."""
    before = client.query("SELECT 'parent'")
    connections_before = server.connections
    context = multiprocessing.get_context(method)
    started = time.monotonic()
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        futures = [
            pool.submit(client.query, f"SELECT {n}") for n in range(TASKS)
        ]  # the client is pickled
        answers = [future.result(timeout=60) for future in futures]
    seconds = time.monotonic() - started
    after = client.query("SELECT 'parent again'")
    problems = []
    if [answer["sql"] for answer in answers] != [f"SELECT {n}" for n in range(TASKS)]:
        problems.append(f"answers reached the wrong tasks: {answers}")
    ports = {answer["port"] for answer in answers}
    if before["port"] in ports or len({answer["connection"] for answer in answers}) != TASKS:
        problems.append(
            f"the workers did not open connections of their own: parent {before}, workers {answers}"
        )
    if server.connections != connections_before + TASKS:
        problems.append(
            f"{server.connections - connections_before} connections for {TASKS} unpickled clients"
        )
    if (after["connection"], after["port"]) != (before["connection"], before["port"]):
        problems.append(f"the parent's kept connection was disturbed: {before} then {after}")
    if any(authorization != f"Bearer {KEY}" for _, authorization in server.seen):
        problems.append("a request went without the key")
    print(
        f"{method}: {TASKS} tasks on 2 workers in {seconds:.2f} s, {len(ports)} client ports of their own,"
        f" the parent's connection {before['connection']} (port {before['port']}) kept"
    )
    return problems


def check_missing_bundle(method: str, server: Server) -> list[str]:
    """A client unpickled where its ca_bundle is gone: its task fails at its first request."""
    with tempfile.TemporaryDirectory() as directory:
        bundle = Path(directory) / "corp.pem"
        shutil.copy(Path(__file__).resolve().parents[1] / "tests_data" / "ca.pem", bundle)
        client = dc.DatasetClient(f"http://127.0.0.1:{server.server_port}", KEY, ca_bundle=bundle)
        bundle.unlink()  # as on a worker that does not have it
        requests = len(server.seen)
        context = multiprocessing.get_context(method)
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            error = pool.submit(client.query, "SELECT 1").exception(timeout=60)
    named = f"ca_bundle names {bundle}, which is not a file or directory of PEM CA certificates"
    if not (isinstance(error, FileNotFoundError) and str(error).startswith(named)):
        return [f"a client without its ca_bundle failed with {error!r}, not at its first request"]
    if len(server.seen) != requests:
        return ["a client without its ca_bundle sent a request"]
    print(f"{method}: unpickled without its ca_bundle: {type(error).__name__} at its first request")
    return []


def main() -> int:
    for name in [name for name in os.environ if name.lower().endswith("_proxy")]:
        del os.environ[name]
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    problems = []
    with (
        local_service.serving(Server()) as server,
        dc.DatasetClient(f"http://127.0.0.1:{server.server_port}", KEY) as client,
    ):
        for method in ("spawn", "forkserver", "fork"):
            if method not in multiprocessing.get_all_start_methods():
                print(
                    f"SKIPPED (by design): {method}: not available on this platform"
                )  # .ci/run counts it
                continue
            problems += [f"{method}: {problem}" for problem in check(method, client, server)]
            problems += [f"{method}: {problem}" for problem in check_missing_bundle(method, server)]
    print(
        "\n".join(
            [*problems, f"process pools: {'FAILED' if problems else 'every start method passed'}"]
        )
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

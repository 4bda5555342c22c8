"""Parallel parts into a pipe on a capped link; what checking a server's digest costs. Figures, not tests.

    python3 benchmarks/into_pipes.py pipe                # 32 MiB through a relay capping each connection at 4 MiB/s
    python3 benchmarks/into_pipes.py pipe --size 64 --rate 8M --runs 3
    python3 benchmarks/into_pipes.py serve --size 512    # a server for A/B pairs of whole downloads (Ctrl-C ends it)

``pipe`` serves a file of random bytes from 127.0.0.1 (the stand-in's send_file, with its
Repr-Digest and each 206's Content-Digest) behind run.py's ThrottlingRelay (each connection
capped, every request delayed 20 ms), and runs the command line as a user would:
``python3 dataset_client.py download URL - --connections N -q`` with its stdout a pipe that
this script reads and hashes, then the same to a file. It prints the median wall time of
each (runs interleaved) and the speed as a multiple of one stream's into the pipe; every run's
bytes are checked. The target: 8 connections into a pipe at least 5x one stream.

``serve`` serves one file of random bytes three times: ``/digest.bin`` with Repr-Digest (and
Content-Digest on each 206), ``/repr.bin`` with Repr-Digest alone, ``/plain.bin`` with none,
and prints the URLs and the sha256,
so that two commands can be timed against each other: the download checked by the server's
Repr-Digest (no ``--sha256``) against the one checked by ``--sha256``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.server
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
import local_service  # noqa: E402 -- its send_file serves the ranges and the digests
from run import ThrottlingRelay  # noqa: E402 -- the capped link of the benchmarks' table 5c

MiB = 1024 * 1024


@contextlib.contextmanager
def serving(data: bytes) -> Iterator[str]:
    """``data`` at ``/digest.bin`` (with the stand-in's digests), ``/repr.bin`` (Repr-Digest alone) and
    ``/plain.bin`` (none); yields the base URL."""
    sha256 = hashlib.sha256(data).hexdigest()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            digests = self.path.endswith("/digest.bin")
            local_service.send_file(
                self,
                io.BytesIO(data),
                len(data),
                '"v1"',
                sha256=sha256 if digests or self.path.endswith("/repr.bin") else None,
                content_digest=digests,
            )

        def log_message(self, format: str, *args: object) -> None:
            pass

    with local_service.serving(local_service.QuietServer(("127.0.0.1", 0), Handler)) as server:
        yield f"http://127.0.0.1:{server.server_port}"


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}


def into_pipe(url: str, connections: int, sha256: str) -> float:
    """Seconds for the command line to download ``url`` into a pipe this process reads; its bytes checked."""
    argv = [sys.executable, os.path.join(REPO, "dataset_client.py"), "download", url, "-", "-q"]
    started = time.monotonic()
    with subprocess.Popen(
        [*argv, "--connections", str(connections)], stdout=subprocess.PIPE, env=environment()
    ) as child:
        assert child.stdout is not None
        received = hashlib.file_digest(child.stdout, "sha256").hexdigest()
    elapsed = time.monotonic() - started
    assert child.returncode == 0 and received == sha256, "a wrong or failed download"
    return elapsed


def to_file(url: str, connections: int, sha256: str, directory: str) -> float:
    target = os.path.join(directory, "out.bin")
    argv = [sys.executable, os.path.join(REPO, "dataset_client.py"), "download", url, target, "-q"]
    started = time.monotonic()
    subprocess.run(
        [*argv, "--connections", str(connections), "--sha256", sha256],
        check=True,
        env=environment(),
    )
    elapsed = time.monotonic() - started
    os.unlink(target)
    return elapsed


def pipe(args: argparse.Namespace) -> int:
    from dataset_client_cli import _rate

    data = os.urandom(args.size * MiB)
    sha256 = hashlib.sha256(data).hexdigest()
    rate = _rate(args.rate)
    times: dict[str, list[float]] = {
        "into a pipe, one stream": [],
        "into a pipe, 8 connections": [],
        "to a file, 8 connections": [],
    }
    with (
        serving(data) as base,
        tempfile.TemporaryDirectory(
            dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        ) as directory,
    ):
        relay = ThrottlingRelay(int(base.rsplit(":", 1)[1]), rate, 0.020)
        url = f"http://127.0.0.1:{relay.port}/digest.bin"
        try:
            for _ in range(args.runs):  # interleaved: the machine's drift falls on each alike
                times["into a pipe, one stream"].append(into_pipe(url, 1, sha256))
                times["into a pipe, 8 connections"].append(into_pipe(url, 8, sha256))
                times["to a file, 8 connections"].append(to_file(url, 8, sha256, directory))
        finally:
            relay.close()
    one = statistics.median(times["into a pipe, one stream"])
    print(
        f"{args.size} MiB through a relay capping each connection at {args.rate}/s, 20 ms a request; medians of {args.runs}"
    )
    print("| download | wall s | MB/s | to one stream into a pipe |")
    print("|---|---|---|---|")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"| {name} | {median:.2f} | {len(data) / median / 1e6:.1f} | {one / median:.2f}x |")
    ratio = one / statistics.median(times["into a pipe, 8 connections"])
    print(f"\n8 connections into a pipe: {ratio:.2f}x one stream (target: at least 5x)")
    return 0 if ratio >= 5 else 1


def serve(args: argparse.Namespace) -> int:
    data = os.urandom(args.size * MiB)
    with serving(data) as base:
        print(f"{base}/digest.bin  (Repr-Digest and Content-Digest)")
        print(f"{base}/repr.bin    (Repr-Digest alone)")
        print(f"{base}/plain.bin   (no digest)")
        print(f"sha256 {hashlib.sha256(data).hexdigest()}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            signal.pause()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("pipe", help="parallel into a pipe on a capped link")
    measure.add_argument("--size", type=int, default=32, help="MiB to download (default: 32)")
    measure.add_argument(
        "--rate", default="4M", help="each connection's cap, as --limit-rate takes it (default: 4M)"
    )
    measure.add_argument(
        "--runs", type=int, default=3, help="runs of each; the median is shown (default: 3)"
    )
    server = commands.add_parser(
        "serve", help="serve a file with and without digests, for A/B pairs"
    )
    server.add_argument("--size", type=int, default=256, help="MiB (default: 256)")
    args = parser.parse_args()
    return pipe(args) if args.command == "pipe" else serve(args)


if __name__ == "__main__":
    sys.exit(main())

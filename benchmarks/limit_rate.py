"""Does `dataset-client download --limit-rate RATE` hold its rate? A figure, not a test.

    python3 benchmarks/limit_rate.py                  # 20 MiB at 2M and 8M, with 1 and 4 connections
    python3 benchmarks/limit_rate.py --rate 500K --size 5

Serves a file of random bytes from 127.0.0.1 (the stand-in's send_file: ranges included),
runs the command line as a user would (`python3 dataset_client.py download URL DEST
--limit-rate RATE --connections N -q`), and prints, for each run, the bytes per second
achieved (the process's wall time less that of `--version`, its start-up) against the cap.
The target: within 10% of the cap, for one connection and for four.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, REPO)
import local_service  # noqa: E402 -- its send_file serves the ranges

from dataset_client_cli import _rate, _size  # noqa: E402 -- the CLI's reading of RATE, its units

MiB = 1024 * 1024


@contextlib.contextmanager
def serving(data: bytes) -> Iterator[str]:
    """A file server on 127.0.0.1 for the duration of the block; yields the file's URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            local_service.send_file(self, io.BytesIO(data), len(data), '"v1"')

        def log_message(self, format: str, *args: object) -> None:
            pass

    with local_service.serving(local_service.QuietServer(("127.0.0.1", 0), Handler)) as server:
        yield f"http://127.0.0.1:{server.server_port}/file.bin"


def wall_time(argv: list[str]) -> float:
    environment = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    started = time.monotonic()
    subprocess.run(
        [sys.executable, os.path.join(REPO, "dataset_client.py"), *argv],
        env=environment,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=20, help="MiB to download (default: 20)")
    parser.add_argument(
        "--rate", action="append", help="a cap, as --limit-rate takes it (default: 2M and 8M)"
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="runs of each case; the median is shown (default: 3)"
    )
    args = parser.parse_args()
    data = os.urandom(args.size * MiB)
    startup = statistics.median(wall_time(["--version"]) for _ in range(5))
    print(
        f"{_size(len(data))} from 127.0.0.1; process start-up {startup * 1000:.0f} ms, taken off each time"
    )
    print("| --limit-rate | connections | achieved | to the cap | within 10%? |")
    print("|---|---|---|---|---|")
    worst = 0.0
    with serving(data) as url, tempfile.TemporaryDirectory() as directory:
        for rate in args.rate or ["2M", "8M"]:
            cap = _rate(rate)
            for connections in (1, 4):
                destination = os.path.join(directory, "out.bin")
                argv = [
                    "download",
                    url,
                    destination,
                    "-q",
                    "--limit-rate",
                    rate,
                    "--connections",
                    str(connections),
                ]
                seconds = statistics.median(wall_time(argv) - startup for _ in range(args.runs))
                assert os.path.getsize(destination) == len(data)
                ratio = len(data) / seconds / cap
                worst = max(worst, abs(ratio - 1))
                achieved = f"{_size(len(data) / seconds)}/s"
                print(
                    f"| {rate} | {connections} | {achieved} | {ratio:.3f}x | {'yes' if abs(ratio - 1) <= 0.1 else 'NO'} |"
                )
    print(f"\nthe furthest from the cap: {worst * 100:.1f}%")
    return 0 if worst <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())

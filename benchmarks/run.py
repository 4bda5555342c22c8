"""Benchmarks: dataset-client side by side with what a user would pick instead.

    python3 benchmarks/run.py --install    # once: nginx-light and curl with apt-get, if missing
    python3 benchmarks/run.py              # the full run (1 GiB downloads; several minutes)
    python3 benchmarks/run.py --quick      # smaller sizes, fewer runs
    python3 benchmarks/run.py --only download --only checksum

It sets up its own world and tears it down: nginx on 127.0.0.1 serving small JSON
answers, a large JSON body (plain and gzip) and a large file of random bytes, over
HTTP and HTTPS with a throwaway CA; a rate-capping relay for a slow link; a throwaway
virtual environment with requests and httpx (never dependencies of the library).
Each figure is a median over runs with the variants interleaved; tables are Markdown,
with ratios taken within this run. Results go to stdout: benchmarks/README.md holds
the latest.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gzip
import hashlib
import http.server
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
import local_service  # noqa: E402 -- the stand-in's send_file serves the in-process servers here

WORKER = os.path.join(HERE, "worker.py")
VENV = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "dataset-client-bench", "venv"
)
PREVIOUS = (
    "8f328b1"  # dataset_client 1.0.0: one stream, a readinto loop, the hash in the receiving thread
)
OLD = "dataset_client 1.0"  # the previous release's column; --previous COMMIT names another
SMALL_JSON = '[{"name": "daily_bars", "rows": 6264}, {"name": "trades", "rows": 50112}]'
MiB = 1024 * 1024
SECTIONS = (
    "import", "construct", "requests", "instructions", "bigjson", "download", "checksum", "throttled", "resume", "parquet",
)  # fmt: skip


@dataclasses.dataclass
class World:
    """What the benchmarks run against."""

    work: str  # a temporary directory, removed at the end
    http: str  # nginx's base URLs
    https: str
    cafile: str
    json_bytes: int  # size of the large JSON answer
    file_size: int  # size of /files/random.bin
    file_sha256: str
    access_log: str  # nginx's record of /files/ requests: status, bytes sent, Range
    python: str  # the throwaway environment's interpreter
    previous: str | None  # a directory holding the previous release's module, when git has it


def main() -> None:
    global PREVIOUS, OLD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer runs")
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="run only this part (repeatable)"
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="install nginx-light and curl with apt-get if missing",
    )
    parser.add_argument(
        "--previous", metavar="COMMIT", help=f"the commit to compare with (default {PREVIOUS}, 1.0)"
    )
    args = parser.parse_args()
    if args.previous:  # its module, from git, in the column of the previous release
        PREVIOUS, OLD = args.previous, f"dataset_client {args.previous}"
    if args.install:
        install_debian_packages()
    missing = [name for name in ("nginx", "curl", "openssl") if not find_program(name)]
    if missing:
        raise SystemExit(f"missing: {', '.join(missing)} (run with --install, or install them)")
    settings = {
        "runs": 2 if args.quick else 5,
        "import_runs": 6 if args.quick else 40,
        "requests": 200 if args.quick else 2000,
        "stock_requests": 50 if args.quick else 400,
        "json_mib": 4 if args.quick else 20,
        "file_mib": 64 if args.quick else 1024,
        "download_runs": 1 if args.quick else 3,
        "throttled_mib": 16 if args.quick else 128,
        "resume_mib": 32 if args.quick else 256,
    }
    with world_of(settings, ensure_venv()) as world:
        lines = header(world, args.quick)
        for section in SECTIONS:
            if section in (args.only or SECTIONS):
                lines += globals()[f"bench_{section}"](world, settings)
    print("\n".join(lines))


# ---------------------------------------------------------------------------
# The world: packages, a virtual environment, nginx with TLS
# ---------------------------------------------------------------------------


def find_program(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}",) if os.path.exists(p)), None
    )


def install_debian_packages() -> None:
    """nginx-light and curl from Debian's packages, asked for with --install."""
    missing = [name for name in ("nginx", "curl", "openssl") if not find_program(name)]
    if not missing:
        return
    print(f"installing {', '.join(missing)} with apt-get", file=sys.stderr)
    policy = "/usr/sbin/policy-rc.d"  # keeps the package's scripts from starting a system nginx on port 80
    created = not os.path.exists(policy)
    if created:
        with open(policy, "w") as script:
            script.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
    try:
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        packages = ["nginx-light" if name == "nginx" else name for name in missing]
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends"],
        ):
            subprocess.run(
                command + (packages if "install" in command else []), check=True, env=environment
            )
    finally:
        if created:
            os.unlink(policy)


def ensure_venv() -> str:
    python = os.path.join(VENV, "bin", "python")
    check = [python, "-c", "import requests, httpx"]
    if not os.path.exists(python) or subprocess.run(check, capture_output=True).returncode != 0:
        print(f"creating a throwaway virtual environment in {VENV}", file=sys.stderr)
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        pip = [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "requests",
            "httpx",
        ]
        subprocess.run(pip, check=True)
    return python


def clean_environment(**extra: str) -> dict[str, str]:
    """The environment of every measured process: no proxies, bytecode compiled as users have it, fixed hashing."""
    environment = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**environment, "NO_PROXY": "127.0.0.1,localhost", "PYTHONHASHSEED": "0", **extra}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def world_of(settings: dict[str, int], python: str) -> Iterator[World]:
    with tempfile.TemporaryDirectory(prefix="dataset-client-bench-") as work:
        os.chmod(work, 0o755)  # nginx's workers run as an unprivileged user
        www = os.path.join(work, "www")
        for directory in ("big", "bigz", "files", "tmp"):
            os.makedirs(os.path.join(www, directory))
        body = big_json(settings["json_mib"] * MiB)
        with open(os.path.join(www, "big", "datasets"), "wb") as out:
            out.write(body)
        with open(os.path.join(www, "bigz", "datasets"), "wb") as out:
            out.write(gzip.compress(body, compresslevel=6))
        json_bytes = len(body)
        del body  # the workers' memory is measured: keep this process small
        size, digest = random_file(
            os.path.join(www, "files", "random.bin"), settings["file_mib"] * MiB
        )
        cafile = make_certificates(work)
        http_port, https_port = free_port(), free_port()
        config = os.path.join(work, "nginx.conf")
        access_log = os.path.join(work, "files.log")
        with open(config, "w") as out:
            out.write(nginx_config(work, www, http_port, https_port, access_log))
        process = subprocess.Popen(
            [find_program("nginx") or "nginx", "-c", config, "-g", "daemon off;"]
        )
        try:
            for port in (http_port, https_port):
                wait_for_port(port)
            yield World(
                work=work,
                http=f"http://127.0.0.1:{http_port}",
                https=f"https://127.0.0.1:{https_port}",
                cafile=cafile,
                json_bytes=json_bytes,
                file_size=size,
                file_sha256=digest,
                access_log=access_log,
                python=python,
                previous=previous_release(work),
            )
        finally:
            process.terminate()
            process.wait(10)


def nginx_config(work: str, www: str, http_port: int, https_port: int, access_log: str) -> str:
    temp = os.path.join(www, "tmp")
    return f"""
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    log_format sent '$status $body_bytes_sent "$http_range"';
    client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy; fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
    sendfile on; tcp_nodelay on;
    keepalive_requests 10000000; keepalive_timeout 300s;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{http_port};
        listen 127.0.0.1:{https_port} ssl;
        ssl_certificate {work}/server.pem;
        ssl_certificate_key {work}/server.key;
        root {www};
        location = /datasets {{ default_type application/json; return 200 '{SMALL_JSON}'; }}
        location = /query {{ default_type application/json; return 200 '{SMALL_JSON}'; }}
        location /big/ {{ default_type application/json; }}
        location /bigz/ {{ default_type application/json; add_header Content-Encoding gzip; }}
        location /files/ {{ access_log {access_log} sent; }}
    }}
}}
"""


def wait_for_port(port: int) -> None:
    for _ in range(100):
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=0.2),
        ):
            return
        time.sleep(0.05)
    raise SystemExit(f"nothing started listening on {port}")


def make_certificates(work: str) -> str:
    """A throwaway CA and a server certificate for 127.0.0.1, with openssl."""
    extensions = os.path.join(work, "ext.cnf")
    with open(extensions, "w") as out:
        out.write("subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")

    def openssl(command: str, *arguments: str) -> None:
        subprocess.run(
            ["openssl", *command.split(), *arguments], check=True, capture_output=True, cwd=work
        )

    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    openssl(f"req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj", "/CN=bench CA")
    openssl(f"req {key} -keyout server.key -out server.csr -subj /CN=127.0.0.1")
    openssl(
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile",
        extensions,
    )
    return os.path.join(work, "ca.pem")


def big_json(size: int) -> bytes:
    """A query-like result of about ``size`` bytes: rows of dates, symbols, floats and ints."""
    rows = []
    for n in range(size // 90):
        rows.append([
            f"2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}",
            ("AAPL", "MSFT", "NVDA")[n % 3],
            100 + n % 997 / 7,
            101 + n % 991 / 3,
            99 + n % 983 / 11,
            100.5 + n % 977 / 13,
            1000 + n * 7 % 100003,
        ])  # fmt: skip
    columns = ["date", "symbol", "open", "high", "low", "close", "volume"]
    return json.dumps({"columns": columns, "rows": rows, "row_count": len(rows)}).encode()


def random_file(path: str, size: int) -> tuple[int, str]:
    """Random bytes (so that a wrong byte shows as a checksum failure); returns the size and sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for _ in range(size // MiB):
            block = os.urandom(MiB)
            digest.update(block)
            out.write(block)
    return size, digest.hexdigest()


def previous_release(work: str) -> str | None:
    """The previous release's module, from git, for the copy loop compared in the same run."""
    directory = os.path.join(work, "previous")
    done = subprocess.run(
        ["git", "show", f"{PREVIOUS}:dataset_client.py"], cwd=REPO, capture_output=True
    )
    if done.returncode != 0:
        return None
    os.makedirs(directory)
    with open(os.path.join(directory, "dataset_client.py"), "wb") as out:
        out.write(done.stdout)
    return directory


def files_directory(world: World) -> str:
    """tmpfs when it has room (the clients' write paths without disk writeback noise), else the work directory.

    tmpfs is warmed once: on this kind of machine the first touch of a page of memory costs
    several times the next one, which made the same run vary 7-fold.
    """
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and shutil.disk_usage(shm).free > 3 * world.file_size):
        return world.work
    warm = os.path.join(shm, "dataset-client-bench-warm")
    with open(warm, "wb") as out:
        for _ in range(2 * world.file_size // MiB):
            out.write(bytes(MiB))
    os.unlink(warm)
    return shm


# ---------------------------------------------------------------------------
# Running measurements, printing tables
# ---------------------------------------------------------------------------


def worker(world: World, *arguments: str, previous: bool = False) -> dict[str, float]:
    """One measurement in a fresh process (worker.py), as a dict of figures."""
    extra = {"DATASET_CLIENT_FROM": world.previous} if previous and world.previous else {}
    done = subprocess.run(
        [world.python, WORKER, *arguments],
        capture_output=True,
        text=True,
        env=clean_environment(**extra),
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(f"worker {' '.join(arguments)} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout)
    return result


def interleaved(
    runs: int, variants: list[str], measure: Callable[[str], dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Median of each figure over ``runs`` rounds, the variants' order rotating each round."""
    samples: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for round_number in range(runs):
        shift = round_number % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            samples[variant].append(measure(variant))
    return {
        variant: {
            field: statistics.median(sample[field] for sample in results) for field in results[0]
        }
        for variant, results in samples.items()
    }


def table(title: str, note: str, columns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown section: a title, a note, a table."""
    lines = ["", f"### {title}", ""] + ([note, ""] if note else [])
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def header(world: World, quick: bool) -> list[str]:
    code = "import sys, requests, httpx; print(sys.version.split()[0], requests.__version__, httpx.__version__)"
    python, requests, httpx = subprocess.run(
        [world.python, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    nginx = subprocess.run(
        [find_program("nginx") or "nginx", "-v"], capture_output=True, text=True
    ).stderr
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1]
    return [
        f"## Benchmarks, {time.strftime('%Y-%m-%d')}{' (--quick)' if quick else ''}",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}. "
        f"Python {python}, requests {requests}, httpx {httpx}, curl {curl}, "
        f"{nginx.strip().replace('nginx version: ', '')} on 127.0.0.1.",
        "Medians of interleaved runs; ratios are to the reference named in each table, in this run.",
    ]


def ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x"


# ---------------------------------------------------------------------------
# The sections
# ---------------------------------------------------------------------------


def bench_import(world: World, settings: dict[str, int]) -> list[str]:
    variants = ["json+urllib.request", "dataset_client", "requests", "httpx"]
    code = {
        "json+urllib.request": "import json, urllib.request",
        "dataset_client": "import dataset_client",
        "requests": "import requests",
        "httpx": "import httpx",
    }
    for variant in variants:  # compile bytecode first, as users have it
        worker(world, "import", variant)

    def measure(variant: str) -> dict[str, float]:
        started = time.perf_counter()
        subprocess.run(
            [world.python, "-c", code[variant]], check=True, cwd=REPO, env=clean_environment()
        )
        return {"process": time.perf_counter() - started, **worker(world, "import", variant)}

    result = interleaved(settings["import_runs"], variants, measure)
    base = result["json+urllib.request"]
    rows = [
        [
            variant,
            f"{figures['seconds'] * 1e3:.1f}",
            ratio(figures["seconds"], base["seconds"]),
            f"{figures['process'] * 1e3:.1f}",
            ratio(figures["process"], base["process"]),
        ]
        for variant, figures in result.items()
    ]
    return table(
        "1. Import", "", ["import", "in-process ms", "ratio", "whole process ms", "ratio"], rows
    )


def bench_construct(world: World, settings: dict[str, int]) -> list[str]:
    labels = {
        "dataset_client": "DatasetClient(https url)",
        "urllib": "urllib.request.build_opener()",
        "requests": "requests.Session()",
        "httpx": "httpx.Client()",
    }
    result = interleaved(
        settings["runs"], list(labels), lambda v: worker(world, "construct", v, "200")
    )
    base = result["urllib"]["seconds"]
    rows = [
        [labels[v], f"{f['seconds'] * 1e6:.0f}", ratio(f["seconds"], base)]
        for v, f in result.items()
    ]
    return table(
        "2. Constructing a client (and closing it)",
        "",
        ["client", "us each", "ratio to urllib"],
        rows,
    )


def bench_requests(world: World, settings: dict[str, int]) -> list[str]:
    variants = [
        "http.client",
        "http.client-no-timeout",
        "dataset_client",
        "urllib",
        "requests",
        "httpx",
    ]
    cells: dict[str, list[str]] = {variant: [] for variant in variants}
    walls: dict[str, list[str]] = {variant: [] for variant in variants}
    for scheme in ("http", "https"):
        cafile = world.cafile if scheme == "https" else "-"
        for method, path in (("GET", "/datasets"), ("POST", "/query")):
            url = getattr(world, scheme) + path

            def measure(
                variant: str, url: str = url, method: str = method, cafile: str = cafile
            ) -> dict[str, float]:
                count = settings["stock_requests"] if variant == "urllib" else settings["requests"]
                return worker(world, "requests", variant, url, method, str(count), cafile)

            result = interleaved(settings["runs"], variants, measure)
            for variant in variants:
                cells[variant].append(
                    f"{result[variant]['cpu'] * 1e6:.0f} ({ratio(result[variant]['cpu'], result['http.client']['cpu'])})"
                )
                if method == "GET":
                    walls[variant].append(f"{result[variant]['wall'] * 1e6:.0f}")
    note = (
        "The floor is raw `http.client` on one kept-alive connection with the same 30 s timeout as dataset_client "
        "(with a timeout, CPython polls before each send and receive); the row without a timeout shows that cost. "
        "Stock urllib connects anew for every request."
    )
    columns = [
        "client",
        "HTTP GET CPU us",
        "HTTP POST CPU us",
        "HTTPS GET CPU us",
        "HTTPS POST CPU us",
    ]
    rows = [[variant, *cells[variant], *walls[variant]] for variant in variants]
    title = "3. Small requests over a kept-alive connection: client CPU and wall time per request"
    return table(title, note, [*columns, "HTTP GET wall us", "HTTPS GET wall us"], rows)


def bench_instructions(world: World, settings: dict[str, int]) -> list[str]:
    """User-space instructions per kept-alive request (valgrind's callgrind): exact, whatever the machine's load."""
    if not shutil.which("valgrind"):
        return ["", "### 3b. Instructions per request: skipped (no valgrind)"]
    counts = (50, 100) if settings["runs"] < 5 else (200, 400)
    cases = [
        ("http", "GET", "/datasets"),
        ("http", "POST", "/query"),
        ("https", "GET", "/datasets"),
        ("https", "POST", "/query"),
    ]
    variants = (
        ["http.client", "dataset_client", OLD]
        if world.previous
        else ["http.client", "dataset_client"]
    )
    rows = []
    with tempfile.TemporaryDirectory() as scratch:

        def count(variant: str, url: str, method: str, requests: int, cafile: str) -> int:
            extra = {"DATASET_CLIENT_FROM": world.previous or ""} if variant == OLD else {}
            command = [WORKER, "requests", variant.split()[0], url, method, str(requests), cafile]
            return callgrind(world, command, scratch, clean_environment(**extra))

        for scheme, method, path in cases[:1] if settings["runs"] < 5 else cases:
            cafile = world.cafile if scheme == "https" else "-"
            url = getattr(world, scheme) + path
            for (
                variant
            ) in variants:  # bytecode compiled first: the two counts must differ by requests only
                count(variant, url, method, 1, cafile)
            per_request = {
                v: (
                    count(v, url, method, counts[1], cafile)
                    - count(v, url, method, counts[0], cafile)
                )
                / (counts[1] - counts[0])
                for v in variants
            }
            rows.append(
                [
                    f"{scheme.upper()} {method}",
                    *(
                        f"{per_request[v]:,.0f} ({ratio(per_request[v], per_request['http.client'])})"
                        for v in variants
                    ),
                ]
            )
        imports = import_instructions(world, scratch)
    note = (
        f"Counted for {counts[0]} and {counts[1]} requests; the difference cancels start-up. Unlike CPU time, this does "
        "not move with the machine's load (PYTHONHASHSEED fixed); it leaves out the kernel's share."
    )
    return (
        table(
            "3b. User-space instructions per kept-alive request (callgrind)",
            note,
            ["request", *variants],
            rows,
        )
        + imports
    )


def import_instructions(world: World, scratch: str) -> list[str]:
    """Instructions of a whole ``python -c "import ..."`` process (callgrind), to those of json + urllib.request."""
    variants = {
        "json+urllib.request": ("import json, urllib.request", REPO),
        "dataset_client": ("import dataset_client", REPO),
    }
    if world.previous:  # the same command in the previous release's directory
        variants[OLD] = ("import dataset_client", world.previous)
    for code, directory in variants.values():  # bytecode compiled first, as users have it
        subprocess.run(
            [world.python, "-c", code], cwd=directory, env=clean_environment(), check=True
        )
    counts = {
        variant: callgrind(world, ["-c", code], scratch, clean_environment(), cwd=directory)
        for variant, (code, directory) in variants.items()
    }
    base = counts["json+urllib.request"]
    rows = [[variant, f"{count:,}", ratio(count, base)] for variant, count in counts.items()]
    note = (
        'The whole process (start-up and shutdown included): `python -c "import json, urllib.request"` against '
        '`python -c "import dataset_client"`, bytecode compiled first, PYTHONHASHSEED=0. The target: at most 1.06x.'
    )
    return table(
        "3c. Instructions to import (callgrind)", note, ["import", "instructions", "ratio"], rows
    )


def callgrind(
    world: World, arguments: list[str], scratch: str, environment: dict[str, str], cwd: str = REPO
) -> int:
    """The instructions valgrind's callgrind counts for world.python running ``arguments``."""
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={scratch}/out",
        world.python,
        *arguments,
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env=environment, cwd=cwd, timeout=900
    )
    found = [line for line in done.stderr.splitlines() if "Collected :" in line]
    if done.returncode != 0 or not found:
        raise SystemExit(f"callgrind failed:\n{done.stderr[-2000:]}")
    return int(found[-1].split(":")[-1])


def bench_bigjson(world: World, settings: dict[str, int]) -> list[str]:
    variants = ["http.client", "dataset_client", "requests", "httpx"]
    cells: dict[str, list[str]] = {variant: [] for variant in variants}
    for path in ("/big/datasets", "/bigz/datasets"):
        here = [
            v for v in variants if not (path.startswith("/bigz") and v == "http.client")
        ]  # raw read() does not gunzip
        result = interleaved(
            settings["runs"],
            here,
            lambda v, p=path: worker(world, "bigjson", v, world.http + p, "-"),
        )
        for variant in variants:
            figures = result.get(variant)
            cells[variant] += ["n/a", "", ""] if figures is None else [
                f"{figures['wall'] * 1e3:.0f}", ratio(figures["wall"], result["requests"]["wall"]), f"{figures['rss']:.0f}"
            ]  # fmt: skip
    columns = ["client", "identity: wall ms", "ratio to requests", "peak RSS growth MiB"]
    columns += ["gzip: wall ms", "ratio to requests", "peak RSS growth MiB"]
    rows = [
        ["http.client read()+json.loads" if v == "http.client" else v, *cells[v]] for v in variants
    ]
    return table(
        f"4. A {world.json_bytes / MiB:.0f} MiB query result to Python objects (GET over HTTP)",
        "",
        columns,
        rows,
    )


def download_table(
    world: World, title: str, note: str, variants: list[str], runs: int, options: list[str]
) -> list[str]:
    """Each variant downloading /files/random.bin over HTTP and HTTPS, to /dev/null and to a file."""
    directory = files_directory(world)
    cells: dict[str, list[str]] = {variant: [] for variant in variants}
    for scheme in ("http", "https"):
        cafile = world.cafile if scheme == "https" else "-"
        for target in ("/dev/null", os.path.join(directory, "downloaded.bin")):

            def measure(
                variant: str, scheme: str = scheme, target: str = target, cafile: str = cafile
            ) -> dict[str, float]:
                name = "dataset_client" if variant == OLD else variant
                url = getattr(world, scheme) + "/files/random.bin"
                result = worker(
                    world,
                    "download",
                    name,
                    url,
                    target,
                    cafile,
                    *options,
                    previous=variant == OLD,
                )
                if target != "/dev/null":
                    assert os.path.getsize(target) == world.file_size, "incomplete download"
                    os.unlink(target)
                return result

            result = interleaved(runs, variants, measure)
            for variant in variants:
                figures = result[variant]
                rate = world.file_size / figures["wall"]
                cells[variant].append(
                    f"{rate / 1e6:.0f} MB/s ({ratio(figures['wall'], result[variants[0]]['wall'])} the time), "
                    f"{figures['cpu']:.2f} s CPU, {figures['rss']:.0f} MiB"
                )
    columns = [
        "client",
        "HTTP to /dev/null",
        "HTTP to a file",
        "HTTPS to /dev/null",
        "HTTPS to a file",
    ]
    return table(title, note, columns, [[variant, *cells[variant]] for variant in variants])


def bench_download(world: World, settings: dict[str, int]) -> list[str]:
    variants = ["curl", "dataset_client", OLD, "requests", "httpx"]
    note = (
        f"MB/s, the time as a ratio to curl's (below 1: faster), CPU seconds, peak RSS in MiB (a bare interpreter: "
        f"{worker(world, 'bare', '-')['rss']:.0f} MiB). `dataset_client` writes a temporary file and renames it; the others "
        "write in place. `dataset_client 1.0` is the previous release (a `readinto` loop), for the copy loop's cost. "
        "Files go to tmpfs, warmed first."
    )
    if not world.previous:
        variants.remove(OLD)
    title = f"5. Downloading {world.file_size // MiB} MiB, one stream"
    return download_table(world, title, note, variants, settings["download_runs"], ["-", "1"])


def bench_checksum(world: World, settings: dict[str, int]) -> list[str]:
    variants = (
        ["curl+openssl", "dataset_client", OLD]
        if world.previous
        else ["curl+openssl", "dataset_client"]
    )
    note = (
        "With the sha256 checked. The reference is what a careful user does instead: to a file, "
        "`curl -o F && openssl dgst -sha256 F`; to /dev/null, `curl | openssl dgst -sha256`. dataset_client hashes on a "
        "thread of its own, overlapping the network; 1.0 hashed in the receiving thread."
    )
    title = f"5b. Downloading {world.file_size // MiB} MiB with its sha256 checked"
    return download_table(
        world, title, note, variants, settings["download_runs"], [world.file_sha256, "1"]
    )


class ThrottlingRelay:
    """A TCP relay on 127.0.0.1 to ``upstream``: each connection capped at ``rate`` bytes/s toward the client,
    each request delayed ``delay`` seconds on its way in (a round trip of that length)."""

    def __init__(self, upstream: int, rate: float, delay: float) -> None:
        self.upstream, self.rate, self.delay = upstream, rate, delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while not self.stopped.is_set():
                client, _ = self.listener.accept()
                server = socket.create_connection(("127.0.0.1", self.upstream))
                threading.Thread(
                    target=self._pipe, args=(client, server, None), daemon=True
                ).start()
                threading.Thread(
                    target=self._pipe, args=(server, client, self.rate), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, destination: socket.socket, rate: float | None) -> None:
        due = time.monotonic()
        with contextlib.suppress(OSError), source, destination:
            while data := source.recv(64 * 1024):
                if rate is None:
                    time.sleep(self.delay)
                else:  # a token bucket of one chunk
                    due = max(due, time.monotonic()) + len(data) / rate
                    time.sleep(max(0.0, due - time.monotonic()))
                destination.sendall(data)
            destination.shutdown(socket.SHUT_WR)


def bench_throttled(world: World, settings: dict[str, int]) -> list[str]:
    """One stream against several ranged requests: on a link that caps each connection, and on plain loopback."""
    size = settings["throttled_mib"] * MiB
    path = os.path.join(world.work, "www", "files", "throttled.bin")
    size, _ = random_file(path, size)
    rate = 8 * MiB  # each connection's share: an eighth of a 64 MiB/s link
    relay = ThrottlingRelay(int(world.http.rsplit(":", 1)[1]), rate, 0.020)
    directory = files_directory(world)
    variants = {
        "curl": ["-", "1"],
        "one stream": ["-", "1"],
        "connections=4": ["-", "4"],
        "connections=8": ["-", "8"],
    }
    columns = []
    results = []
    try:
        for label, base, file, total in (
            (
                f"a link of 8 MiB/s a connection, 20 ms round trip, {size // MiB} MiB",
                f"http://127.0.0.1:{relay.port}",
                "throttled.bin",
                size,
            ),
            (
                f"plain loopback, {world.file_size // MiB} MiB",
                world.http,
                "random.bin",
                world.file_size,
            ),
        ):

            def measure(
                variant: str, base: str = base, file: str = file, total: int = total
            ) -> dict[str, float]:
                target = os.path.join(directory, "downloaded.bin")
                name = "curl" if variant == "curl" else "dataset_client"
                result = worker(
                    world, "download", name, f"{base}/files/{file}", target, "-", *variants[variant]
                )
                assert os.path.getsize(target) == total, "incomplete download"
                os.unlink(target)
                return result

            columns.append(label)
            results.append(
                (
                    interleaved(
                        1 if base != world.http else settings["download_runs"],
                        list(variants),
                        measure,
                    ),
                    total,
                )
            )
    finally:
        relay.close()
        os.unlink(path)
    rows = []
    for variant in variants:
        cells = []
        for result, total in results:
            speed = total / result[variant]["wall"]
            cells.append(
                f"{speed / 1e6:.0f} MB/s ({speed * result['one stream']['wall'] / total:.2f}x one stream), {result[variant]['rss']:.0f} MiB"
            )
        rows.append([variant, *cells])
    note = (
        "MB/s, the speed as a multiple of one dataset_client stream's, peak RSS. The capped link is a relay this "
        "benchmark runs: each connection gets an eighth of the link and every request waits 20 ms on its way in. "
        f"Files written to {directory}."
    )
    return table("5c. Parallel ranged requests (`connections=N`)", note, ["client", *columns], rows)


def bench_resume(world: World, settings: dict[str, int]) -> list[str]:
    return resume_within_a_call(world, settings) + resume_across_runs(world)


def resume_within_a_call(world: World, settings: dict[str, int]) -> list[str]:
    """Bytes fetched for a download cut at several points, against a server that honours Range."""
    size = settings["resume_mib"] * MiB
    path = os.path.join(world.work, "resume.bin")
    size, digest = random_file(path, size)
    cuts = [size // 7, size // 3, size // 2, size * 6 // 7]
    interruptions = len(cuts)  # send_file takes them off the list as it cuts
    served = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            def count(bytes_sent: int) -> None:
                served[0] += bytes_sent

            with open(path, "rb") as file:
                local_service.send_file(self, file, size, '"v1"', cuts=cuts, sending=count)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = os.path.join(world.work, "resumed.bin")
        worker(
            world,
            "download",
            "dataset_client",
            f"http://127.0.0.1:{server.server_port}/file",
            target,
            "-",
            digest,
            "1",
        )
    finally:
        server.shutdown()
        server.server_close()
    overhead = served[0] - size
    return [
        "",
        "### 6. A download cut four times, resumed within the call",
        "",
        f"{size // MiB} MiB cut at 1/7, 1/3, 1/2 and 6/7: {served[0]:,} bytes fetched for a {size:,}-byte file "
        f"({served[0] / size:.4f}x; {overhead / interruptions:,.0f} bytes over per interruption), sha256 checked.",
    ]


def read_lines(path: str) -> list[str]:
    with open(path) as file:
        return file.read().splitlines()


def resume_across_runs(world: World) -> list[str]:
    """kill -9 at 90% of the file, then run again: what the second run fetched, from nginx's access log."""
    directory = files_directory(world)
    target = os.path.join(directory, "resumed.bin")
    state = os.path.join(directory, ".resumed.bin.part.json")
    url = world.http + "/files/random.bin"
    code = (
        "import sys, dataset_client as dc\n"
        "with dc.DatasetClient(sys.argv[1]) as client:\n"
        "    client.download(sys.argv[1], sys.argv[2], resume=True, sha256=sys.argv[3])\n"
    )
    first = subprocess.Popen(
        [world.python, "-c", code, url, target, world.file_sha256],
        cwd=REPO,
        env=clean_environment(),
    )
    done_at_kill = 0
    while first.poll() is None and done_at_kill < world.file_size * 9 // 10:
        with contextlib.suppress(OSError, ValueError, KeyError), open(state) as saved:
            done_at_kill = sum(part[2] for part in json.load(saved)["parts"])
        time.sleep(0.002)
    first.send_signal(signal.SIGKILL)
    first.wait()
    kept = os.path.getsize(os.path.join(directory, ".resumed.bin.part"))
    log_lines = len(read_lines(world.access_log))
    started = time.perf_counter()
    subprocess.run(
        [world.python, "-c", code, url, target, world.file_sha256],
        cwd=REPO,
        env=clean_environment(),
        check=True,
    )
    elapsed = time.perf_counter() - started
    fetched = [int(line.split()[1]) for line in read_lines(world.access_log)[log_lines:]]
    os.unlink(target)
    return [
        "",
        "### 7. A download killed (SIGKILL) at 90%, then run again with `resume=True`",
        "",
        f"{world.file_size // MiB} MiB; the state on disk said {done_at_kill:,} bytes when the kill came, "
        f"{kept:,} bytes were in the partial file. The second run fetched {sum(fetched):,} bytes "
        f"({sum(fetched) / world.file_size:.1%} of the file; the target: at most 10% + one 1 MiB chunk, "
        f"{world.file_size // 10 + MiB:,}) in {len(fetched)} request(s), {elapsed:.2f} s, sha256 of the whole file checked.",
    ]


def bench_parquet(world: World, settings: dict[str, int]) -> list[str]:
    """The stand-in's Parquet writer: rows written per second and file size, against csv, for daily bars."""
    import csv
    import io
    import random

    import parquet_writer

    count = 100_000 if settings["runs"] < 5 else 1_000_000
    rng = random.Random(1)
    start = datetime.date(2000, 1, 3)
    symbols = (
        "AAPL",
        "AMZN",
        "GOOG",
        "JNJ",
        "JPM",
        "META",
        "MSFT",
        "NVDA",
        "TSLA",
        "V",
        "WMT",
        "XOM",
    )
    rows = [
        (str(start + datetime.timedelta(n // 12)), symbols[n % 12], *(round(rng.uniform(20, 400), 2) for _ in range(4)),
         rng.randrange(100_000, 5_000_000))
        for n in range(count)
    ]  # fmt: skip
    columns = [
        ("date", "date"),
        ("symbol", "string"),
        *((name, "double") for name in ("open", "high", "low", "close")),
    ]
    columns.append(("volume", "int64"))

    def csv_bytes() -> int:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([name for name, _ in columns])
        writer.writerows(rows)
        return len(out.getvalue().encode())

    variants: dict[str, Callable[[], int]] = {
        "csv (the csv module)": csv_bytes,
        "parquet, uncompressed": lambda: parquet_bytes(parquet_writer, columns, rows, None, 6),
        "parquet, gzip level 1 (the stand-in's)": lambda: parquet_bytes(
            parquet_writer, columns, rows, "gzip", 1
        ),
        "parquet, gzip level 6": lambda: parquet_bytes(parquet_writer, columns, rows, "gzip", 6),
    }
    figures = {}
    for label, write in variants.items():
        times = []
        for _ in range(3):
            started = time.perf_counter()
            size = write()
            times.append(time.perf_counter() - started)
        figures[label] = (statistics.median(times), size)
    csv_size = figures["csv (the csv module)"][1]
    table_rows = [
        [label, f"{count / seconds:,.0f}", f"{size / MiB:.1f}", f"{size / csv_size:.2f}x"]
        for label, (seconds, size) in figures.items()
    ]
    note = f"{count:,} rows of daily bars (a date, a symbol, four prices, a volume), written to memory; median of 3."
    return table(
        "8. The stand-in's Parquet writer (examples/parquet_writer.py)",
        note,
        ["format", "rows/s", "MiB", "size to csv"],
        table_rows,
    )


def parquet_bytes(
    writer: Any,
    columns: list[tuple[str, str]],
    rows: list[Any],
    compression: str | None,
    level: int,
) -> int:
    import io

    out = io.BytesIO()
    writer.write_parquet(out, columns, rows, compression=compression, compresslevel=level)
    return len(out.getvalue())


if __name__ == "__main__":
    main()

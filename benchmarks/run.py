"""Benchmarks: dataset-client side by side with what a user would pick instead.

    python3 benchmarks/run.py            # the full run (1 GiB downloads; a few minutes)
    python3 benchmarks/run.py --quick    # smaller sizes, fewer runs: under a minute

It sets up its own world and tears it down: nginx on 127.0.0.1 (installed with apt-get
when missing) serving small JSON answers, a large JSON body (plain and gzip) and a large
file, over HTTP and HTTPS with a throwaway CA; a throwaway virtual environment with
requests and httpx (never dependencies of the library); curl. Every figure is the median
of several runs with the variants interleaved, printed as a Markdown table with ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.server
import json
import os
import platform
import shutil
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
WORKER = os.path.join(HERE, "worker.py")
VENV = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "dataset-client-bench", "venv")
SMALL_JSON = '[{"name": "daily_bars", "rows": 6264}, {"name": "trades", "rows": 50112}]'
MiB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer runs (under a minute)")
    sections = ["import", "construct", "requests", "instructions", "bigjson", "download", "resume"]
    parser.add_argument("--only", action="append", choices=sections, help="run only this part (repeatable)")
    args = parser.parse_args()
    chosen = args.only or sections
    quick = args.quick
    settings = {
        "runs": 2 if quick else 5,
        "import_runs": 6 if quick else 40,
        "requests": 200 if quick else 2000,
        "stock_requests": 50 if quick else 400,
        "json_mib": 4 if quick else 20,
        "file_mib": 64 if quick else 1024,
        "download_runs": 1 if quick else 3,
        "resume_mib": 32 if quick else 256,
    }
    ensure_debian_packages(["nginx", "curl", "openssl"])
    python = ensure_venv()
    with tempfile.TemporaryDirectory(prefix="dataset-client-bench-") as work, nginx_world(work, settings) as world:
        lines = header(python, quick)
        parts: dict[str, Callable[[], list[str]]] = {
            "import": lambda: bench_import(python, settings["import_runs"]),
            "construct": lambda: bench_construct(python, settings["runs"]),
            "requests": lambda: bench_requests(python, world, settings),
            "instructions": lambda: bench_instructions(python, world, quick),
            "bigjson": lambda: bench_bigjson(python, world, settings),
            "download": lambda: bench_download(python, world, work, settings),
            "resume": lambda: bench_resume(python, work, settings),
        }
        for section in sections:
            if section in chosen:
                lines += parts[section]()
    print("\n".join(lines))


# ---------------------------------------------------------------------------
# The world: packages, a virtual environment, nginx with TLS
# ---------------------------------------------------------------------------


def ensure_debian_packages(commands: list[str]) -> None:
    missing = [name for name in commands if not (shutil.which(name) or os.path.exists(f"/usr/sbin/{name}"))]
    if not missing:
        return
    print(f"installing {', '.join(missing)} with apt-get", file=sys.stderr)
    # Keep the package scripts from starting a system nginx on port 80.
    policy = "/usr/sbin/policy-rc.d"
    created = not os.path.exists(policy)
    if created:
        with open(policy, "w") as script:
            script.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
    try:
        quiet = {"stdout": subprocess.DEVNULL, "env": {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}}
        subprocess.run(["apt-get", "update", "-qq"], check=True, **quiet)  # type: ignore[call-overload]
        packages = ["nginx-light" if name == "nginx" else name for name in missing]
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], check=True, **quiet)  # type: ignore[call-overload]
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
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "requests", "httpx"], check=True
        )
    return python


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def nginx_world(work: str, settings: dict[str, int]) -> Iterator[dict[str, str]]:
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
    with open(os.path.join(www, "files", "big.bin"), "wb") as out:
        out.truncate(settings["file_mib"] * MiB)  # sparse: measures the clients, not the disk under nginx
    cafile = make_certificates(work)
    http_port, https_port = free_port(), free_port()
    config = os.path.join(work, "nginx.conf")
    temp = os.path.join(www, "tmp")
    with open(config, "w") as out:
        out.write(f"""
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
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
        location /files/ {{ }}
    }}
}}
""")
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    process = subprocess.Popen([binary, "-c", config, "-g", "daemon off;"], stderr=subprocess.PIPE)
    try:
        wait_for_port(http_port)
        wait_for_port(https_port)
        yield {
            "http": f"http://127.0.0.1:{http_port}",
            "https": f"https://127.0.0.1:{https_port}",
            "cafile": cafile,
            "json_bytes": str(json_bytes),
        }
    finally:
        process.terminate()
        process.wait(10)


def wait_for_port(port: int) -> None:
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise SystemExit(f"nginx did not start listening on {port}")


def make_certificates(work: str) -> str:
    """A throwaway CA and a server certificate for 127.0.0.1, with openssl."""
    extensions = os.path.join(work, "ext.cnf")
    with open(extensions, "w") as out:
        out.write("subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")

    def openssl(command: str, *arguments: str) -> None:
        subprocess.run(["openssl", *command.split(), *arguments], check=True, capture_output=True, cwd=work)

    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    openssl(f"req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj", "/CN=bench CA")
    openssl(f"req {key} -keyout server.key -out server.csr -subj /CN=127.0.0.1")
    openssl(
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile", extensions
    )
    return os.path.join(work, "ca.pem")


def big_json(size: int) -> bytes:
    """A query-like result of about ``size`` bytes: rows of dates, symbols, floats and ints."""
    rows = []
    total = 0
    n = 0
    while total < size:
        row = [
            f"2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}",
            ("AAPL", "MSFT", "NVDA")[n % 3],
            100 + n % 997 / 7,
            101 + n % 991 / 3,
            99 + n % 983 / 11,
            100.5 + n % 977 / 13,
            1000 + n * 7 % 100003,
        ]
        rows.append(row)
        total += 90
        n += 1
    columns = ["date", "symbol", "open", "high", "low", "close", "volume"]
    return json.dumps({"columns": columns, "rows": rows, "row_count": len(rows)}).encode()


# ---------------------------------------------------------------------------
# Running measurements
# ---------------------------------------------------------------------------


def worker(python: str, *arguments: str) -> dict[str, float]:
    environment = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # users have bytecode compiled
    environment["NO_PROXY"] = "127.0.0.1,localhost"
    done = subprocess.run([python, WORKER, *arguments], capture_output=True, text=True, env=environment, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"worker {' '.join(arguments)} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout)
    return result


def interleaved(
    runs: int, variants: list[str], measure: Callable[[str], dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Median of each field over ``runs`` rounds, the variants' order rotating each round."""
    samples: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for round_number in range(runs):
        shift = round_number % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            samples[variant].append(measure(variant))
    return {
        variant: {field: statistics.median(sample[field] for sample in results) for field in results[0]}
        for variant, results in samples.items()
    }


def header(python: str, quick: bool) -> list[str]:
    version = subprocess.run(
        [
            python,
            "-c",
            "import sys, requests, httpx; print(sys.version.split()[0], requests.__version__, httpx.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    nginx = subprocess.run(
        [shutil.which("nginx") or "/usr/sbin/nginx", "-v"], capture_output=True, text=True
    ).stderr.strip()
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1]
    return [
        f"## Benchmarks, {time.strftime('%Y-%m-%d')}{' (--quick)' if quick else ''}",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}. "
        f"Python {version[0]}, requests {version[1]}, httpx {version[2]}, curl {curl}, {nginx.replace('nginx version: ', '')} on 127.0.0.1.",
        "Medians of interleaved runs; ratios are to the reference named in each table, in this run.",
    ]


def bench_import(python: str, runs: int) -> list[str]:
    variants = ["json+urllib.request", "dataset_client", "requests", "httpx"]
    for variant in variants:  # compile bytecode first, as users have it
        worker(python, "import", variant)
    code = {
        "json+urllib.request": "import json, urllib.request",
        "dataset_client": "import dataset_client",
        "requests": "import requests",
        "httpx": "import httpx",
    }
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def measure(variant: str) -> dict[str, float]:
        started = time.perf_counter()
        subprocess.run([python, "-c", code[variant]], check=True, cwd=REPO, env=environment)
        return {"process": time.perf_counter() - started, **worker(python, "import", variant)}

    result = interleaved(runs, variants, measure)
    base = result["json+urllib.request"]
    lines = [
        "",
        "### 1. Import",
        "",
        "| import | in-process ms | ratio | whole process ms | ratio |",
        "|---|---|---|---|---|",
    ]
    for variant, figures in result.items():
        lines.append(
            f"| {variant} | {figures['seconds'] * 1e3:.1f} | {figures['seconds'] / base['seconds']:.3f}x "
            f"| {figures['process'] * 1e3:.1f} | {figures['process'] / base['process']:.3f}x |"
        )
    return lines


def bench_construct(python: str, runs: int) -> list[str]:
    variants = ["dataset_client", "urllib", "requests", "httpx"]
    result = interleaved(runs, variants, lambda v: worker(python, "construct", v, "200"))
    lines = [
        "",
        "### 2. Constructing a client (and closing it)",
        "",
        "| client | us each | ratio to urllib.build_opener() |",
        "|---|---|---|",
    ]
    labels = {
        "dataset_client": "DatasetClient(https url)",
        "urllib": "urllib.request.build_opener()",
        "requests": "requests.Session()",
        "httpx": "httpx.Client()",
    }
    for variant, figures in result.items():
        lines.append(
            f"| {labels[variant]} | {figures['seconds'] * 1e6:.0f} | {figures['seconds'] / result['urllib']['seconds']:.2f}x |"
        )
    return lines


def bench_requests(python: str, world: dict[str, str], settings: dict[str, int]) -> list[str]:
    variants = ["http.client", "http.client-no-timeout", "dataset_client", "urllib", "requests", "httpx"]
    lines = [
        "",
        "### 3. Small requests over a kept-alive connection: client CPU and wall time per request",
        "",
        "The floor is raw `http.client` on one kept-alive connection with the same 30 s timeout as dataset_client: "
        "with a timeout, CPython polls before each send and receive (two `poll` calls a request), which a blocking "
        "socket skips; the row without a timeout shows that cost. Stock urllib connects anew for every request.",
        "",
        "| client | HTTP GET CPU us | HTTP POST CPU us | HTTPS GET CPU us | HTTPS POST CPU us | HTTP GET wall us | HTTPS GET wall us |",
        "|---|---|---|---|---|---|---|",
    ]
    table: dict[str, list[str]] = {variant: [] for variant in variants}
    walls: dict[str, list[str]] = {variant: [] for variant in variants}
    for scheme in ("http", "https"):
        cafile = world["cafile"] if scheme == "https" else "-"
        for method, path in (("GET", "/datasets"), ("POST", "/query")):
            url = world[scheme] + path

            def measure(variant: str, url: str = url, method: str = method, cafile: str = cafile) -> dict[str, float]:
                count = settings["stock_requests"] if variant == "urllib" else settings["requests"]
                return worker(python, "requests", variant, url, method, str(count), cafile)

            result = interleaved(settings["runs"], variants, measure)
            floor = result["http.client"]["cpu"]
            for variant in variants:
                cpu = result[variant]["cpu"]
                table[variant].append(f"{cpu * 1e6:.0f} ({cpu / floor:.2f}x)")
                if method == "GET":
                    walls[variant].append(f"{result[variant]['wall'] * 1e6:.0f}")
    for variant in variants:
        lines.append(f"| {variant} | {' | '.join(table[variant])} | {' | '.join(walls[variant])} |")
    return lines


def bench_instructions(python: str, world: dict[str, str], quick: bool) -> list[str]:
    """User-space instructions per kept-alive request (valgrind's callgrind): exact, whatever the machine's load."""
    if not shutil.which("valgrind"):
        return ["", "### 3b. Instructions per request: skipped (no valgrind)"]
    counts = (50, 100) if quick else (200, 400)
    lines = [
        "",
        "### 3b. User-space instructions per kept-alive request (callgrind)",
        "",
        f"Counted for {counts[0]} and {counts[1]} requests; the difference, divided by {counts[1] - counts[0]}, cancels start-up. "
        "Unlike CPU time, this does not move with the machine's load; it leaves out the kernel's share.",
        "",
        "| request | http.client | dataset_client | ratio |",
        "|---|---|---|---|",
    ]
    environment = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment["NO_PROXY"] = "127.0.0.1,localhost"
    with tempfile.TemporaryDirectory() as scratch:
        cases = [
            ("http", "GET", "/datasets"),
            ("http", "POST", "/query"),
            ("https", "GET", "/datasets"),
            ("https", "POST", "/query"),
        ]
        for scheme, method, path in cases[:1] if quick else cases:  # --quick: one case, to stay under a minute
            cafile = world["cafile"] if scheme == "https" else "-"
            per_request = {}
            for variant in ("http.client", "dataset_client"):
                totals = []
                for count in counts:
                    command = [
                        "valgrind",
                        "--tool=callgrind",
                        f"--callgrind-out-file={scratch}/out",
                        python,
                        WORKER,
                        "requests",
                        variant,
                        world[scheme] + path,
                        method,
                        str(count),
                        cafile,
                    ]
                    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=900)
                    found = [line for line in done.stderr.splitlines() if "Collected :" in line]
                    if done.returncode != 0 or not found:
                        raise SystemExit(f"callgrind failed:\n{done.stderr[-2000:]}")
                    totals.append(int(found[-1].split(":")[-1]))
                per_request[variant] = (totals[1] - totals[0]) / (counts[1] - counts[0])
            ratio = per_request["dataset_client"] / per_request["http.client"]
            lines.append(
                f"| {scheme.upper()} {method} | {per_request['http.client']:,.0f} | {per_request['dataset_client']:,.0f} | {ratio:.2f}x |"
            )
    return lines


def bench_bigjson(python: str, world: dict[str, str], settings: dict[str, int]) -> list[str]:
    variants = ["http.client", "dataset_client", "requests", "httpx"]
    size = int(world["json_bytes"]) / MiB
    lines = [
        "",
        f"### 4. A {size:.0f} MiB query result to Python objects (GET over HTTP)",
        "",
        "| client | identity: wall ms | ratio to requests | peak RSS growth MiB | gzip: wall ms | ratio to requests | peak RSS growth MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    cells: dict[str, list[str]] = {variant: [] for variant in variants}
    for path in ("/big/datasets", "/bigz/datasets"):
        url = world["http"] + path
        if path.startswith("/bigz") and "http.client" in variants:
            variants_here = [v for v in variants if v != "http.client"]  # raw read()+loads does not gunzip
        else:
            variants_here = variants
        result = interleaved(settings["runs"], variants_here, lambda v, url=url: worker(python, "bigjson", v, url, "-"))
        base = result["requests"]["wall"]
        for variant in variants:
            if variant in result:
                figures = result[variant]
                cells[variant] += [
                    f"{figures['wall'] * 1e3:.0f}",
                    f"{figures['wall'] / base:.2f}x",
                    f"{figures['rss']:.0f}",
                ]
            else:
                cells[variant] += ["n/a", "", ""]
    for variant in variants:
        label = "http.client read()+json.loads" if variant == "http.client" else variant
        lines.append(f"| {label} | {' | '.join(cells[variant])} |")
    return lines


def bench_download(python: str, world: dict[str, str], work: str, settings: dict[str, int]) -> list[str]:
    variants = ["curl", "dataset_client", "requests", "httpx"]
    bare = worker(python, "bare", "-")["rss"]
    size = settings["file_mib"] * MiB
    lines = [
        "",
        f"### 5. Downloading {settings['file_mib']} MiB",
        "",
        f"MB/s (ratio to curl), CPU seconds, peak RSS in MiB (a bare interpreter: {bare:.0f} MiB). "
        "`dataset_client` to a file writes a temporary file and renames it; the others write in place. "
        f"Files are written to {file_directory(work, size)}: on this machine's disk, the same code varied 6-fold "
        "from run to run with the kernel's writeback, which hid any difference between the clients.",
        "",
        "| client | HTTP to /dev/null | HTTP to a file | HTTPS to /dev/null | HTTPS to a file |",
        "|---|---|---|---|---|",
    ]
    cells: dict[str, list[str]] = {variant: [] for variant in variants}
    for scheme in ("http", "https"):
        cafile = world["cafile"] if scheme == "https" else "-"
        url = world[scheme] + "/files/big.bin"
        for target in ("/dev/null", os.path.join(file_directory(work, size), "downloaded.bin")):

            def measure(variant: str, url: str = url, target: str = target, cafile: str = cafile) -> dict[str, float]:
                result = worker(python, "download", variant, url, target, cafile)
                if target != "/dev/null":
                    assert os.path.getsize(target) == size, "incomplete download"
                    os.unlink(target)
                    os.sync()  # leave no writeback behind for the next variant (untimed)
                return result

            runs = settings["download_runs"] * (2 if target != "/dev/null" and settings["download_runs"] > 1 else 1)
            result = interleaved(runs, variants, measure)
            reference = size / result["curl"]["wall"]
            for variant in variants:
                figures = result[variant]
                rate = size / figures["wall"]
                cells[variant].append(
                    f"{rate / 1e6:.0f} MB/s ({rate / reference:.2f}x), {figures['cpu']:.2f} s CPU, {figures['rss']:.0f} MiB"
                )
    for variant in variants:
        label = {"curl": "curl -o", "requests": "requests iter_content(1 MiB)", "httpx": "httpx iter_bytes()"}.get(
            variant, variant
        )
        lines.append(f"| {label} | {' | '.join(cells[variant])} |")
    return lines


def file_directory(work: str, size: int) -> str:
    """tmpfs when it has room (the clients' write paths, without disk writeback noise), else the work directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and shutil.disk_usage(shm).free > 2 * size:
        return shm
    return work


def bench_resume(python: str, work: str, settings: dict[str, int]) -> list[str]:
    """Bytes fetched for a download cut at several points, against a server that honours Range."""
    size = settings["resume_mib"] * MiB
    path = os.path.join(work, "resume.bin")
    with open(path, "wb") as out:
        out.write(os.urandom(size))
    cuts = [size // 7, size // 3, size // 2, size * 6 // 7]
    served = [0]
    pending = list(cuts)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            start = 0
            if self.headers.get("Range") and self.headers.get("If-Range") == '"v1"':
                start = int(self.headers["Range"].split("=")[1].rstrip("-"))
            end = pending.pop(0) if pending and pending[0] > start else size
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(size - start))
            self.send_header("ETag", '"v1"')
            if start:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            served[0] += end - start  # before writing: the client may finish before this thread resumes
            with open(path, "rb") as source:
                source.seek(start)
                remaining = end - start
                while remaining:
                    chunk = source.read(min(remaining, MiB))
                    self.wfile.write(chunk)
                    remaining -= len(chunk)
            if end < size:
                self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = os.path.join(work, "resumed.bin")
        worker(python, "download", "dataset_client", f"http://127.0.0.1:{server.server_port}/file", target, "-")
        with open(target, "rb") as got, open(path, "rb") as want:
            assert got.read() == want.read(), "the resumed file differs"
    finally:
        server.shutdown()
        server.server_close()
    overhead = served[0] - size
    return [
        "",
        "### 6. A resumed download",
        "",
        f"{settings['resume_mib']} MiB cut {len(cuts)} times: {served[0]:,} bytes fetched for a {size:,}-byte file "
        f"({served[0] / size:.4f}x; {overhead / len(cuts):,.0f} bytes over per interruption), and the file is identical.",
    ]


if __name__ == "__main__":
    main()

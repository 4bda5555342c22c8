"""Many small files, one after the other: the client's cost per file against what users script instead.

    python3 benchmarks/many_files.py                  # 1,000 files of 64 KiB, 7 rounds (under a minute)
    python3 benchmarks/many_files.py --quick          # 100 files, 2 rounds: a smoke run of seconds
    python3 benchmarks/many_files.py --library /tmp/old/dataset_client.py   # another copy
    python3 benchmarks/many_files.py --profile client # cProfile of one variant's loop (top functions)

It builds its own world and tears it down: nginx on 127.0.0.1 serving ``--files`` files of
64 KiB of random bytes, destinations on tmpfs (/dev/shm, warmed first), and run.py's throwaway
virtual environment for requests (never a dependency of the library). Each variant downloads
every file, one after the other, on one kept-alive connection, in a process of its own
(``many_files.py measure ...``): after a few files into another directory (connecting,
imports, caches), the loop over all the files is timed. The variants:

- bare: ``http.client.HTTPConnection`` GET, ``shutil.copyfileobj`` into a ``tempfile.mkstemp``
  file in the destination directory, ``os.replace`` to the file's name (the reference);
- requests: a ``Session``, ``copyfileobj`` of its raw response, written the same way;
- curl: ``curl --remote-name-all`` with every URL, one process (timed whole, its start-up in);
- the client: ``DatasetClient(base).download(url, path)`` per file; with ``resume=True``,
  ``sha256=``, ``connections=2``; and into a directory already holding ``--crowd`` other files
  (30,000), beside the bare loop into that directory.

Rounds interleave the variants (their order rotating each round); figures are medians, ratios
are within this run. Every run's files are checked (names, nothing beside them, sha256) and
removed. The library is a copy of the checkout's ``dataset_client.py`` (or ``--library``'s),
imported by the measuring processes only. Results go to stdout: benchmarks/README.md holds
the latest.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KiB = 1024
FILE_SIZE = 64 * KiB
WARM_UP = 5  # files downloaded before the timed loop, into a directory of their own

# Variant: (what it is, whether its directory holds the crowd).
VARIANTS = {
    "bare": ("bare", False),
    "requests": ("requests", False),
    "curl": ("curl", False),
    "client": ("client", False),
    "client resume=True": ("client", False),
    "client sha256=": ("client", False),
    "client connections=2": ("client", False),
    "client, crowded": ("client", True),
    "bare, crowded": ("bare", True),
}


def main() -> None:
    if sys.argv[1:2] == ["measure"]:  # a measuring process, started by this script
        print(json.dumps(measure(*sys.argv[2:])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 files, 2 rounds, 3,000 others")
    parser.add_argument("--files", type=int, help="files a run downloads (default 1,000)")
    parser.add_argument("--crowd", type=int, help="other files in the crowded directory (30,000)")
    parser.add_argument("--runs", type=int, help="rounds of interleaved runs (default 7)")
    parser.add_argument(
        "--library",
        metavar="PATH",
        help="the dataset_client.py to measure (default: this checkout's)",
    )
    parser.add_argument(
        "--profile", metavar="VARIANT", choices=VARIANTS, help="profile one variant's loop instead"
    )
    args = parser.parse_args()
    count = args.files or (100 if args.quick else 1000)
    crowd = args.crowd if args.crowd is not None else (3000 if args.quick else 30000)
    runs = args.runs or (2 if args.quick else 7)
    library = os.path.abspath(args.library or os.path.join(REPO, "dataset_client.py"))
    if not os.path.isfile(library):
        raise SystemExit(f"no such file: {library}")
    sys.path.insert(0, HERE)
    import run  # the benchmarks' world: nginx, the virtual environment, interleaving, tables

    if not run.find_program("nginx") or (args.profile is None and not shutil.which("curl")):
        raise SystemExit("missing nginx or curl (python3 benchmarks/run.py --install)")
    python = run.ensure_venv()
    with world(run, count, crowd, library) as files:
        if args.profile:
            print(profile(run, python, files, args.profile))
        else:
            print("\n".join(benchmark(run, python, files, runs, library)))


class Files:
    """The world a run downloads from and into."""

    def __init__(self, work: str, base: str, names: list[str], digests: dict[str, str]) -> None:
        self.work = work
        self.base = base  # the files' URLs: base/NAME
        self.names = names
        self.digests = digests  # NAME: sha256
        self.manifest = os.path.join(work, "manifest.json")
        with open(self.manifest, "w") as out:
            json.dump({"names": names, "digests": digests}, out)
        self.crowd: set[str] = set()
        self.library = os.path.join(work, "library")

    def destination(self, crowded: bool) -> str:
        return os.path.join(self.work, "crowded" if crowded else "empty")


@contextlib.contextmanager
def world(run: Any, count: int, crowd: int, library: str) -> Iterator[Files]:
    """nginx on 127.0.0.1 serving ``count`` files of 64 KiB; an empty and a crowded directory."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="dataset-client-many-files-", dir=shm) as work:
        os.chmod(work, 0o755)  # nginx's workers run as an unprivileged user
        www = os.path.join(work, "www", "many")
        os.makedirs(www)
        os.makedirs(os.path.join(work, "www", "tmp"))
        names = [f"file-{number:05d}.bin" for number in range(count)]
        digests = {}
        for name in names:
            data = os.urandom(FILE_SIZE)
            digests[name] = hashlib.sha256(data).hexdigest()
            with open(os.path.join(www, name), "wb") as out:
                out.write(data)
        port = run.free_port()
        config = os.path.join(work, "nginx.conf")
        with open(config, "w") as out:
            out.write(nginx_config(work, port))
        nginx = subprocess.Popen(
            [run.find_program("nginx") or "nginx", "-c", config, "-g", "daemon off;"]
        )
        try:
            run.wait_for_port(port)
            files = Files(work, f"http://127.0.0.1:{port}/many", names, digests)
            os.makedirs(files.library)
            shutil.copy(library, os.path.join(files.library, "dataset_client.py"))
            os.makedirs(files.destination(crowded=False))
            files.crowd = make_crowd(files.destination(crowded=True), crowd)
            warm_tmpfs(work, 2 * count * FILE_SIZE)
            yield files
        finally:
            nginx.terminate()
            nginx.wait(10)


def nginx_config(work: str, port: int) -> str:
    """One worker serving ``work``/www on 127.0.0.1:``port``, its connections kept alive."""
    kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    temporary = " ".join(f"{kind}_temp_path {work}/www/tmp/{kind};" for kind in kinds)
    server = f"server {{ listen 127.0.0.1:{port}; root {work}/www; }}"
    return "\n".join([
        f"worker_processes 1; pid {work}/nginx.pid; error_log {work}/error.log warn;",
        "events { worker_connections 64; }",
        f"http {{ access_log off; {temporary}",
        "    sendfile on; tcp_nodelay on; keepalive_requests 10000000; keepalive_timeout 300s;",
        f"    default_type application/octet-stream; {server} }}",
    ])  # fmt: skip


def make_crowd(directory: str, count: int) -> set[str]:
    """``count`` empty files in ``directory``: a few years of daily exports side by side."""
    os.makedirs(directory)
    names = {f"export-{number:05d}.csv" for number in range(count)}
    for name in names:
        os.close(os.open(os.path.join(directory, name), os.O_CREAT | os.O_WRONLY, 0o644))
    return names


def warm_tmpfs(work: str, size: int) -> None:
    """The first touch of a page of memory costs several times the next one (run.py's note)."""
    warm = os.path.join(work, "warm")
    with open(warm, "wb") as out:
        for _ in range(size // (1024 * KiB) + 1):
            out.write(bytes(1024 * KiB))
    os.unlink(warm)


# ---------------------------------------------------------------------------
# The parent: rounds, checks, tables
# ---------------------------------------------------------------------------


def benchmark(run: Any, python: str, files: Files, runs: int, library: str) -> list[str]:
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}

    def one_run(variant: str) -> dict[str, float]:
        result = start_measuring(run, python, files, variant)
        check_and_clear(files, variant)
        samples[variant].append(result["wall"])
        return result

    result = run.interleaved(runs, list(VARIANTS), one_run)
    count = len(files.names)
    bare = result["bare"]["wall"]
    rows = []
    for variant, figures in result.items():
        spread = f"{count / max(samples[variant]):,.0f}-{count / min(samples[variant]):,.0f}"
        rows.append([
            variant,
            f"{count / figures['wall']:,.0f} ({spread})",
            f"{figures['wall'] / count * 1e6:.0f}",
            run.ratio(figures["wall"], bare),
            f"{figures['cpu'] / count * 1e6:.0f} ({run.ratio(figures['cpu'], result['bare']['cpu'])})",
        ])  # fmt: skip
    crowded = result["client, crowded"]["wall"] / result["client"]["wall"]
    crowded_bare = result["bare, crowded"]["wall"] / bare
    note = (
        f"{count:,} files of {FILE_SIZE // KiB} KiB from nginx on 127.0.0.1, one after the other on one "
        f"kept-alive connection, to tmpfs; medians of {runs} interleaved rounds (files/s: the median, then "
        f"the slowest and fastest run). Crowded: the destination directory already holds "
        f"{len(files.crowd):,} other files. CPU: the measuring process's (curl's: the child's)."
    )
    columns = [
        "variant",
        "files/s (slowest-fastest run)",
        "us per file",
        "time per file to bare",
        "CPU us per file (to bare)",
    ]
    summary = (
        f"Into a directory of {len(files.crowd):,} files against an empty one: the client "
        f"{crowded:.2f}x the time per file, the bare loop {crowded_bare:.2f}x."
    )
    section: list[str] = run.table("Many files", note, columns, rows)
    return header(run, python, library) + section + ["", summary]


def header(run: Any, python: str, library: str) -> list[str]:
    code = "import sys, requests; print(sys.version.split()[0], requests.__version__)"
    versions = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    version, requests = versions.stdout.split()
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1]
    nginx = subprocess.run(
        [run.find_program("nginx") or "nginx", "-v"], capture_output=True, text=True
    )
    nginx_version = nginx.stderr.strip().replace("nginx version: ", "")
    return [
        f"## Many files, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"load {os.getloadavg()[0]:.1f}. Python {version}, requests {requests}, curl {curl}, "
        f"{nginx_version}. Library: {describe(library)}.",
    ]


def describe(library: str) -> str:
    """The library measured: its checkout's commit (and whether changed since), or its path."""
    with open(library, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()[:12]
    if library != os.path.join(REPO, "dataset_client.py"):
        return f"{library} (sha256 {digest}...)"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "dataset_client.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"this checkout's dataset_client.py at {commit or 'an unknown commit'}" + (
        f" with uncommitted changes (sha256 {digest}...)" if changed else ""
    )


def start_measuring(
    run: Any, python: str, files: Files, variant: str, *extra: str, library: str = ""
) -> dict[str, float]:
    """``variant`` measured in a process of its own (``library``: another copy's directory)."""
    destination = files.destination(VARIANTS[variant][1])
    command = [python, os.path.abspath(__file__), "measure", variant, files.base, destination]
    command += [files.manifest, library or files.library, *extra]
    done = subprocess.run(
        command, capture_output=True, text=True, env=run.clean_environment(), timeout=900
    )
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout)
    return result


def check_and_clear(files: Files, variant: str) -> None:
    """Every file there with its bytes, nothing else beside them (other than the crowd); then removed."""
    crowded = VARIANTS[variant][1]
    directory = files.destination(crowded)
    present = set(os.listdir(directory))
    expected = set(files.names) | (files.crowd if crowded else set())
    if present != expected:
        extra, missing = sorted(present - expected)[:5], sorted(expected - present)[:5]
        raise SystemExit(f"{variant}: unexpected files {extra}, missing {missing} in {directory}")
    for name in files.names:
        path = os.path.join(directory, name)
        with open(path, "rb") as file:
            if hashlib.sha256(file.read()).hexdigest() != files.digests[name]:
                raise SystemExit(f"{variant}: {path} is not the server's file")
        os.unlink(path)


def profile(run: Any, python: str, files: Files, variant: str) -> str:
    """One run of ``variant`` under cProfile: its top functions by own time and by cumulative time."""
    output = os.path.join(files.work, "profile.out")
    result = start_measuring(run, python, files, variant, output)
    check_and_clear(files, variant)
    count = len(files.names)
    lines = [
        f"{variant}: {count:,} files in {result['wall']:.2f} s under cProfile "
        f"({result['wall'] / count * 1e6:.0f} us per file)"
    ]
    for order in ("tottime", "cumulative"):
        stream = io.StringIO()
        pstats.Stats(output, stream=stream).sort_stats(order).print_stats(25)
        lines += ["", f"## by {order}", stream.getvalue()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The measuring process
# ---------------------------------------------------------------------------


def measure(
    variant: str, base: str, destination: str, manifest: str, library: str, *profile_to: str
) -> dict[str, float]:
    """Download every file of ``manifest`` from ``base`` into ``destination``, one after the other."""
    with open(manifest) as file:
        files = json.load(file)
    names: list[str] = files["names"]
    if VARIANTS[variant][0] == "curl":
        return run_curl(base, destination, names)
    sys.path.insert(0, library)
    download, close = downloader(variant, base, files["digests"])
    warm = destination + "-warm"
    os.makedirs(warm)
    for name in names[:WARM_UP]:
        download(name, warm)
    shutil.rmtree(warm)
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    wall, cpu = time.perf_counter(), time.process_time()
    for name in names:
        download(name, destination)
    result = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile_to[0])
    close()
    return result


def downloader(
    variant: str, base: str, digests: dict[str, str]
) -> tuple[Callable[[str, str], None], Callable[[], None]]:
    """(download one file by name into a directory; close) for ``variant``."""
    kind = VARIANTS[variant][0]
    if kind == "bare":
        return bare_loop(base)
    if kind == "requests":
        return requests_loop(base)
    import dataset_client

    client = dataset_client.DatasetClient(base.rsplit("/", 1)[0])
    options: dict[str, Any] = {}
    if variant.endswith("resume=True"):
        options["resume"] = True
    elif variant.endswith("connections=2"):
        options["connections"] = 2

    def download(name: str, directory: str) -> None:
        sha256 = digests[name] if variant.endswith("sha256=") else None
        client.download(f"{base}/{name}", os.path.join(directory, name), sha256=sha256, **options)

    return download, client.close


def bare_loop(base: str) -> tuple[Callable[[str, str], None], Callable[[], None]]:
    """What a careful user scripts with the standard library: a temporary file, then a rename."""
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(base)
    # With a timeout, as the client always has (30 s by default): CPython polls before each read.
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30.0)

    def download(name: str, directory: str) -> None:
        connection.request("GET", f"{parts.path}/{name}")
        response = connection.getresponse()
        if response.status != 200:
            raise SystemExit(f"{name}: {response.status} {response.reason}")
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
        with open(fd, "wb") as out:
            shutil.copyfileobj(response, out)
        os.replace(temporary, os.path.join(directory, name))

    return download, connection.close


def requests_loop(base: str) -> tuple[Callable[[str, str], None], Callable[[], None]]:
    """requests with a Session, written as the bare loop writes."""
    import requests

    session = requests.Session()

    def download(name: str, directory: str) -> None:
        with session.get(f"{base}/{name}", stream=True, timeout=30.0) as response:
            response.raise_for_status()
            fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
            with open(fd, "wb") as out:
                shutil.copyfileobj(response.raw, out)
            os.replace(temporary, os.path.join(directory, name))

    return download, session.close


def run_curl(base: str, destination: str, names: list[str]) -> dict[str, float]:
    """One curl process for every URL, writing each file under its remote name (in place)."""
    command = ["curl", "-sS", "--fail", "--remote-name-all", *(f"{base}/{name}" for name in names)]
    wall = time.perf_counter()
    subprocess.run(command, cwd=destination, check=True)
    elapsed = time.perf_counter() - wall
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": elapsed, "cpu": usage.ru_utime + usage.ru_stime}


if __name__ == "__main__":
    main()

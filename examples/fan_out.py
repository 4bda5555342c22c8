"""Many exports at once on a Dask cluster: one export per symbol (or per month), each downloaded and checked.

    python examples/fan_out.py DATASET --symbols A,B,C --start YYYY-MM-DD --end YYYY-MM-DD \\
           --into DIR [--by symbol|month] [--format parquet|csv|jsonl] \\
           [--scheduler ADDRESS] [--workers N]

Without ``--scheduler`` it starts a ``LocalCluster`` of ``--workers`` processes (default 2)
on this machine; with it, it uses that cluster (and waits for ``--workers`` workers when
given). Each task gets the ``DatasetClient`` made here, pickled (the pickle holds the key),
creates its export, downloads it into ``DIR`` as ``DATASET-SYMBOL.EXT`` or
``DATASET-YYYY-MM.EXT`` (other characters than letters, digits, ``_.-~`` percent-encoded:
``BRK/A`` is ``BRK%2FA``) with the export's sha256 checked, and writes ``NAME.sha256`` beside
it (``sha256sum`` format, after a comment line saying what the export covers). A re-run
skips every file whose ``.sha256`` it matches and that covers what is asked now (the same
symbols, dates and format), so it downloads only what is missing, not verified or of
another range. ``DIR`` must be reachable from every worker (a shared file system on a real
cluster), and ``dataset_client.py`` importable by the scheduler and every worker
(``PYTHONPATH``: the scheduler unpickles the task graph).

The service address and key come from the same variables and profile as the command line's
(``DATASET_CLIENT_BASE_URL``, ``DATASET_CLIENT_API_KEY``, ``DATASET_CLIENT_PROFILE``, the config
file). It prints each failure on its own line, then ``N files, M bytes, F failed in S s on
ADDRESS (W workers)``: ``N`` files there and verified (skipped ones included), ``M`` their
bytes, ``S`` the seconds the fan-out took once the cluster was up. Exit status: 0 when every
file is there and verified, 1 when any failed, 2 for a usage error or without Dask.

Needs Dask (``pip install "dask[distributed]"``); the library itself never does.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import errno
import hashlib
import io
import os
import stat
import sys
import time
import urllib.parse
from typing import Any, NamedTuple

try:
    import dataset_client as dc
except ImportError:  # run from a checkout: the library is one directory up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import dataset_client as dc

EXTENSIONS = {"parquet": ".parquet", "csv": ".csv", "jsonl": ".jsonl"}


class Job(NamedTuple):
    """One export to make and download: its label (a symbol or YYYY-MM), what it covers, its file's name."""

    label: str
    dataset: str
    symbols: tuple[str, ...]
    start: datetime.date
    end: datetime.date
    file_format: str
    name: str


class Outcome(NamedTuple):
    label: str
    error: str | None  # None: the file is there and verified
    size: int | None = None  # the verified file's bytes, as the worker found them


def month_spans(start: datetime.date, end: datetime.date) -> list[tuple[str, datetime.date, datetime.date]]:
    """Each calendar month the range touches, as (YYYY-MM, first day, last day), clipped to the range."""
    spans = []
    first = start.replace(day=1)
    while first <= end:
        following = (first + datetime.timedelta(days=32)).replace(day=1)
        spans.append((first.strftime("%Y-%m"), max(start, first), min(end, following - datetime.timedelta(days=1))))
        first = following
    return spans


def plan(args: argparse.Namespace) -> list[Job]:
    """The exports to make: one per symbol, or one per month of the range with every symbol."""
    extension = EXTENSIONS[args.format]
    if args.by == "symbol":
        spans = [(symbol, (symbol,), args.start, args.end) for symbol in args.symbols]
    else:
        spans = [(month, tuple(args.symbols), first, last) for month, first, last in month_spans(args.start, args.end)]
    return [
        Job(label, args.dataset, symbols, first, last, args.format, f"{file_name(args.dataset, label)}{extension}")
        for label, symbols, first, last in spans
    ]


def file_name(dataset: str, label: str) -> str:
    """``DATASET-LABEL``, each percent-encoded: one file in the directory whatever a symbol holds (``/``, ``..``)."""
    return f"{urllib.parse.quote(dataset, safe='')}-{urllib.parse.quote(label, safe='')}"


def covers(job: Job) -> str:
    """The comment line of ``job``'s ``.sha256`` record: what its export holds (``sha256sum -c`` skips it)."""
    symbols = ",".join(urllib.parse.quote(symbol, safe="") for symbol in job.symbols)
    return f"# {urllib.parse.quote(job.dataset, safe='')} {symbols} {job.start} {job.end} {job.file_format}"


def verified_size(path: str, job: Job) -> int | None:
    """The size of the file at ``path`` when its ``.sha256`` record names its digest and says it
    covers ``job`` (a file of another range or symbols is no file of this run's); else None."""
    try:
        with open_regular(path + ".sha256") as recorded, open_regular(path) as file:
            lines = recorded.read(4096).decode("ascii").splitlines()  # two short lines: more is none of ours
            if len(lines) != 2 or lines[0] != covers(job):
                return None
            expected = lines[1].split(" ", 1)[0]
            digest = hashlib.file_digest(file, "sha256").hexdigest()
            size = os.fstat(file.fileno()).st_size
    except (OSError, UnicodeDecodeError):
        return None
    return size if digest == expected else None


def open_regular(path: str) -> io.BufferedReader:
    """``path`` open for reading when it is the user's own regular file, reached through no link;
    else an OSError. A FIFO or device planted in a shared directory would have the task wait or
    read for ever; another user's file and record (or links to them) would pass for this run's export.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)  # a FIFO opens at once
    fd = os.open(path, flags)
    status = os.fstat(fd)
    own = not hasattr(os, "geteuid") or status.st_uid == os.geteuid()
    if not (stat.S_ISREG(status.st_mode) and own and status.st_nlink == 1):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file of the user's own", path)
    return os.fdopen(fd, "rb")


def fetch(client: dc.DatasetClient, job: Job, into: str) -> Outcome:
    """On a worker: make ``job``'s export and download it into ``into``, unless it is there and verified."""
    path = os.path.join(into, job.name)
    size = verified_size(path, job)
    if size is not None:
        return Outcome(job.label, None, size)
    try:
        os.makedirs(into, exist_ok=True)  # as this worker sees DIR: main() made it only where it runs
        with copy.copy(client) as own:  # this task's own connections, closed when it ends
            export = own.create_export(
                job.dataset, symbols=job.symbols, start_date=job.start, end_date=job.end, format=job.file_format
            )
            own.download(export["download_url"], path, sha256=export["sha256"])
        size = os.stat(path).st_size  # checked against the export's sha256 as it was written
        # A name of its own, made with O_EXCL and O_NOFOLLOW: in a shared directory another user's
        # link planted at a predictable name would have this write go where the link points.
        partial = f"{path}.sha256.{os.urandom(6).hex()}.part"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with open(os.open(partial, flags, 0o666), "w", encoding="ascii") as recorded:
            recorded.write(f"{covers(job)}\n{export['sha256']}  {job.name}\n")
        os.replace(partial, path + ".sha256")
    except Exception as exc:  # reported with its label; the other tasks go on
        return Outcome(job.label, f"{type(exc).__name__}: {exc}")
    return Outcome(job.label, None, size)


def run(distributed: Any, args: argparse.Namespace, client: dc.DatasetClient, jobs: list[Job]) -> int:
    """Fan the jobs out on the cluster; print the failures and the summary line; the exit status."""
    if args.scheduler:
        cluster, dask = None, distributed.Client(args.scheduler)
        if args.workers:
            dask.wait_for_workers(args.workers, timeout=120)
    else:
        cluster = distributed.LocalCluster(
            n_workers=args.workers or 2, threads_per_worker=2, dashboard_address=None, host="127.0.0.1"
        )
        dask = distributed.Client(cluster)
    try:
        started = time.monotonic()
        futures = [dask.submit(fetch, client, job, args.into, pure=False) for job in jobs]
        outcomes = dask.gather(futures)
        seconds = time.monotonic() - started
        address, workers = dask.scheduler.address, len(dask.scheduler_info()["workers"])
    finally:
        dask.close()
        if cluster is not None:
            cluster.close()
    # The workers' word (each checked its file): DIR may be mounted elsewhere here, or not at all, and
    # hashing every file again here would read them all twice.
    failures = [outcome for outcome in outcomes if outcome.error]
    for failure in failures:
        print(f"failed {failure.label}: {failure.error}")
    done = [outcome.size or 0 for outcome in outcomes if not outcome.error]
    summary = f"{len(done)} files, {sum(done)} bytes, {len(failures)} failed in {seconds:.1f} s"
    print(f"{summary} on {address} ({workers} workers)")
    return 1 if failures else 0


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", metavar="DATASET")
    parser.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    parser.add_argument("--start", required=True, type=datetime.date.fromisoformat, help="YYYY-MM-DD")
    parser.add_argument("--end", required=True, type=datetime.date.fromisoformat, help="YYYY-MM-DD")
    parser.add_argument("--into", required=True, metavar="DIR", help="where the files go (made if missing)")
    parser.add_argument("--by", choices=("symbol", "month"), default="symbol", help="one export per (default: symbol)")
    parser.add_argument("--format", choices=tuple(EXTENSIONS), default="parquet")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="a running scheduler (default: a LocalCluster)")
    parser.add_argument("--workers", type=int, metavar="N", help="LocalCluster's workers (default 2); or wait for N")
    args = parser.parse_args(argv)
    args.symbols = list(dict.fromkeys(symbol.strip() for symbol in args.symbols.split(",") if symbol.strip()))
    if not args.symbols:
        parser.error("--symbols names no symbol")
    if args.start > args.end:
        parser.error("--start is after --end")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        import dask.distributed as distributed
    except ImportError:
        print('fan_out.py needs Dask: pip install "dask[distributed]"', file=sys.stderr)
        return 2
    try:  # the command line's client: DATASET_CLIENT_* variables, then the profile
        client = dc.DatasetClient.from_profile()
    except (ValueError, TypeError, OSError, LookupError) as exc:
        print(f"fan_out.py: {exc}", file=sys.stderr)
        return 2
    os.makedirs(args.into, exist_ok=True)
    with client:
        return run(distributed, args, client, plan(args))


if __name__ == "__main__":
    sys.exit(main())

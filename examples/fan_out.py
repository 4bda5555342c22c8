"""Many exports at once, on threads or on a Dask cluster: one export per symbol (or per month), each
downloaded and checked.

    python3 examples/fan_out.py DATASET --symbols A,B,C --start YYYY-MM-DD --end YYYY-MM-DD \\
            --into DIR [--by symbol|month] [--format parquet|csv|jsonl] \\
            [--scheduler ADDRESS] [--workers N]

Without Dask (the standard library alone) it runs the jobs on ``--workers`` threads (default 4)
sharing one ``DatasetClient``. Where Dask is installed, or with ``--scheduler``, it runs them on
Dask: without ``--scheduler`` a ``LocalCluster`` of ``--workers`` processes (default 2) on this
machine; with it, that cluster (waiting for ``--workers`` workers when given), each task getting
the ``DatasetClient`` made here, pickled (the pickle holds the key). Each job creates its export,
downloads it into ``DIR`` as ``DATASET-SYMBOL.EXT`` or ``DATASET-YYYY-MM.EXT`` (other characters
than letters, digits, ``_.-~`` percent-encoded: ``BRK/A`` is ``BRK%2FA``) with the export's sha256
checked, and writes ``NAME.sha256`` beside it (``sha256sum`` format, the digest in lower case,
after a comment line saying what the export covers). A re-run skips every file whose ``.sha256``
it matches and that covers what is asked now (the same symbols, dates and format), so it
downloads only what is missing, not verified or of another range. ``DIR`` must be reachable from
every worker (a shared file system on a real cluster) and be the user's own (another user could
plant links at its files' names). The scheduler and the workers need ``dataset_client.py`` (the
scheduler unpickles the task graph): where it cannot be imported, it is shipped with
``Client.upload_file``.

The service address and key come from the same variables and profile as the command line's
(``DATASET_CLIENT_BASE_URL``, ``DATASET_CLIENT_API_KEY``, ``DATASET_CLIENT_PROFILE``, the config
file). It prints each failure on its own line (a task whose worker is lost fails once the
cluster has had no worker for ``LOST_AFTER`` seconds), then ``N fetched, M already there``,
then ``N files, M bytes, F failed in S s on WHERE``: ``N`` files there and verified (skipped
ones included), ``M`` their bytes, ``S`` the seconds the fan-out took (once the cluster was up),
``WHERE`` either ``this machine (T threads)`` or the scheduler's address and ``(W workers)``.
Ctrl-C on the threads closes the client (the calls under way end), starts no other job and
prints the same lines for what was done. Exit status: 0 when every file is there and verified,
1 when any failed, 2 for a usage error, ``--scheduler`` without Dask, or a cluster that cannot
run the tasks, 130 after Ctrl-C on the threads.

Dask (``pip install "dask[distributed]"``) is this example's alone; the library never needs it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import datetime
import errno
import hashlib
import io
import os
import re
import stat
import sys
import time
import urllib.parse
import warnings
from typing import Any, NamedTuple

try:
    import dataset_client as dc
except ImportError:  # run from a checkout: the library is one directory up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import dataset_client as dc

EXTENSIONS = {"parquet": ".parquet", "csv": ".csv", "jsonl": ".jsonl"}
# As many jobs at once as the default LocalCluster runs (2 workers of 2 threads each)
THREADS = 4
LOST_AFTER = 60.0  # seconds the cluster may have no worker before the tasks still waiting fail
# What a terminal must not get raw (as the CLI escapes it):
UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f"  # C0, DEL, C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional controls
    "\u200b-\u200d\u2060\ufeff\u2028\u2029\ud800-\udfff]"  # zero-width, separators, lone surrogates
)


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
    fetched: bool = False  # downloaded by this run (not already there)


def month_spans(
    start: datetime.date, end: datetime.date
) -> list[tuple[str, datetime.date, datetime.date]]:
    """Each calendar month the range touches, as (YYYY-MM, first day, last day), clipped to the range."""
    spans = []
    first = start.replace(day=1)
    while first <= end:
        following = (first + datetime.timedelta(days=32)).replace(day=1)
        spans.append(
            (
                first.strftime("%Y-%m"),
                max(start, first),
                min(end, following - datetime.timedelta(days=1)),
            )
        )
        first = following
    return spans


def plan(args: argparse.Namespace) -> list[Job]:
    """The exports to make: one per symbol, or one per month of the range with every symbol."""
    extension = EXTENSIONS[args.format]
    if args.by == "symbol":
        spans = [(symbol, (symbol,), args.start, args.end) for symbol in args.symbols]
    else:
        spans = [
            (month, tuple(args.symbols), first, last)
            for month, first, last in month_spans(args.start, args.end)
        ]
    return [
        Job(
            label,
            args.dataset,
            symbols,
            first,
            last,
            args.format,
            f"{file_name(args.dataset, label)}{extension}",
        )
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
            # Two short lines: more is none of ours. As sha256sum -c: any case, white space around.
            text = recorded.read(4096).decode("ascii")
            lines = [line.strip() for line in text.strip().splitlines()]
            if len(lines) != 2 or lines[0] != covers(job) or not lines[1]:
                return None
            expected = lines[1].split()[0].lower()
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
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    )  # a FIFO opens at once
    fd = os.open(path, flags)
    status = os.fstat(fd)
    own = not hasattr(os, "geteuid") or status.st_uid == os.geteuid()
    if not (stat.S_ISREG(status.st_mode) and own and status.st_nlink == 1):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file of the user's own", path)
    return os.fdopen(fd, "rb")


def fetch(client: dc.DatasetClient, job: Job, into: str) -> Outcome:
    """With ``client``: make ``job``'s export and download it into ``into``, unless it is there
    and verified. Whatever fails (the client too: a ca_bundle missing here) is the outcome's error."""
    path = os.path.join(into, job.name)
    try:
        # As this worker sees DIR: main() made it only where it runs
        os.makedirs(into, exist_ok=True)
        check_own_directory(into)
        size = verified_size(path, job)
        if size is not None:
            return Outcome(job.label, None, size)
        export = client.create_export(
            job.dataset,
            symbols=job.symbols,
            start_date=job.start,
            end_date=job.end,
            format=job.file_format,
        )
        digest = export["sha256"]
        if not isinstance(digest, str):
            raise ValueError(f"the export has no sha256 to check its file against: {digest!r}")
        client.download(export["download_url"], path, sha256=digest)
        # Checked against the export's sha256 as it was written
        size = os.stat(path).st_size
        # download() took the digest as sha256sum -c does (any case, white space around): recorded
        # in one spelling, so that a re-run's comparison is of like with like.
        record_digest(path, job, digest.strip().lower())
    except Exception as exc:  # reported with its label; the other tasks go on
        return Outcome(job.label, f"{type(exc).__name__}: {exc}")
    return Outcome(job.label, None, size, fetched=True)


def fetch_on_worker(client: dc.DatasetClient, job: Job, into: str) -> Outcome:
    """A Dask task: ``fetch`` with a copy of the client shipped to it (connections of this task's
    own, closed when it ends)."""
    with copy.copy(client) as own:
        return fetch(own, job, into)


def record_digest(path: str, job: Job, digest: str) -> None:
    """Write ``PATH.sha256``: what the export covers, then ``digest`` in sha256sum's format."""
    # A name of its own, made with O_EXCL and O_NOFOLLOW: in a shared directory another user's
    # link planted at a predictable name would have this write go where the link points.
    partial = f"{path}.sha256.{os.urandom(6).hex()}.part"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with open(os.open(partial, flags, 0o666), "w", encoding="ascii") as recorded:
        recorded.write(f"{covers(job)}\n{digest}  {os.path.basename(path)}\n")
    os.replace(partial, path + ".sha256")


def check_own_directory(path: str) -> None:
    """Refuse a directory another user owns: they could plant links at its files' names."""
    owner = os.stat(path).st_uid
    if hasattr(os, "geteuid") and owner != os.geteuid():
        raise PermissionError(
            f"--into {path} belongs to another user (uid {owner}), who could plant links at its"
            " files' names: use a directory of your own"
        )


def run(
    distributed: Any, args: argparse.Namespace, client: dc.DatasetClient, jobs: list[Job]
) -> int:
    """Fan the jobs out on the cluster; print the failures and the summary; the exit status."""
    try:
        cluster, dask = start(distributed, args)
    except (OSError, TimeoutError, ValueError) as exc:  # no scheduler there, too few workers
        print(f"fan_out.py: {one_line(exc)}", file=sys.stderr)
        return 2
    try:
        problem = ship_library(dask)
        if problem:
            print(f"fan_out.py: {problem}", file=sys.stderr)
            return 2
        started = time.monotonic()
        futures = [dask.submit(fetch_on_worker, client, job, args.into, pure=False) for job in jobs]
        outcomes = collect(distributed, dask, futures, jobs)
        seconds = time.monotonic() - started
        address, workers = dask.scheduler.address, workers_left(dask)
    finally:
        dask.close()
        if cluster is not None:
            cluster.close()
    # The workers' word (each checked its file): DIR may be mounted elsewhere here, or not at all, and
    # hashing every file again here would read them all twice.
    return summarise(outcomes, seconds, f"{address} ({counted(workers, 'worker')})")


def run_on_threads(args: argparse.Namespace, client: dc.DatasetClient, jobs: list[Job]) -> int:
    """Without Dask: the jobs on ``--workers`` threads sharing ``client``; print the failures and
    the summary; the exit status. Ctrl-C closes the client, which ends the calls under way (each
    then a failed line), starts no other job, and sums up what was done: exit status 130."""
    threads = args.workers or THREADS
    started = time.monotonic()
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="fan_out")
    futures: list[concurrent.futures.Future[Outcome]] = []
    interrupted = False
    try:
        # One by one: a Ctrl-C while they are handed out still finds each one handed
        for job in jobs:
            futures.append(pool.submit(fetch, client, job, args.into))
        concurrent.futures.wait(futures)
    except KeyboardInterrupt:
        interrupted = True
        # The jobs waiting first: a thread freed by the close must not take up another
        pool.shutdown(wait=False, cancel_futures=True)
        client.close()
    finally:
        pool.shutdown()
    outcomes = [future.result() for future in futures if not future.cancelled()]
    seconds = time.monotonic() - started
    if interrupted:
        left = len(jobs) - len(outcomes)
        print(
            f"fan_out.py: interrupted: {left} of {len(jobs)} exports not started"
            " (a re-run fetches what is not there)",
            file=sys.stderr,
        )
    status = summarise(outcomes, seconds, f"this machine ({counted(threads, 'thread')})")
    return 130 if interrupted else status


def summarise(outcomes: list[Outcome], seconds: float, where: str) -> int:
    """Print each failure on its line, ``N fetched, M already there`` and the summary, ``where``
    the jobs ran; the exit status: 1 when any failed."""
    failures = [outcome for outcome in outcomes if outcome.error]
    for failure in failures:
        print(f"failed {escaped(failure.label)}: {escaped(' '.join(str(failure.error).split()))}")
    done = [outcome for outcome in outcomes if not outcome.error]
    fetched = sum(outcome.fetched for outcome in done)
    size = sum(outcome.size or 0 for outcome in done)
    print(f"{fetched} fetched, {len(done) - fetched} already there")
    print(f"{len(done)} files, {size} bytes, {len(failures)} failed in {seconds:.1f} s on {where}")
    return 1 if failures else 0


def counted(number: int, thing: str) -> str:
    """``1 worker``, ``2 workers``."""
    return f"{number} {thing}" if number == 1 else f"{number} {thing}s"


def start(distributed: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """The LocalCluster started (or None) and the Dask client."""
    if args.scheduler:
        dask = distributed.Client(args.scheduler)
        if args.workers:
            try:
                dask.wait_for_workers(args.workers, timeout=120)
            except BaseException:
                dask.close()
                raise
        return None, dask
    # The scheduler's HTTP server on a free port of loopback: on 8787 (its default, even without a
    # dashboard) it warns in four lines when another user's cluster holds that port.
    warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
    cluster = distributed.LocalCluster(
        n_workers=args.workers or 2,
        threads_per_worker=2,
        dashboard_address=None,
        host="127.0.0.1",
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    return cluster, distributed.Client(cluster)


def importable() -> str | None:
    """On the scheduler or a worker: why ``dataset_client`` cannot be imported there, or None."""
    try:
        import dataset_client  # noqa: F401
    except Exception as exc:  # a SyntaxError of an older Python too
        return type(exc).__name__
    return None


def ship_library(dask: Any) -> str | None:
    """Ship ``dataset_client.py`` (``Client.upload_file``) to the scheduler and workers that cannot
    import it: the pickled client and task graph need it. None, or the line saying what failed."""
    found = {"the scheduler": dask.run_on_scheduler(importable), **dask.run(importable)}
    missing = {where: why for where, why in found.items() if why}
    if not missing:
        return None
    named = ", ".join(missing)
    try:
        dask.upload_file(dc.__file__)
    except Exception as exc:
        why = ", ".join(sorted(set(missing.values())))
        return (
            f"dataset_client cannot be imported on {named} ({why}), and shipping it failed"
            f" ({type(exc).__name__}: {one_line(exc)}): put dataset_client.py on their PYTHONPATH"
        )
    shipped = f"shipped dataset_client.py to {named}, which could not import it"
    print(f"fan_out.py: {shipped}", file=sys.stderr)
    return None


def collect(distributed: Any, dask: Any, futures: list[Any], jobs: list[Job]) -> list[Outcome]:
    """Each task's outcome, in the jobs' order. A task that erred (its arguments could not be
    unpickled, its workers died: Dask's KilledWorker) fails with that error; once the cluster has
    had no worker for LOST_AFTER seconds, or the scheduler is lost, the tasks still waiting fail."""
    outcomes: dict[int, Outcome] = {}
    alone_since: float | None = None
    while len(outcomes) < len(futures):
        waiting, stop = [n for n in range(len(futures)) if n not in outcomes], None
        try:
            distributed.wait(
                [futures[n] for n in waiting], timeout=1, return_when="FIRST_COMPLETED"
            )
        except TimeoutError:  # none ended in that second: is any worker left to run them?
            alone_since = (alone_since or time.monotonic()) if not workers_left(dask) else None
            if alone_since is not None and time.monotonic() - alone_since >= LOST_AFTER:
                stop = f"no worker left to run it for {LOST_AFTER:g} s (see the scheduler's log)"
        except Exception as exc:  # the scheduler lost: Dask cancelled the tasks
            stop = f"{type(exc).__name__}: {exc}"
        for n in waiting:
            if futures[n].done():
                outcomes[n] = outcome_of(futures[n], jobs[n].label)
            elif stop is not None:
                outcomes[n] = Outcome(jobs[n].label, stop)
    return [outcomes[n] for n in range(len(futures))]


def workers_left(dask: Any) -> int:
    try:
        return len(dask.scheduler_info()["workers"])
    except Exception:  # the scheduler is gone too
        return 0


def outcome_of(future: Any, label: str) -> Outcome:
    """What the task returned, or its error: Dask's for a task that could not run."""
    try:
        outcome: Outcome = future.result(timeout=LOST_AFTER)
    except Exception as exc:
        return Outcome(label, f"{type(exc).__name__}: {exc}")
    return outcome


def one_line(error: BaseException) -> str:
    """An error's text on one escaped line (Dask's own run over several)."""
    return escaped(" ".join(str(error).split()))


def escaped(text: str) -> str:
    """``text`` with what a terminal must not get raw escaped (``\\x1b``, ``\\u202e``), as the CLI
    does."""
    return UNPRINTABLE.sub(escape, text)


def escape(found: re.Match[str]) -> str:
    code = ord(found[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", metavar="DATASET", help="as `dataset-client datasets` lists")
    parser.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    parser.add_argument(
        "--start", required=True, type=datetime.date.fromisoformat, help="YYYY-MM-DD"
    )
    parser.add_argument("--end", required=True, type=datetime.date.fromisoformat, help="YYYY-MM-DD")
    parser.add_argument(
        "--into", required=True, metavar="DIR", help="where the files go (made if missing)"
    )
    parser.add_argument(
        "--by",
        choices=("symbol", "month"),
        default="symbol",
        help="one export per (default: symbol)",
    )
    parser.add_argument(
        "--format", choices=tuple(EXTENSIONS), default="parquet", help="(default: parquet)"
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a running Dask scheduler (default: a LocalCluster where Dask is installed, else threads)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help=f"threads (default {THREADS}) or LocalCluster's workers (default 2); or wait for N",
    )
    args = parser.parse_args(argv)
    args.symbols = list(
        dict.fromkeys(symbol.strip() for symbol in args.symbols.split(",") if symbol.strip())
    )
    if not args.symbols:
        parser.error("--symbols names no symbol")
    if args.start > args.end:
        parser.error("--start is after --end")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    distributed = dask_distributed()
    if distributed is None and args.scheduler:
        print(
            'fan_out.py: --scheduler needs Dask: pip install "dask[distributed]"', file=sys.stderr
        )
        return 2
    try:  # the command line's client: DATASET_CLIENT_* variables, then the profile
        client = dc.DatasetClient.from_profile()
        os.makedirs(args.into, exist_ok=True)
        check_own_directory(args.into)
    except (ValueError, TypeError, OSError, LookupError) as exc:
        print(f"fan_out.py: {one_line(exc)}", file=sys.stderr)
        return 2
    with client:
        if distributed is None:
            return run_on_threads(args, client, plan(args))
        return run(distributed, args, client, plan(args))


def dask_distributed() -> Any:
    """``dask.distributed`` where Dask is installed, else None (the jobs then run on threads)."""
    try:
        import dask.distributed as distributed
    except ImportError:
        return None
    return distributed


if __name__ == "__main__":
    sys.exit(main())

"""Tests for dataset_client_cli, the command line, against the stand-in service and scripted servers.

Run with ``python -m unittest -v`` (or pytest). Standard library only.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import errno
import hashlib
import io
import itertools
import json
import logging
import os
import pickle
import re
import select
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient
from tests.support import (
    BIG,
    CA_FILE,
    DATA,
    DATA_SHA,
    EXPORT_V,
    KEY,
    PYCACHE,
    ROOT,
    SIGNED_QUERY,
    SIGNED_SHOWN,
    Handler,
    ScriptedCommandLineTestCase,
    ServerTestCase,
    StandInTestCase,
    TerminalOutput,
    cut,
    drop,
    file_size_limit,
    first_bytes_then_stall,
    free_port,
    import_or_skip,
    inherited_signals,
    local_service,
    recorded_sleeps,
    reply,
    serve_file,
    server_tls_context,
    signed_values_in,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def ignored_signals(pid: int) -> set[int]:
    """The signals a (Linux) process ignores, from /proc/PID/status."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def waiting(pid: int) -> bool:
    """True when every thread of (Linux) process ``pid`` sleeps, as a download's do once the bytes sent so far
    are written and counted; elsewhere, True."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    states = []
    for task in tasks:
        with (
            contextlib.suppress(OSError),
            open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as stat_file,
        ):
            states.append(stat_file.read().rsplit(")", 1)[1].split()[0])
    return all(state in "SD" for state in states)


HINT = "; with -c, the partial file is kept and the same command continues it"  # after an error without -c
RAW_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f]"
)  # what must not reach a terminal (a newline may)


NO_BYTECODE_HERE = {"PYTHONPYCACHEPREFIX": PYCACHE}  # a checkout's __pycache__ left alone


def assert_usage_errors(test: Any, *cases: tuple[str, str]) -> list[str]:
    """Each command line (its words split at spaces) exits 2 with nothing on stdout, the last
    line of its stderr the error ``text``; their stderrs."""
    errors = []
    for words, text in cases:
        with test.subTest(argv=words):
            status, out, err = test.run_main(*words.split())
            test.assertEqual((status, out), (2, ""))
            command = r"dataset-client( download| export)?"
            test.assertRegex(err.splitlines()[-1], rf"^{command}: error: {re.escape(text)}$")
            errors.append(err)
    return errors


def hostile(text: str) -> str:
    """``text`` wrapped in what a server could use to retitle the window, clear the screen, colour a fake "ok"."""
    return f"\x1b]0;pwned\x07{text}\x1b[2J\x9b32mok\x7f"


COMPLETION_CASES = [  # (the words typed, the last one being completed), what is offered
    (["d"], ["datasets", "download"]),
    (["--output", ""], ["table", "json", "jsonl", "csv"]),
    (["-q", "export", "trades", "--f"], ["--format"]),
    (["export", "trades", "--format", ""], ["parquet", "csv", "jsonl"]),
    (["completion", ""], ["bash", "zsh"]),
    (["--base-url", ""], []),
    (["download", "--l"], ["--limit-rate"]),
    (["download", "http://host/f", "o"], ["other.csv", "out.bin"]),  # DEST: file names
]


COPIED_FILE = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'dataset_client.py'))}"  # as a vendored copy runs


def readme_alias() -> str:
    """The README's alias line, as a user pastes it (its comment left off)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^alias dataset-client=.*?(?=\s+#|$)", readme, re.M)
    assert found is not None, "the README shows an alias"
    return found[0]


def _kill_if_running(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def on_screen(drawn: str) -> list[str]:
    """The lines a terminal shows once it has drawn ``drawn`` (carriage returns and erase to the end
    of the line applied; no wrapping)."""
    lines, column = [""], 0
    for piece in re.split(r"(\r\n|\n|\r|\x1b\[K)", drawn):
        if piece in ("\r\n", "\n"):
            lines, column = [*lines, ""], 0
        elif piece == "\r":
            column = 0
        elif piece == "\x1b[K":
            lines[-1] = lines[-1][:column]
        else:
            lines[-1] = lines[-1][:column] + piece + lines[-1][column + len(piece) :]
            column += len(piece)
    return lines


class CommandLineTests(StandInTestCase):
    def test_datasets_query_export(self) -> None:
        status, out, err = self.run_main("datasets")
        self.assertEqual((status, err), (0, ""))
        self.assertEqual([d["name"] for d in json.loads(out)], ["daily_bars", "trades"])
        self.assertIn('\n  {\n    "name"', out, "pretty-printed")
        status, out, _ = self.run_main("query", "-", stdin="SELECT 40 + 2 AS answer")
        self.assertEqual((status, json.loads(out)["rows"]), (0, [[42]]))
        status, out, _ = self.run_main("query", "SELECT 'é' AS e")
        self.assertEqual(json.loads(out)["rows"], [["é"]])
        status, out, _ = self.run_main(
            "export",
            "daily_bars",
            "--symbols",
            "AAPL, MSFT",
            "--start",
            "2024-01-01",
            "--end",
            "2024-01-31",
            "--format",
            "csv",
        )
        export = json.loads(out)
        self.assertEqual(
            (status, export["symbols"], export["start_date"]), (0, ["AAPL", "MSFT"], "2024-01-01")
        )
        target = self.tmp() / "out.csv"
        status, out, err = self.run_main(
            "download", export["download_url"], str(target), "--sha256", export["sha256"]
        )
        self.assertEqual((status, out), (0, ""))
        self.assertEqual(hashlib.sha256(target.read_bytes()).hexdigest(), export["sha256"])
        self.assertRegex(
            err, rf"^downloaded {target}: [\d.]+ KiB, [\d.]+ s, .*/s, sha256 verified\n$"
        )

    def test_output_formats(self) -> None:
        sql = "SELECT symbol, count(*) AS days, round(avg(close), 2) AS mean FROM daily_bars GROUP BY symbol LIMIT 3"
        status, out, err = self.run_main(
            "query", sql
        )  # stdout is not a terminal: JSON, exactly the result
        result = json.loads(out)
        self.assertEqual((status, err, result["columns"]), (0, "", ["symbol", "days", "mean"]))
        status, out, _ = self.run_main(
            "query", sql, "--output", "table"
        )  # options after the command too
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["symbol", "days", "mean"])
        self.assertEqual(lines[1].split(), ["------", "----", "------"])
        self.assertEqual(lines[2].split(), ["AAPL", "522", str(result["rows"][0][2])])
        self.assertTrue(lines[2].endswith(str(result["rows"][0][2])), "numbers on the right")
        self.assertEqual(lines[-1], "(3 rows)")
        self.assertEqual(len({len(line) for line in lines[:-1]}), 1, "aligned")
        status, out, _ = self.run_main("--output", "csv", "query", sql)
        self.assertEqual(
            out.split("\r\n")[:2], ["symbol,days,mean", f"AAPL,522,{result['rows'][0][2]}"]
        )
        status, out, _ = self.run_main("--output", "jsonl", "query", sql)
        self.assertEqual(
            [json.loads(line) for line in out.splitlines()],
            [dict(zip(result["columns"], row, strict=True)) for row in result["rows"]],
        )
        status, out, _ = self.run_main(
            "--output", "table", "datasets"
        )  # a list of objects: the union of their keys
        self.assertEqual(out.splitlines()[0].split()[:2], ["name", "description"])
        self.assertIn('[{"name":"date","type":"DATE"},', out, "a nested value as compact JSON")
        self.assertEqual(out.splitlines()[-1], "(2 rows)")

    def test_a_result_that_is_not_a_table_is_json_and_a_cut_one_is_said(self) -> None:
        status, out, _ = self.run_main(
            "--output",
            "csv",
            "export",
            "trades",
            "--symbols",
            "V",
            "--start",
            "2024-01-02",
            "--end",
            "2024-01-02",
            "--format",
            "csv",
        )
        header, row = csv.reader(io.StringIO(out))  # an export is one record: csv as asked
        self.assertEqual((status, dict(zip(header, row, strict=True))["status"]), (0, "ready"))
        status, out, err = self.run_main("--output", "csv", "query", "SELECT * FROM trades")
        self.assertEqual(len(out.split("\r\n")), 10_000 + 2)
        self.assertEqual(err.count("\n"), 1)
        self.assertEqual(
            err, 'dataset-client: warning: the service cut this result short ("truncated": true)\n'
        )
        self.assertEqual(
            self.run_main("-q", "query", "SELECT * FROM trades")[2], "", "-q: errors only"
        )

    def test_export_and_download_in_one_command(self) -> None:
        directory = self.tmp()
        status, out, err = self.run_main(
            "export",
            "daily_bars",
            "--symbols",
            "AAPL,MSFT",
            "--start",
            "2024-01-01",
            "--end",
            "2024-03-31",
            "--format",
            "csv",
            "--download",
            str(directory),
        )
        export = json.loads(out)
        target = directory / export["download_url"].rsplit("/", 1)[1]
        self.assertEqual(status, 0, err)
        self.assertEqual(hashlib.sha256(target.read_bytes()).hexdigest(), export["sha256"])
        self.assertRegex(
            err, rf"^downloaded {target}: [\d.]+ KiB, [\d.]+ s, .*/s, sha256 verified\n$"
        )
        self.assertEqual([p.name for p in directory.iterdir()], [target.name])

    def test_download_destinations(self) -> None:
        export = self.stand_in_client().create_export(
            "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-03", format="csv"
        )
        url, name = export["download_url"], export["download_url"].rsplit("/", 1)[1]
        directory = self.tmp()
        with contextlib.chdir(directory):
            self.assertEqual(self.run_main("download", url)[0], 0)  # no DEST: the URL's name, here
        self.assertEqual(self.run_main("download", url, str(directory / "sub.csv"))[0], 0)
        os.mkdir(directory / "into")
        self.assertEqual(
            self.run_main("download", url, str(directory / "into"), "-c", "--connections", "2")[0],
            0,
        )
        self.assertEqual(
            sorted(str(p.relative_to(directory)) for p in directory.rglob("*")),
            sorted([name, "sub.csv", "into", f"into/{name}"]),
        )
        for path in (directory / name, directory / "sub.csv", directory / "into" / name):
            self.assertEqual(hashlib.sha256(path.read_bytes()).hexdigest(), export["sha256"])
        for argv, text in (
            (["download", url.rsplit("/", 1)[0] + "/"], "cannot name a file after"),
            (
                ["download", url.rsplit("/", 1)[0] + "/..", str(directory)],
                "cannot name a file after",
            ),
            (["download", url.rsplit("/", 1)[0] + "/a%2Fb"], "cannot name a file after"),
            (["download", url, "-", "-c"], "-c needs a file"),
            (["download", url, "x", "--connections", "0"], "--connections: must be 1 to 32"),
            (["download", url, "x", "--sha256", "abc"], "--sha256 must be 64 hexadecimal digits"),
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertIn(text, err)

    def test_retries_timeout_and_verbosity(self) -> None:
        base = self.server.url + "/api"
        self.script(
            reply(503, {"message": "busy"}), reply(503, {"message": "busy"}), reply(body=[])
        )
        status, _, err = self.run_main("--retries", "0", "-v", "datasets", base_url=base)
        self.assertEqual(status, 1)
        self.assertEqual(len(self.requests), 1)
        self.assertRegex(
            err,
            r"^dataset-client: GET http://127\.0\.0\.1:\d+/api/datasets: 503 Service Unavailable \(\d+ ms\)\n",
        )
        self.assertIn("dataset-client: error: 503 Service Unavailable: GET", err)
        with recorded_sleeps():
            status, out, err = self.run_main("--timeout", "0", "-v", "datasets", base_url=base)
        self.assertEqual((status, json.loads(out)), (0, []))
        self.assertEqual(err.count("dataset-client: retrying in "), 1, err)
        self.assertEqual(err.count(": 200 OK ("), 1, err)
        self.assertNotIn("stand-in-key", err)

    def test_a_file_not_of_the_announced_size_is_said_in_sizes_for_people(self) -> None:
        # Issue 27: from the error's received/expected fields, not by parsing its text.
        out, commit = self.tmp() / "out.bin", dc._FileTarget.commit

        def cut_short_then_commit(target: Any, total: int | None) -> None:
            os.ftruncate(target.fd, 1024 * 1024)
            commit(target, total)

        self.script(serve_file(DATA))
        with mock.patch.object(dc._FileTarget, "commit", cut_short_then_commit):
            status, _, err = self.run_main("download", self.server.url + "/files/x", str(out))
        self.assertNotEqual(status, 0)
        self.assertIn(
            f"has 1.0 MiB where the server announced {dc._size(len(DATA))}: not committed", err
        )
        self.assertFalse(out.exists())
        self.assertEqual(len(self.requests), 1)

    def test_a_resumed_transfer_says_so(self) -> None:
        directory = self.tmp()
        url = self.server.url + "/files/x"
        self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}), cut(DATA, 2_500_000, {"ETag": '"v1"'}))
        status, _, err = self.run_main(
            "--retries", "0", "download", url, str(directory / "out.bin"), "-c"
        )
        self.assertEqual(status, 3)
        partial = directory / ".out.bin.part"
        self.assertIn(
            f"connection closed after 1.4 MiB of 3.0 MiB; the same command continues its partial file {partial}\n",
            err,
        )  # sizes for people, not bytes
        self.server.script.insert(0, drop)  # found in review: "resuming" said before an answer
        out = str(directory / "out.bin")
        status, _, err = self.run_main("--retries", "0", "download", url, out, "-c")
        self.assertEqual(status, 3)
        self.assertNotIn("resuming", err)
        self.script(serve_file(DATA))
        with recorded_sleeps():
            status, _, err = self.run_main("download", url, str(directory / "out.bin"), "-c")
        self.assertEqual(status, 0, err)
        lines = err.splitlines()  # the server sent all again (no 206): no "resuming: 1.4 MiB"
        self.assertEqual(
            lines[0], "dataset-client: resuming at 2.4 MiB of 3.0 MiB after an interruption"
        )  # -v: the URL
        self.assertRegex(lines[1], r"^downloaded .*out\.bin: 3\.0 MiB, ")
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        asked = [(r.headers["Range"], r.headers["If-Range"]) for r in self.requests]
        self.assertEqual(
            asked, [(None, None), *[("bytes=1500000-", '"v1"')] * 2, ("bytes=2500000-", '"v1"')]
        )

    def test_errors_speak_in_the_command_lines_own_terms(self) -> None:
        base = self.server.url + "/api"
        self.script(reply(429, {"message": "slow down"}, {"Retry-After": "120"}))
        cases = [
            (
                ["--base-url", "ftp://x/api", "datasets"],
                {},
                2,
                "--base-url (or DATASET_CLIENT_BASE_URL) must be an http:// or https:// URL, not 'ftp'",
            ),
            (
                ["datasets"],
                {"DATASET_CLIENT_API_KEY": "two words"},
                2,
                "DATASET_CLIENT_API_KEY contains whitespace or a control character (CR, LF, ...)",
            ),
            (
                ["export", "d", "--symbols", "A", "--start", "2024-02-01", "--end", "2024-01-01"],
                {},
                2,
                "--start 2024-02-01 is after --end 2024-01-01",
            ),
            (
                ["--base-url", base, "datasets"],
                {},
                1,
                "429 Too Many Requests: GET " + base + "/datasets: slow down; try again in 2:00",
            ),
        ]
        for argv, environment, expected, text in cases:
            with self.subTest(argv=argv):
                status, out, err = self.run_main(
                    *argv, key=environment.get("DATASET_CLIENT_API_KEY", "stand-in-key")
                )
                self.assertEqual((status, out), (expected, ""))
                self.assertEqual(err, f"dataset-client: error: {text}\n")

    def test_a_proxy_in_the_way_is_named(self) -> None:
        port = free_port()  # a proxy that is not there
        with mock.patch.dict(
            os.environ, {"HTTP_PROXY": f"http://127.0.0.1:{port}", "NO_PROXY": ""}
        ):
            status, _, err = self.run_main("--retries", "0", "datasets")
        self.assertEqual(status, 3)
        self.assertIn(f"via proxy 127.0.0.1:{port} (NO_PROXY bypasses it): could not connect", err)

    def test_a_full_disk_is_a_one_line_error(self) -> None:
        class FullDisk(io.StringIO):
            def write(self, text: str) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

        for argv in (["datasets"], ["query", "SELECT 1"]):
            err = io.StringIO()
            with (
                mock.patch.dict(
                    os.environ,
                    {
                        "DATASET_CLIENT_BASE_URL": self.base_url,
                        "DATASET_CLIENT_API_KEY": "stand-in-key",
                    },
                ),
                contextlib.redirect_stdout(FullDisk()),
                contextlib.redirect_stderr(err),
            ):
                status = cli.main(argv)
            self.assertEqual(status, 1)
            self.assertEqual(
                err.getvalue(),
                "dataset-client: error: cannot write stdout: No space left on device\n",
            )
        self.script(reply(200, b"x" * 1000, {"ETag": '"v1"'}))
        with file_size_limit(100):
            status, _, err = self.run_main(
                "download", self.server.url + "/f", str(self.tmp() / "f")
            )
        self.assertEqual(status, 1)
        self.assertRegex(err, r"^dataset-client: error: cannot write .*/f: File too large\n$")

    def test_signals_end_a_download_with_their_status_and_nothing_left(self) -> None:
        for signal_name, status, keep in (
            ("SIGTERM", 143, False),
            ("SIGHUP", 129, False),
            ("SIGTERM", 143, True),
            ("SIGINT", 130, False),
        ):
            if not hasattr(signal, signal_name):  # Windows has no SIGHUP
                continue
            self.script(first_bytes_then_stall(DATA, 1_500_000))
            directory = self.tmp()
            environment = {
                k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")
            }
            argv = [
                "download",
                self.server.url + "/files/x",
                str(directory / "out.bin"),
                *(["-c"] if keep else []),
            ]
            with inherited_signals(
                signal.SIG_DFL, "SIGINT", "SIGHUP", "SIGTERM"
            ):  # as in a terminal
                process = subprocess.Popen(
                    [sys.executable, "-m", "dataset_client", "--base-url", self.server.url, *argv],
                    env=environment,
                    cwd=ROOT,
                    stderr=subprocess.PIPE,
                )
            self.addCleanup(process.kill)
            with self.subTest(signal=signal_name, keep=keep):
                wait_for(
                    lambda d=directory: any(
                        p.name.endswith(".part") and p.stat().st_size for p in d.iterdir()
                    )
                )
                wait_for(
                    lambda pid=process.pid: waiting(pid)
                )  # the bytes counted too: the hint is said when some came
                process.send_signal(getattr(signal, signal_name))
                _, err = process.communicate(timeout=10)
                self.assertEqual(process.returncode, status)
                partial = directory / ".out.bin.part"
                hint = f"; the same command continues its partial file {partial}" if keep else HINT
                self.assertEqual(
                    err.decode().splitlines()[-1],
                    f"dataset-client: error: {'interrupted' if status == 130 else 'stopped by ' + signal_name}{hint}",
                )
                left = sorted(p.name for p in directory.iterdir())
                self.assertEqual(left, [".out.bin.part", ".out.bin.part.json"] if keep else [])
            self.server.script.clear()

    @unittest.skipUnless(sys.platform == "linux", "reads /proc/PID/status")
    def test_a_download_started_by_nohup_goes_on_after_a_hang_up(self) -> None:
        rest = threading.Event()
        self.addCleanup(rest.set)
        self.script(first_bytes_then_stall(DATA, 1_500_000, rest_when=rest))
        destination = self.tmp() / "out.bin"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        argv = [
            "--base-url",
            self.server.url,
            "download",
            self.server.url + "/files/x",
            str(destination),
        ]
        if not hasattr(signal, "SIGHUP"):
            self.skipTest("this platform has no SIGHUP (nor nohup)")
        with inherited_signals(
            signal.SIG_IGN, "SIGHUP"
        ):  # what nohup does before it runs the command
            process = subprocess.Popen(
                [sys.executable, "-m", "dataset_client", *argv],
                env=environment,
                cwd=ROOT,
                stderr=subprocess.PIPE,
            )
        self.addCleanup(process.communicate)
        self.addCleanup(process.kill)
        wait_for(
            lambda: any(
                p.name.endswith(".part") and p.stat().st_size for p in destination.parent.iterdir()
            )
        )
        self.assertIn(
            signal.SIGHUP, ignored_signals(process.pid), "SIGHUP stays ignored while downloading"
        )
        process.send_signal(signal.SIGHUP)
        rest.set()
        _, err = process.communicate(timeout=10)
        self.assertEqual((process.returncode, destination.read_bytes()), (0, DATA), err.decode())

    def test_the_progress_line_fits_the_terminal_and_redraws_in_place(self) -> None:
        for columns in (80, 40):
            frames_seen = threading.Semaphore(0)
            seen = [0]

            def on_screen(
                text: str, frames_seen: threading.Semaphore = frames_seen, seen: list[int] = seen
            ) -> None:
                frames = text.count("%")
                while seen[0] < frames:  # one chunk more for each frame drawn
                    seen[0] += 1
                    frames_seen.release()

            def paced(handler: Handler, frames_seen: threading.Semaphore = frames_seen) -> None:
                handler.send_response(200)
                handler.send_header("Content-Length", str(len(BIG)))
                handler.send_header("ETag", '"v1"')
                handler.end_headers()
                for start in range(0, len(BIG), 1024 * 1024):
                    frames_seen.acquire(timeout=5)
                    handler.wfile.write(BIG[start : start + 1024 * 1024])

            self.script(paced)
            target = self.tmp() / "big.bin"
            with self.subTest(columns=columns):
                status, drawn = self.run_in_terminal(
                    ["download", self.server.url + "/big", str(target)], columns, on_screen
                )
                self.assertEqual(status, 0, drawn)
                self.assertEqual(target.read_bytes(), BIG)
                text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", drawn)
                rows = text.split("\r\n")
                self.assertEqual(
                    rows[1:],
                    [""],
                    "one row: the progress redrawn in place, then the summary over it",
                )
                *frames, summary = [frame for frame in rows[0].split("\r") if frame]
                self.assertGreaterEqual(len(frames), 9)
                self.assertTrue(
                    all(len(frame) < columns for frame in frames),
                    [f for f in frames if len(f) >= columns],
                )
                self.assertTrue(
                    columns == 40 or len(summary) < columns, summary
                )  # at 40 columns, a message may wrap
                self.assertRegex(frames[-1], r"100%  8\.0/8\.0 MiB")
                self.assertRegex(summary, r"^downloaded .*big\.bin: 8\.0 MiB, [\d.]+ s")

    def test_no_progress_line_over_a_file_written_to_the_terminal(self) -> None:
        export = self.stand_in_client().create_export(
            "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-31", format="jsonl"
        )
        status, drawn = self.run_in_terminal(["download", export["download_url"], "-"], 80)
        self.assertEqual(status, 0)
        self.assertIn('{"date": "2024-01-02"', drawn)
        self.assertNotIn("%", drawn, "a progress line among the file's bytes")
        self.assertRegex(drawn, r"downloaded stdout: [\d.]+ KiB, [\d.]+ s, [\d.]+ [KMG]?i?B/s")

    def test_a_wide_table_fits_the_terminal(self) -> None:
        numbers = [str(dataset["rows"]) for dataset in self.stand_in_client().list_datasets()]
        for columns in (80, 40):
            with self.subTest(columns=columns):
                status, drawn = self.run_in_terminal(
                    ["datasets"], columns
                )  # a terminal: a table by default
                rows = drawn.split("\r\n")
                self.assertEqual(status, 0)
                self.assertEqual(rows[-2:], ["(2 rows)", ""])
                self.assertTrue(
                    all(len(row) <= columns for row in rows),
                    [row for row in rows if len(row) > columns],
                )
                words = drawn.split()
                self.assertTrue(
                    all(number in words for number in numbers), (numbers, drawn)
                )  # every number whole
                if columns == 80:  # nested values narrowed first, then text; the dates whole
                    self.assertTrue(rows[2].startswith("daily_bars ") and "…" in rows[2], rows[2])
                    self.assertIn(" 2023-01-02 ", rows[2])
                    description, nested, listed = re.split(r"  +", rows[2])[1:4]
                    self.assertEqual((len(nested), len(listed)), (8, 8), rows[2])
                    self.assertTrue(
                        description.startswith("Daily open, high") and len(description) > 8, rows[2]
                    )
                else:  # too narrow even so: one block per record, as psql's expanded wrapped mode
                    self.assertEqual(rows[0], "-[ RECORD 1 ]-")
                    self.assertEqual(rows[1], "name        | daily_bars")
                    self.assertIn(f"rows        | {numbers[1]}", rows)
                    self.assertEqual(sum(row.startswith("-[ RECORD ") for row in rows), 2)
                    start = rows.index("description | Daily open, high, low,")  # wrapped at words
                    wrapped = [f"{'':11} | close and volume per", f"{'':11} | symbol, on weekdays."]
                    self.assertEqual(rows[start + 1 : start + 3], wrapped)

    def test_a_long_cell_is_measured_once_per_character(self) -> None:
        import unicodedata

        measured: list[str] = []
        real = unicodedata.east_asian_width
        sql = "SELECT replace(hex(zeroblob(3000)), '00', 'é') AS long, 7 AS n"  # 3000 characters, not ASCII
        with (
            mock.patch.dict(os.environ, {"COLUMNS": "80"}),
            mock.patch.object(
                unicodedata, "east_asian_width", lambda c: measured.append(c) or real(c)
            ),
        ):
            status, out, _ = self.run_main("--output", "table", "query", sql)
        rows = out.splitlines()
        self.assertEqual(status, 0)
        self.assertEqual(rows[2], "é" * 76 + "…  7")  # 80 columns
        self.assertEqual(rows[3], "(1 row)")
        self.assertLess(
            len(measured),
            4 * 3000,
            "cutting a cell must not measure it again for each character dropped",
        )

    def test_help_for_every_command(self) -> None:
        for argv in ([], ["datasets"], ["query"], ["export"], ["download"]):
            with self.subTest(argv=argv):
                status, out, _ = self.run_main(*argv, "--help")
                self.assertEqual(status, 0)
                self.assertIn("usage: dataset-client", out)

    def test_usage_errors_send_nothing(self) -> None:
        for argv in (
            ["bogus"],
            [
                "export",
                "daily_bars",
                "--symbols",
                "A",
                "--start",
                "2024-02-30",
                "--end",
                "2024-03-01",
            ],
            [
                "export",
                "daily_bars",
                "--symbols",
                "A",
                "--start",
                "2024-03-01",
                "--end",
                "2024-02-01",
            ],
            [
                "export",
                "daily_bars",
                "--symbols",
                ",",
                "--start",
                "2024-01-01",
                "--end",
                "2024-02-01",
            ],
            ["query", "  "],
            ["--timeout", "-1", "datasets"],
            ["download", "ftp://host/file", "out"],
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err)

    def test_exit_statuses_and_streams_of_the_process(self) -> None:
        ok = self.run_process("datasets")
        self.assertEqual((ok.returncode, ok.stderr), (0, b""))
        self.assertEqual(json.loads(ok.stdout)[1]["name"], "trades")
        secret = "sk-live-NEVER-PRINT-ME"
        denied = self.run_process("datasets", key=secret)
        self.assertEqual((denied.returncode, denied.stdout), (1, b""))
        self.assertRegex(
            denied.stderr.decode(),
            r"^dataset-client: error: 401 Unauthorized: GET .*/datasets: missing or wrong API key\n$",
        )
        self.assertNotIn(secret.encode(), denied.stderr)
        missing = self.run_process("datasets", base_url="")
        self.assertEqual(missing.returncode, 2)
        self.assertIn(b"DATASET_CLIENT_BASE_URL", missing.stderr)
        unreachable = self.run_process(  # one retry: its wait leaves no line behind
            "--timeout",
            "2",
            "--retries",
            "1",
            "datasets",
            base_url=f"http://127.0.0.1:{free_port()}",
            key=secret,
        )
        self.assertEqual((unreachable.returncode, unreachable.stdout), (3, b""))
        self.assertEqual(unreachable.stderr.count(b"\n"), 1, "one line")
        self.assertNotIn(secret.encode(), unreachable.stderr)

    def test_download_to_stdout(self) -> None:
        export = self.stand_in_client().create_export(
            "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-02", format="jsonl"
        )
        result = self.run_process("download", export["download_url"], "-")
        self.assertEqual(result.returncode, 0)
        self.assertEqual(hashlib.sha256(result.stdout).hexdigest(), export["sha256"])


class ScriptedCommandLineTestCase(ScriptedCommandLineTestCase):
    """The contract's "The first hour": what a new user meets at the terminal."""

    def test_a_mistyped_option_says_so_before_or_after_the_command(self) -> None:
        for argv, text in (
            (
                ["--outptu", "csv", "datasets"],
                "unknown option '--outptu' (did you mean '--output'?)",
            ),
            (
                ["-o", "csv", "datasets"],
                "unknown option '-o' (did you mean '--output'?)",
            ),  # csv is not the command
            (
                ["datasets", "--outptu", "csv"],
                "unknown option '--outptu' (did you mean '--output'?)",
            ),
            (
                ["export", "trades", "--formta", "csv"],
                "unknown option '--formta' (did you mean '--format'?)",
            ),
            (
                ["datasets", "--symbols", "V"],
                "unknown option '--symbols'",
            ),  # another command's option
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertEqual(err.splitlines()[-1], f"dataset-client: error: {text}")
                self.assertNotIn("command", err.splitlines()[-1])
        self.script(reply(body=[]), reply(body=[]), reply(body=[]))  # what is known still runs
        for argv in (["--out", "csv", "datasets"], ["datasets", "--timeout=5"], ["-q", "datasets"]):
            with self.subTest(argv=argv):
                status, _, err = self.run_main(*argv)
                self.assertEqual(status, 0, err)
        self.assertEqual(
            [r.path for r in self.requests], ["/api/datasets"] * 3, "nothing sent for a usage error"
        )

    def script_export(self, data: bytes, name: str) -> None:
        digest = hashlib.sha256(data).hexdigest()
        export = {
            "id": "exp_1",
            "download_url": f"/api/files/{name}",
            "sha256": digest,
            "size_bytes": len(data),
        }
        self.script(reply(201, export), serve_file(data))

    def test_the_file_name_picks_the_export_format(self) -> None:
        for name, extra, sent in (
            ("bars.csv", [], "csv"),
            ("bars.JSONL", [], "jsonl"),
            ("bars.bin", [], "parquet"),
            ("bars.bin", ["--format", "jsonl"], "jsonl"),
        ):
            with self.subTest(name=name, extra=extra):
                self.requests.clear()
                directory = self.tmp()
                self.script_export(b"a,b\r\n1,2\r\n", name)
                status, _, err = self.run_main(
                    "-q", *self.export_argv("--download", str(directory / name), *extra)
                )
                self.assertEqual((status, err), (0, ""))
                self.assertEqual(self.requests[0].json()["format"], sent)  # type: ignore[index]
                self.assertEqual((directory / name).read_bytes(), b"a,b\r\n1,2\r\n")
        for extra in ([], ["--download", str(self.tmp())]):  # no file name: parquet, as before
            with self.subTest(extra=extra):
                self.requests.clear()
                self.script_export(b"PAR1", "x.parquet")
                if not extra:
                    self.server.script.pop()  # no download
                with contextlib.chdir(self.tmp()):
                    status, _, err = self.run_main("-q", *self.export_argv(*extra))
                self.assertEqual(status, 0, err)
                self.assertEqual(self.requests[0].json()["format"], "parquet")  # type: ignore[index]
        self.assertEqual(cli._export_format(None, "-"), "parquet")  # to stdout
        self.requests.clear()
        status, out, err = self.run_main(
            *self.export_argv("--format", "jsonl", "--download", "bars.csv")
        )
        self.assertEqual((status, out, self.requests), (2, "", []), "nothing sent")
        self.assertEqual(
            err,
            "dataset-client: error: --format jsonl disagrees with DEST 'bars.csv', a .csv name: "
            "drop --format, or give DEST a .jsonl name\n",
        )

    def test_bad_values_name_the_option_and_what_it_takes(self) -> None:
        seconds = "give seconds, 0 or more (0: no limit)"
        rate = "bytes per second, such as 500K, 10M or 1G"
        errors = assert_usage_errors(
            self,
            ("--timeout -1 datasets", f"argument --timeout: invalid value '-1': {seconds}"),
            ("--timeout soon datasets", f"argument --timeout: invalid value 'soon': {seconds}"),
            ("download /x out --connections 0", "argument --connections: must be 1 to 32, got 0"),
            (
                "download /x out --connections 100",
                "argument --connections: must be 1 to 32, got 100",
            ),
            (
                "download /x out --limit-rate -5",
                f"argument --limit-rate: invalid rate '-5': {rate}",
            ),
        )
        for err in errors:
            self.assertRegex(err, r"^usage: dataset-client")  # the same shape as any bad value
            self.assertNotIn("_seconds", err)
        self.assertEqual(self.requests, [], "nothing sent")
        status, out, _ = self.run_main("export", "--help")
        self.assertEqual(status, 0)
        self.assertIn("--format {parquet,csv,jsonl}", out)
        for command in ("query", "export", "download", "completion"):
            with self.subTest(command=command):
                _, out, _ = self.run_main(command, "--help")
                listed = out.split("positional arguments:\n", 1)[1].split("\n\n", 1)[0].splitlines()
                positionals = [
                    line for line in listed if not line.startswith("   ")
                ]  # not a wrapped help line
                self.assertTrue(positionals)
                self.assertTrue(
                    all(len(line.split(None, 1)) == 2 for line in positionals), positionals
                )

    def test_a_profile_says_what_it_ignored_and_where_it_looked(self) -> None:
        xdg, home = self.tmp(), self.tmp()
        for directory, base_url in (
            (xdg, self.server.url + "/api"),
            (home / ".config", self.server.url + "/home"),
        ):
            (directory / "dataset-client").mkdir(parents=True)
            config = directory / "dataset-client" / "config.toml"
            config.write_text(
                f'[default]\nbase_url = "{base_url}"\ntimout = 5\ncolour = "red"\n[other]\nx = 1\n'
            )
            config.chmod(0o600)
        found = xdg / "dataset-client" / "config.toml"
        self.script(reply(body=[]), reply(body=[]))
        environment = {
            "XDG_CONFIG_HOME": str(xdg),
            "HOME": str(home),
            "DATASET_CLIENT_API_KEY": KEY,
        }
        status, out, err = self.run_main("datasets", environment=environment)
        self.assertEqual((status, out), (0, "[]\n"))
        self.assertEqual(
            err.splitlines(),
            [
                f"dataset-client: warning: unknown key 'colour' in [default] in {found} (ignored): "
                "known keys: base_url, api_key, ca_bundle, timeout",
                f"dataset-client: warning: unknown key 'timout' in [default] in {found} (ignored): "
                "did you mean 'timeout'?",
            ],
        )  # [other], not the profile used, says nothing
        self.assertEqual(
            [r.path for r in self.requests], ["/api/datasets"], "$XDG_CONFIG_HOME's file was read"
        )
        relative = {
            **environment,
            "XDG_CONFIG_HOME": "relative/dir",
        }  # not absolute: ignored, as the spec says
        status, _, err = self.run_main("datasets", environment=relative)
        self.assertEqual(status, 0)
        self.assertIn(f"in {home}/.config/dataset-client/config.toml (ignored)", err)
        self.assertEqual(self.requests[-1].path, "/home/datasets")
        nowhere = self.tmp()
        for argv, variables in (
            (["--profile", "staging"], {}),
            ([], {"DATASET_CLIENT_PROFILE": "staging"}),
        ):
            with self.subTest(argv=argv, variables=variables):
                status, out, err = self.run_main(
                    *argv,
                    "datasets",
                    environment={**environment, **variables, "XDG_CONFIG_HOME": str(nowhere)},
                )
                self.assertEqual((status, out), (2, ""))
                self.assertEqual(
                    err,
                    f"dataset-client: error: no config file {nowhere}/dataset-client/config.toml"
                    " for --profile staging\n",
                )
        self.assertEqual(len(self.requests), 2, "nothing sent for a usage error")

    def test_partial_files_are_named_and_a_resume_is_said_once(self) -> None:
        url = (
            self.server.url
            + "/files/a-rather-long-name-for-an-export-file-that-a-service-chose.bin"
        )
        target, data = self.tmp() / "out.bin", DATA[:300_000]
        self.script(
            cut(DATA, 0, {"ETag": '"v1"'}), first_bytes_then_stall(DATA, 0)
        )  # nothing received
        for argv in (["--retries", "0"], ["--retries", "0", "--timeout", "0.1"]):
            with self.subTest(argv=argv):
                status, _, err = self.run_main(*argv, "download", url, str(target), environment={})
                self.assertEqual(status, 3)
                self.assertRegex(
                    err,
                    r"^dataset-client: error: GET .*: (connection closed after 0 B of 3\.0 MiB|.*timed out.*)\n$",
                )
                self.assertNotIn("with -c", err)
        for again in (["-c"], []):  # the same command, or without -c
            with self.subTest(again=again):
                self.script(cut(data, 150_000, {"ETag": '"v1"'}), serve_file(data))
                status, _, err = self.run_main(
                    "--retries", "0", "download", url, str(target), "-c", environment={}
                )
                partial = target.parent / ".out.bin.part"
                self.assertEqual(
                    (status, err.splitlines()[-1]),
                    (
                        3,
                        "dataset-client: error: GET "
                        + url
                        + ": connection closed after 146.5 KiB of 293.0 KiB; "
                        f"the same command continues its partial file {partial}",
                    ),
                )
                self.assertEqual(partial.stat().st_size, 150_000)
                status, _, err = self.run_main("download", url, str(target), *again, environment={})
                self.assertEqual((status, target.read_bytes()), (0, data), err)
                said = [
                    line
                    for line in err.splitlines()
                    if re.search("resum|continu|partial", line, re.I)
                ]
                self.assertEqual(
                    said, ["dataset-client: resuming: 146.5 KiB of 293.0 KiB already downloaded"]
                )
                self.assertLessEqual(len(said[0]), 79)  # fits 80 columns
                self.assertEqual(self.requests[-1].headers["Range"], "bytes=150000-")
                self.assertEqual(os.listdir(target.parent), ["out.bin"])
                target.unlink()

    def test_an_export_on_a_terminal_reads_at_a_glance(self) -> None:
        export = {
            "id": "exp_1",
            "status": "ready",
            "dataset": "trades",
            "symbols": ["V"],
            "format": "csv",
            "rows": 1234,
            "size": 3 * 1024 * 1024 + 99,
            "sha256": DATA_SHA,
            "download_url": "/files/exp_1.csv\x1b[2J",
        }
        self.script(*[reply(201, export)] * 3)
        status, out, err = self.run_main(*self.export_argv(), terminal=True)
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(
            out.splitlines(),
            [
                "id           | exp_1",
                "dataset      | trades",
                'symbols      | ["V"]',
                "format       | csv",
                "rows         | 1234",
                "size         | 3.0 MiB",
                f"sha256       | {DATA_SHA}",
                "download_url | /files/exp_1.csv\\x1b[2J",
            ],
        )
        for argv, terminal in ((["--output", "json"], True), ([], False)):  # JSON as before
            with self.subTest(argv=argv, terminal=terminal):
                status, out, err = self.run_main(*argv, *self.export_argv(), terminal=terminal)
                self.assertEqual((status, err, json.loads(out)), (0, "", export))
        self.assertEqual([r.path for r in self.requests], ["/api/exports"] * 3)

    def run_on_a_terminal(
        self, columns: int, *argv: str, pager: dict[str, str]
    ) -> tuple[int, str, str]:
        """main() in process, its stdout a real pty of 24 rows and ``columns`` columns, with the ``pager``
        variables: its status, what the terminal got (the pager's output too), its stderr."""
        fcntl, pty, termios = (import_or_skip(self, name) for name in ("fcntl", "pty", "termios"))
        master, slave = pty.openpty()
        self.addCleanup(os.close, master)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        drawn = bytearray()

        def read() -> None:  # drained all along: a pty holds only a few KiB
            with contextlib.suppress(OSError):  # EIO: every end of the slave is closed
                while data := os.read(master, 65536):
                    drawn.extend(data)

        reader = threading.Thread(target=read)
        reader.start()
        terminal = open(slave, "w", encoding="utf-8")  # noqa: SIM115 (closed below, before the reader is joined)
        environment = {
            "DATASET_CLIENT_BASE_URL": self.server.url + "/api",
            "DATASET_CLIENT_API_KEY": KEY,
            **pager,
        }
        try:
            status, _, err = self.run_main(*argv, environment=environment, stdout=terminal)
        finally:
            terminal.close()
            reader.join(10)
        return status, drawn.decode().replace("\r\n", "\n"), err

    def test_long_output_pages_on_a_terminal(self) -> None:
        paged = self.tmp() / "paged.txt"
        into_a_file = {"DATASET_CLIENT_PAGER": f"sh -c 'cat > {paged}'"}
        tall, short = "SELECT date, symbol, close FROM daily_bars LIMIT 40", "SELECT 1 AS one"

        def rows(handler: Handler) -> None:  # 40 rows of three columns, or one of one
            sql = json.loads(handler.body)["sql"]
            table = {
                "columns": ["date", "symbol", "close"],
                "rows": [["2024-01-02", "AAPL", 185.64]] * 40,
            }
            reply(body=table if sql == tall else {"columns": ["one"], "rows": [[1]]})(handler)

        self.server.default = rows
        for columns in (80, 40):
            with self.subTest(columns=columns):
                status, drawn, err = self.run_on_a_terminal(
                    columns, "query", tall, pager=into_a_file
                )
                self.assertEqual((status, err, drawn), (0, "", ""), "the pager had it all")
                lines = paged.read_text().splitlines()
                self.assertEqual((len(lines), lines[-1]), (43, "(40 rows)"))
                self.assertTrue(
                    all(len(line) <= columns for line in lines), "laid out for this terminal"
                )
                paged.unlink()
                status, drawn, err = self.run_on_a_terminal(
                    columns, "query", tall, pager={"PAGER": "head -n 3"}
                )
                self.assertEqual(
                    (status, err, drawn.count("\n")), (0, "", 3), "quit early: exit 0, no error"
                )
        for argv, pager in (
            (["query", short], into_a_file),  # fits the screen
            (["--no-pager", "query", tall], into_a_file),
            (["query", tall, "--no-pager"], into_a_file),
            (
                ["query", tall],
                {"DATASET_CLIENT_PAGER": "", "PAGER": into_a_file["DATASET_CLIENT_PAGER"]},
            ),  # set: decides
            (["query", tall], {"PAGER": " "}),
        ):
            with self.subTest(argv=argv, pager=pager):
                status, drawn, err = self.run_on_a_terminal(80, *argv, pager=pager)
                self.assertEqual((status, err), (0, ""))
                self.assertFalse(paged.exists())
                self.assertTrue(drawn.endswith(" rows)\n") or drawn.endswith(" row)\n"), drawn)
        status, out, _ = self.run_main(
            "query",
            tall,
            environment={
                "DATASET_CLIENT_BASE_URL": self.server.url + "/api",
                "DATASET_CLIENT_API_KEY": KEY,
                **into_a_file,
            },
        )
        self.assertEqual(
            (status, len(json.loads(out)["rows"]), paged.exists()), (0, 40, False), "not a terminal"
        )
        with mock.patch.dict(os.environ, {"PAGER": "x"}):
            del os.environ["PAGER"]
            self.assertEqual(
                cli._pager_command(),
                [shutil.which("less"), "-FRX"] if shutil.which("less") else None,
            )
            os.environ["PAGER"] = "more -s"
            self.assertEqual(cli._pager_command(), ["more", "-s"])

    def test_limit_rate_0_means_no_limit(self) -> None:
        self.server.default = serve_file(DATA)
        target = self.tmp() / "out.bin"
        with mock.patch.object(
            dc.DatasetClient, "download", autospec=True, side_effect=dc.DatasetClient.download
        ) as called:
            status, _, err = self.run_main(
                "-q", "download", "/api/files/x", str(target), "--limit-rate", "0"
            )
        self.assertEqual((status, err, target.read_bytes()), (0, "", DATA))
        self.assertNotIn("max_rate", called.call_args.kwargs)
        self.assertEqual([r.path for r in self.requests], ["/api/files/x"])

    def test_an_export_whose_size_no_float_holds_is_shown_whole(self) -> None:
        # Found in review2: a 4,000-digit "size" made the export block an OverflowError and a traceback.
        huge = 10**4000
        for size, shown in ((huge, str(huge)), (-5, "-5"), (2**63, str(2**63)), (2048, "2.0 KiB")):
            with self.subTest(size=str(size)[:10]):
                self.server.requests.clear()
                self.script(reply(201, {"id": "exp_1", "size": size}))
                status, out, err = self.run_main(*self.export_argv(), terminal=True)
                self.assertEqual((status, err), (0, ""))
                self.assertEqual(out.splitlines(), ["id   | exp_1", f"size | {shown}"])
                self.assertEqual([r.path for r in self.requests], ["/api/exports"])

    def test_a_profile_s_api_key_of_the_wrong_type_is_refused_without_showing_it(self) -> None:
        # Found in review2: an unquoted numeric token (api_key = 123456789012345, an integer in TOML) was
        # printed whole in the error that said it must be a string.
        config = self.tmp() / "config.toml"
        for value in (
            "123456789012345",
            '["sk-listed-0123456789"]',
            "{ key = 'sk-table-0123456789' }",
        ):
            with self.subTest(value=value):
                config.write_text(f'[default]\nbase_url = "{self.server.url}"\napi_key = {value}\n')
                config.chmod(0o600)
                status, out, err = self.run_main(
                    "datasets", environment={"DATASET_CLIENT_CONFIG": str(config)}
                )
                kind = {"1": "an integer", "[": "an array", "{": "a table"}[value[0]]
                said = f"dataset-client: error: api_key in [default] in {config} must be a non-empty string, not {kind}\n"
                self.assertEqual((status, out, err), (2, "", said))
                self.assertEqual(self.requests, [], "nothing sent")


class ThirdPassCommandLineTests(StandInTestCase):
    """The contract's "The first hour, third pass", and the third review's "The pager gets no
    secrets"."""

    cli_unset = ScriptedCommandLineTestCase.cli_unset

    run_on_a_terminal = ScriptedCommandLineTestCase.run_on_a_terminal  # self.server's, at /api

    def test_the_pager_gets_no_secrets(self) -> None:
        dumped = self.tmp() / "environment.txt"
        rows = [["2024-01-02", "AAPL", 185.64]] * 40
        self.server.default = reply(body={"columns": ["date", "symbol", "close"], "rows": rows})
        password = "proxy-pass-4321"
        variables = {
            "DATASET_CLIENT_PAGER": f"sh -c 'cat > /dev/null; env > {dumped}'",  # dumps what it got
            "HTTPS_PROXY": f"http://user:{password}@proxy.invalid:3128",
            "COPY_OF_THE_KEY": KEY,
            "KEPT": "what the pager may see",
        }
        status, drawn, err = self.run_on_a_terminal(80, "query", "SELECT 1", pager=variables)
        self.assertEqual((status, err, drawn), (0, "", ""), "the pager had it all")
        seen = dumped.read_text()
        self.assertIn("\nKEPT=what the pager may see\n", seen, "the rest is the pager's")
        self.assertIn("\nDATASET_CLIENT_PAGER=", seen)
        for secret in (KEY, password, "DATASET_CLIENT_API_KEY", "COPY_OF_THE_KEY", "HTTPS_PROXY"):
            self.assertNotIn(secret, seen)
        self.assertEqual(self.requests[0].headers["Authorization"], f"Bearer {KEY}", "the client's")

    def stand_in_export(self, *output: str, start: str = "2024-01-02", end: str = "") -> list[str]:
        dates = ["--start", start, "--end", end or "2024-01-05", "--format", "csv"]
        return [*output, "export", "daily_bars", "--symbols", "AAPL,MSFT", *dates]

    def test_output_means_the_same_for_export(self) -> None:
        status, out, err = self.run_main(*self.stand_in_export("--output", "json"))
        export = json.loads(out)
        self.assertEqual((status, err, export["rows"], out.count("\n") > 5), (0, "", 8, True))
        manifest = self.tmp() / "exports.jsonl"
        for _ in range(2):  # export ... --output jsonl >> exports.jsonl
            status, out, err = self.run_main(*self.stand_in_export("--output", "jsonl"))
            self.assertEqual((status, err, out.count("\n")), (0, "", 1))
            with manifest.open("a") as file:
                file.write(out)
        records = [json.loads(line) for line in manifest.read_text().splitlines()]
        self.assertEqual([sorted(record) for record in records], [sorted(export)] * 2)
        self.assertEqual([record["symbols"] for record in records], [["AAPL", "MSFT"]] * 2)
        self.assertNotEqual(records[0]["id"], records[1]["id"])
        status, out, err = self.run_main(*self.stand_in_export("--output", "csv"))
        self.assertEqual((status, err), (0, ""))
        header, row = csv.reader(io.StringIO(out))  # a header row and one row
        self.assertEqual(header, list(export))
        record = dict(zip(header, row, strict=True))
        self.assertEqual((record["symbols"], record["rows"]), ('["AAPL","MSFT"]', "8"), "compact")
        self.assertTrue(out.endswith("\r\n"))
        narrow = {**self.cli_environment(), "COLUMNS": "40"}
        argv = self.stand_in_export("--output", "table")
        status, out, err = self.run_main(*argv, environment=narrow)
        self.assertEqual((status, err), (0, ""))
        shown = ["dataset      | daily_bars", 'symbols      | ["AAPL", "MSFT"]']
        self.assertEqual(out.splitlines()[1:3], shown)
        url = re.escape(self.base_url) + "/files/exp_[0-9a-f]+[.]csv"
        whole = rf"\nsha256       \| [0-9a-f]{{64}}\ndownload_url \| {url}\n$"
        self.assertRegex(out, whole, "what one copies, on one line at any width")
        self.assertEqual(len(self.requests), 0)

    def test_an_empty_export_is_said(self) -> None:
        argv = self.stand_in_export(start="2021-01-01", end="2021-01-31")
        status, out, err = self.run_main(*argv, terminal=True)
        self.assertEqual(status, 0)
        self.assertEqual(
            err,
            "dataset-client: warning: the export holds no rows: check --symbols, --start and --end"
            " against dataset-client datasets daily_bars\n",
        )
        lines = out.splitlines()
        self.assertEqual(lines[1:6], [
            "dataset      | daily_bars",
            'symbols      | ["AAPL", "MSFT"]',
            "start_date   | 2021-01-01",
            "end_date     | 2021-01-31",
            "format       | csv",
        ])  # fmt: skip
        self.assertEqual(lines[6], "rows         | 0")
        for more in (["--output", "json"], ["-q"]):
            with self.subTest(more=more):
                status, out, err = self.run_main(*more, *argv)
                self.assertEqual(status, 0)
                self.assertEqual(err.count("holds no rows"), 0 if "-q" in more else 1)
        status, out, err = self.run_main(*self.stand_in_export(), terminal=True)
        self.assertEqual((status, err), (0, ""), "an export with rows: nothing said")

    def block(self, out: str) -> dict[str, str]:
        """A ``field | value`` block: each field's value, continuation lines joined by a space."""
        fields: dict[str, str] = {}
        for line in out.splitlines():
            name, _, value = line.partition(" | ")
            if name.strip():
                fields[name.strip()] = value
            else:
                fields[list(fields)[-1]] += " " + value
        return fields

    def test_one_dataset_at_a_glance(self) -> None:
        listed = self.stand_in_client().list_datasets()[0]
        whole = {key: v if isinstance(v, str) else json.dumps(v) for key, v in listed.items()}
        for columns in (40, 80):
            with self.subTest(columns=columns):
                environment = {**self.cli_environment(), "COLUMNS": str(columns)}
                argv = ["datasets", "daily_bars"]
                status, out, err = self.run_main(*argv, terminal=True, environment=environment)
                self.assertEqual((status, err), (0, ""))
                self.assertEqual(out.splitlines()[0], "name        | daily_bars")
                self.assertTrue(all(len(line) <= columns for line in out.splitlines()), out)
                self.assertEqual(self.block(out), whole, "every field whole")
        for output in ("json", "jsonl"):
            status, out, err = self.run_main("--output", output, "datasets", "daily_bars")
            self.assertEqual((status, err, json.loads(out)), (0, "", listed))
            self.assertEqual(out.count("\n") == 1, output == "jsonl")
        status, out, err = self.run_main("datasets", "daily_bars", "--output", "csv")
        header, row = csv.reader(io.StringIO(out))
        self.assertEqual(header[:2], ["name", "description"])
        self.assertEqual(row[:2], ["daily_bars", whole["description"]])
        for name, said in (
            ("daily_bar", "no dataset 'daily_bar' (did you mean 'daily_bars'?)"),
            ("TRADES", "no dataset 'TRADES' (did you mean 'trades'?)"),
            ("quotes\x1b[2J", "no dataset 'quotes\\x1b[2J'; the datasets: daily_bars, trades"),
        ):
            with self.subTest(name=name):
                status, out, err = self.run_main("datasets", name)
                self.assertEqual((status, out, err), (1, "", f"dataset-client: error: {said}\n"))
        status, out, _ = self.run_main("datasets", "--output", "json")
        self.assertEqual([d["name"] for d in json.loads(out)], ["daily_bars", "trades"])

    def test_hints_point_at_the_cause(self) -> None:
        config = self.tmp() / "config.toml"
        config.write_text(f'[staging]\nbase_url = "{self.server.url}/api"\n')
        config.chmod(0o600)
        self.script(reply(401, {"message": "missing or wrong API key"}))
        environment = {"DATASET_CLIENT_CONFIG": str(config)}
        status, _, err = self.run_main("--profile", "staging", "datasets", environment=environment)
        self.assertEqual(status, 1)
        said = f"(DATASET_CLIENT_API_KEY is not set, and [staging] in {config} has no api_key)\n"
        self.assertTrue(err.endswith(f": missing or wrong API key {said}"), err)
        gone = reply(404, {"message": "no such endpoint"})
        self.script(gone, gone, reply(404, {"message": "no such dataset: 'nope'"}), gone)
        day, url = ["--start", "2024-01-02", "--end", "2024-01-02"], self.server.url + "/api"
        for argv, hint in (
            (["--base-url", url + "/v1", "datasets"], " (check the path /api/v1 of --base-url)"),
            (["query", "SELECT 1"], " (check the path /api of DATASET_CLIENT_BASE_URL)"),
            (["export", "nope", "--symbols", "V", *day], ""),  # the service said what it lacks
            (["--base-url", self.server.url, "datasets"], ""),  # no path to check
        ):
            with self.subTest(argv=argv):
                status, _, err = self.run_main(*argv, key=KEY, base_url=url)
                self.assertEqual(status, 1)
                said = r"^dataset-client: error: 404 Not Found: .*: no such \w+[^(]*"
                self.assertRegex(err, said + re.escape(hint) + "\n$")
        for text, said in (
            ("2024-13-01", "there is no month 13"),
            ("2024-00-01", "there is no month 0"),
            ("2024-01-32", "there is no day 32"),
            ("2023-02-29", "there is no 29 February 2023"),
            ("2024-04-31T10:00", "there is no 31 April 2024"),
            ("0000-01-01", "there is no year 0"),
            ("2024/01/02", "use YYYY-MM-DD"),
        ):
            with self.subTest(text=text):
                argv = ["export", "trades", "--symbols", "V", "--start", "2024-01-01", "--end"]
                status, out, err = self.run_main(*argv, text)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err.endswith(f"--end: invalid date {text!r}: {said}\n"), err)
        self.assertEqual(len(self.requests), 5, "nothing sent for a usage error")

    def test_a_mistyped_option_prints_the_usage_of_its_command(self) -> None:
        day = ["--start", "2024-01-02", "--end", "2024-01-02"]
        for argv, usage, told in (
            (
                ["export", "trades", "--simbols", "V", *day],
                "usage: dataset-client export [-h] --symbols SYMBOLS",
                "unknown option '--simbols' (did you mean '--symbols'?)",
            ),
            (["datasets", "--outptu", "csv"], "usage: dataset-client datasets [-h]", "unknown"),
            (["--outptu", "csv", "datasets"], "usage: dataset-client [-h] [--base-url", "unknown"),
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err.startswith(usage + " "), err)
                self.assertTrue(err.splitlines()[-1].startswith(f"dataset-client: error: {told}"))
        self.assertEqual(self.requests, [])

    def test_the_readmes_way_in_works_from_anywhere(self) -> None:
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        install = readme[readme.index("\n## Install\n") :].split("\n## ", 2)[1]
        for said in ("`dataset_client.py`", "`dataset_client_cli.py`", "pip install", "setuptools"):
            self.assertIn(said, install)
        self.assertNotIn("flit", readme, "the build backend is setuptools")
        programs = self.tmp()  # python3 is this Python, as the README's alias runs it
        (programs / "python3").symlink_to(sys.executable)
        checkout, elsewhere = shlex.quote(str(ROOT)), self.tmp()
        script = f"cd {checkout}\n{readme_alias()}\ncd {elsewhere}\ndataset-client --version"
        path = f"{programs}{os.pathsep}{os.environ['PATH']}"
        result = subprocess.run(
            ["bash", "--norc", "--noprofile", "-O", "expand_aliases", "-c", script],
            env={"PATH": path, **NO_BYTECODE_HERE},
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        self.assertEqual(result.stdout, f"dataset-client {dc.__version__}\n")


class CommandLineTerminalTests(StandInTestCase):
    def test_export_download_to_stdout_writes_the_file_alone(self) -> None:
        result = self.run_process(*self.export_argv("--format", "csv", "--download", "-"))
        self.assertEqual(result.returncode, 0, result.stderr)
        printed, summary = result.stderr.decode().rsplit("\n", 2)[:2]
        export = json.loads(printed)  # the export went to stderr
        self.assertEqual(
            hashlib.sha256(result.stdout).hexdigest(), export["sha256"], "stdout: the file alone"
        )
        self.assertTrue(result.stdout.startswith(b"date,"), result.stdout[:40])
        self.assertRegex(summary, r"^downloaded stdout: .*sha256 verified$")
        quiet = self.run_process("-q", *self.export_argv("--format", "csv", "--download", "-"))
        self.assertEqual((quiet.returncode, quiet.stderr), (0, b""))
        self.assertEqual(quiet.stdout, result.stdout)

    def test_export_download_to_stdout_shows_the_export_as_a_block_on_a_terminal(self) -> None:
        # Found by a new user: stderr a terminal, the export came as 16 lines of indented JSON.
        argv = self.export_argv("--format", "csv", "--download", "-")
        status, drawn = self.run_in_terminal(argv, 80)
        self.assertEqual(status, 0, drawn)
        drawn = drawn.replace("\r\x1b[K", "")  # a status line cleared
        self.assertRegex(drawn, r"(?m)^id +\| exp_\w+\r?$")
        self.assertRegex(drawn, r"(?m)^sha256 +\| [0-9a-f]{64}\r?$")
        self.assertNotIn('"download_url":', drawn)
        self.assertIn("date,", drawn, "the file, on the terminal too")

    def test_no_control_character_from_the_server_reaches_the_terminal(self) -> None:
        at_base = {"DATASET_CLIENT_BASE_URL": self.server.url + "/api"}
        table = {"columns": [hostile("name"), "n"], "rows": [[hostile("cell"), 1]]}
        self.script(reply(body=table), reply(body=table), reply(body=table), reply(body=table))
        for output in ("table", "csv"):
            with self.subTest(output=output):
                status, out, err = self.run_main(
                    "--output", output, "query", "SELECT 1", environment=at_base, terminal=True
                )
                self.assertEqual((status, err), (0, ""))
                self.assertIsNone(
                    RAW_CONTROL.search(out.replace("\r\n", "\n")), repr(out)
                )  # csv ends lines so
                self.assertIn(r"\x1b]0;pwned\x07cell\x1b[2J\x9b32mok\x7f", out)
        for output in ("json", "jsonl"):
            with self.subTest(output=output):
                argv = ("--output", output, "query", "SELECT 1")
                status, out, err = self.run_main(*argv, environment=at_base)
                self.assertIsNone(RAW_CONTROL.search(out), repr(out))
                self.assertIn(r"\u001b]0;pwned\u0007cell\u001b[2J\u009b32mok\u007f", out)
                decoded = (
                    json.loads(out)
                    if output == "json"
                    else {"rows": [list(json.loads(out).values())]}
                )
                self.assertEqual(
                    decoded["rows"][0][0], hostile("cell"), "the same text, escaped as JSON does"
                )

        def reason(handler: Handler) -> None:  # a reason phrase and a message of its own choosing
            body = json.dumps({"message": hostile("message")}).encode()
            handler.send_response(503, hostile("reason"))
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        self.script(reason, reason)
        with recorded_sleeps():
            status, out, err = self.run_main(
                "-v", "--retries", "1", "datasets", environment=at_base
            )
        self.assertEqual(status, 1)
        self.assertIsNone(RAW_CONTROL.search(err), repr(err))
        self.assertEqual(err.count("\n"), 4, err)  # two requests, a retry, the error: each escaped
        self.assertIn(r"503 \x1b]0;pwned\x07reason\x1b[2J\x9b32mok\x7f", err.splitlines()[0])
        self.assertIn(r"\x1b]0;pwned\x07message\x1b[2J\x9b32mok\x7f", err.splitlines()[-1])

    def test_a_name_from_the_url_never_replaces_a_file(self) -> None:
        directory = self.tmp()
        url = self.server.url + "/files/"
        with contextlib.chdir(directory):
            for name, refused in (
                (".bashrc", "starts with a dot"),
                ("a%1b%5B2Jb", "holds a control character"),
            ):
                with self.subTest(name=name):
                    status, out, err = self.run_main("download", url + name)
                    self.assertEqual((status, out), (2, ""))
                    self.assertIn(refused, err)
                    self.assertIsNone(RAW_CONTROL.search(err), repr(err))
            Path("data.bin").write_bytes(b"mine")
            status, _, err = self.run_main("download", url + "data.bin", "--sha256", DATA_SHA)
            self.assertEqual(status, 1)
            self.assertEqual(
                err,
                "dataset-client: error: data.bin exists and was not replaced (its name came from the URL): "
                "give DEST to replace it\n",
            )
            self.assertEqual(Path("data.bin").read_bytes(), b"mine")
            self.assertEqual(self.requests, [], "nothing was sent")
            Path("data.bin").write_bytes(
                DATA
            )  # already the file: not fetched again, with or without DEST
            for argv in (
                ["download", url + "data.bin"],
                ["download", url + "data.bin", "data.bin"],
            ):
                with self.subTest(argv=argv):
                    status, _, err = self.run_main(*argv, "--sha256", DATA_SHA)
                    self.assertEqual(
                        (status, err),
                        (0, "data.bin already has the expected sha256: not downloaded again\n"),
                    )
            self.assertEqual(self.requests, [], "nothing was sent")
            self.script(serve_file(DATA))
            Path("data.bin").write_bytes(b"old")  # DEST given, another file: replaced
            status, _, err = self.run_main(
                "download", url + "data.bin", "data.bin", "--sha256", DATA_SHA
            )
            self.assertEqual((status, Path("data.bin").read_bytes()), (0, DATA), err)
            self.assertEqual(sorted(os.listdir()), ["data.bin"])

    def test_an_absolute_url_needs_no_service_and_gets_no_key(self) -> None:
        self.script(serve_file(DATA))
        destination = self.tmp() / "out.bin"
        status, _, err = self.run_main(
            "download",
            self.server.url + "/files/x",
            str(destination),
            environment={"DATASET_CLIENT_API_KEY": KEY},
        )
        self.assertEqual((status, destination.read_bytes()), (0, DATA), err)
        self.assertEqual(
            [(r.method, r.path, r.headers.get("Authorization")) for r in self.requests],
            [("GET", "/files/x", None)],
        )
        status, _, err = self.run_main("download", "/files/x", str(destination), environment={})
        self.assertEqual(status, 2)
        self.assertIn("no service address", err)

    def idempotent_service(self) -> dict[str, int]:
        """POST /api/exports gives one export per Idempotency-Key (its number, in what is returned); its file's
        first GET stalls after 1.5 MB, later ones serve it whole or the range asked for."""
        exports: dict[str, int] = {}
        lock = threading.Lock()

        def respond(handler: Handler) -> None:
            if handler.command == "POST":
                with lock:
                    number = exports.setdefault(
                        handler.headers["Idempotency-Key"], len(exports) + 1
                    )
                export = {
                    "id": f"exp_{number}",
                    "download_url": f"/files/exp_{number}.bin",
                    "sha256": DATA_SHA,
                }
                return reply(201, export)(handler)
            first = sum(r.method == "GET" for r in self.requests) == 1
            return (first_bytes_then_stall(DATA, 1_500_000) if first else serve_file(DATA))(handler)

        self.server.default = respond
        return exports

    def test_an_interrupted_export_download_with_c_continues_when_run_again(self) -> None:
        exports = self.idempotent_service()
        directory = self.tmp()
        base = ["--base-url", self.server.url + "/api"]
        argv = [*base, *self.export_argv("--download", str(directory / "out.bin"), "-c")]
        interrupted: list[str] = []

        def ctrl_c_once_counted(
            screen: str,
        ) -> None:  # the progress line shows bytes: they are kept
            if not interrupted and re.search(r"\b[1-9]\d*%", screen):
                interrupted.append(screen)
                self.in_terminal.send_signal(signal.SIGINT)

        with inherited_signals(signal.SIG_DFL, "SIGINT"):  # as in a terminal
            status, drawn = self.run_in_terminal(argv, 80, ctrl_c_once_counted)
        self.assertEqual(len(interrupted), 1, drawn)
        self.assertEqual(status, 130, drawn)
        partial = directory / ".out.bin.part"
        said = f"dataset-client: error: interrupted; the same command continues its partial file {partial}\r\n"
        self.assertTrue(drawn.endswith(said), drawn)
        status, _, err_text = self.run_main(
            *argv, environment={"DATASET_CLIENT_API_KEY": KEY}
        )  # the same command
        self.assertEqual((status, (directory / "out.bin").read_bytes()), (0, DATA), err_text)
        self.assertEqual(os.listdir(directory), ["out.bin"])
        posts = [r for r in self.requests if r.method == "POST"]
        gets = [r for r in self.requests if r.method == "GET"]
        self.assertEqual(len(posts), 2)
        self.assertEqual(posts[0].headers["Idempotency-Key"], posts[1].headers["Idempotency-Key"])
        self.assertEqual(exports, {posts[0].headers["Idempotency-Key"]: 1}, "one export, got twice")
        self.assertEqual([r.path for r in gets], ["/files/exp_1.bin"] * 2)
        self.assertRegex(
            gets[1].headers["Range"], r"^bytes=[1-9]\d*-$", "the partial file continued"
        )
        for _ in range(2):  # without -c, each run is a new export
            self.assertEqual(
                self.run_main(
                    *base, *self.export_argv(), environment={"DATASET_CLIENT_API_KEY": KEY}
                )[0],
                0,
            )
        self.assertEqual(len(exports), 3)

    def test_a_download_without_c_continues_what_a_c_run_left_and_leaves_nothing(self) -> None:
        directory = self.tmp()
        url = self.server.url + "/files/x"
        os.symlink(
            "real.bin", directory / "link.bin"
        )  # through a symlink: the partial file is beside real.bin
        for name, left in (
            ("out.bin", ["link.bin", "out.bin"]),
            ("link.bin", ["link.bin", "out.bin", "real.bin"]),
        ):
            with self.subTest(name=name):
                self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}))
                status, _, err = self.run_main(
                    "--retries", "0", "download", url, str(directory / name), "-c", environment={}
                )
                self.assertEqual(status, 3)
                partial = directory / f".{'real' if name == 'link.bin' else 'out'}.bin.part"
                said = f"connection closed after 1.4 MiB of 3.0 MiB; the same command continues its partial file {partial}"
                self.assertTrue(err.endswith(said + "\n"), err)  # -c: where its partial file is
                self.script(serve_file(DATA))
                status, _, err = self.run_main(
                    "download", url, str(directory / name), environment={}
                )
                self.assertEqual(status, 0, err)
                self.assertEqual(
                    err.splitlines()[0],
                    "dataset-client: resuming: 1.4 MiB of 3.0 MiB already downloaded",
                )
                self.assertRegex(self.requests[-1].headers["Range"], r"^bytes=[1-9]\d*-$")
                self.assertEqual(
                    ((directory / name).read_bytes() == DATA, sorted(os.listdir(directory))),
                    (True, left),
                )
        self.script(
            cut(DATA, 1_000_000, {"ETag": '"v2"'})
        )  # without -c, a network error says what -c does
        status, _, err = self.run_main(
            "--retries", "0", "download", url, str(directory / "b.bin"), environment={}
        )
        self.assertEqual(status, 3)
        self.assertTrue(
            err.endswith(
                ": connection closed after 976.6 KiB of 3.0 MiB; with -c, the partial file is kept "
                "and the same command continues it\n"
            ),
            err,
        )
        self.assertEqual(sorted(os.listdir(directory)), ["link.bin", "out.bin", "real.bin"])

    def test_an_empty_file_a_c_run_left_is_continued_and_removed_too(self) -> None:
        # Found in review: a state of total 0 was not taken for a partial file, and stayed for ever.
        directory = self.tmp()
        self.script(serve_file(b""))

        def ctrl_c(done: int, total: int | None) -> None:
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            self.client(self.server.url).download(
                "files/x", directory / "out.bin", resume=True, progress=ctrl_c
            )
        self.assertEqual(sorted(os.listdir(directory)), [".out.bin.part", ".out.bin.part.json"])
        self.script(serve_file(b""))
        status, _, err = self.run_main(
            "download", self.server.url + "/files/x", str(directory / "out.bin")
        )
        self.assertEqual(status, 0, err)
        self.assertRegex(err, r"^downloaded .*out\.bin: 0 B, ")  # no "resuming: 0 B of 0 B"
        self.assertEqual(os.listdir(directory), ["out.bin"])
        self.assertEqual((directory / "out.bin").read_bytes(), b"")

    def test_errors_say_what_to_do(self) -> None:
        base = self.server.url + "/api"
        self.script(*[reply(401, {"message": "missing or wrong API key"})] * 2)
        status, _, err = self.run_main("datasets", environment={"DATASET_CLIENT_BASE_URL": base})
        self.assertEqual(
            (status, err),
            (
                1,
                f"dataset-client: error: 401 Unauthorized: GET {base}/datasets: missing or wrong API key "
                "(DATASET_CLIENT_API_KEY is not set)\n",
            ),
        )
        self.assertIsNone(self.requests[0].headers.get("Authorization"))
        status, _, err = self.run_main(
            "datasets", environment={"DATASET_CLIENT_BASE_URL": base, "DATASET_CLIENT_API_KEY": KEY}
        )
        self.assertEqual(status, 1)
        self.assertTrue(err.endswith(": missing or wrong API key\n"), err)
        assert_usage_errors(
            self,
            ("datset", "unknown command 'datset': did you mean 'datasets'?"),
            ("--output tabel datasets", "unknown --output value 'tabel': did you mean 'table'?"),
            (
                "export trades --symbols V --start 2024/01/02 --end 2024-01-03",
                "argument --start: invalid date '2024/01/02': use YYYY-MM-DD",
            ),
            (
                "--base-url localhost:8765 datasets",
                "--base-url 'localhost:8765' has no scheme: did you mean 'http://localhost:8765'?",
            ),
            (
                "download /x out --limit-rate 10X",
                "argument --limit-rate: invalid rate '10X': bytes per second, such as 500K, 10M or 1G",
            ),
        )
        self.assertEqual(len(self.requests), 2, "nothing sent for a usage error")

    def test_a_certificate_failure_names_ca_bundle_which_works_from_the_option_and_the_profile(
        self,
    ) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body=[])
        environment = {"DATASET_CLIENT_BASE_URL": tls.url + "/api"}
        status, _, err = self.run_main("--retries", "0", "datasets", environment=environment)
        self.assertEqual(status, 3)
        self.assertIn(": TLS certificate verification failed: ", err)
        self.assertTrue(
            err.endswith(
                "; if a private CA or a proxy signs it, pass --ca-bundle FILE or set SSL_CERT_FILE\n"
            ),
            err,
        )
        status, out, err = self.run_main(
            "--ca-bundle", CA_FILE, "datasets", environment=environment
        )
        self.assertEqual((status, json.loads(out)), (0, []), err)
        config = self.tmp() / "config.toml"
        config.write_text(f'[default]\nca_bundle = "{CA_FILE}"\n')
        status, out, err = self.run_main(
            "datasets", environment={**environment, "DATASET_CLIENT_CONFIG": str(config)}
        )
        self.assertEqual((status, json.loads(out)), (0, []), err)
        status, _, err = self.run_main(
            "--ca-bundle", str(config), "datasets", environment=environment
        )
        self.assertEqual(status, 2)
        self.assertIn(
            f"--ca-bundle names {config}, which is not a file or directory of PEM CA certificates",
            err,
        )

    def test_the_certificate_advice_follows_the_errors_certificate_field_not_its_words(
        self,
    ) -> None:
        advice = "; if a private CA or a proxy signs it, pass --ca-bundle FILE or set SSL_CERT_FILE"
        failed = dc.NetworkError("GET https://h/x: TLS handshake failed", certificate=True)
        self.assertEqual(cli._error_text(failed), "GET https://h/x: TLS handshake failed" + advice)
        self.assertEqual(cli._error_text(pickle.loads(pickle.dumps(failed))), str(failed) + advice)
        other = dc.NetworkError(
            "GET https://h/x: connection lost: the certificate verifier went away"
        )
        self.assertEqual(cli._error_text(other), str(other))

    def test_connections_into_stdout_and_a_fifo_fetch_parts_at_once(self) -> None:
        self.server.default = serve_file(DATA, digests=True)
        result = self.run_process(
            "download", self.server.url + "/files/x", "-", "--connections", "4", base_url=""
        )
        self.assertEqual((result.returncode, result.stdout), (0, DATA), result.stderr)
        summary = r"^downloaded {}: .*, verified by the server's Repr-Digest \(sha-256\)$"
        self.assertRegex(result.stderr.decode().strip(), summary.format("stdout"))
        self.assertEqual(
            len([r for r in self.requests if "Range" in r.headers]), 3, "parts at once"
        )
        self.server.requests.clear()
        fifo = self.tmp() / "fifo"
        os.mkfifo(fifo)
        received = bytearray()
        reader = threading.Thread(target=lambda: received.extend(fifo.read_bytes()))
        reader.start()
        self.addCleanup(reader.join, 10)
        status, _, err = self.run_main(
            "download",
            self.server.url + "/files/x",
            str(fifo),
            "--connections",
            "4",
            environment={},
        )
        reader.join(10)
        self.assertEqual((status, bytes(received)), (0, DATA), err)
        self.assertRegex(err.strip(), summary.format(re.escape(str(fifo))))
        self.assertEqual(
            len([r for r in self.requests if "Range" in r.headers]), 3, "parts at once"
        )

    def test_help_per_command(self) -> None:
        status, out, _ = self.run_main("--help")
        self.assertEqual(status, 0)
        self.assertIn("Exit status: 0 ok", out)
        for command in cli._COMMANDS:
            with self.subTest(command=command):
                status, out, _ = self.run_main(command, "--help")
                self.assertEqual(status, 0)
                self.assertTrue(out.startswith(f"usage: dataset-client {command} [-h]"), out)
                options, examples = out.split("\nexamples:\n")
                self.assertNotIn("Exit status", out, "the global epilog is not repeated")
                self.assertNotIn("--base-url", options)
                self.assertNotIn("--output", options)
                self.assertIn(f"dataset-client {command}", examples)
                self.assertTrue(all(len(line) < 80 for line in out.splitlines()), out)
        self.assertIn("--limit-rate RATE", self.run_main("download", "--help")[1])

    def test_limit_rate_is_the_librarys_max_rate(self) -> None:
        rates: list[object] = []

        def recording(client: DatasetClient, *args: object, **options: object) -> None:
            rates.append(options.get("max_rate", "not passed"))

        url = self.server.url + "/files/x"
        with mock.patch.object(dc.DatasetClient, "download", recording):
            for rate in ("500K", "10M", "1G", "1.5k", "2048", None):
                argv = [
                    "download",
                    url,
                    str(self.tmp() / "x"),
                    *(["--limit-rate", rate] if rate else []),
                ]
                self.assertEqual(self.run_main(*argv, environment={})[0], 0)
        self.assertEqual(rates, [512_000, 10_485_760, 1_073_741_824, 1536, 2048, "not passed"])
        for rate in ("-5", "1T", "fast"):  # 0: no limit (ScriptedCommandLineTestCase)
            with self.subTest(rate=rate):
                status, _, err = self.run_main(
                    "download", url, "x", "--limit-rate", rate, environment={}
                )
                self.assertEqual(status, 2)
                self.assertIn("bytes per second, such as 500K, 10M or 1G", err)
        self.assertEqual(self.requests, [], "a bad rate sends nothing")
        self.server.default = serve_file(DATA)
        destination = self.tmp() / "x"
        status, _, err = self.run_main(
            "download",
            url,
            str(destination),
            "--limit-rate",
            "1G",
            "--connections",
            "2",
            environment={},
        )
        self.assertEqual((status, destination.read_bytes()), (0, DATA), err)

    def test_profiles(self) -> None:
        other = self.server.url + "/api"
        self.server.default = reply(body=[{"name": "scripted"}])
        config = self.tmp() / "config.toml"
        config.write_text(
            f'[default]\nbase_url = "{self.base_url}"\napi_key = "stand-in-key"\n\n'
            f'[staging]\nbase_url = "{other}"\napi_key = "{KEY}"\ntimeout = 5\n'
        )
        config.chmod(0o600)
        chosen = {"DATASET_CLIENT_CONFIG": str(config)}

        def names(*argv: str, **environment: str) -> list[str]:
            status, out, err = self.run_main(
                *argv, "--output", "json", "datasets", environment={**chosen, **environment}
            )
            self.assertEqual(status, 0, err)
            return [dataset["name"] for dataset in json.loads(out)]

        self.assertEqual(names(), ["daily_bars", "trades"], "[default]")
        self.assertEqual(names("--profile", "staging"), ["scripted"])
        self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(names(DATASET_CLIENT_PROFILE="staging"), ["scripted"])
        self.assertEqual(
            names(DATASET_CLIENT_BASE_URL=other), ["scripted"], "a variable beats the file"
        )
        self.assertIsNone(
            self.requests[-1].headers["Authorization"],
            "[default]'s key is for its own base_url only",
        )
        self.server.script.append(reply(401, {"message": "missing or wrong API key"}))
        status, _, err = self.run_main(
            "datasets", environment={**chosen, "DATASET_CLIENT_BASE_URL": other}
        )
        self.assertEqual(
            (status, err),
            (
                1,
                f"dataset-client: error: 401 Unauthorized: GET {other}/datasets: missing or wrong API key "
                "(DATASET_CLIENT_API_KEY is not set; the profile's api_key goes only to its own base_url)\n",
            ),
        )
        self.assertEqual(
            names(
                DATASET_CLIENT_PROFILE="staging",
                DATASET_CLIENT_API_KEY="stand-in-key",
                DATASET_CLIENT_BASE_URL=self.base_url,
            ),
            ["daily_bars", "trades"],
        )
        self.assertEqual(
            names("--base-url", other, DATASET_CLIENT_BASE_URL=self.base_url),
            ["scripted"],
            "an option beats a variable",
        )
        home = self.tmp()  # the file's usual place
        (home / ".config" / "dataset-client").mkdir(parents=True)
        os.link(config, home / ".config" / "dataset-client" / "config.toml")
        status, out, err = self.run_main(
            "--profile", "staging", "datasets", environment={"HOME": str(home)}
        )
        self.assertEqual((status, json.loads(out)), (0, [{"name": "scripted"}]), err)
        for argv, environment, text in (
            (
                ["--profile", "prod"],
                chosen,
                f"no profile 'prod' in {config}; its profiles: default, staging",
            ),
            (
                [],
                {"DATASET_CLIENT_PROFILE": "prod", "HOME": str(home)},
                f"no profile 'prod' in {home}/.config/dataset-client/config.toml; its profiles: default, staging",
            ),
            (
                ["--profile", "staging"],
                {"DATASET_CLIENT_CONFIG": str(home / "none.toml")},
                f"no config file {home}/none.toml for --profile staging",
            ),
        ):
            with self.subTest(argv=argv, environment=environment):
                status, _, err = self.run_main(*argv, "datasets", environment=environment)
                self.assertEqual((status, err), (2, f"dataset-client: error: {text}\n"))
        config.chmod(0o640)
        status, _, err = self.run_main("datasets", environment=chosen)
        self.assertEqual(
            (status, err),
            (
                2,
                f"dataset-client: error: {config} holds an api_key and is readable by others: run chmod 600 {config}\n",
            ),
        )
        config.write_text('[default]\nbase-url = "http://x"\n')
        status, _, err = self.run_main("datasets", environment=chosen)
        self.assertEqual(status, 2)  # a warning, then: no service address
        self.assertIn("unknown key 'base-url' in [default]", err)
        self.assertIn("(ignored): did you mean 'base_url'?", err)

    def test_settings_are_read_once_say_where_each_came_from_and_hand_the_library_only_what_was_set(
        self,
    ) -> None:
        self.server.default = reply(body=[{"name": "scripted"}])
        config = self.tmp() / "config.toml"
        config.write_text(
            f'[staging]\nbase_url = "{self.server.url}/api"\napi_key = "{KEY}"\ntimeout = 0\n'
        )
        config.chmod(0o600)
        chosen = {"DATASET_CLIENT_CONFIG": str(config), "DATASET_CLIENT_PROFILE": "staging"}
        kept = {k: v for k, v in os.environ.items() if not k.startswith(self.cli_unset)}
        with mock.patch.dict(os.environ, {**kept, **chosen}, clear=True):
            argv = ["--retries", "0", "--output", "csv", "download", "/files/x.csv", "-c"]
            settings = cli._read_settings(cli._parse_arguments(argv))
        with mock.patch.dict(
            os.environ, {**kept, "HOME": str(self.tmp())}, clear=True
        ):  # no profile at all
            bare = cli._read_settings(
                cli._parse_arguments(["--base-url", self.base_url, "datasets"])
            )
        where = f"[staging] in {config}"
        self.assertEqual(
            settings.client_options, {"timeout": None, "max_retries": 0}
        )  # timeout 0: no limit
        self.assertEqual(
            settings.sources,
            {
                **{"base_url": where, "api_key": where, "timeout": where},
                **{"max_retries": "--retries", "deadline": "default", "ca_bundle": "default"},
            },
        )
        self.assertEqual(
            (
                settings.command,
                settings.url,
                settings.resume,
                settings.connections,
                settings.output,
                settings.api_key,
            ),
            ("download", "/files/x.csv", True, 1, "csv", KEY),
        )
        self.assertNotIn(KEY, repr(settings))
        with self.assertRaises(AttributeError):
            settings.resume = False  # type: ignore[misc]
        self.assertEqual((bare.client_options, bare.sources["timeout"]), ({}, "default"))
        with cli._open_client(bare) as client:  # the library's own defaults, said there alone
            self.assertEqual(
                (client._arguments["timeout"], client._arguments["max_retries"]), (30.0, 2)
            )
        status, out, err = self.run_main("--output", "json", "datasets", environment=chosen)
        self.assertEqual((status, json.loads(out)), (0, [{"name": "scripted"}]), err)
        self.assertEqual(self.requests[-1].path, "/api/datasets")
        self.assertEqual(
            self.requests[-1].headers["Authorization"], f"Bearer {KEY}"
        )  # the profile's key, sent

    def test_a_command_is_one_entry_of_the_table_its_help_arguments_run_and_completion(
        self,
    ) -> None:
        self.server.default = reply(body=[{"name": "scripted"}])
        ran = []

        def run(client: dc.DatasetClient, settings: Any, stderr: Any) -> None:
            ran.append((settings.command, settings.thing, client.list_datasets()))

        ping = cli._Command(
            "ping the service",
            "Ping it.",
            ["dataset-client ping x"],
            lambda parser: parser.add_argument("thing", metavar="THING", choices=("x", "y")),
            run,
            operands=("x", "y"),
        )
        with mock.patch.dict(cli._COMMANDS, {"ping": ping}):
            status, out, err = self.run_main("--base-url", self.server.url + "/api", "ping", "x")
            self.assertEqual((status, out, err), (0, "", ""))
            self.assertEqual(ran, [("ping", "x", [{"name": "scripted"}])])
            self.assertEqual(self.requests[-1].path, "/api/datasets")
            status, out, _ = self.run_main("--help")
            self.assertIn("    ping                ping the service\n", out)
            status, out, _ = self.run_main("ping", "--help")
            self.assertIn("Ping it.\n\npositional arguments:\n  THING\n", out)
            self.assertIn("examples:\n  dataset-client ping x\n", out)
            script = cli._completion_script("bash", cli._build_parser())
        self.assertIn('"ping") if [[ $cur == -* ]]; then', script)
        self.assertIn('else COMPREPLY=($(compgen -W "x y" -- "$cur")); fi ;;', script)
        self.assertIn('case "$word" in datasets|query|export|download|completion|ping)', script)

    def test_stdout_whose_reader_left_ends_quietly_and_a_failed_write_names_stdout(self) -> None:
        self.server.default = reply(body=[{"name": "scripted"}])

        class Closed(io.StringIO):
            def write(self, text: str) -> int:
                raise self.error

        closed = Closed()
        for closed.error, expected in (
            (BrokenPipeError(errno.EPIPE, "Broken pipe"), (0, "")),  # as under `| head`
            (
                OSError(errno.ENOSPC, "No space left on device"),
                (1, "cannot write stdout: No space left on device"),
            ),
        ):
            with self.subTest(error=closed.error):
                status, _, err = self.run_main(
                    "--base-url",
                    self.server.url + "/api",
                    "--output",
                    "json",
                    "datasets",
                    stdout=closed,
                )
                self.assertEqual(
                    (status, err),
                    (expected[0], expected[1] and f"dataset-client: error: {expected[1]}\n"),
                )
                self.assertEqual(self.requests[-1].path, "/api/datasets")

    def test_the_progress_line_keeps_its_shape_and_v_lines_are_whole(self) -> None:
        def rest_after_a_pause(
            handler: Handler,
        ) -> None:  # the range asked for, its rate known after the pause
            start, end = local_service._requested_range(handler.headers.get("Range"), len(BIG))
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(BIG)}")
            handler.send_header("Content-Length", str(end - start))
            handler.send_header("ETag", '"v1"')
            handler.end_headers()
            handler.wfile.write(BIG[start : start + 1024 * 1024])
            handler.wfile.flush()
            # Not a timing assertion: the client shows a rate once half a second has passed, and the retry's
            # wait before this response (at the default backoff, at least a quarter of a second) counts too.
            time.sleep(0.3)
            handler.wfile.write(BIG[start + 1024 * 1024 : end])

        self.script(
            cut(BIG, 1024 * 1024, {"ETag": '"v1"', "Accept-Ranges": "bytes"}), rest_after_a_pause
        )
        target = self.tmp() / "big.bin"
        status, drawn = self.run_in_terminal(
            ["-v", "download", self.server.url + "/big", str(target)], 80
        )
        self.assertEqual((status, target.read_bytes() == BIG), (0, True), drawn)
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", drawn)
        frames = [
            piece
            for row in text.split("\r\n")
            for piece in row.split("\r")
            if piece.startswith("[")
        ]
        self.assertGreaterEqual(len(frames), 5, text)
        self.assertTrue(
            all(len(frame) < 80 for frame in frames), [f for f in frames if len(f) >= 80]
        )
        bars = {len(re.match(r"\[[#-]+\]", frame)[0]) for frame in frames}  # type: ignore[index]
        self.assertEqual(len(bars), 1, frames)
        self.assertNotIn("/s", frames[0])
        self.assertRegex(frames[-1], r"\]  100%  8\.0/8\.0 MiB  +[\d.]+ [KMG]iB/s +0:00 left$")
        retry = r"dataset-client: retrying in [\d.]+ s \(2 attempts left\): GET "
        retry += rf"{self.server.url}/big: connection closed after 1\.0 MiB of 8\.0 MiB\r\n"
        self.assertRegex(text, retry, "a -v line whole, the cause of the retry at its end")

    def test_a_status_line_cut_to_the_terminal_shows_no_part_of_a_secret(self) -> None:
        stderr = cli._Stderr(quiet=False, verbose=False)
        stderr.stream, stderr.is_terminal, stderr.secrets = (
            TerminalOutput(),
            True,
            dc._Secrets([KEY]),
        )
        with mock.patch.dict(os.environ, {"COLUMNS": "41"}):
            stderr.status(
                f"dataset-client: retrying: {KEY} was refused"
            )  # the key crosses the 40th column
        self.assertEqual(
            stderr.stream.getvalue(), "\rdataset-client: retrying: <redacted> wa\u2026\x1b[K"
        )

    def test_a_table_narrows_its_text_first_then_shows_records_never_cutting_a_number(self) -> None:
        sql = "SELECT 'a rather long description of it' AS about, 1234567890123 AS big, 'x' AS t"
        for columns, expected in (
            (
                40,
                [
                    "about"
                    + " " * 17
                    + "  "
                    + " " * 10
                    + "big  t",  # a number's column on the right, whole
                    "-" * 22 + "  " + "-" * 13 + "  -",
                    "a rather long descrip…  1234567890123  x",  # the text gave way
                ],
            ),
            (  # records: the names whole up to half the width, a long text wrapped at words
                24,
                [
                    "-[ RECORD 1 ]-",
                    "about | a rather long",
                    "      | description of",
                    "      | it",
                    "big   | 1234567890123",
                    "t     | x",
                ],
            ),
            (  # a word longer than the line: cut into pieces
                12,
                [
                    "-[ RECORD 1 ]-",
                    "about | a ra",
                    *[f"      | {p}" for p in ("ther", "long", "desc", "ript", "ion", "of", "it")],
                    "big   | 1234567890123",
                    "t     | x",
                ],
            ),
        ):
            with (
                self.subTest(columns=columns),
                mock.patch.dict(os.environ, {"COLUMNS": str(columns)}),
            ):
                status, out, err = self.run_main("--output", "table", "query", sql)
                self.assertEqual((status, out.splitlines()), (0, [*expected, "(1 row)"]), err)


class DownloadCommandTests(StandInTestCase):
    """The download side of the command line as issues 30 and 32 found it (the contract's rules in
    "The third review" and "The first hour, third pass")."""

    def cli_process(self, *argv: str, cwd: Path = ROOT, **popen: Any) -> subprocess.Popen[bytes]:
        """``python -m dataset_client ARGV`` started in ``cwd``, as run_process runs it."""
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        environment["PYTHONPATH"] = str(ROOT)
        command = [sys.executable, "-m", "dataset_client", *argv]
        process = subprocess.Popen(command, env=environment, cwd=cwd, **popen)
        self.addCleanup(process.wait, 10)
        self.addCleanup(process.kill)
        return process

    def test_a_signed_url_s_credentials_show_nowhere_on_stderr(self) -> None:
        """-v lines, the summary and errors redact a presigned URL's credentials; the file is still
        named after its path, and the request sends them unchanged."""
        self.server.default = serve_file(DATA)
        url = f"{self.server.url}/bucket/exp.parquet?X-Amz-Expires=60&{SIGNED_QUERY}"
        directory = self.tmp()
        status, out, err = self.run_main(
            "-v", "download", url, str(directory), key=None, base_url=""
        )
        self.assertEqual((status, out, signed_values_in([err])), (0, "", []))
        self.assertIn(f"/bucket/exp.parquet?X-Amz-Expires=60&{SIGNED_SHOWN}: 200 OK", err)
        self.assertEqual((directory / "exp.parquet").read_bytes(), DATA)
        self.assertTrue(self.requests[-1].path.endswith(SIGNED_QUERY), self.requests[-1].path)
        self.server.default = reply(404, b"NoSuchKey", content_type="text/plain")
        status, out, err = self.run_main("download", url, str(self.tmp()), key=None, base_url="")
        self.assertEqual((status, signed_values_in([out, err])), (1, []))
        self.assertIn(SIGNED_SHOWN, err)
        named = f"{self.server.url}/files/{KEY}.csv?{SIGNED_QUERY}"  # a name the CLI refuses, saying why
        status, out, err = self.run_main("download", named, key=KEY, base_url=self.server.url)
        self.assertEqual((status, signed_values_in([out, err])), (1, []))
        self.assertIn(f"/files/<redacted>.csv?{SIGNED_SHOWN} holds a secret", err)

    def test_a_server_never_names_stdout(self) -> None:
        self.server.default = serve_file(DATA)
        argv = [
            "--base-url",
            self.server.url,
            "--output",
            "json",
            "export",
            "trades",
            "--symbols",
            "V",
        ]
        argv += ["--start", "2024-01-02", "--end", "2024-01-03", "--download"]
        for name in ("%2D", "-", "%2d", ".", "%2E%2E", ""):
            export = {
                "id": "exp_1",
                "rows": 1,
                "download_url": f"/files/{name}",
                "sha256": DATA_SHA,
            }
            self.script(reply(201, export))
            directory = self.tmp()
            with self.subTest(name=name):
                if name == "%2D":  # a real process: its stdout, a pipe here, gets the export alone
                    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
                    process = self.cli_process(*argv, cwd=directory, **pipes)
                    out, err = (text.decode() for text in process.communicate(timeout=30))
                    status = process.returncode
                else:
                    with contextlib.chdir(directory):
                        status, out, err = self.run_main(*argv, environment={})
                self.assertEqual((status, json.loads(out)), (1, export), "the service's fault")
                self.assertIn(f"a file after the URL path '/files/{name}': give DEST", err)
                self.assertEqual(os.listdir(directory), [])
                self.assertEqual([r.method for r in self.requests], ["POST"], "no GET of the file")
                self.server.requests.clear()
        status, _, err = self.run_main(*argv[:-1], "--download", "-", "-c", environment={})
        self.assertEqual(status, 2, "the user's mistake, not the service's")
        self.assertIn("-c needs a file to continue: not - (stdout)", err)
        self.assertEqual(self.requests, [], "found before the export is made")
        signed = self.server.url + "/files/%2D?X-Amz-Signature=816d"
        status, _, err = self.run_main("download", signed, environment={})
        self.assertEqual(status, 2)
        self.assertNotIn("816d", err, "the URL's query is not its name, and may be a credential")
        self.assertEqual(self.requests, [])

    def test_a_pipe_whose_reader_leaves_early_is_not_a_success(self) -> None:
        self.server.default = serve_file(BIG)
        reads_100000 = "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read(100000))"
        for connections in ("1", "4"):
            with self.subTest(connections=connections):
                argv = [
                    "download",
                    self.server.url + "/files/big",
                    "-",
                    "--connections",
                    connections,
                ]
                writer = self.cli_process(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                assert writer.stdout is not None and writer.stderr is not None
                reader = subprocess.Popen(
                    [sys.executable, "-c", reads_100000],
                    stdin=writer.stdout,
                    stdout=subprocess.PIPE,
                )
                self.addCleanup(reader.kill)
                writer.stdout.close()  # the reader's alone now: its exit closes the pipe
                read, _ = reader.communicate(timeout=30)
                err = writer.stderr.read().decode()
                writer.stderr.close()
                self.assertEqual((reader.returncode, read), (0, BIG[:100000]))
                self.assertIn(writer.wait(30), (1, -signal.SIGPIPE), err)
                if writer.returncode == 1:  # what the reader took at least, and its pipe held
                    said = r"^dataset-client: error: stdout's reader went away after"
                    said += r" ([\d.]+) ([KM])iB of 8\.0 MiB was written: the file is incomplete\n"
                    found = re.fullmatch(said, err)
                    assert found is not None, err
                    written = float(found[1]) * 1024 ** " KM".index(found[2])
                    self.assertGreaterEqual(written, 100000 - 52)
                self.assertIn("GET", [r.method for r in self.requests])

    def test_numbers_of_any_size_are_usage_errors_naming_the_option(self) -> None:
        huge = "9" * 400
        for option in (
            "--retries",
            "--connections",
            "--timeout",
            "--max-time",
            "--limit-rate",
            "--speed-limit",
        ):
            for value in (huge, "9" * 5000):
                with self.subTest(option=option, digits=len(value)):
                    status, out, err = self.run_main("download", "/x", "out", option, value)
                    self.assertEqual((status, out), (2, ""), err)
                    self.assertRegex(
                        err.splitlines()[-1],
                        rf"^dataset-client download: error: argument {option}: ",
                    )
                    self.assertNotIn("Error", err)
                    self.assertLess(len(err.splitlines()[-1]), 160, "the value shown cut")
        self.assertEqual(self.requests, [], "nothing sent")

    def test_limit_rate_below_speed_limit_is_refused_before_any_request(self) -> None:
        url = self.server.url + "/files/x"
        export = [
            *EXPORT_V,
        ]
        for argv in (
            ["download", url, "out", "--limit-rate", "50K", "--speed-limit", "100K"],
            [*export, "--speed-limit", "100K", "--download", "--limit-rate", "50K"],
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv, base_url=self.server.url)
                self.assertEqual((status, out), (2, ""))
                self.assertEqual(
                    err.splitlines()[-1],
                    f"dataset-client {argv[0]}: error: --limit-rate 50.0 KiB/s is below"
                    " --speed-limit 100.0 KiB/s: every connection would stall; raise --limit-rate"
                    " or lower --speed-limit",
                )
        rates = ["--limit-rate", "150K", "--speed-limit", "100K", "--connections", "2"]
        status, _, err = self.run_main("download", url, "out", *rates)
        self.assertEqual(status, 2)
        self.assertTrue(
            err.endswith(
                "error: --limit-rate 150.0 KiB/s is below --speed-limit 100.0 KiB/s times"
                " --connections 2: every connection would stall; raise --limit-rate or lower"
                " --speed-limit or --connections\n"
            ),
            err,
        )
        self.assertEqual(self.requests, [], "nothing sent")
        called: list[dict[str, object]] = []
        with mock.patch.object(dc.DatasetClient, "download", lambda *_, **kw: called.append(kw)):
            for limit, floor, status in (("0", "1K", 0), ("200K", "100K", 0), ("100K", "100K", 2)):
                argv = ["download", url, str(self.tmp() / "x"), "--connections", "2"]
                argv += ["--limit-rate", limit, "--speed-limit", floor]
                self.assertEqual(self.run_main(*argv, environment={})[0], status)
        self.assertEqual([options.get("max_rate") for options in called], [None, 204_800])

    def test_the_summary_of_a_resumed_download_tells_this_run(self) -> None:
        directory = self.tmp()
        url = self.server.url + "/files/x"
        self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}), serve_file(DATA))
        target = str(directory / "out.bin")
        status, _, err = self.run_main("--retries", "0", "download", url, target, "-c")
        self.assertEqual(status, 3, err)
        clock = itertools.chain([100.0], itertools.repeat(102.0))  # it starts; 2 s later, all else
        with mock.patch.object(cli, "time", mock.Mock(monotonic=lambda: next(clock))):
            status, _, err = self.run_main("download", url, target, "-c")
        self.assertEqual(status, 0, err)
        self.assertEqual((directory / "out.bin").read_bytes(), DATA)
        rate = dc._size((len(DATA) - 1_500_000) / 2)
        self.assertEqual(
            err.splitlines(),
            [
                "dataset-client: resuming: 1.4 MiB of 3.0 MiB already downloaded",
                f"downloaded {target}: 3.0 MiB (1.4 MiB already there), 2.0 s, {rate}/s",
            ],
        )
        self.assertEqual(self.requests[-1].headers["Range"], "bytes=1500000-")

    def test_max_time_says_how_long_it_ran_and_how_much_of_how_much_arrived(self) -> None:
        self.script(first_bytes_then_stall(DATA, 1_500_000))
        target = self.tmp() / "out.bin"
        started = time.monotonic()
        argv = ["--max-time", "1", "download", self.server.url + "/x", str(target)]
        status, _, err = self.run_main(*argv)
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(status, 3, err)
        self.assertRegex(
            err,
            rf"^dataset-client: error: GET {re.escape(self.server.url)}/x: --max-time 1 was reached"
            r" \(after 1 attempt\); it ran [\d.]+ s and received 1\.4 MiB of 3\.0 MiB; with -c,",
        )
        self.assertNotIn("raise --max-time", err)
        self.assertFalse(target.exists())

    def test_a_digest_verified_after_a_redirect_to_plain_http_says_so(self) -> None:
        tls = self.start_server(server_tls_context())
        plain = self.server.url + "/files/x"
        self.server.default = serve_file(DATA, digests=True)
        tls.default = reply(302, b"", {"Location": plain})
        for source, sha256, checked in (
            (tls.url + "/x", [], "verified by the server's Repr-Digest \\(sha-256\\)"),
            (tls.url + "/x", ["--sha256", DATA_SHA], "sha256 verified"),
            (plain, ["--sha256", DATA_SHA], "sha256 verified"),
        ):
            with self.subTest(source=source, sha256=sha256):
                target = self.tmp() / "out.bin"
                status, _, err = self.run_main(
                    "--ca-bundle", CA_FILE, "download", source, str(target), *sha256, environment={}
                )
                self.assertEqual((status, target.read_bytes()), (0, DATA), err)
                over_http = " \\(the bytes came over plain HTTP: a redirect left https://\\)"
                summary = rf"^downloaded .*: 3\.0 MiB, [\d.]+ s, .*/s, {checked}"
                self.assertRegex(err, summary + (over_http if source != plain else "") + "\n$")

    def test_a_retry_on_a_terminal_keeps_its_reason_and_shortens_the_url(self) -> None:
        long_url = "http://127.0.0.1:8080/files/" + "a-long-directory-name/" * 4 + "big.bin"
        reason = "connection closed after 1.0 MiB of 8.0 MiB"
        closed = dc.IncompleteResponseError(f"GET {long_url}: {reason}")
        unavailable = dc.ServiceError(503, "Service Unavailable", "GET", long_url)
        new_wording, old_wording = (
            "retrying in %.1f s (%s): %s",
            "retrying %s %s in %.2f s (attempt %d failed: %s)",
        )
        around = len(f"dataset-client: retrying in 1.0 s (2 attempts left): GET : {reason}")
        shortened = 149 - around
        for columns, message, args, shown in (
            (240, new_wording, (1.0, "2 attempts left", closed), f"GET {long_url}: {reason}"),
            (
                150,
                new_wording,
                (1.0, "2 attempts left", closed),
                f"GET {long_url[: shortened - 1]}\u2026: {reason}",
            ),
            (100, new_wording, (1.0, "2 attempts left", closed), reason),
            (80, new_wording, (1.0, "2 attempts left", unavailable), "503 Service Unavailable"),
            (100, old_wording, ("GET", long_url, 0.25, 1, closed), reason),
            (80, new_wording, (1.0, "2 attempts left", closed), reason),
            (40, new_wording, (1.0, "2 attempts left", closed), "c\u2026"),
        ):
            if message == old_wording:
                shown = f"dataset-client: retrying in 0.25 s (attempt 1 failed: {shown})"
            else:
                shown = f"dataset-client: retrying in 1.0 s (2 attempts left): {shown}"
            if len(shown) >= columns:  # the program's name goes before the reason does
                shown = shown.removeprefix("dataset-client: ")
            with self.subTest(columns=columns, message=message, shown=shown):
                record = logging.LogRecord("dc", logging.WARNING, "", 1, message, args, None)
                for verbose in (False, True):
                    stderr = cli._Stderr(quiet=False, verbose=verbose)
                    stderr.stream, stderr.is_terminal = TerminalOutput(), True
                    with mock.patch.dict(os.environ, {"COLUMNS": str(columns)}):
                        stderr.log(record)
                    if verbose:  # never cut
                        whole = f"\r\x1b[Kdataset-client: {message % args}\n"
                        self.assertEqual(stderr.stream.getvalue(), whole)
                    else:
                        self.assertEqual(stderr.stream.getvalue(), f"\r{shown}\x1b[K")
                        self.assertLess(len(shown), columns)

    def test_a_retry_on_a_pseudo_terminal_fits_and_keeps_its_reason(self) -> None:
        path = "/files/" + "a-long-directory-name/" * 4 + "big.bin"
        for columns in (80, 40):
            self.script(cut(BIG, 1024 * 1024, {"ETag": '"v1"'}), serve_file(BIG))
            target = self.tmp() / "big.bin"
            with self.subTest(columns=columns):
                argv = ["download", self.server.url + path, str(target)]
                status, drawn = self.run_in_terminal(argv, columns)
                self.assertEqual((status, target.read_bytes() == BIG), (0, True), drawn)
                text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", drawn)
                frames = [piece for row in text.split("\r\n") for piece in row.split("\r") if piece]
                retries = [frame for frame in frames if "retrying" in frame]  # also under a message
                self.assertEqual(len(set(retries)), 1, frames)
                status_lines = [frame for frame in frames if "retrying" in frame or "%" in frame]
                self.assertTrue(all(len(frame) < columns for frame in status_lines), frames)
                self.assertNotIn(path, retries[0])
                if columns == 80:  # the whole reason with the library's wording of issue 30
                    self.assertIn("connection closed after 1.0 MiB of ", retries[0])


class TableLayoutTests(unittest.TestCase):
    """_table_lines: what gives way when a table must fit the terminal, and what it costs."""

    def test_nested_values_give_way_before_text(self) -> None:
        description = "Daily open, high, low, close and volume per symbol, on weekdays."
        nested = [{"name": "date", "type": "DATE"}, {"name": "symbol", "type": "TEXT"}]
        rows = [["daily_bars", description, nested, ["AAPL", "AMZN", "GOOG"], 6264]]
        lines = cli._table_lines(["name", "description", "columns", "symbols", "rows"], rows, 80)
        self.assertTrue(all(len(line) <= 80 for line in lines), lines)
        self.assertEqual(lines[-1], "(1 row)")
        cells = re.split(r"  +", lines[2])
        self.assertEqual(cells[0], "daily_bars")
        self.assertEqual(cells[-1], "6264", "the number whole")
        shown, columns, symbols = cells[1:4]
        self.assertEqual(
            len(columns), cli._NARROWEST_TEXT, "nested values narrowed to the least a column keeps"
        )
        self.assertEqual((len(symbols), symbols[-1]), (cli._NARROWEST_TEXT, "…"))
        self.assertTrue(shown.endswith("…") and description.startswith(shown[:-1]), shown)
        self.assertEqual(
            len(shown), 80 - 2 * 4 - len("daily_bars") - 2 * 8 - 4, "the text took the rest"
        )
        nested_only = cli._table_lines(
            ["name", "columns"], [["daily_bars", nested]], 40
        )  # no text to give way
        self.assertEqual(nested_only[2], 'daily_bars  [{"name":"date","type":"DAT…')

    def test_records_keep_names_whole_and_wrap_long_values(self) -> None:
        text = "A long description that cannot fit on one line of a narrow terminal at all." * 2
        wide = "数" * 30  # two columns each
        rows = [[123456789012345, text, wide, 7, 123456789012345]]
        lines = cli._table_lines(
            ["opening_balance", "description", "wide", "n", "closing_balance"], rows, 40
        )
        self.assertEqual(lines[0], "-[ RECORD 1 ]-")
        self.assertEqual(
            lines[1], "opening_balance | 123456789012345", "a name that fits is never cut"
        )
        self.assertTrue(all(cli._text_width(line) <= 40 for line in lines), lines)
        start = lines.index("description     | A long description")  # " that" would pass 40 columns
        continued = list(
            itertools.takewhile(lambda line: line.startswith(" " * 15 + " | "), lines[start + 1 :])
        )
        pieces = [line[18:] for line in [lines[start], *continued]]
        self.assertEqual(" ".join(pieces), text, "wrapped at words, never cut")
        self.assertEqual(len(continued), 7)
        start += 1 + len(continued)
        self.assertEqual(lines[start], "wide            | " + "数" * 11)
        self.assertEqual(lines[start + 2], " " * 15 + " | " + "数" * 8)
        self.assertEqual(
            lines[start + 3 :],
            ["n               | 7", "closing_balance | 123456789012345", "(1 row)"],
        )
        long_name = cli._table_lines(
            ["a_column_name_longer_than_half_the_width", "n"], [["x", 10**31]], 40
        )
        self.assertEqual(
            long_name[1], "a_column_name_longe… | x", "names take at most half the width"
        )

    def test_records_wrap_at_words(self) -> None:
        text = "Daily open, high, low, close and volume per symbol, on weekdays."
        lines = cli._table_lines(["description", "n"], [[text, 10**40]], 40)  # the number: records
        self.assertEqual(
            lines[1:4],
            [
                "description | Daily open, high, low,",
                "            | close and volume per",
                "            | symbol, on weekdays.",
            ],
        )
        self.assertEqual(cli._wrapped("a bb ccc", 3), ["a", "bb", "ccc"])
        self.assertEqual(cli._wrapped("a  b", 1), ["a", " ", "b"], "a run of spaces: one goes")
        long_word = "x" * 9 + " y"
        self.assertEqual(cli._wrapped("ab " + long_word, 4), ["ab x", "xxxx", "xxxx", "y"], "cut")
        self.assertEqual(
            cli._wrapped("数 数 数数", 5), ["数 数", "数数"], "in columns: wide ones too"
        )
        symbols = ["AAPL", "AMZN", "GOOG", "JNJ", "JPM", "META"]
        lines = cli._table_lines(["symbols", "n"], [[symbols, 10**40]], 40)  # nested, in records
        wrapped = ['symbols | ["AAPL", "AMZN", "GOOG",', '        | "JNJ", "JPM", "META"]']
        self.assertEqual(lines[1:3], wrapped, "JSON with spaces, to wrap at words too")

    def test_fitting_is_linear_in_the_size_of_the_result(self) -> None:
        columns = [f"c{index}" for index in range(20)]
        rows = [["x" * 100_000 for _ in columns], [str(index) * 9 for index in range(20)]]
        budget = [
            20_000
        ]  # calls made in the module: cutting the widest column one at a time made millions

        def count(frame: Any, event: str, arg: object) -> None:
            if frame.f_globals is vars(dc):
                budget[0] -= 1
                if budget[0] < 0:
                    raise AssertionError("fitting the table made more calls than its 40 cells need")

        previous = (
            sys.getprofile()
        )  # a profile function, not a trace one: coverage.py traces the suite
        sys.setprofile(count)
        try:
            lines = cli._table_lines(columns, rows, 400)
        finally:
            sys.setprofile(previous)
        self.assertEqual(len(lines), 5, [line[:80] for line in lines])
        self.assertTrue(all(len(line) <= 400 for line in lines), [len(line) for line in lines])
        self.assertEqual(len(lines[2]), 400)
        self.assertEqual(
            {(len(cell), cell[-1]) for cell in lines[2].split()}, {(18, "…"), (19, "…")}
        )  # level
        self.assertEqual(lines[3].split(), [str(index) * 9 for index in range(20)])


class CompletionTests(unittest.TestCase):
    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.directory = Path(directory.name)
        for name in ("out.bin", "other.csv", "z.txt"):
            (self.directory / name).touch()

    def script(self, shell: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "dataset_client", "completion", shell],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        self.assertEqual(result.stderr, b"")
        return result.stdout.decode()

    def run_shell(self, shell: list[str], lines: list[str], name: str) -> str:
        """``lines`` run by ``shell`` (the code its last argument) among the test's files, with ``name``'s
        completion script in $SCRIPT; what it printed, once it ended well and said nothing on stderr."""
        result = subprocess.run(
            [*shell, "\n".join(lines)],
            env={"PATH": os.environ["PATH"], "SCRIPT": self.script(name), **NO_BYTECODE_HERE},
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=False,
        )
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        return result.stdout

    def test_bash_completes_commands_options_values_and_file_names(self) -> None:
        lines = ['eval "$SCRIPT"', "complete -p dataset-client"]
        for typed, _ in COMPLETION_CASES:
            words = " ".join(shlex.quote(word) for word in ["dataset-client", *typed])
            lines.append(
                f"COMP_WORDS=({words}); COMP_CWORD={len(typed)}; COMPREPLY=(); _dataset_client"
            )
            lines.append('printf "%s\\n" "${COMPREPLY[@]}" | sort; echo ===')
        stdout = self.run_shell(["bash", "--norc", "--noprofile", "-c"], lines, "bash")
        registered, *offered = (
            stdout.split("\n", 1)[0],
            *stdout.split("\n", 1)[1].split("===\n")[:-1],
        )
        self.assertEqual(
            registered, "complete -o bashdefault -o filenames -F _dataset_client dataset-client"
        )
        for (typed, expected), got in zip(COMPLETION_CASES, offered, strict=True):
            with self.subTest(typed=typed):
                self.assertEqual(got.split(), sorted(expected))

    @unittest.skipUnless(shutil.which("zsh"), "zsh is not installed here (apt-get install zsh)")
    def test_zsh_completes_commands_options_values_and_file_names(self) -> None:
        # Outside an interactive shell's completion system: compadd and _files stood in for, so that what the
        # function offers is printed (the file names themselves are zsh's _files at the terminal).
        lines = [
            'compadd() { [[ $1 == -- ]] && shift; print -l -- "$@" }',
            "_files() { print -- FILES }",
        ]
        lines += ["compdef() { print -- compdef $@ }", 'eval "$SCRIPT"']
        for typed, _ in COMPLETION_CASES:
            words = " ".join(shlex.quote(word) for word in ["dataset-client", *typed])
            lines.append(
                f"words=({words}); CURRENT={len(typed) + 1}; PREFIX={shlex.quote(typed[-1])}"
            )
            lines.append("_dataset_client | sort; print -- '==='")
        registered, rest = self.run_shell(["zsh", "-f", "-c"], lines, "zsh").split("\n", 1)
        self.assertEqual(registered, "compdef _dataset_client dataset-client")
        for (typed, expected), got in zip(COMPLETION_CASES, rest.split("===\n")[:-1], strict=True):
            with self.subTest(typed=typed):
                if typed[0] == "download" and not typed[-1].startswith("-"):
                    self.assertEqual(got.split(), ["FILES"])
                else:
                    offered = [
                        word for word in got.split() if word.startswith(typed[-1])
                    ]  # zsh filters by PREFIX
                    self.assertEqual(offered, sorted(expected))

    def shell_at_a_terminal(
        self, shell: list[str], environment: dict[str, str]
    ) -> tuple[Callable[[bytes, bytes], None], subprocess.Popen[bytes]]:
        """``shell`` started on a 40-column pty in self.directory, and a function that types keys and waits
        (at most 10 s) until what the screen shows holds what is wanted."""
        fcntl, pty, termios = (import_or_skip(self, name) for name in ("fcntl", "pty", "termios"))
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
        process = (
            subprocess.Popen(  # its own session: the pty becomes its terminal, with job control
                shell,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=environment,
                cwd=self.directory,
                start_new_session=True,
            )
        )
        self.addCleanup(lambda: (process.kill(), process.wait()))  # type: ignore[func-returns-value]
        os.close(slave)
        self.addCleanup(os.close, master)
        screen = b""

        def type_until(keys: bytes, wanted: bytes) -> None:
            nonlocal screen
            os.write(master, keys)
            deadline = time.monotonic() + 10
            while wanted not in screen and time.monotonic() < deadline:
                if select.select([master], [], [], 0.5)[0]:
                    screen += os.read(master, 4096)
            self.assertIn(wanted, screen)

        return type_until, process

    def complete_at_a_terminal(self, shell: list[str], setup: bytes) -> None:
        """In ``shell`` on a 40-column pty: ``setup``, then Tab after each word typed; the line run must be whole."""
        environment = {
            "PATH": os.environ["PATH"],
            "TERM": "dumb",
            "PS1": "$ ",
            "HOME": str(self.directory),
            **NO_BYTECODE_HERE,
        }
        type_until, process = self.shell_at_a_terminal(
            shell, environment
        )  # in self.directory: out.bin, other.csv, z.txt
        type_until(setup + b"; echo READY\n", b"READY\r\n")
        # Shows the line as completed. DEFI''NED: the typed line's own echo must not pass for the output.
        type_until(
            b"dataset-client() { printf '<%s>' \"$@\"; echo; }; echo DEFI''NED\n", b"DEFINED\r\n"
        )
        type_until(
            b"dataset-client --output cs\tcomp\tz\t\n", b"<--output><csv><completion><zsh>\r\n"
        )
        type_until(
            b"dataset-client download http://h/f z\t\n", b"<download><http://h/f><z.txt>\r\n"
        )  # DEST
        type_until(b"exit\n", b"exit")
        self.assertEqual(process.wait(10), 0)

    def test_bash_at_a_terminal_completes_with_tab(self) -> None:
        script = f'eval "$({COPIED_FILE} completion bash)"'
        self.complete_at_a_terminal(["bash", "--norc", "--noprofile", "-i"], script.encode())

    @unittest.skipUnless(shutil.which("zsh"), "zsh is not installed here (apt-get install zsh)")
    def test_zsh_at_a_terminal_completes_with_tab(self) -> None:
        script = f'eval "$({COPIED_FILE} completion zsh)"'
        setup = b"autoload -Uz compinit && compinit -u && " + script.encode()
        self.complete_at_a_terminal(["zsh", "-f", "-i"], setup)

    def test_profiles_are_read_from_a_regular_file_only_never_a_fifo_the_shell_would_wait_on(
        self,
    ) -> None:
        config = self.directory / "config.toml"
        lines = [cli._PROFILES_FUNCTION, "_dataset_client_profiles; echo END"]
        for make in (
            lambda: config.write_text("[staging]\n"),
            lambda: (config.unlink(), os.mkfifo(config)),
        ):
            make()
            environment = {"PATH": os.environ["PATH"], "DATASET_CLIENT_CONFIG": str(config)}
            environment |= NO_BYTECODE_HERE
            result = subprocess.run(
                ["bash", "-c", "\n".join(lines)], env=environment, capture_output=True, timeout=5
            )
            expected = b"END\n" if stat.S_ISFIFO(config.stat().st_mode) else b"staging\nEND\n"
            self.assertEqual((result.stdout, result.stderr), (expected, b""))

    def complete_under_the_alias(self, shell: list[str], setup: bytes) -> None:
        """In ``shell`` on a 40-column pty, with the README's alias: ``setup``, then Tab after words typed;
        each line completed is shown as its words (Ctrl-A puts a printf before it), not run."""
        names = [
            "my file.csv",
            "[a]*.csv",
            ".env",
            ".out.bin.part",
            ".out.bin.part.json",
            ".out.bin.part.lock",
        ]
        names += [
            ".out.bin.0123456789ab.part",
            ".out.bin.0123456789ab.new",
            ".out.bin.part.json.0a1b2c3d.tmp",
        ]
        for name in names:
            (self.directory / name).touch()
        (self.directory / "xdg" / "dataset-client").mkdir(parents=True)
        profiles = '[default]\nbase_url = "http://x"\n  [staging]  # theirs\n[default.sub]\n'
        (self.directory / "xdg" / "dataset-client" / "config.toml").write_text(profiles)
        programs = (
            self.directory / "bin"
        )  # python3 is this Python, as the README's alias runs it (a chroot has none)
        programs.mkdir(exist_ok=True)
        (programs / "python3").symlink_to(sys.executable)
        environment = {
            "PATH": f"{programs}{os.pathsep}{os.environ['PATH']}",
            **NO_BYTECODE_HERE,
            "TERM": "dumb",
            "PS1": "$ ",
            "HOME": str(self.directory),
            "XDG_CONFIG_HOME": str(self.directory / "xdg"),
        }
        type_until, process = self.shell_at_a_terminal(shell, environment)
        alias = f"cd {shlex.quote(str(ROOT))} && {readme_alias()} && cd -".encode()  # made there
        type_until(alias + b"\n" + setup + b"; echo READY\n", b"READY\r\n")
        show = b"\x01printf '<%s>' \n"  # the typed line's echo has no "><": only printf's output can match
        type_until(b"dataset-client --output cs\t" + show, b"<dataset-client><--output><csv>")
        type_until(
            b"dataset-client download http://h/f my\t" + show,
            b"<download><http://h/f><my file.csv>",
        )
        type_until(
            b"dataset-client download http://h/f \\[\t" + show, b"<download><http://h/f><[a]*.csv>"
        )
        type_until(
            b"dataset-client download http://h/f .o\t" + show, b"<download><http://h/f><.o>"
        )  # none
        type_until(
            b"dataset-client download http://h/f .e\t" + show, b"<download><http://h/f><.env>"
        )
        type_until(b"dataset-client --profile st\t" + show, b"<dataset-client><--profile><staging>")
        type_until(b"exit\n", b"exit")
        self.assertEqual(process.wait(10), 0)

    def test_bash_completes_under_the_alias_quoted_without_partial_files(self) -> None:
        setup = b'eval "$(dataset-client completion bash)"'
        self.complete_under_the_alias(["bash", "--norc", "--noprofile", "-i"], setup)

    @unittest.skipUnless(shutil.which("zsh"), "zsh is not installed here (apt-get install zsh)")
    def test_zsh_completes_under_the_alias_quoted_without_partial_files(self) -> None:
        setup = b'autoload -Uz compinit && compinit -u && eval "$(dataset-client completion zsh)"'
        self.complete_under_the_alias(["zsh", "-f", "-i"], setup)


class TwoFilesTests(ServerTestCase):
    """The library and the command line, two files: five ways in behave the same; a lone library says
    where the command line is; the library is compiled once a run and imports nothing only the CLI needs."""

    def copied(self, *names: str) -> Path:
        directory = self.tmp() / "vendored"
        directory.mkdir()
        for name in names:
            shutil.copy(ROOT / name, directory / name)
        return directory

    def run_python(self, *argv: str, cwd: Path, path: Path | None = None) -> tuple[int, str, str]:
        unset = ("DATASET_CLIENT_", "PYTHONPATH", "COVERAGE_")  # COVERAGE_: copies, not measured
        environment = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
        environment |= {"DATASET_CLIENT_BASE_URL": self.server.url, "HOME": str(self.tmp())}
        if path is not None:
            environment["PYTHONPATH"] = str(path)
        done = subprocess.run(
            [sys.executable, *argv], cwd=cwd, env=environment, capture_output=True, timeout=60
        )
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def test_five_ways_in_give_the_same_bytes_and_status(self) -> None:
        pair, elsewhere = self.copied("dataset_client.py", "dataset_client_cli.py"), self.tmp()
        installed = "import sys, dataset_client_cli; sys.argv[0] = 'dataset-client'; sys.exit(dataset_client_cli.main())"
        library, command_line = str(pair / "dataset_client.py"), str(pair / "dataset_client_cli.py")
        beside, away = {"cwd": pair}, {"cwd": elsewhere}
        ways: dict[str, tuple[list[str], dict[str, Any]]] = {
            "python -m dataset_client": (["-m", "dataset_client"], beside),
            "python path/dataset_client.py": ([library], away),
            "python -I path/dataset_client.py": (["-I", library], away),
            "python -m dataset_client_cli": (["-m", "dataset_client_cli"], beside),
            "python path/dataset_client_cli.py": ([command_line], away),
            "python -I path/dataset_client_cli.py": (["-I", command_line], away),
            "the installed script": (["-c", installed], {"cwd": elsewhere, "path": pair}),
        }
        commands = (("datasets",), ("--outptu", "csv", "datasets"))
        self.server.default = reply(body=[{"name": "daily_bars"}])
        # A usage line names the program: the ways whose argv[0] is a file name show it; -m to compare.
        named = (
            "python -m dataset_client",
            "python path/dataset_client.py",
            "python path/dataset_client_cli.py",
        )
        runs = [(commands[0], way) for way in ways] + [(commands[1], way) for way in named]
        self.run_python(
            "-c", "import dataset_client_cli", cwd=pair
        )  # compiled once, into the tests' cache
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # each a Python of its own
            done = pool.map(
                lambda run: self.run_python(*ways[run[1]][0], *run[0], **ways[run[1]][1]), runs
            )
            outcomes = dict(zip(runs, done, strict=True))
        for argv in commands:
            with self.subTest(argv=argv):
                seen = {way: outcome for (asked, way), outcome in outcomes.items() if asked == argv}
                first = seen["python -m dataset_client"]
                self.assertEqual(
                    {way: outcome for way, outcome in seen.items() if outcome != first}, {}
                )
                status, out, err = first
                if argv == ("datasets",):
                    self.assertEqual((status, err), (0, ""))
                    self.assertEqual(json.loads(out), [{"name": "daily_bars"}])
                else:
                    self.assertEqual((status, out), (2, ""))
                    self.assertTrue(err.startswith("usage: dataset-client "), err)
                    self.assertIn("unknown option '--outptu' (did you mean '--output'?)", err)

    def test_a_lone_library_says_where_to_get_the_command_line(self) -> None:
        lone = self.copied("dataset_client.py")
        expected = (
            "dataset-client: error: the command line is dataset_client_cli.py: copy it beside dataset_client.py,"
            " or pip install dataset-client\n"
        )
        for argv in (
            ["-I", str(lone / "dataset_client.py"), "datasets"],
            ["-m", "dataset_client", "datasets"],
        ):
            with self.subTest(argv=argv):
                self.assertEqual(self.run_python(*argv, cwd=lone), (2, "", expected))
        imported = self.run_python(
            "-I", "-c", "import sys; sys.path.insert(0, '.'); import dataset_client", cwd=lone
        )
        self.assertEqual(imported, (0, "", ""))

    def test_a_lone_command_line_says_it_needs_the_library(self) -> None:
        lone = self.copied("dataset_client_cli.py")
        status, out, err = self.run_python(
            "-I", str(lone / "dataset_client_cli.py"), "datasets", cwd=lone
        )
        self.assertEqual((status, out), (2, ""))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("needs dataset_client.py beside it", err)

    def test_the_library_is_compiled_once_a_run(self) -> None:
        pair = self.copied("dataset_client.py", "dataset_client_cli.py")
        for argv in (
            [str(pair / "dataset_client.py")],
            ["-m", "dataset_client"],
            [str(pair / "dataset_client_cli.py")],
        ):
            with self.subTest(argv=argv):
                status, _, err = self.run_python("-X", "importtime", *argv, "--version", cwd=pair)
                imported = [
                    line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if "|" in line
                ]
                self.assertEqual(status, 0)
                self.assertNotIn(
                    "dataset_client", imported
                )  # run as __main__, or loaded from beside: once

    def test_the_library_imports_nothing_only_the_command_line_needs(self) -> None:
        names = (
            "argparse",
            "subprocess",
            "difflib",
            "csv",
            "shlex",
            "tomllib",
            "dataset_client_cli",
        )
        code = (  # what importing the library adds (coverage.py, measuring this, imports some of them first)
            f"import sys; before = set(sys.modules); import dataset_client; "
            f"print([n for n in {names!r} if n in set(sys.modules) - before])"
        )
        self.assertEqual(self.run_python("-c", code, cwd=ROOT), (0, "[]\n", ""))


class FourthReviewCommandLineTests(StandInTestCase):
    """An adversarial review of the command line after issues 30-32: what a hostile server, an odd
    environment and a new user at a terminal still met."""

    def test_a_retry_leaves_no_status_line_under_the_result(self) -> None:
        busy = reply(503, {"error": "busy"}, {"Retry-After": "0"})
        for columns in (80, 40):
            self.script(busy, reply(body=[{"name": "daily_bars"}]))
            with self.subTest(columns=columns):
                argv = ["--base-url", self.server.url + "/api", "datasets"]
                status, drawn = self.run_in_terminal(argv, columns)
                self.assertEqual(status, 0, drawn)
                self.assertIn("retrying in 0.0 s (2 attempts left)", drawn, "said while it waited")
                shown = ["name", "----------", "daily_bars", "(1 row)", ""]
                self.assertEqual(on_screen(drawn), shown)
        self.assertEqual([request.path for request in self.requests], ["/api/datasets"] * 4)

    def test_an_exports_sha256_that_is_no_digest_is_not_a_usage_error(self) -> None:
        url = self.server.url + "/files/bars.csv"
        for digest in ("g" * 64, " " + DATA_SHA[1:]):
            export = {"id": "exp_1", "rows": 1, "sha256": digest, "download_url": url}
            self.script(reply(body=export), serve_file(DATA))
            target = self.tmp() / "bars.csv"
            argv = ["export", "daily_bars", "--symbols", "V", "--start", "2024-01-02"]
            with self.subTest(digest=digest):
                status, _, err = self.run_main(
                    *argv,
                    "--end",
                    "2024-01-02",
                    "--download",
                    str(target),
                    environment={"DATASET_CLIENT_BASE_URL": self.server.url},
                )
                self.assertEqual((status, target.read_bytes()), (0, DATA), err)
                self.assertNotIn("--sha256", err)
                self.assertNotIn("verified", err, "nothing was checked")
        self.assertEqual([r.path for r in self.requests], ["/exports", "/files/bars.csv"] * 2)

    def run_closed(self, closed: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """The command run with a standard descriptor closed (``closed``: ``>&-`` or ``2>&-``)."""
        return subprocess.run(
            [
                "sh",
                "-c",
                f'exec "$@" {closed}',
                "sh",
                sys.executable,
                "-m",
                "dataset_client",
                *argv,
            ],
            env={**os.environ, **self.cli_environment(), "HOME": str(self.tmp())},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def test_a_closed_stdout_or_stderr_is_no_traceback(self) -> None:
        for closed in (">&-", "2>&-"):
            self.script(serve_file(DATA))
            target = self.tmp() / "data.bin"
            with self.subTest(closed=closed):
                done = self.run_closed(closed, "download", self.server.url + "/d.bin", str(target))
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(target.read_bytes(), DATA)
        for argv in (["datasets"], ["download", self.server.url + "/d.bin", "-"]):
            self.script(serve_file(DATA))
            with self.subTest(argv=argv):
                done = self.run_closed(">&-", *argv)
                self.assertEqual(done.returncode, 1, done.stderr)
                self.assertRegex(done.stderr, r"^dataset-client: error: cannot write [^\n]*\n$")

    def test_a_reader_gone_before_a_result_is_written_is_exit_0_and_quiet(self) -> None:
        environment = {**os.environ, **self.cli_environment(), "HOME": str(self.tmp())}
        environment.pop("PYTHONUNBUFFERED", None)  # as people have it: stdout buffered
        export = ["export", "daily_bars", "--symbols", "V", "--start", "2024-01-02"]
        for argv in (
            ["datasets"],
            ["--output", "csv", "datasets"],
            ["datasets", "trades"],
            ["--output", "jsonl", *export, "--end", "2024-01-02"],
            ["completion", "bash"],
        ):
            reading, writing = os.pipe()
            os.close(reading)  # as `| true` does: gone before a byte is written
            with self.subTest(argv=argv):
                done = subprocess.run(
                    [sys.executable, "-m", "dataset_client", *argv],
                    env=environment,
                    cwd=ROOT,
                    stdout=writing,
                    stderr=subprocess.PIPE,
                    text=True,
                    timeout=60,
                    check=False,
                )
                os.close(writing)
                self.assertEqual((done.returncode, done.stderr), (0, ""))

    run_on_a_terminal = ScriptedCommandLineTestCase.run_on_a_terminal  # self.server's, at /api

    def test_sigterm_while_paging_takes_the_pager_along(self) -> None:
        rows = [["2024-01-02", "AAPL", 185.64]] * 40
        self.server.default = reply(body={"columns": ["date", "symbol", "close"], "rows": rows})
        started = self.tmp() / "pager.pid"
        # Its pid written once all is read: the command is past starting it, and waits for it.
        pager = {
            "DATASET_CLIENT_PAGER": f"sh -c 'cat > /dev/null; echo $$ > {started}; exec sleep 30'"
        }

        def stop_when_paging() -> None:
            wait_for(lambda: started.exists() and started.read_text().endswith("\n"), 20)
            os.kill(os.getpid(), signal.SIGTERM)  # main() holds SIGTERM while it runs

        stopper = threading.Thread(target=stop_when_paging)
        stopper.start()
        status, _, err = self.run_on_a_terminal(80, "query", "SELECT 1", pager=pager)
        stopper.join(30)
        pid = int(started.read_text())
        self.addCleanup(_kill_if_running, pid)  # not kill(1): Debian's minbase chroot has none
        self.assertEqual((status, err), (143, "dataset-client: error: stopped by SIGTERM\n"))
        with self.assertRaises(ProcessLookupError, msg="the pager outlived the command"):
            os.kill(pid, 0)

    def test_columns_and_lines_of_any_size_or_digit(self) -> None:
        terminal = TerminalOutput()
        for value in ("9" * 400, "99999999", "\u00b2", "\uff18\uff10"):
            with self.subTest(value=value), mock.patch.dict(os.environ, {"COLUMNS": value}):
                self.assertLessEqual(cli._terminal_size(terminal, "columns"), 9999)
                stderr = cli._Stderr(quiet=False, verbose=False)
                stderr.stream, stderr.is_terminal = TerminalOutput(), True
                stderr.status("retrying in 1.0 s (2 attempts left): 503 Service Unavailable")
                self.assertLess(len(stderr.stream.getvalue()), 10_000)

    def test_a_file_name_from_the_url_is_no_option_and_no_blank(self) -> None:
        for name, why in (
            ("-rf", "starts with a dash"),
            ("--help", "starts with a dash"),
            ("%20", "starts or ends with white space"),
            ("bars.csv%20", "starts or ends with white space"),
        ):
            directory = self.tmp()
            with self.subTest(name=name), contextlib.chdir(directory):
                status, out, err = self.run_main("download", f"{self.server.url}/files/{name}")
                self.assertEqual((status, out, list(directory.iterdir())), (2, "", []), err)
                self.assertIn(f"the URL gives {why}: give DEST", err)
        self.assertEqual(self.requests, [])

    def test_invisible_characters_beyond_bidi_are_escaped(self) -> None:
        hidden = "\u00ad\u034f\u115f\u180e\u2061\u2064\u206a\u3164\ufff9\U000e0001\U000e0041"
        table = {"columns": ["name"], "rows": [[f"a{hidden}b"]]}
        self.script(reply(body=table), reply(body=table))
        environment = {"DATASET_CLIENT_BASE_URL": self.server.url}
        status, out, err = self.run_main(
            "query", "SELECT 1", environment=environment, terminal=True
        )
        self.assertEqual((status, err), (0, ""))
        self.assertIn("a\\u00ad\\u034f\\u115f\\u180e\\u2061\\u2064\\u206a\\u3164\\ufff9", out)
        self.assertIn("\\U000e0001\\U000e0041b", out)
        self.assertEqual([c for c in out if c in hidden], [])
        status, out, err = self.run_main(
            "--output", "json", "query", "SELECT 1", environment=environment
        )
        self.assertEqual([c for c in out if c in hidden], [])
        self.assertEqual(json.loads(out), table, "escaped as JSON escapes them")
        for name in ("bars%F3%A0%81%81.csv", "bars%C2%AD.csv"):  # no file is named so
            with self.subTest(name=name), contextlib.chdir(self.tmp()):
                status, _, err = self.run_main("download", f"{self.server.url}/files/{name}")
                self.assertEqual(status, 2, err)
                self.assertIn("gives holds a control character or an invisible one: give DEST", err)
        self.assertEqual(len(self.requests), 2, "the two queries: no download")

    def test_no_such_dataset_names_a_few(self) -> None:
        listing = [{"name": f"dataset_{number:04d}_" + "x" * 200} for number in range(2000)]
        self.script(reply(body=listing))
        environment = {"DATASET_CLIENT_BASE_URL": self.server.url}
        status, out, err = self.run_main("datasets", "nothing_like_it", environment=environment)
        self.assertEqual((status, out, err.count("\n")), (1, "", 1), err[:300])
        self.assertRegex(
            err, r"^dataset-client: error: no dataset 'nothing_like_it'; the datasets: "
        )
        self.assertIn("dataset_0000_", err)
        self.assertLess(len(err), 400)
        self.assertIn("2000 in all", err)


if __name__ == "__main__":
    unittest.main()

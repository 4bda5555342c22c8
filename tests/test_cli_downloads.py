"""The command line's downloads: destinations, stdout and FIFOs, -c and partial files, what a
download says, signals.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from tests.support import (
    BIG,
    CA_FILE,
    DATA,
    DATA_SHA,
    KEY,
    RAW_CONTROL,
    ROOT,
    SIGNED_QUERY,
    SIGNED_SHOWN,
    Handler,
    ScriptedCommandLineTestCase,
    StandInTestCase,
    cut,
    drop,
    first_bytes_then_stall,
    inherited_signals,
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
# What a download to out.bin writes into: with -c, and without (its first temporary name).
PARTIAL_FILES = (".out.bin.part", ".out.bin.part.1")


class DownloadCommandTests(StandInTestCase):
    """download, and export --download: where the bytes go, and what the server may not choose."""

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

    def test_download_to_stdout(self) -> None:
        export = self.stand_in_client().create_export(
            "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-02", format="jsonl"
        )
        result = self.run_process("download", export["download_url"], "-")
        self.assertEqual(result.returncode, 0)
        self.assertEqual(hashlib.sha256(result.stdout).hexdigest(), export["sha256"])

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

    def cli_process(self, *argv: str, cwd: Path = ROOT, **popen: Any) -> subprocess.Popen[bytes]:
        """``python -m dataset_client ARGV`` started in ``cwd``, as run_process runs it."""
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        environment["PYTHONPATH"] = str(ROOT)
        command = [sys.executable, "-m", "dataset_client", *argv]
        process = subprocess.Popen(command, env=environment, cwd=cwd, **popen)
        self.addCleanup(process.wait, 10)
        self.addCleanup(process.kill)
        return process

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


class ResumeCommandTests(StandInTestCase):
    """-c: a download continued across runs, its partial files, and what the summary says."""

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

    def test_the_hint_never_names_a_partial_file_that_is_not_the_users(self) -> None:
        # Found in review (issue 37, F1): with another user's empty .NAME.part there, -c cut
        # said "the same command continues its partial file" of theirs; the next run started
        # over.
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user")
        directory = self.tmp()
        directory.chmod(0o1777)
        theirs = directory / ".out.bin.part"
        theirs.write_bytes(b"")
        os.chown(theirs, 4242, 4242)
        url = self.server.url + "/files/x"
        self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}))
        out = str(directory / "out.bin")
        status, _, err = self.run_main("--retries", "0", "download", url, out, "-c")
        self.assertEqual(status, 3)
        self.assertIn(".out.bin.part: not resumable (", err)
        self.assertNotIn("continues its partial file", err)
        self.assertEqual(os.listdir(directory), [theirs.name])
        # Nothing of theirs taken up: one GET of the whole file.
        sent = [(r.method, r.path, r.headers["Range"]) for r in self.requests]
        self.assertEqual(sent, [("GET", "/files/x", None)])
        # A sound state of the user's own beside their .part: still theirs, still not named.
        state = {"url": url, "validator": '"v1"', "total": len(DATA), "parts": [[0, len(DATA), 0]]}
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (directory / ".out.bin.part.json").touch(0o600)
        (directory / ".out.bin.part.json").write_text(json.dumps(state))
        self.script(cut(DATA, 1_500_000, {"ETag": '"v1"'}))
        status, _, err = self.run_main("--retries", "0", "download", url, out, "-c")
        self.assertEqual(status, 3)
        self.assertIn(".out.bin.part: not resumable (", err)
        self.assertNotIn("continues its partial file", err)
        self.assertEqual(theirs.stat().st_size, 0, "theirs is left alone")

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


class FileNameTests(ScriptedCommandLineTestCase):
    """The destination's name: it picks the export's format; the partial files it names."""

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
        # A request that timed out may be read by the server after the command ended: once it
        # is, the next command's request gets the next scripted response, not the stall.
        wait_for(lambda: not self.server.script)
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


class DownloadMessageTests(StandInTestCase):
    """What a download says: sizes for people, how long --max-time ran, the checks passed, no
    signed URL's credentials.
    """

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

    def test_v_says_why_connections_fetched_in_one_stream(self) -> None:
        # Found by a new user: --connections 4 on a 1.7 MB file quietly used one stream.
        small = DATA[:1_700_000]
        self.server.default = serve_file(small)
        why = (
            "dataset-client: one stream, not 4 connections: 1.6 MiB is too small for parts of at"
            f" least 1 MiB, GET {self.server.url}/files/small.bin\n"
        )
        for verbose in (["-v"], []):
            with self.subTest(verbose=verbose):
                self.server.requests.clear()
                target = self.tmp() / "small.bin"
                url = self.server.url + "/files/small.bin"
                argv = [*verbose, "download", url, str(target), "--connections", "4"]
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out, target.read_bytes()), (0, "", small))
                self.assertEqual([r.headers.get("Range") for r in self.requests], [None])
                self.assertEqual(why in err, bool(verbose), err)
        self.server.requests.clear()
        argv = ["-v", "download", url, str(self.tmp() / "big.bin"), "--connections", "4"]
        self.server.default = serve_file(DATA)  # 3.0 MiB: three parts, not four; in parallel
        status, out, err = self.run_main(*argv)
        self.assertEqual((status, len(self.requests)), (0, 3), err)
        self.assertNotIn("one stream", err)

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


class SignalTests(StandInTestCase):
    """Signals end a download with their status and leave nothing; nohup's download goes on."""

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
            # Reaped after the kill: a subtest that fails before communicate() leaves no zombie.
            self.addCleanup(process.wait, 10)
            self.addCleanup(process.kill)
            # communicate() closes it; a subtest that fails before must not leave it to the GC.
            self.addCleanup(process.stderr.close)  # type: ignore[union-attr]
            with self.subTest(signal=signal_name, keep=keep):
                wait_for(
                    lambda d=directory: any(
                        p.name in PARTIAL_FILES and p.stat().st_size for p in d.iterdir()
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
                p.name in PARTIAL_FILES and p.stat().st_size for p in destination.parent.iterdir()
            )
        )
        self.assertIn(
            signal.SIGHUP, ignored_signals(process.pid), "SIGHUP stays ignored while downloading"
        )
        process.send_signal(signal.SIGHUP)
        rest.set()
        _, err = process.communicate(timeout=10)
        self.assertEqual((process.returncode, destination.read_bytes()), (0, DATA), err.decode())

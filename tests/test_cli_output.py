"""The command line's output: results as tables, records and JSON, the export block, the pager,
the progress line, closed streams, and what is escaped before it reaches a terminal.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import itertools
import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import unittest
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from tests.support import (
    BIG,
    DATA,
    DATA_SHA,
    KEY,
    RAW_CONTROL,
    ROOT,
    Handler,
    ScriptedCommandLineTestCase,
    StandInTestCase,
    TerminalOutput,
    cut,
    import_or_skip,
    local_service,
    recorded_sleeps,
    reply,
    serve_file,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def hostile(text: str) -> str:
    """``text`` wrapped in what a server could use to retitle the window, clear the screen, colour a fake "ok"."""
    return f"\x1b]0;pwned\x07{text}\x1b[2J\x9b32mok\x7f"


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


class ResultOutputTests(StandInTestCase):
    """Results as JSON, CSV and tables, fitted to the terminal."""

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
            out.split("\n")[:2], ["symbol,days,mean", f"AAPL,522,{result['rows'][0][2]}"]
        )
        self.assertNotIn("\r", out, "LF line ends, as psql --csv and gh: `read` gets no CR")
        # A cell holding a line end is quoted, whatever the Python (3.11's writer quoted a CR only
        # when it ended lines too).
        sql_with_line_ends = "SELECT 'a' || char(13) || 'b' AS cr, 'c' || char(10) || 'd' AS lf"
        status, out, _ = self.run_main("--output", "csv", "query", sql_with_line_ends)
        self.assertEqual(out, 'cr,lf\n"a\rb","c\nd"\n')
        self.assertEqual(
            list(csv.reader(io.StringIO(out, newline=""))), [["cr", "lf"], ["a\rb", "c\nd"]]
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
        self.assertEqual(len(out.split("\n")), 10_000 + 2)
        self.assertEqual(err.count("\n"), 1)
        self.assertEqual(
            err, 'dataset-client: warning: the service cut this result short ("truncated": true)\n'
        )
        self.assertEqual(
            self.run_main("-q", "query", "SELECT * FROM trades")[2], "", "-q: errors only"
        )

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

    def test_columns_and_lines_of_any_size_or_digit(self) -> None:
        terminal = TerminalOutput()
        for value in ("9" * 400, "99999999", "\u00b2", "\uff18\uff10"):
            with self.subTest(value=value), mock.patch.dict(os.environ, {"COLUMNS": value}):
                self.assertLessEqual(cli._terminal_size(terminal, "columns"), 9999)
                stderr = cli._Stderr(quiet=False, verbose=False)
                stderr.stream, stderr.is_terminal = TerminalOutput(), True
                stderr.status("retrying in 1.0 s (2 attempts left): 503 Service Unavailable")
                self.assertLess(len(stderr.stream.getvalue()), 10_000)


class ExportOutputTests(StandInTestCase):
    """An export's output: --output means the same as for a query; an empty export is said; a
    dataset's description at a glance.
    """

    cli_unset = ScriptedCommandLineTestCase.cli_unset

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
        self.assertTrue(out.endswith("\n") and "\r" not in out)
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

    def test_the_export_block_wraps_its_symbols_at_commas_within_the_terminal(self) -> None:
        symbols = local_service.SYMBOLS  # twelve
        listed = json.dumps(list(symbols))
        argv = ["export", "daily_bars", "--symbols", ",".join(symbols), "--start", "2024-01-02"]
        argv += ["--end", "2024-01-03", "--format", "csv"]
        for columns, more in itertools.product((80, 40), ([], ["--download", "-"])):
            with self.subTest(columns=columns, more=more):
                status, drawn = self.run_in_terminal([*argv, *more], columns)
                lines = on_screen(drawn)
                first = next(i for i, line in enumerate(lines) if line.startswith("symbols "))
                pieces = [lines[first]]
                while lines[first + len(pieces)].startswith(" " * 12 + " | "):
                    pieces.append(lines[first + len(pieces)])
                self.assertEqual(status, 0)
                self.assertGreater(len(pieces), 1, "wrapped")
                self.assertTrue(all(len(piece) <= columns for piece in pieces), pieces)
                self.assertTrue(all(piece.endswith(",") for piece in pieces[:-1]), pieces)
                self.assertEqual(" ".join(piece[15:] for piece in pieces), listed)
                digest = next(line for line in lines if line.startswith("sha256 "))
                self.assertRegex(digest, "^sha256 +\\| [0-9a-f]{64}$", "whole, past the edge at 40")
        long = "X" * 30  # no space: whole, past the edge; the list wraps at its commas
        fields = {"id": long, "symbols": ["AAPL", "MSFT", "V"]}
        lines = cli._block_lines(fields, 22, spaceless=True)
        self.assertEqual(
            lines, [f"id      | {long}", 'symbols | ["AAPL",', '        | "MSFT", "V"]']
        )

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


class ExportBlockTests(ScriptedCommandLineTestCase):
    """The export block a terminal shows: read at a glance, whatever the sizes the server sends."""

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

    def test_an_export_of_no_rows_warns_whether_the_service_says_rows_or_row_count(self) -> None:
        warning = "dataset-client: warning: the export holds no rows: check --symbols"
        for field, count, warned in (
            ("rows", 0, True),
            ("row_count", 0, True),
            ("row_count", 3, False),
        ):
            with self.subTest(field=field, count=count):
                self.server.requests.clear()
                self.script(reply(201, {"id": "exp_1", "dataset": "trades", field: count}))
                status, out, err = self.run_main(*self.export_argv(), terminal=True)
                self.assertEqual((status, err.startswith(warning)), (0, warned), err)
                self.assertEqual(err.count("\n"), 1 if warned else 0)
                self.assertRegex(out, rf"(?m)^{field} +\| {count}$", "the count in the block")
                self.assertEqual([r.path for r in self.requests], ["/api/exports"])


class PagerTests(ScriptedCommandLineTestCase):
    """Long output on a terminal goes through a pager, which gets no secrets and ends with the
    command.
    """

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

    def test_a_cut_result_is_said_again_after_the_pager_once_without_one(self) -> None:
        warning = 'dataset-client: warning: the service cut this result short ("truncated": true)'
        argv = ["query", "SELECT symbol, price FROM trades"]  # 10,000 rows of the stand-in's
        for pager, said in (({"DATASET_CLIENT_PAGER": "cat"}, 2), ({}, 1)):  # {}: no pager
            with self.subTest(pager=pager):
                status, drawn = self.run_in_terminal(argv, 80, variables=pager)
                lines = on_screen(drawn)[:-1]
                self.assertEqual((status, lines.count(warning)), (0, said), lines[-3:])
                self.assertEqual(lines[0], warning, "said before the result as before")
                self.assertEqual(lines[-said:], ["(10000 rows)", warning][:said], "then after it")
        status, drawn = self.run_in_terminal(
            ["--no-pager", *argv], 80, variables={"DATASET_CLIENT_PAGER": "cat"}
        )
        self.assertEqual(drawn.count(warning), 1)

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


class ProgressLineTests(StandInTestCase):
    """The progress line and the status lines of retries: fitted to the terminal, redrawn in
    place, gone before the result.
    """

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
            # DEST as one types it, in the directory the command runs in: the summary names it
            # as given, and a long TMPDIR in its name made it wider than 80 columns.
            target = self.tmp() / "big.bin"
            with self.subTest(columns=columns):
                argv = ["download", self.server.url + "/big", target.name]
                status, drawn = self.run_in_terminal(
                    argv, columns, on_screen, directory=target.parent
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
                self.assertRegex(summary, r"^downloaded big\.bin: 8\.0 MiB, [\d.]+ s")

    def test_no_progress_line_over_a_file_written_to_the_terminal(self) -> None:
        export = self.stand_in_client().create_export(
            "trades", symbols="V", start_date="2024-01-02", end_date="2024-01-31", format="jsonl"
        )
        status, drawn = self.run_in_terminal(["download", export["download_url"], "-"], 80)
        self.assertEqual(status, 0)
        self.assertIn('{"date": "2024-01-02"', drawn)
        self.assertNotIn("%", drawn, "a progress line among the file's bytes")
        self.assertRegex(drawn, r"downloaded stdout: [\d.]+ KiB, [\d.]+ s, [\d.]+ [KMG]?i?B/s")

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
        stderr.stream, stderr.is_terminal, stderr.redact = (
            TerminalOutput(),
            True,
            dc._Secrets([KEY]).redact,
        )
        with mock.patch.dict(os.environ, {"COLUMNS": "41"}):
            stderr.status(
                f"dataset-client: retrying: {KEY} was refused"
            )  # the key crosses the 40th column
        self.assertEqual(
            stderr.stream.getvalue(), "\rdataset-client: retrying: <redacted> wa\u2026\x1b[K"
        )

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


class ClosedOutputTests(StandInTestCase):
    """A stdout or stderr that is closed, or whose reader left: quiet, no traceback."""

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


class EscapingTests(StandInTestCase):
    """No control or invisible character from a server reaches the terminal raw."""

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


class StatusLineCostTests(unittest.TestCase):
    def test_fitting_a_retry_line_is_linear_in_the_servers_reason(self) -> None:
        # Issue 36: a 60 KB reason phrase cost 1.8 s of CPU a line (a pattern tried from every
        # word, a replace and a measure of the whole line per URL in it). At 1 MB, what is
        # quadratic takes minutes: this test would not end (no timing is asserted).
        size = 1_000_000
        for reason in (
            "a." * (size // 2),
            "a://b " * (size // 6),
            "GET a://b: " * (size // 11),
            "http://h/" + ":" * size,
            "A " * (size // 2),
            ".a" * (size // 2) + "://",
        ):
            with self.subTest(reason=reason[:12]):
                line = (
                    f"dataset-client: retrying in 1.0 s (2 attempts left): GET http://h/x: {reason}"
                )
                fitted = cli._status_fitted(line, 80)
                self.assertLessEqual(len(fitted), 80)
                self.assertIn("retrying in 1.0 s (2 attempts left):", fitted)

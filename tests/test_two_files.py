"""The library and the command line as two files: five ways in, each file alone, the README's
way in, the Pythons they refuse.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import unittest
from pathlib import Path
from typing import Any

import dataset_client as dc
from tests.support import NO_BYTECODE_HERE, ROOT, ServerTestCase, readme_alias, reply

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


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


class OldPythonTests(unittest.TestCase):
    """Python 3.10 or older: a clear ImportError, and one line from the command line, exit status 2."""

    EXPECTED = "dataset_client needs Python 3.11 or later; this is Python {}"

    def run_python(self, python: str, code: str) -> subprocess.CompletedProcess[str]:
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(ROOT),
        }
        return subprocess.run(
            [python, "-c", code],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def assert_refused(self, python: str, pretend: str, version: str) -> None:
        imported = self.run_python(python, f"{pretend}import dataset_client")
        self.assertEqual(imported.returncode, 1)
        self.assertEqual(
            imported.stderr.splitlines()[-1], "ImportError: " + self.EXPECTED.format(version)
        )
        for module in (
            "dataset_client",
            "dataset_client_cli",
        ):  # either file run as the command line
            run = f"sys.argv = ['{module}', 'datasets']; runpy.run_module('{module}', run_name='__main__')"
            command = self.run_python(python, f"import runpy, sys; {pretend}{run}")
            self.assertEqual(
                command.stderr, f"dataset-client: error: {self.EXPECTED.format(version)}\n"
            )
            self.assertEqual((command.returncode, command.stdout), (2, ""))

    def test_this_python_pretending_to_be_3_10(self) -> None:
        self.assert_refused(
            sys.executable, "import sys; sys.version_info = (3, 10, 13, 'final', 0); ", "3.10.13"
        )

    def test_real_older_pythons(self) -> None:
        root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
        pythons = sorted(root.glob("3.[89].*/bin/python")) + sorted(root.glob("3.10.*/bin/python"))
        if not pythons:
            self.skipTest(f"no Python 3.8 to 3.10 under {root} (pyenv install 3.10.13 adds one)")
        for python in pythons:
            with self.subTest(python=str(python)):
                self.assert_refused(str(python), "", python.parent.parent.name)

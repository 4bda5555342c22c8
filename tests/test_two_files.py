"""The library and the command line as two files: five ways in, each file alone, the README's
way in, the Pythons they refuse.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import functools
import importlib.util
import io
import json
import marshal
import os
import pickle
import shlex
import shutil
import subprocess
import sys
import unittest
import zipfile
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient
from tests.support import (
    KEY,
    NO_BYTECODE_HERE,
    ROOT,
    ServerTestCase,
    outcome_of,
    readme_alias,
    reply,
)

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

    def test_the_two_files_vendored_in_a_zip_run_every_way_in(self) -> None:
        # Beside a module imported from a zip is a path through the zip file: ENOTDIR, no file.
        archive = self.tmp() / "vendored.zip"
        with zipfile.ZipFile(archive, "w") as vendored:
            for name in ("dataset_client.py", "dataset_client_cli.py"):
                vendored.write(ROOT / name, name)
        self.server.default = reply(body=[{"name": "daily_bars"}])
        main = "import sys, dataset_client; sys.exit(dataset_client.main(['datasets']))"
        ways = (["-m", "dataset_client", "datasets"], ["-m", "dataset_client_cli", "datasets"])
        for argv in (*ways, ["-c", main]):
            with self.subTest(argv=argv):
                outcome = self.run_python(*argv, cwd=self.tmp(), path=archive)
                self.assertEqual(outcome, (0, '[\n  {\n    "name": "daily_bars"\n  }\n]\n', ""))
        self.assertEqual([(r.method, r.path) for r in self.requests], [("GET", "/datasets")] * 3)

    def test_a_lone_library_says_where_to_get_the_command_line(self) -> None:
        lone = self.copied("dataset_client.py")
        # Issue 38: the file to copy, or pip install . in a checkout (no package of that name is
        # published).
        expected = (
            "dataset-client: error: the command line is dataset_client_cli.py: copy it beside dataset_client.py,"
            " or run pip install . in a checkout\n"
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
        said = (
            "dataset-client: error: dataset_client_cli.py needs dataset_client.py beside it: copy it"
            " there, or run pip install . in a checkout\n"
        )
        self.assertEqual((status, out, err), (2, "", said))

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


class PlantedBesideTests(ServerTestCase):
    """Issue 36: a file beside the library runs only when it is the user's own regular file (or
    root's), compiled from its source; never a .pyc from __pycache__; another version in one line."""

    # The pair copied into a directory of its own, as the two-files tests copy it.
    pair = TwoFilesTests.copied

    def run_python(self, *argv: str, cwd: Path) -> tuple[int, str, str]:
        unset = ("DATASET_CLIENT_", "PYTHONPATH", "COVERAGE_", "PYTHONDONTWRITEBYTECODE")
        environment = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
        environment |= {"DATASET_CLIENT_BASE_URL": self.server.url, "HOME": str(self.tmp())}
        environment.pop("PYTHONPYCACHEPREFIX", None)  # __pycache__ beside the files, as a user's
        done = subprocess.run(
            [sys.executable, *argv], cwd=cwd, env=environment, capture_output=True, timeout=60
        )
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def planted_pyc(self, source: Path) -> None:
        """A .pyc in __pycache__ whose header matches ``source`` (mtime, size), as Python's loader
        checks it: its code, run, would print PLANTED."""
        status = source.stat()
        code = compile("print('PLANTED')\n", str(source), "exec")
        header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
        header += (int(status.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        header += (status.st_size & 0xFFFFFFFF).to_bytes(4, "little")
        cache = source.parent / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / f"{source.stem}.{sys.implementation.cache_tag}.pyc").write_bytes(
            header + marshal.dumps(code)
        )

    def test_a_pyc_in_pycache_is_never_run_with_or_without_bytecode_writing(self) -> None:
        pair = self.pair("dataset_client.py", "dataset_client_cli.py")
        self.planted_pyc(pair / "dataset_client_cli.py")
        self.planted_pyc(pair / "dataset_client.py")
        for flags in (["-I"], ["-I", "-B"]):
            for script in ("dataset_client.py", "dataset_client_cli.py"):
                with self.subTest(flags=flags, script=script):
                    done = self.run_python(*flags, str(pair / script), "--version", cwd=self.tmp())
                    self.assertEqual(done, (0, f"dataset-client {dc.__version__}\n", ""))

    def test_a_file_beside_owned_by_another_user_is_one_line_naming_it_and_its_owner(self) -> None:
        pair = self.pair("dataset_client.py", "dataset_client_cli.py")
        planted = pair / "dataset_client_cli.py"
        planted.write_text("print('PLANTED')\n")
        owner = os.geteuid()
        theirs: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if owner == 0:
            os.chown(planted, owner := 4242, 4242)
        else:  # this user's file, seen as another user's (as the suite's owner tests do)
            theirs = mock.patch.object(dc.os, "geteuid", return_value=owner + 1)
        with theirs, self.assertRaises(ImportError) as caught:
            dc._own_source(str(planted))
        said = f"{planted} is not run (owner: uid {owner}): another user's file"
        self.assertEqual(caught.exception.msg, said)
        if os.geteuid() != 0:
            self.skipTest("not root: a file another user owns cannot be made here")
        done = self.run_python("-I", str(pair / "dataset_client.py"), "datasets", cwd=self.tmp())
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        library = pair / "dataset_client.py"
        os.chown(library, 4242, 4242)
        planted.write_bytes((ROOT / "dataset_client_cli.py").read_bytes())
        os.chown(planted, 0, 0)
        done = self.run_python("-I", str(planted), "datasets", cwd=self.tmp())
        said = f"{library} is not run (owner: uid 4242): another user's file"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        self.assertEqual(self.requests, [])

    def test_the_command_line_holds_the_library_beside_it_to_the_same_rule(self) -> None:
        """The CLI's own loader: a library with a second link, or that group or others can write,
        is not run (a teammate could change it); one line saying what to do."""
        pair = self.pair("dataset_client_cli.py")
        library = pair / "dataset_client.py"
        elsewhere = self.tmp() / "kept.py"
        shutil.copy(ROOT / "dataset_client.py", elsewhere)
        os.link(elsewhere, library)
        done = self.run_python("-I", str(pair / "dataset_client_cli.py"), "datasets", cwd=pair)
        said = f"{library} is not run (owner: uid {os.geteuid()}): a file with 2 links"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        library.unlink()
        shutil.copy(elsewhere, library)
        library.chmod(0o646)
        done = self.run_python("-I", str(pair / "dataset_client_cli.py"), "datasets", cwd=pair)
        said = f"{library} is not run (owner: uid {os.geteuid()}): writable by group or others"
        said += f"; run chmod go-w {library}"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        self.assertEqual(self.requests, [])

    def test_a_link_a_fifo_or_a_directory_beside_is_one_line_naming_it_and_its_owner(self) -> None:
        """Never waited on, never a traceback (a directory was an IsADirectoryError), whichever
        file loads the other."""
        me = os.geteuid()
        elsewhere = self.tmp() / "elsewhere.py"
        for script, beside in (
            ("dataset_client.py", "dataset_client_cli.py"),
            ("dataset_client_cli.py", "dataset_client.py"),
        ):
            pair = self.pair(script)
            shutil.copy(ROOT / beside, elsewhere)
            planted = pair / beside
            for kind, make, what in (
                ("link", functools.partial(planted.symlink_to, elsewhere), "a symbolic link"),
                ("fifo", functools.partial(os.mkfifo, planted), "not a regular file"),
                ("directory", planted.mkdir, "not a regular file"),
            ):
                with self.subTest(script=script, kind=kind):
                    make()
                    done = self.run_python("-I", str(pair / script), "datasets", cwd=self.tmp())
                    os.rmdir(planted) if kind == "directory" else os.unlink(planted)
                    said = f"{planted} is not run (owner: uid {me}): {what}"
                    self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        self.assertEqual(self.requests, [])

    def test_a_file_beside_python_cannot_compile_is_one_line(self) -> None:
        """Cut short in a copy, or written for a later Python: one line, not a SyntaxError's
        traceback; a library cut where it still compiles, one line too."""
        for script, beside in (
            ("dataset_client.py", "dataset_client_cli.py"),
            ("dataset_client_cli.py", "dataset_client.py"),
        ):
            pair = self.pair(script)
            planted = pair / beside
            text = (ROOT / beside).read_text()
            cut = text[: text.index("\ndef ", len(text) // 2) + 9]
            later = text + "type Later = int\n" if sys.version_info < (3, 12) else text + "x = 0_\n"
            kinds = [("cut", cut), ("a later Python's", later)]
            if beside == "dataset_client.py":
                # It compiles, and lacks what the command line imports (a cut command line
                # compiles and runs until it lacks a name: a copy's fault, told by a traceback).
                kinds.append(("cut at a statement", text[: text.index("\ndef ", len(text) // 2)]))
            for kind, planted_text in kinds:
                with self.subTest(script=script, kind=kind):
                    planted.write_text(planted_text)
                    status, out, err = self.run_python(
                        "-I", str(pair / script), "datasets", cwd=self.tmp()
                    )
                    self.assertEqual((status, out, err.count("\n")), (2, "", 1), err)
                    self.assertTrue(err.startswith(f"dataset-client: error: {planted} "), err)
        self.assertEqual(self.requests, [])

    def test_a_file_of_another_version_beside_is_one_line(self) -> None:
        pair = self.pair("dataset_client.py")
        cli_text = (ROOT / "dataset_client_cli.py").read_text()
        cli_path, library = pair / "dataset_client_cli.py", pair / "dataset_client.py"
        newer = cli_text.replace(f'__version__ = "{dc.__version__}"', '__version__ = "9.0.0"')
        lacking = cli_text.replace("    DatasetClient,\n", "    DatasetClient,\n    _Gone,\n", 1)
        for text, said in (
            (
                newer,
                f"{cli_path} does not fit this dataset_client.py: it is version 9.0.0, this"
                f" {dc.__version__}",
            ),
            (
                lacking,
                f"{cli_path} does not fit this dataset_client.py: cannot import name '_Gone' from"
                f" '__main__' ({library})",
            ),
        ):
            with self.subTest(said=said):
                cli_path.write_text(text)
                done = self.run_python("-I", str(library), "datasets", cwd=self.tmp())
                self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        cli_path.write_text(cli_text)
        library.write_text(
            library.read_text().replace(f'__version__ = "{dc.__version__}"', '__version__ = "0.9"')
        )
        done = self.run_python("-I", str(cli_path), "datasets", cwd=self.tmp())
        said = f"{library} is version 0.9, not {dc.__version__}: copy the two together"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        self.assertEqual(self.requests, [])


class PlantedBesideInProcessTests(ServerTestCase):
    """The loader's refusals, in this process (the subprocess tests above run copies)."""

    def test_own_source_reads_the_users_regular_file_and_refuses_the_rest(self) -> None:
        directory = self.tmp()
        own = directory / "own.py"
        own.write_text("x = 1\n")
        self.assertEqual(dc._own_source(str(own)), b"x = 1\n")
        self.assertIsNone(dc._own_source(str(directory / "missing.py")))
        (directory / "link.py").symlink_to(own)
        os.mkfifo(directory / "fifo.py")
        for name, what in (("link.py", "a symbolic link"), ("fifo.py", "not a regular file")):
            with self.subTest(name=name), self.assertRaises(ImportError) as caught:
                dc._own_source(str(directory / name))
            said = f"{directory / name} is not run (owner: uid {os.geteuid()}): {what}"
            self.assertTrue(caught.exception.msg.startswith(said), caught.exception.msg)

    def test_own_source_holds_the_file_to_the_config_files_rule(self) -> None:
        """The fourth review's second pass: a file with a second link or that group or others can
        write was run; a directory raised IsADirectoryError; a link gone between open and lstat
        (another user's loop) FileNotFoundError. Each is one ImportError naming it, or none there."""
        directory, me = self.tmp(), os.geteuid()
        (directory / "directory.py").mkdir()
        (directory / "own.py").write_text("x = 1\n")
        os.link(directory / "own.py", directory / "linked.py")
        shared = directory / "shared file.py"
        shared.write_text("x = 1\n")
        shared.chmod(0o646)
        # Writable by the user's own group (umask 002 and a group of one's own): run.
        (directory / "ours.py").write_text("x = 1\n")
        (directory / "ours.py").chmod(0o664)
        self.assertEqual(dc._own_source(str(directory / "ours.py")), b"x = 1\n")
        faults = [
            ("directory.py", "not a regular file"),
            ("linked.py", "a file with 2 links"),
            ("shared file.py", f"writable by group or others; run chmod go-w '{shared}'"),
        ]
        if me == 0:
            # A group's the user is not in by default, as a team directory's (setgid) gives.
            os.chown(directory / "ours.py", 0, 4242)
            chmod = f"writable by group or others; run chmod go-w {directory / 'ours.py'}"
            faults.append(("ours.py", chmod))
        for name, why in faults:
            with self.subTest(name=name), self.assertRaises(ImportError) as caught:
                dc._own_source(str(directory / name))
            said = f"{directory / name} is not run (owner: uid {me}): {why}"
            self.assertEqual(caught.exception.msg, said)
        gone = directory / "gone.py"
        gone.symlink_to(directory / "own.py")
        with mock.patch.object(dc.os, "open", side_effect=FileNotFoundError):
            self.assertIsNone(dc._own_source(str(gone)), "gone since lstat: none there")
        # Not to be looked at (a path past PATH_MAX): one line, not an UnboundLocalError.
        too_long = f"{directory}/" + f"{'x' * 250}/" * 20 + "own.py"
        with self.assertRaises(ImportError) as caught:
            dc._own_source(too_long)
        self.assertEqual(caught.exception.msg, f"{too_long} is not run: File name too long")

    def test_a_command_line_of_another_version_is_refused_and_not_left_registered(self) -> None:
        # Not named dataset_client_cli.py: coverage.py would take it for the one it measures.
        copy = self.tmp() / "cli_of_another_version.py"
        copy.write_text('__version__ = "0.1"\n')
        with mock.patch.dict(sys.modules), self.assertRaises(ImportError) as caught:
            del sys.modules["dataset_client_cli"]
            dc._command_line(str(copy))
        self.assertNotIn("0.1", getattr(sys.modules.get("dataset_client_cli"), "__version__", ""))
        said = (
            f"{copy} does not fit this dataset_client.py: it is version 0.1, this {dc.__version__}"
        )
        self.assertEqual(caught.exception.msg, said)
        err = io.StringIO()
        with mock.patch.dict(sys.modules), contextlib.redirect_stderr(err):
            del sys.modules["dataset_client_cli"]
            with mock.patch.object(dc, "_command_line", side_effect=ImportError(said)):
                self.assertEqual(dc.main(["--version"]), 2)
        self.assertEqual(err.getvalue(), f"dataset-client: error: {said}\n")

    def test_no_file_beside_is_the_installed_one_else_one_line_saying_where_to_get_it(self) -> None:
        missing = str(self.tmp() / "dataset_client_cli.py")
        self.assertIs(dc._command_line(missing), cli, "importable: the installed one")
        halted = mock.patch.dict(sys.modules, {"dataset_client_cli": None})
        with halted, self.assertRaises(ImportError) as caught:
            dc._command_line(missing)
        self.assertEqual(
            caught.exception.msg,
            "the command line is dataset_client_cli.py: copy it beside dataset_client.py, or run"
            " pip install . in a checkout",
        )

    def test_the_command_lines_loader_in_this_process(self) -> None:
        """The CLI's own loader of the library beside it, which the subprocess tests run in
        copies coverage.py does not measure: none there, this checkout's, each refusal (a copy
        is never run here: coverage.py would measure a file named dataset_client.py, then gone)."""
        directory = self.tmp()
        beside = directory / "dataset_client.py"

        def load(where: Path) -> tuple[object, str, object]:
            err = io.StringIO()
            cli_file = str(where / "dataset_client_cli.py")
            with mock.patch.object(cli, "__file__", cli_file), mock.patch.dict(sys.modules):
                with contextlib.redirect_stderr(err):
                    outcome = outcome_of(cli._load_library_beside)
                loaded = sys.modules.get("dataset_client")
            return outcome, err.getvalue(), loaded

        self.assertEqual(load(directory), (None, "", dc), "none there: the installed one")
        outcome, said, loaded = load(ROOT)
        self.assertEqual((outcome, said), (None, ""))
        self.assertIsNot(loaded, dc, "compiled from its source into a module of its own")
        self.assertEqual(getattr(loaded, "__file__", None), str(ROOT / "dataset_client.py"))
        me = os.geteuid()
        beside.write_text("x = (\n")
        for what, make in (
            ("Python cannot compile it", lambda: beside.chmod(0o644)),
            ("writable by group or others; run chmod go-w", lambda: beside.chmod(0o646)),
            ("a symbolic link", lambda: (beside.unlink(), beside.symlink_to(ROOT / "README.md"))),
        ):
            with self.subTest(what=what):
                make()
                outcome, said, loaded = load(directory)
                self.assertIsInstance(outcome, SystemExit)
                assert isinstance(outcome, SystemExit)
                self.assertEqual(outcome.code, 2)
                self.assertEqual(said.count("\n"), 1, said)
                if what == "Python cannot compile it":
                    self.assertTrue(
                        said.startswith(f"dataset-client: error: {beside} is not run: ")
                    )
                else:
                    self.assertIn(f"{beside} is not run (owner: uid {me}): {what}", said)


class OneWayBetweenTheCommandLineAndTheLibraryTests(ServerTestCase):
    """Issue 37 items 3-5: what the command line needs is public: redact, read_settings, resolve,
    worded; its messages read from fields, never rewritten."""

    def test_redact_hides_the_key_in_any_form_and_signed_urls_unless_asked_not_to(self) -> None:
        client = self.client()
        signed = "https://s3.example/b/x?X-Amz-Signature=816d0123secret"
        text = f"echoed {KEY}, {KEY.replace('-', '%2D')} and {signed}"
        self.assertEqual(
            client.redact(text),
            "echoed <redacted>, <redacted> and https://s3.example/b/x?X-Amz-Signature=<redacted>",
        )
        result = {"rows": [[KEY, signed]], "n": 1}
        self.assertEqual(
            client.redact(result, signed_urls=False), {"rows": [["<redacted>", signed]], "n": 1}
        )
        self.assertEqual(result["rows"][0][0], KEY, "a copy: the result itself is left")
        keyless = self.client(api_key=None)
        self.assertEqual(keyless.redact(KEY, signed_urls=False), KEY)

    def test_read_settings_says_where_each_setting_came_from(self) -> None:
        for name in [name for name in os.environ if name.startswith("DATASET_CLIENT_")]:
            del os.environ[name]
        config = self.tmp() / "config.toml"
        config.write_text(
            f'[staging]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\ntimeout = 7\n'
        )
        config.chmod(0o600)
        os.environ.update(DATASET_CLIENT_CONFIG=str(config), DATASET_CLIENT_API_KEY="sk-variable")
        found = DatasetClient.read_settings("staging", max_retries=0)
        where = f"[staging] in {config}"
        self.assertEqual(
            found,
            {
                "base_url": (self.server.url, where),
                "api_key": ("sk-variable", "DATASET_CLIENT_API_KEY"),
                "timeout": (7, where),
                "max_retries": (0, "argument"),
            },
        )
        self.assertIsInstance(found["api_key"][0], dc._Secret)
        found = DatasetClient.read_settings("staging", base_url="http://elsewhere")
        self.assertEqual(found["base_url"], ("http://elsewhere", "argument"))
        del os.environ["DATASET_CLIENT_API_KEY"]
        found = DatasetClient.read_settings("staging", base_url="http://elsewhere")
        self.assertEqual(found["api_key"], (None, where), "the profile's key: its own service's")

    def test_resolve_is_the_url_download_fetches(self) -> None:
        client = self.client(self.server.url + "/api/v1")
        self.assertEqual(client.resolve("files/x.csv"), self.server.url + "/api/v1/files/x.csv")
        self.assertEqual(client.resolve("/files/\u00e9"), self.server.url + "/files/%C3%A9")
        with self.assertRaisesRegex(ValueError, "^download_url must be an http"):
            client.resolve("ftp://h/x")

    def test_errors_say_what_they_name_in_a_callers_words(self) -> None:
        error = outcome_of(lambda: self.client().download("ftp://h/x", io.BytesIO()))
        assert isinstance(error, ValueError), repr(error)
        self.assertEqual(error.named, {"download_url": 0})  # type: ignore[attr-defined]
        self.assertEqual("".join(error.parts), str(error))  # type: ignore[attr-defined]
        ended = dc._Deadline(1.5).reached("GET", "http://h/x")
        ended.attempts = 2
        self.assertEqual(
            str(ended), "GET http://h/x: the deadline of 1.5 s was reached (after 2 attempts)"
        )
        self.assertEqual(
            ended.worded(deadline="--max-time 1.5"),
            "GET http://h/x: --max-time 1.5 was reached (after 2 attempts)",
        )
        self.assertEqual(
            pickle.loads(pickle.dumps(ended)).worded(deadline="D"),
            "GET http://h/x: D was reached (after 2 attempts)",
        )
        self.assertEqual(
            dc.ServiceError(404, "Not Found", "GET", "http://h/x").worded(x="y"),
            "404 Not Found: GET http://h/x",
        )

    def test_an_errors_pieces_are_the_librarys_own_and_str_never_raises(self) -> None:
        # The fourth review's second pass: parts and named were keyword fields, and
        # DatasetClientError("x", parts=["a"], named={"deadline": 4}) or parts=[1, 2] made str()
        # raise (through pickle and copy too); so did attempts="3".
        for fields in (
            {"parts": ["a"], "named": {"deadline": 4}},
            {"parts": [1, 2]},
            {"named": {}},
        ):
            with self.subTest(fields=fields), self.assertRaisesRegex(TypeError, "has no field"):
                dc.DatasetClientError("x", **fields)
        error = dc.DatasetClientError("x", attempts="3")  # type: ignore[arg-type]
        for shown in (error, pickle.loads(pickle.dumps(error))):
            self.assertEqual(str(shown), "x (after 3 attempts)")

    def test_the_command_line_reaches_no_more_than_three_private_names(self) -> None:
        sys.path.insert(0, str(ROOT / ".ci"))
        self.addCleanup(sys.path.remove, str(ROOT / ".ci"))
        import count_lines

        library = ast.parse((ROOT / "dataset_client.py").read_text())
        command_line = ast.parse((ROOT / "dataset_client_cli.py").read_text())
        members = count_lines.private_members(library)
        names = count_lines.private_library_names(command_line, members)
        self.assertEqual(names, ["_PartialFile", "_UNSEEN", "_size"])
        reach = ast.parse("def f(client):\n    return client._secrets, self._x, parser._actions\n")
        self.assertEqual(count_lines.private_library_names(reach, members), ["client._secrets"])

"""The command line's completion in bash and zsh, at a terminal and under the README's alias."""

from __future__ import annotations

import os
import select
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from collections.abc import Callable
from pathlib import Path

import dataset_client_cli as cli
from tests.support import NO_BYTECODE_HERE, ROOT, import_or_skip, readme_alias

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests

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
            ".out.bin.1.part",
            ".out.bin.part.1",
            ".out.bin.part.0123456789ab",
            ".out.bin.0123456789ab.part",
            ".out.bin.0123456789ab.new",
            ".out.bin.part.json.tmp",
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

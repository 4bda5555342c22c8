"""Shared directories with REAL second users (issues 23, 30): a victim and an attacker made with
useradd, teammates in a group made with groupadd, driven with runuser, the CLI run as the victim
in sticky world-writable directories and in a 2775 team directory.

    sudo python3 .ci/second_user_checks.py

Without root, useradd or runuser, a line "SKIPPED: why" (.ci/run counts it), exit status 0;
removes the users it made. Ends with
'N passed, N failed' (exit 1 when any failed).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

RUNUSER = shutil.which("runuser") or "runuser"
ROOT = Path(__file__).resolve().parent.parent
DATA = os.urandom(300_000)
SHA = hashlib.sha256(DATA).hexdigest()
NOTES = b"the victim's notes\n"


class Files(http.server.BaseHTTPRequestHandler):
    """Serves DATA at any path (under /slow/, in 30 pieces over 1.5 s); counts the requests."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Files.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()
        step = 10_000 if self.path.startswith("/slow/") else len(DATA)
        for start in range(0, len(DATA), step):
            self.wfile.write(DATA[start : start + step])
            time.sleep(0.05 if step < len(DATA) else 0)

    def log_message(self, *args: object) -> None:
        pass


# The teammate's loop: its own file renamed over each temporary file of a download to data.csv it
# sees, until the file "stop" appears (at most 20 s); prints how many it renamed over.
RENAMER = """
import os, re, sys, time
team, renamed, ends = sys.argv[1], 0, time.monotonic() + 20
while time.monotonic() < ends and not os.path.exists(os.path.join(team, "stop")):
    for name in os.listdir(team):
        if re.fullmatch(r"[.]data[.]csv[.][0-9a-f]{12}[.]part", name):
            with open(os.path.join(team, "theirs"), "wb") as file:
                file.write(b"the teammate's rows")
            os.replace(os.path.join(team, "theirs"), os.path.join(team, name))
            renamed += 1
    time.sleep(0.002)
print(renamed)
"""


class Checks:
    def __init__(self, work: Path, url: str, users: tuple[str, str, str], python: str) -> None:
        self.work, self.url, self.python = work, url, python
        self.victim, self.attacker, self.group = users  # the group: both users'
        self.passed = self.failed = 0

    def check(self, name: str, test: Callable[[], str | None]) -> None:
        """Run ``test`` (None: passed; else what went wrong)."""
        Files.requests.clear()
        try:
            wrong = test()
        except Exception as exc:  # a check that raised is a failed check, not the end of the run
            wrong = f"{type(exc).__name__}: {exc}"
        if wrong is None:
            self.passed += 1
            print(f"ok    {name}")
        else:
            self.failed += 1
            print(f"FAIL  {name}: {wrong}")

    def as_user(
        self, user: str, command: str, **options: object
    ) -> subprocess.CompletedProcess[bytes]:
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "NO_PROXY": "127.0.0.1",
            "HOME": str(self.work),
        }
        done: subprocess.CompletedProcess[bytes] = subprocess.run(
            [RUNUSER, "-u", user, "--", "sh", "-c", command],
            env=environment,
            capture_output=True,
            timeout=30,
            **options,  # type: ignore[call-overload]
        )
        return done

    def download(
        self, *arguments: str, cwd: Path, environment: str = ""
    ) -> subprocess.CompletedProcess[bytes]:
        quoted = " ".join(f"'{argument}'" for argument in arguments)
        client = f"{self.python} {self.work / 'dataset_client.py'}"
        return self.as_user(self.victim, f"cd '{cwd}' && {environment} {client} download {quoted}")

    def sticky(self) -> Path:
        directory = Path(tempfile.mkdtemp(dir=self.work))
        directory.chmod(0o1777)
        return directory

    def team(self) -> Path:
        """A team's directory: 2775, the group the victim and the attacker share."""
        directory = Path(tempfile.mkdtemp(dir=self.work))
        shutil.chown(directory, group=self.group)
        directory.chmod(0o2775)
        return directory

    def victims_notes(self) -> Path:
        """~/notes.txt: the victim's, in a directory of the victim's own."""
        home = Path(tempfile.mkdtemp(dir=self.work))
        shutil.chown(home, user=self.victim)
        notes = home / "notes.txt"
        self.as_user(self.victim, f"cat > '{notes}'", input=NOTES).check_returncode()
        return notes

    def link_is_refused(
        self, directory: Path, notes: Path, *, on_the_way: bool = False
    ) -> str | None:
        """The attacker's link in ``directory``, at data.csv to ``notes`` (``on_the_way``: at drop,
        to the directory of ``notes``, the download to drop/notes.txt): refused, nothing asked."""
        link, target = directory / "data.csv", notes
        if on_the_way:
            link, target = directory / "drop", notes.parent
        self.as_user(self.attacker, f"ln -s '{target}' '{link}'").check_returncode()
        destination = "drop/notes.txt" if on_the_way else "data.csv"
        done = self.download(self.url, destination, "--sha256", SHA, cwd=directory)
        said = b"refusing to follow a symbolic link another user made"
        if done.returncode != 1 or said not in done.stderr:
            return f"exit {done.returncode}: {done.stderr!r}"
        if notes.read_bytes() != NOTES or Files.requests:
            return f"the link was followed: {len(Files.requests)} requests"
        return None

    def teammates_link_is_refused(self) -> str | None:
        return self.link_is_refused(self.team(), self.victims_notes())

    def directory_link_below_a_parent_not_readable(self) -> str | None:
        """The teammate's link team/drop -> the victim's directory, team in a 0711 directory
        (searchable, not readable, as many homes): download to team/drop/notes.txt is refused."""
        parent = Path(tempfile.mkdtemp(dir=self.work))
        parent.chmod(0o711)
        team = parent / "team"
        team.mkdir()
        shutil.chown(team, group=self.group)
        team.chmod(0o2775)
        return self.link_is_refused(team, self.victims_notes(), on_the_way=True)

    def owners_link(self) -> str | None:
        shared = self.sticky()
        shutil.chown(shared, user=self.attacker)  # 1777, the attacker's: the kernel follows theirs
        return self.link_is_refused(shared, self.victims_notes())

    def renamed_over(self) -> str | None:
        team = self.team()
        self.as_user(self.victim, f"echo earlier > '{team / 'data.csv'}'").check_returncode()
        command = [RUNUSER, "-u", self.attacker, "--", self.python, "-c", RENAMER, str(team)]
        renamer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        slow = self.url.replace("/files/", "/slow/")
        try:
            done = self.download(slow, "data.csv", "--sha256", SHA, cwd=team)
        finally:
            (team / "stop").touch()
            out, err = renamer.communicate(timeout=30)
        if out.strip() in (b"", b"0"):
            return f"the race was not run: the teammate renamed over nothing ({out!r}, {err!r})"
        kept = (team / "data.csv").read_bytes()
        if done.returncode == 0 or kept != b"earlier\n":
            return f"exit {done.returncode}, data.csv now {kept[:40]!r}: {done.stderr!r}"
        if b"another file was put in place of the temporary file" not in done.stderr:
            return f"not said: {done.stderr!r}"
        return None

    def fifo_read_by(
        self, user: str, fifo: Path, mode: str
    ) -> tuple[Path, subprocess.Popen[bytes]]:
        """A FIFO ``user`` makes (with ``mode``) and reads, for at most 20 s."""
        self.as_user(user, f"mkfifo -m {mode} '{fifo}'").check_returncode()
        command = [RUNUSER, "-u", user, "--", "timeout", "20", "cat", str(fifo)]
        return fifo, subprocess.Popen(command, stdout=subprocess.PIPE)

    def planted_fifo_gets_nothing(self) -> str | None:
        shared = self.sticky()
        fifo, reader = self.fifo_read_by(self.attacker, shared / "report.csv", "622")
        done = self.download(self.url, "report.csv", "--sha256", SHA, cwd=shared)
        release = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) if reader.poll() is None else None
        if release is not None:
            os.close(release)  # the reader still waits in open(): let it go
        got = reader.communicate(timeout=30)[0]
        if got or done.returncode == 0 or Files.requests:
            return f"the attacker read {len(got)} bytes; exit {done.returncode}; {len(Files.requests)} requests"
        if b"a FIFO another user made" not in done.stderr:
            return f"not said: {done.stderr!r}"
        return None

    def own_fifo_is_written(self) -> str | None:
        shared = self.sticky()
        _, reader = self.fifo_read_by(self.victim, shared / "out.csv", "600")
        got: list[bytes] = []
        draining = threading.Thread(target=lambda: got.append(reader.communicate(timeout=30)[0]))
        draining.start()  # read as it comes: a full pipe would stop the reader, then the writer
        done = self.download(self.url, "out.csv", "--sha256", SHA, cwd=shared)
        draining.join(30)
        if (done.returncode, got) != (0, [DATA]):
            return f"exit {done.returncode}, {len(b''.join(got))} of {len(DATA)} bytes read: {done.stderr!r}"
        return None

    def dev_stdout_appends(self) -> str | None:
        directory = self.sticky()
        log = directory / "t.log"
        self.as_user(self.victim, f"echo earlier > '{log}'").check_returncode()
        client = f"{self.python} {self.work / 'dataset_client.py'}"
        done = self.as_user(
            self.victim, f"cd '{directory}' && {client} download '{self.url}' /dev/stdout >> t.log"
        )
        return (
            None
            if log.read_bytes() == b"earlier\n" + DATA
            else f"exit {done.returncode}: {done.stderr!r}"
        )

    def skip_never_follows_the_attackers_link(self) -> str | None:
        shared = self.sticky()
        notes = shared / "notes.bin"
        self.as_user(
            self.victim, f"cat > '{notes}'", input=DATA
        ).check_returncode()  # has the expected sha256
        self.as_user(self.attacker, f"ln -s '{notes}' '{shared / 'report.csv'}'").check_returncode()
        done = self.download(self.url, "report.csv", "--sha256", SHA, cwd=shared)
        if done.returncode != 1 or b"refusing to follow a symbolic link" not in done.stderr:
            return f"exit {done.returncode}: {done.stderr!r}"
        return (
            None if notes.read_bytes() == DATA and not Files.requests else "the link was followed"
        )

    def skip_never_trusts_the_attackers_file(self) -> str | None:
        shared = Path(tempfile.mkdtemp(dir=self.work))
        shared.chmod(0o777)  # a team's directory: not sticky
        self.as_user(
            self.attacker, f"cat > '{shared / 'report.csv'}'", input=DATA
        ).check_returncode()
        done = self.download(self.url, "report.csv", "--sha256", SHA, cwd=shared)
        owner = pwd.getpwuid((shared / "report.csv").stat().st_uid).pw_name
        if done.returncode != 0 or len(Files.requests) != 1 or owner != self.victim:
            return f"exit {done.returncode}, {len(Files.requests)} requests, owner {owner}: {done.stderr!r}"
        return None

    def config_of_another_user_is_refused(self) -> str | None:
        config = self.sticky() / "config.toml"
        text = f'[default]\\nbase_url = "{self.url}"\\n'
        self.as_user(self.attacker, f"umask 022 && printf '{text}' > '{config}'").check_returncode()
        environment = f"DATASET_CLIENT_CONFIG='{config}'"
        client = f"{self.python} {self.work / 'dataset_client.py'}"
        done = self.as_user(self.victim, f"{environment} {client} datasets")
        if done.returncode != 2 or b"is owned by another user" not in done.stderr or Files.requests:
            return f"exit {done.returncode}, {len(Files.requests)} requests: {done.stderr!r}"
        own = config.with_name("own.toml")
        self.as_user(
            self.victim, f"install -m 600 '{config}' '{own}'"
        ).check_returncode()  # as the message says
        done = self.as_user(self.victim, f"DATASET_CLIENT_CONFIG='{own}' {client} datasets")
        return None if len(Files.requests) == 1 else f"the user's own copy: {done.stderr!r}"

    def planted_beside_is_never_run(self) -> str | None:
        """Issue 36: in a 1777 directory, the attacker's dataset_client_cli.py beside the victim's
        library, then the attacker's .pyc in __pycache__ beside the victim's own pair (-I, -B,
        PYTHONDONTWRITEBYTECODE=1), then the attacker's library beside the victim's CLI: none runs."""
        shared = self.sticky()
        library, cli = shared / "dataset_client.py", shared / "dataset_client_cli.py"
        self.as_user(self.victim, f"cp '{self.work / library.name}' '{library}'").check_returncode()
        ran = shared / "ran"
        self.as_user(
            self.attacker, f"echo \"open('{ran}', 'w').close()\" > '{cli}'"
        ).check_returncode()
        done = self.as_user(self.victim, f"{self.python} -I '{library}' --version")
        said = f"{cli} is not run: not a regular file of yours (owner: uid {pwd.getpwnam(self.attacker).pw_uid})"
        if done.returncode != 2 or said.encode() not in done.stderr or ran.exists():
            return f"their CLI: exit {done.returncode}, ran: {ran.exists()}: {done.stderr!r}"
        self.as_user(self.attacker, f"rm -f '{cli}'").check_returncode()
        self.as_user(self.victim, f"cp '{self.work / cli.name}' '{cli}'").check_returncode()
        planting = self.as_user(self.attacker, f"{self.python} - '{shared}'", input=PYC.encode())
        planting.check_returncode()
        for flags in ("-I", "-I -B", "-I -X pycache_prefix=/nonexistent"):
            for script in (library, cli):
                command = f"PYTHONDONTWRITEBYTECODE=1 {self.python} {flags} '{script}' --version"
                done = self.as_user(self.victim, command)
                if done.returncode != 0 or ran.exists():
                    return f"{flags} {script.name}: their .pyc ran: {ran.exists()}: {done.stderr!r}"
        self.as_user(self.victim, f"rm -f '{library}'").check_returncode()
        self.as_user(
            self.attacker, f"cp '{self.work / library.name}' '{library}'"
        ).check_returncode()
        done = self.as_user(self.victim, f"{self.python} -I '{cli}' --version")
        if done.returncode != 2 or b"is not a regular file of yours" not in done.stderr:
            return f"their library: exit {done.returncode}: {done.stderr!r}"
        return None


# The attacker's loop: for each of the pair in the directory given, a .pyc in __pycache__ whose
# header matches the file (mtime, size), as Python's loader checks it, creating the file "ran".
PYC = """
import importlib.util, marshal, os, sys
directory = sys.argv[1]
os.makedirs(os.path.join(directory, "__pycache__"), exist_ok=True)
for name in ("dataset_client", "dataset_client_cli"):
    source = os.path.join(directory, name + ".py")
    status = os.stat(source)
    code = compile(f"open({os.path.join(directory, 'ran')!r}, 'w').close()", source, "exec")
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(status.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    header += (status.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cached = os.path.join(directory, "__pycache__", f"{name}.{sys.implementation.cache_tag}.pyc")
    with open(cached, "wb") as file:
        file.write(header + marshal.dumps(code))
"""


def python_for(user: str) -> str | None:
    """A Python 3.11+ that ``user`` can run (this one may lie under root's home)."""
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        code = "import sys; sys.exit(sys.version_info < (3, 11))"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if (
                subprocess.run(
                    [RUNUSER, "-u", user, "--", python, "-c", code], capture_output=True, timeout=30
                ).returncode
                == 0
            ):
                return python
    return None


def make_user(prefix: str, group: str) -> str:
    name = f"{prefix}{os.urandom(3).hex()}"
    command = ["useradd", "--no-create-home", "--shell", "/bin/sh", "--groups", group, name]
    subprocess.run(command, check=True, capture_output=True)
    return name


def main() -> int:
    tools = ("useradd", "userdel", "groupadd", "groupdel", "runuser")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        print(
            f"SKIPPED: second users: {'not root' if os.geteuid() else 'no ' + ', '.join(missing)}"
        )
        return 0
    print("== second users (useradd, groupadd, runuser) in sticky and team directories")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    users: list[str] = []
    checks: Checks | None = None
    work = Path(tempfile.mkdtemp(prefix="second-users-"))
    group = f"dcteam{os.urandom(3).hex()}"
    try:
        subprocess.run(["groupadd", group], check=True, capture_output=True)
        users += [make_user("dcfs", group), make_user("dcfs", group)]
        work.chmod(0o755)
        for module in ("dataset_client.py", "dataset_client_cli.py"):
            shutil.copy(ROOT / module, work / module)
        python = python_for(users[0])
        if python is None:
            print("SKIPPED: second users: no Python 3.11+ that another user can run")
            return 0
        url = f"http://127.0.0.1:{server.server_address[1]}/files/report.csv"
        checks = Checks(work, url, (users[0], users[1], group), python)
        checks.check("a FIFO another user planted gets nothing", checks.planted_fifo_gets_nothing)
        checks.check("the user's own FIFO is written", checks.own_fifo_is_written)
        checks.check("download URL /dev/stdout >> t.log appends", checks.dev_stdout_appends)
        checks.check(
            "the sha256 skip never follows another's link",
            checks.skip_never_follows_the_attackers_link,
        )
        checks.check(
            "the sha256 skip never trusts another's file",
            checks.skip_never_trusts_the_attackers_file,
        )
        checks.check(
            "a config file another user owns is refused", checks.config_of_another_user_is_refused
        )
        checks.check("2775: a teammate's link is not followed", checks.teammates_link_is_refused)
        checks.check("2775: a file renamed over the temporary is not kept", checks.renamed_over)
        checks.check(
            "2775 below 0711: a teammate's directory link on the way is not followed",
            checks.directory_link_below_a_parent_not_readable,
        )
        checks.check("1777: the directory owner's link is not followed", checks.owners_link)
        checks.check(
            "1777: a CLI, library or .pyc another user put beside the pair is never run",
            checks.planted_beside_is_never_run,
        )
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(work, ignore_errors=True)
        for user in users:
            subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
    assert checks is not None
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())

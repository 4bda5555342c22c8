"""Shared directories with REAL second users (issues 23, 30, 35): a victim and an attacker made
with useradd, teammates in a group made with groupadd, driven with runuser, the CLI (or the
library) run as the victim in sticky world-writable directories and in a 2775 team directory.

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
        if re.fullmatch(r"[.]data[.]csv[.]part[.](?:[0-9]|[0-9a-f]{12})", name):
            with open(os.path.join(team, "theirs"), "wb") as file:
                file.write(b"the teammate's rows")
            os.replace(os.path.join(team, "theirs"), os.path.join(team, name))
            renamed += 1
    time.sleep(0.002)
print(renamed)
"""


# Every name a download to data.csv may make (issue 35): the temporary file's (three, then one no
# one can guess, of which a few of that pattern), the partial file's, its state's, the state's own
# temporary file's, the lock's where there is no flock.
SIDE_NAMES = [
    *(f".data.csv.part.{slot}" for slot in (1, 2, 3)),
    ".data.csv.part.000000000000",
    ".data.csv.part.ffffffffffff",
    ".data.csv.part",
    ".data.csv.part.json",
    ".data.csv.part.json.tmp",
    ".data.csv.part.json.00000000.tmp",
    ".data.csv.part.lock",
]

# The teammate's loop (issue 35, the fourth review): team/box swapped for its link to the victim's
# other directory and back, the real one left in place a millisecond between swaps (so that the
# victim's walks mostly pass and its downloads are swapped under them), until the file "stop"
# appears (at most 30 s); prints how many swaps it made.
SWAPPER = """
import os, sys, time
team, elsewhere, swaps, ends = sys.argv[1], sys.argv[2], 0, time.monotonic() + 30
box, away = os.path.join(team, "box"), os.path.join(team, "box.away")
while time.monotonic() < ends and not os.path.exists(os.path.join(team, "stop")):
    os.rename(box, away)
    os.symlink(elsewhere, box)
    os.unlink(box)
    os.rename(away, box)
    swaps += 1
    time.sleep(0.001)
print(swaps)
"""

# The victim's downloads to team/box/data.csv in one process, half with resume=True: prints how
# each ended (a JSON object of counts).
SWAPPED_DOWNLOADS = """
import collections, json, sys
sys.path.insert(0, sys.argv[1])
import dataset_client as dc
ended = collections.Counter()
with dc.DatasetClient(sys.argv[2], timeout=30, max_retries=0) as client:
    for number in range(int(sys.argv[4])):
        try:
            client.download(sys.argv[2], sys.argv[3], resume=number % 2 == 1)
            ended["downloaded"] += 1
        except OSError as exc:
            ended[type(exc).__name__ + ": " + (exc.strerror or str(exc))[:60]] += 1
print(json.dumps(ended))
"""

# The victim's process holding a log open, downloading to team/inbox/FD once its line is read
# (the teammate makes inbox -> /proc/PID/fd meanwhile): prints its pid and descriptor, then how the
# download ended.
HOLDING_A_LOG = """
import os, sys
sys.path.insert(0, sys.argv[1])
import dataset_client as dc
log = open(sys.argv[3], "ab")
print(os.getpid(), log.fileno(), flush=True)
sys.stdin.readline()
try:
    dc.DatasetClient(sys.argv[2]).download(sys.argv[2], f"{sys.argv[4]}/{log.fileno()}")
    print("downloaded")
except OSError as exc:
    print(type(exc).__name__, exc.filename, exc.strerror)
"""

# The neighbour's loop (issue 35): at each name a download may make, its own file, link, FIFO or
# directory made and removed again (never another's: those it only steps over), until the file
# "stop" appears (at most 30 s); prints how many it made.
PLANTER = """
import os, sys, time
directory, target, made, ends = sys.argv[1], sys.argv[2], 0, time.monotonic() + 30
names = sys.argv[3:]
makers = [
    lambda path: os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)),
    lambda path: os.symlink(target, path),
    lambda path: os.mkfifo(path, 0o666),
    lambda path: os.mkdir(path),
]
while time.monotonic() < ends and not os.path.exists(os.path.join(directory, "stop")):
    for number, name in enumerate(names):
        path = os.path.join(directory, name)
        try:
            makers[(made + number) % 4](path)
            made += 1
        except OSError:
            continue
        if os.lstat(path).st_uid == os.getuid():
            (os.rmdir if os.path.isdir(path) and not os.path.islink(path) else os.unlink)(path)
print(made)
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

    def plant_everywhere(
        self, directory: Path, kind: str, notes: Path
    ) -> dict[str, tuple[int, int]]:
        """The attacker's ``kind`` (file, link to ``notes``, fifo, directory) at every side name;
        what is there (inode, mode) after."""
        make = {
            "file": "echo theirs > '{}'",
            "link": f"ln -s '{notes}' '{{}}'",
            "fifo": "mkfifo -m 666 '{}'",
            "directory": "mkdir '{}'",
        }[kind]
        for name in SIDE_NAMES:
            self.as_user(self.attacker, make.format(directory / name)).check_returncode()
        return {name: self.looked_at(directory / name) for name in SIDE_NAMES}

    @staticmethod
    def looked_at(path: Path) -> tuple[int, int]:
        status = path.lstat()
        return status.st_ino, status.st_mode

    def planted_at_every_name(self) -> str | None:
        """Issue 35: a neighbour's files, links, FIFOs and directories at every name the client may
        make beside data.csv, in a 2775 and a 1777 directory: every download (plain and -c) is
        whole, none of theirs touched, nothing of the victim's left."""
        for make_directory in (self.team, self.sticky):
            for kind in ("file", "link", "fifo", "directory"):
                directory, notes = make_directory(), self.victims_notes()
                planted = self.plant_everywhere(directory, kind, notes)
                for options in ((), ("-c",), ("-c", "--connections", "2")):
                    with contextlib.suppress(FileNotFoundError):
                        (directory / "data.csv").unlink()
                    done = self.download(
                        self.url, "data.csv", "--sha256", SHA, *options, cwd=directory
                    )
                    where = f"{directory.stat().st_mode:o}, {kind}, {options}"
                    if done.returncode != 0 or (directory / "data.csv").read_bytes() != DATA:
                        return f"{where}: exit {done.returncode}: {done.stderr!r}"
                    now = {name: self.looked_at(directory / name) for name in SIDE_NAMES}
                    left = sorted({p.name for p in directory.iterdir()} - {*SIDE_NAMES, "data.csv"})
                    if now != planted or left or notes.read_bytes() != NOTES:
                        return f"{where}: theirs changed or the victim's left: {left}"
        return None

    def neighbour_racing_the_names(self) -> str | None:
        """Issue 35: the neighbour making and removing its files, links, FIFOs and directories at
        every side name in a loop while the victim downloads 40 times (plain and -c): all whole."""
        for make_directory in (self.team, self.sticky):
            directory, notes = make_directory(), self.victims_notes()
            command = [RUNUSER, "-u", self.attacker, "--", self.python, "-c", PLANTER]
            command += [str(directory), str(notes), *SIDE_NAMES]
            planter = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                failed = []
                for number in range(40):
                    resume = ("-c",) if number % 2 else ()
                    done = self.download(self.url, "data.csv", *resume, cwd=directory)
                    if done.returncode != 0:
                        failed.append(done.stderr[-200:])
            finally:
                (directory / "stop").touch()
                out, err = planter.communicate(timeout=60)
            if out.strip() in (b"", b"0"):
                return f"the race was not run ({out!r}, {err!r})"
            left = sorted({p.name for p in directory.iterdir()} - {*SIDE_NAMES, "data.csv", "stop"})
            if failed or left or (directory / "data.csv").read_bytes() != DATA:
                return f"{len(failed)} of 40 failed ({failed[:1]!r}), left {left}"
            if notes.read_bytes() != NOTES:
                return "the victim's notes changed"
        return None

    def swapped_directory_changes_nothing_elsewhere(self) -> str | None:
        """Issue 35 (the fourth review): team/box swapped for the teammate's link to the victim's
        other directory and back in a loop, the victim downloading to team/box/data.csv 1,000 times
        (half with resume): nothing made, replaced or removed in that other directory."""
        team = self.team()
        self.as_user(self.victim, f"mkdir '{team / 'box'}'").check_returncode()
        elsewhere = self.victims_notes().parent
        partial = elsewhere / ".data.csv.part"
        made = f"echo other > '{partial}' && echo {{}} > '{partial}.json'"
        self.as_user(self.victim, made).check_returncode()
        before = {p.name: (self.looked_at(p), p.read_bytes()) for p in elsewhere.iterdir()}
        code = [self.python, "-c", SWAPPED_DOWNLOADS, str(self.work), self.url]
        victim = [RUNUSER, "-u", self.victim, "--", *code, str(team / "box" / "data.csv")]
        # The control: without the teammate's swaps, every download ends in team/box.
        done = subprocess.run([*victim, "4"], capture_output=True, timeout=120)
        if done.stdout.strip() != b'{"downloaded": 4}':
            return f"the control: {done.stdout!r} {done.stderr[-300:]!r}"
        command = [RUNUSER, "-u", self.attacker, "--", self.python, "-c", SWAPPER]
        swapper = subprocess.Popen(
            [*command, str(team), str(elsewhere)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            done = subprocess.run([*victim, "1000"], capture_output=True, timeout=120)
        finally:
            (team / "stop").touch()
            out, err = swapper.communicate(timeout=60)
        if out.strip() in (b"", b"0") or done.returncode != 0:
            return f"not run: {out!r} {err!r} {done.stderr[-300:]!r}"
        after = {p.name: (self.looked_at(p), p.read_bytes()) for p in elsewhere.iterdir()}
        if after != before:
            return f"the other directory changed: {sorted(after)} (ended: {done.stdout!r})"
        print(f"      {int(out)} swaps; the downloads ended: {done.stdout.decode().strip()}")
        return None

    def teammates_link_to_descriptors_is_refused(self) -> str | None:
        """Issue 35: team/inbox -> /proc/<victim's pid>/fd, the teammate's: the victim's download
        to team/inbox/N is a PermissionError naming inbox, before any request; its log unchanged."""
        team = self.team()
        log = self.victims_notes()
        code = [
            self.python,
            "-c",
            HOLDING_A_LOG,
            str(self.work),
            self.url,
            str(log),
            str(team / "inbox"),
        ]
        victim = subprocess.Popen(
            [RUNUSER, "-u", self.victim, "--", *code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert victim.stdout is not None and victim.stdin is not None
        pid = victim.stdout.readline().split()[0].decode()
        self.as_user(self.attacker, f"ln -s /proc/{pid}/fd '{team / 'inbox'}'").check_returncode()
        out, err = victim.communicate(b"go\n", timeout=30)
        said = (
            f"PermissionError {team / 'inbox'} refusing to follow a symbolic link another user made"
        )
        if out.decode().strip() != said or Files.requests or log.read_bytes() != NOTES:
            return f"{out!r} {err[-300:]!r}, {len(Files.requests)} requests"
        return None

    def unread_fifo_ends_at_the_deadline(self) -> str | None:
        """Issue 35: the teammate's 0664 FIFO at team/data.csv that no one reads: --max-time 2
        ends the victim's download within a second of it (exit 3), nothing asked."""
        team = self.team()
        self.as_user(self.attacker, f"mkfifo -m 664 '{team / 'data.csv'}'").check_returncode()
        client = f"{self.python} {self.work / 'dataset_client.py'}"
        command = f"cd '{team}' && {client} --max-time 2 download '{self.url}' data.csv"
        started = time.monotonic()
        done = self.as_user(self.victim, command)
        took = time.monotonic() - started
        if done.returncode != 3 or took > 3 + 1 or Files.requests:
            return f"exit {done.returncode} after {took:.1f} s, {len(Files.requests)} requests: {done.stderr!r}"
        print(f"      ended after {took:.2f} s (--max-time 2, the process's start included)")
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
        uid = pwd.getpwnam(self.attacker).pw_uid
        said = f"{cli} is not run (owner: uid {uid}): another user's file"
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
        if done.returncode != 2 or b"another user's file" not in done.stderr:
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


def remove_user(name: str) -> None:
    """userdel, once the user's last process is gone: it refuses a user a process still runs as."""
    for _ in range(50):
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        done = subprocess.run(["userdel", name], capture_output=True, text=True)
        if done.returncode != 8:  # 8: the user is logged in (a process of theirs)
            break
        time.sleep(0.1)
    if done.returncode != 0:
        print(f"WARNING: user {name} not removed: {done.stderr.strip()}")


def main() -> int:
    tools = ("useradd", "userdel", "groupadd", "groupdel", "runuser", "pkill")
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
            "2775, 1777: a neighbour's files, links, FIFOs, directories at every side name",
            checks.planted_at_every_name,
        )
        checks.check(
            "2775, 1777: a neighbour making and removing them in a loop",
            checks.neighbour_racing_the_names,
        )
        checks.check(
            "2775: team/box swapped for a link in a loop changes nothing elsewhere",
            checks.swapped_directory_changes_nothing_elsewhere,
        )
        checks.check(
            "2775: a teammate's link to /proc/PID/fd is refused",
            checks.teammates_link_to_descriptors_is_refused,
        )
        checks.check(
            "2775: a teammate's FIFO no one reads ends at --max-time",
            checks.unread_fifo_ends_at_the_deadline,
        )
        checks.check(
            "1777: a CLI, library or .pyc another user put beside the pair is never run",
            checks.planted_beside_is_never_run,
        )
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(work, ignore_errors=True)
        for user in users:
            remove_user(user)
        subprocess.run(["groupdel", group], capture_output=True)
    assert checks is not None
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())

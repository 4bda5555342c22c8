"""Files and shared directories: links and files other users planted, FIFOs and descriptors,
the lock and the side files a download makes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from tests.support import (
    DATA,
    DATA_SHA,
    KEY,
    ROOT,
    ServerTestCase,
    cut,
    first_bytes_then_stall,
    hang,
    import_or_skip,
    other_user,
    outcome_of,
    reply,
    serve_file,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class SharedDirectoryTests(ServerTestCase):
    """Downloads into directories other people can write to: real links, real second users."""

    def user(self) -> tuple[str, int, int]:
        user = other_user()
        if user is None:
            self.skipTest("needs root and useradd to make a second user")
        return user

    def shared(self, mode: int) -> Path:
        directory = self.tmp()
        directory.chmod(mode)  # 0o1777 as /tmp; 0o777 as a team's group-writable directory
        return directory

    def victim_file(self) -> Path:
        notes = self.tmp() / "notes.txt"
        notes.write_text("the victim's notes")
        return notes

    def plant(
        self,
        path: Path,
        user: tuple[str, int, int],
        *,
        link_to: Path | None = None,
        data: bytes = b"",
    ) -> None:
        """A file or link that ``user`` owns, as if that user had made it."""
        if link_to is not None:
            subprocess.run(
                ["runuser", "-u", user[0], "--", "ln", "-s", str(link_to), str(path)], check=True
            )
        else:
            path.write_bytes(data)
            os.chown(path, user[1], user[2])
            path.chmod(0o666)

    def test_a_link_another_user_owns_is_refused_sticky_or_not(self) -> None:
        # Issue 30: in a 2775 team directory a teammate's link at data.csv to ~/notes.txt made the
        # download replace notes.txt; so did a 1777 directory owner's link. The kernel follows both.
        user, cases = self.user(), ("/tmp", "team", "team", "the link's owner's")
        for mode, whose in zip((0o1777, 0o2775, 0o777, 0o1777), cases, strict=True):
            with self.subTest(mode=oct(mode), directory=whose):
                shared, notes = self.shared(mode), self.victim_file()
                if whose != "/tmp":
                    os.chown(shared, user[1] if whose == "the link's owner's" else -1, user[2])
                self.plant(shared / "data.csv", user, link_to=notes)
                with self.assertRaises(PermissionError) as caught:
                    self.client().download("files/x", shared / "data.csv", sha256=DATA_SHA)
                self.assertEqual(caught.exception.filename, str(shared / "data.csv"))
                said = "refusing to follow a symbolic link another user made"
                self.assertIn(said, str(caught.exception))
                self.assertEqual(notes.read_text(), "the victim's notes")
                self.assertEqual(self.requests, [], "refused before any request")
                self.assertEqual([p.name for p in shared.iterdir()], ["data.csv"])

    def test_a_directory_link_another_user_owns_on_the_way_is_refused(self) -> None:
        # Found in review: a teammate's link team/drop -> ~victim made team/drop/notes.txt replace
        # the victim's notes. The user's own links on the way are followed, as before.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])  # a team directory: the teammate's group may write there
        self.plant(shared / "drop", user, link_to=notes.parent)
        (shared / "mine").symlink_to(shared / "drop")  # the user's own, through the teammate's
        for via in ("drop", "mine", "drop/../drop", "mine/."):
            with self.subTest(via=via), self.assertRaises(PermissionError) as caught:
                self.client().download("files/x", f"{shared}/{via}/notes.txt", sha256=DATA_SHA)
            self.assertEqual(caught.exception.filename, str(shared / "drop"))
            said = "refusing to follow a symbolic link another user made"
            self.assertIn(said, str(caught.exception))
        self.assertEqual(notes.read_text(), "the victim's notes")
        self.assertEqual(self.requests, [], "refused before any request")
        (shared / "own").symlink_to(notes.parent)
        self.script(serve_file(DATA))
        self.client().download("files/x", shared / "own" / "new.csv")
        self.assertEqual((notes.parent / "new.csv").read_bytes(), DATA)

    def test_a_directory_swapped_for_a_link_after_the_walk_gets_nothing_replaced(self) -> None:
        # Found in review: a teammate swapping team/box for a link to ~victim between the client's
        # walk and its making the file replaced the victim's notes (0.1% of tries, in a loop).
        # Issue 35: every side file is made in the directory walked to, held: the download ends
        # there, wherever the teammate moved it.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])
        (box := shared / "box").mkdir()
        create, swapped = dc._Directory.create, list[str]()

        def swapping(directory: Any, name: str, mode: int = 0o600) -> int:
            if not swapped:  # the first file the download makes: box goes, the link comes
                swapped.append(name)
                box.rename(shared / "box.away")
                self.plant(box, user, link_to=notes.parent)
            return create(directory, name, mode)  # type: ignore[no-any-return]

        self.script(serve_file(DATA))
        with mock.patch.object(dc._Directory, "create", swapping):
            self.client().download("files/x", box / "notes.txt")
        self.assertEqual(swapped, [".notes.txt.part.1"])
        self.assertEqual(notes.read_text(), "the victim's notes")
        self.assertEqual(sorted(p.name for p in notes.parent.iterdir()), ["notes.txt"])
        self.assertEqual((shared / "box.away" / "notes.txt").read_bytes(), DATA)
        self.assertEqual([p.name for p in (shared / "box.away").iterdir()], ["notes.txt"])

    def test_a_directory_link_is_refused_whatever_the_link_at_the_end_says(self) -> None:
        # Found in review: team/box -> ~victim/dots (a teammate's), and there the victim's own
        # data.bin -> ~victim/precious: the end link's absolute target skipped the walk of team/box.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])
        (dots := notes.parent / "dots").mkdir()
        (dots / "data.bin").symlink_to(notes)  # absolute
        self.plant(shared / "box", user, link_to=dots)
        with self.assertRaises(PermissionError) as caught:
            self.client().download("files/x", shared / "box" / "data.bin", sha256=DATA_SHA)
        self.assertEqual(caught.exception.filename, str(shared / "box"))
        self.assertEqual((notes.read_text(), self.requests), ("the victim's notes", []))

    def test_a_directory_missing_at_the_walk_is_never_replaced_by_path(self) -> None:
        # Found in review: team/box missing when the walk looked, a teammate's link to ~victim
        # there when the file was made: the commit went by path and replaced the victim's notes.
        user, notes = self.user(), self.victim_file()
        shared = self.shared(0o2775)
        os.chown(shared, -1, user[2])
        look, planted = dc._link_target, list[bool]()

        def planting(directory: Any, name: str, shown: str) -> str | None:
            target = look(directory, name, shown)
            if not planted:  # right after the walk found box missing: the teammate's link comes
                planted.append(True)
                self.plant(shared / "box", user, link_to=notes.parent)
            return target

        self.script(serve_file(DATA))
        with (
            mock.patch.object(dc, "_link_target", planting),
            self.assertRaises(OSError) as caught,
        ):
            self.client().download("files/x", shared / "box" / "notes.txt")
        self.assertEqual(planted, [True])
        self.assertEqual(caught.exception.errno, errno.ENOENT)
        self.assertEqual(notes.read_text(), "the victim's notes")
        self.assertEqual(sorted(p.name for p in notes.parent.iterdir()), ["notes.txt"])

    def test_the_users_own_links_and_roots_are_followed(self) -> None:
        me = os.geteuid()  # 4242 below: a user who is not root, the link root's (as /dev/stdout is)
        for mode, user in ((0o1777, me), (0o2775, me), (0o1777, 4242 if me == 0 else me)):
            with self.subTest(mode=oct(mode), user=user), mock.patch.object(dc.os, "geteuid") as id:
                id.return_value = user
                shared, notes = self.shared(mode), self.victim_file()
                (shared / "report.csv").symlink_to(notes)
                self.script(serve_file(DATA))
                self.client().download("files/x", shared / "report.csv")
                self.assertEqual(notes.read_bytes(), DATA, "the file the link names is replaced")
                self.assertTrue((shared / "report.csv").is_symlink())
                self.assertEqual(sorted(p.name for p in notes.parent.iterdir()), ["notes.txt"])

    def test_a_link_renamed_over_the_users_own_as_it_is_read_is_not_followed(self) -> None:
        # A teammate's link renamed over the user's own between the client's look and its read.
        user = self.user()
        if not dc._O_PATH:
            self.skipTest("without O_PATH the link is looked at, then read by its name")
        shared, notes, own = self.shared(0o2775), self.victim_file(), self.tmp() / "own.csv"
        os.chown(shared, -1, user[2])  # the teammate's group: they can write there
        (shared / "data.csv").symlink_to(own)
        self.plant(shared / "theirs", user, link_to=notes)
        read = os.readlink

        def renamed_over_it_first(path: Any, *args: Any, **kwargs: Any) -> Any:
            if os.path.lexists(shared / "theirs"):
                os.replace(shared / "theirs", shared / "data.csv")
            return read(path, *args, **kwargs)

        self.script(serve_file(DATA))
        with mock.patch.object(dc.os, "readlink", renamed_over_it_first):
            self.client().download("files/x", shared / "data.csv")
        self.assertFalse(os.path.lexists(shared / "theirs"), "renamed")
        self.assertEqual((own.read_bytes(), notes.read_text()), (DATA, "the victim's notes"))

    def test_ctrl_c_in_the_walk_never_closes_a_descriptor_twice(self) -> None:
        # Found in review (issue 35, L4): Ctrl-C just after the walk closed a directory's
        # descriptor, before it held the next, closed that number again on the way out: EBADF
        # replaced the KeyboardInterrupt (in a threaded program: another thread's descriptor).
        nested = self.tmp() / "a" / "b"
        nested.mkdir(parents=True)
        link = nested.parent / "link"
        link.symlink_to(nested)  # absolute: the walk starts again from /
        close, closes = os.close, [0]

        def counted(fd: int) -> None:
            close(fd)
            closes[0] += 1

        with mock.patch.object(dc.os, "close", counted):
            dc._Directory(str(link / "out.bin")).close()
        for interrupted in range(1, closes[0]):
            closed = [0]

            def close_then_ctrl_c(
                fd: int, at: int = interrupted, count: list[int] = closed
            ) -> None:
                close(fd)
                count[0] += 1
                if count[0] == at:
                    raise KeyboardInterrupt

            with (
                self.subTest(interrupted=interrupted),
                mock.patch.object(dc.os, "close", close_then_ctrl_c),
                self.assertRaises(KeyboardInterrupt),
            ):
                dc._Directory(str(link / "out.bin")).close()

    def test_links_planted_at_the_side_files_names_are_never_followed(self) -> None:
        user = self.user()
        # The partial file, its state, and a save of the state that kill -9 cut short (which is cleaned up).
        for name in (".out.bin.part", ".out.bin.part.json", ".out.bin.part.json.0123abcd.tmp"):
            with self.subTest(name):
                shared, notes = self.shared(0o777), self.victim_file()
                self.plant(shared / name, user, link_to=notes)
                self.script(serve_file(DATA))
                self.client().download("files/x", shared / "out.bin", resume=True)
                self.assertEqual(notes.read_text(), "the victim's notes")
                self.assertEqual((shared / "out.bin").read_bytes(), DATA)
                self.assertEqual(
                    sorted(p.name for p in shared.iterdir()), sorted([name, "out.bin"])
                )

    def test_a_planted_partial_file_and_forged_state_are_left_alone(self) -> None:
        user = self.user()
        shared = self.shared(0o1777)
        url = self.server.url + "/api/v1/files/x"
        forged = {"url": url, "validator": '"v1"', "total": 4, "parts": [[0, 4, 4]]}
        self.plant(shared / ".out.bin.part", user, data=b"EVIL")
        self.plant(shared / ".out.bin.part.json", user, data=json.dumps(forged).encode())
        self.script(serve_file(DATA))
        self.client().download("files/x", shared / "out.bin", resume=True)
        self.assertEqual((shared / "out.bin").read_bytes(), DATA)
        self.assertEqual(len(self.requests), 1, "the forged 'complete' state sent no request")
        self.assertIsNone(self.requests[0].headers["Range"])
        self.assertEqual(
            (shared / ".out.bin.part").read_bytes(),
            b"EVIL",
            "nothing written into the planted file",
        )
        self.assertEqual(
            sorted(p.name for p in shared.iterdir()),
            [".out.bin.part", ".out.bin.part.json", "out.bin"],
        )
        own = self.tmp()  # the control: the same files, this user's own, are taken up (their last byte asked again)
        (own / ".out.bin.part").write_bytes(b"EVIL")
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (own / ".out.bin.part.json").touch(0o600)
        (own / ".out.bin.part.json").write_text(json.dumps(forged))
        self.server.default = serve_file(
            DATA
        )  # a 206 of another size: the file changed, it starts over
        self.client().download("files/x", own / "out.bin", resume=True)
        self.assertEqual(self.requests[1].headers["Range"], "bytes=3-")

    def test_a_planted_world_writable_partial_file_never_receives_the_download(self) -> None:
        user = self.user()
        shared = self.shared(0o1777)
        self.plant(shared / ".out.bin.part", user)
        self.script(first_bytes_then_stall(DATA, 1_500_000))
        with self.assertRaises(dc.RequestTimeoutError):
            self.client(timeout=0.1, max_retries=0).download(
                "files/x", shared / "out.bin", resume=True
            )
        self.assertEqual(
            (shared / ".out.bin.part").read_bytes(), b"", "the other user could read it"
        )

    def test_a_partial_file_another_process_commits_as_this_one_opens_it_is_left_alone(
        self,
    ) -> None:
        # Found in review: the lock was taken on a .part another process had just renamed over the
        # destination; with no state beside it, this download truncated and rewrote the finished file.
        directory = self.tmp()
        destination = directory / "out.bin"
        (directory / ".out.bin.part").write_bytes(DATA)  # the other process's, complete
        take_the_lock = dc._FileTarget._lock

        def committed_first(target: Any, fd: int) -> bool:
            os.replace(
                directory / ".out.bin.part", destination
            )  # the other process's commit lands now
            return take_the_lock(target, fd)  # type: ignore[no-any-return]

        self.script(cut(DATA, 1000, {"ETag": '"v1"'}))
        with (
            mock.patch.object(dc._FileTarget, "_lock", committed_first),
            self.assertRaises(dc.IncompleteResponseError),
        ):
            self.client(max_retries=0).download("files/x", destination, resume=True)
        self.assertEqual(
            destination.read_bytes(), DATA, "the finished file is left exactly as it was"
        )
        self.assertEqual(sorted(p.name for p in directory.iterdir()), ["out.bin"])

    def test_a_file_renamed_over_the_temporary_file_is_never_committed(self) -> None:
        # Issue 30: a teammate's file renamed over .data.csv.*.part was committed: the call, given
        # the right sha256= (of the bytes the client wrote), returned normally, data.csv theirs.
        user = self.user()
        for resume in (False, True):
            with self.subTest(resume=resume):
                self.server.requests.clear()
                shared = self.shared(0o2775)
                destination, theirs = shared / "data.csv", shared / "theirs.csv"
                destination.write_text("the victim's earlier data")
                self.plant(theirs, user, data=b"the teammate's rows")

                def swap(done: int, total: int | None, planted: Path = theirs) -> None:
                    for name in (".data.csv.part", ".data.csv.part.1"):
                        if planted.exists() and (planted.parent / name).exists():
                            os.replace(planted, planted.parent / name)

                self.script(serve_file(DATA))
                fetch = self.client().download
                with self.assertRaises(PermissionError) as caught:
                    fetch("files/x", destination, sha256=DATA_SHA, resume=resume, progress=swap)
                self.assertFalse(theirs.exists(), "the rename took place")
                self.assertEqual(caught.exception.filename, str(destination))
                said = "another file was put in place of the temporary file: not committed"
                self.assertIn(said, str(caught.exception))
                self.assertEqual(destination.read_text(), "the victim's earlier data")
                self.assertEqual(len(self.requests), 1)
                self.assertEqual([p.name for p in shared.iterdir()], ["data.csv"])

    def test_a_file_renamed_over_the_temporary_as_it_is_committed_is_not_left_there(self) -> None:
        # The rename landing between the client's check and its rename: the check after finds it.
        user, replace = self.user(), os.replace
        for owner in ("a teammate", "the user"):
            with self.subTest(swapped_in_file_of=owner):
                shared = self.shared(0o2775)
                destination, theirs = shared / "data.csv", shared / "theirs.csv"
                if owner == "a teammate":
                    self.plant(theirs, user, data=b"their rows")
                else:
                    theirs.write_text("own")

                def renamed_over_it_first(
                    source: Any, target: Any, planted: Path = theirs, **at: Any
                ) -> None:
                    if Path(target).name == "data.csv":  # the commit: checked, not yet renamed
                        replace(planted, planted.parent / Path(source).name)
                    replace(source, target, **at)

                self.script(serve_file(DATA))
                with mock.patch.object(dc.os, "replace", renamed_over_it_first):
                    outcome = outcome_of(
                        lambda d=destination: self.client().download("files/x", d, sha256=DATA_SHA)  # type: ignore[misc]
                    )
                said = "another file was put in place of the temporary file and moved into place: "
                if owner == "a teammate":
                    self.assertIsInstance(outcome, PermissionError)
                    self.assertIn(said + "removed", str(outcome))
                    self.assertEqual(list(shared.iterdir()), [], "their file is not left there")
                else:
                    # Issue 35: the user's own file there, this download's linked nowhere: as
                    # another download's commit after this one (the last to commit wins).
                    self.assertIsNone(outcome)
                    self.assertEqual(destination.read_text(), "own")
                    self.assertEqual([p.name for p in shared.iterdir()], ["data.csv"])

    def test_a_commit_that_fails_after_the_move_leaves_the_temporary_name_alone(self) -> None:
        # Found in review: once moved, the temporary's name is free, and another download to the same
        # destination may take it; when the check after the move failed (this download's file moved
        # away, another put in its place), the clean-up removed that download's temporary file.
        directory, replace = self.tmp(), os.replace

        def moved_then_taken(source: Any, target: Any, **at: Any) -> None:
            replace(source, target, **at)
            if Path(target).name == "data.csv":
                replace(directory / "data.csv", directory / "moved.csv")
                (directory / "data.csv").write_text("own")
                (directory / ".data.csv.part.1").write_text("another download's")

        self.script(serve_file(DATA))
        with mock.patch.object(dc.os, "replace", moved_then_taken):
            outcome = outcome_of(lambda: self.client().download("files/x", directory / "data.csv"))
        self.assertIsInstance(outcome, PermissionError)
        self.assertIn("moved into place: left there", str(outcome))
        self.assertEqual(len(self.requests), 1)
        self.assertEqual((directory / ".data.csv.part.1").read_text(), "another download's")
        self.assertEqual((directory / "moved.csv").read_bytes(), DATA)

    def test_a_fifo_swapped_for_a_link_once_looked_at_never_gets_the_links_target_written(
        self,
    ) -> None:
        # Found in review: a destination found to be a FIFO was then opened "wb" (create, truncate,
        # following links): swapped for a link in between, the link's target was truncated and written.
        # The walk looks once at the destination, in its directory: the other user's move right after.
        shared, notes = self.shared(0o1777), self.victim_file()
        destination = shared / "out.bin"
        os.mkfifo(destination)
        looks: list[str] = []
        lstat = os.lstat

        def look_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            status = lstat(path, *args, **kwargs)
            if str(path) in (str(destination), destination.name) and not looks:
                looks.append(str(path))
                destination.unlink()
                destination.symlink_to(notes)
            return status

        self.script(serve_file(DATA))
        with mock.patch.object(os, "lstat", look_then_swap):
            outcome = outcome_of(lambda: self.client().download("files/x", destination, deadline=5))
        self.assertEqual(looks, ["out.bin"])
        self.assertIsInstance(outcome, OSError)
        self.assertEqual(notes.read_text(), "the victim's notes", f"the download: {outcome!r}")

    def test_dev_stdout_and_other_magic_links_are_written_through(self) -> None:
        self.script(serve_file(b"through /dev/stdout\n"))
        code = "import sys, dataset_client as dc\ndc.DatasetClient(sys.argv[1]).download('files/x', '/dev/stdout')\n"
        done = subprocess.run(
            [sys.executable, "-c", code, self.server.url], cwd=ROOT, capture_output=True, timeout=30
        )
        self.assertEqual((done.returncode, done.stdout), (0, b"through /dev/stdout\n"), done.stderr)

    def test_the_state_file_is_made_private(self) -> None:
        directory = self.tmp()
        modes: list[int] = []

        def look(done: int, total: int | None) -> None:
            state = directory / ".out.bin.part.json"
            if state.exists():
                modes.append(state.stat().st_mode & 0o777)

        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "out.bin", resume=True, progress=look)
        self.assertTrue(modes)
        self.assertEqual(
            set(modes), {0o600}, "the state holds the URL, which may carry a signature"
        )

    def test_a_temporary_file_left_by_kill_9_is_removed_by_the_next_download(self) -> None:
        fcntl = import_or_skip(self, "fcntl")
        code = (
            "import sys, dataset_client as dc\n"
            "with dc.DatasetClient(sys.argv[1], timeout=30, max_retries=0) as client:\n"
            "    client.download('files/x', sys.argv[2])\n"
        )
        for case, respond in (
            ("with bytes", first_bytes_then_stall(DATA, 1_500_000)),
            ("empty", hang),
        ):
            with self.subTest(
                killed=case
            ):  # empty: killed while waiting for the answer, before any write
                self.script(respond)
                directory, asked = self.tmp(), len(self.requests)
                arguments = [self.server.url + "/api/v1", str(directory / "out.bin")]
                process = subprocess.Popen([sys.executable, "-c", code, *arguments])
                self.addCleanup(process.kill)
                # Only the .part is looked at: the file made before it, under another name, may be gone by then.
                # Its request must have arrived too: else the next download got the scripted answer.
                empty = case == "empty"
                wait_for(
                    lambda d=directory, e=empty, n=asked: (  # type: ignore[misc]
                        len(self.requests) > n
                        and any(
                            p.name == ".out.bin.part.1" and (e or p.stat().st_size > 0)
                            for p in d.iterdir()
                        )
                    ),
                    10,
                )
                process.kill()
                process.wait(10)
                (left,) = directory.iterdir()
                self.assertEqual(left.name, ".out.bin.part.1")
                # Another download's, in progress: held, kept.
                busy = directory / ".out.bin.part.2"
                busy.write_bytes(b"")
                with busy.open("rb") as held:
                    fcntl.flock(held.fileno(), fcntl.LOCK_EX)
                    self.script(serve_file(DATA))
                    self.client().download("files/x", directory / "out.bin")
                self.assertEqual(
                    sorted(p.name for p in directory.iterdir()), [busy.name, "out.bin"]
                )

    def test_the_sweep_removes_only_the_names_the_client_makes(self) -> None:
        # Found in review: a download to notes.txt removed .notes.txt.from-laptop1.part (its length matched).
        import_or_skip(self, "fcntl")
        # Issue 35: the names a download probes for (no listing); the earlier scheme's random names
        # (.NAME.<12 hex>.part, .NAME.part.json.<8 hex>.tmp) are looked for no more, nor its
        # .NAME.1.part (the partial file of NAME.1) or this one's random .NAME.part.<12 hex>.
        users = [
            ".notes.txt.from-laptop1.part",
            ".notes.txt.0123456789AB.part",
            ".notes.txt.part.json.laptop-1.tmp",
            ".notes.txt.0123456789ab.part",
            ".notes.txt.part.json.0123abcd.tmp",
            ".notes.txt.4.part",
            ".notes.txt.01.part",
            ".notes.txt.1.part",
            ".notes.txt.part.4",
            ".notes.txt.part.01",
            ".notes.txt.part.0123456789ab",
        ]
        for resume in (False, True):
            with self.subTest(resume=resume):
                directory = self.tmp()
                for name in [*users, *(f".notes.txt.part.{n}" for n in (1, 2, 3))]:
                    (directory / name).write_bytes(b"kept")
                if resume:  # a save of the state that kill -9 cut short
                    (directory / ".notes.txt.part.json.tmp").write_bytes(b"{")
                self.script(serve_file(DATA))
                self.client().download("files/x", directory / "notes.txt", resume=resume)
                left = sorted(p.name for p in directory.iterdir())
                self.assertEqual(left, sorted([*users, "notes.txt"]))

    def test_a_download_never_takes_another_destinations_partial_file(self) -> None:
        # Found in review (issue 35, H1): a download to sales tried .sales.1.part for its temporary
        # file, the partial file of sales.1: it removed it as abandoned (the next resume of sales.1
        # started over), or a resume of sales.1 took up what a killed download to sales left there.
        directory = self.tmp()
        self.script(cut(DATA, 1_200_000, {"ETag": '"v1"'}))
        with self.assertRaises(dc.DatasetClientError):
            self.client(max_retries=0).download("files/x", directory / "sales.1", resume=True)
        kept = (directory / ".sales.1.part").read_bytes()
        self.script(serve_file(DATA[::-1]))
        self.client().download("files/y", directory / "sales")
        self.assertEqual((directory / ".sales.1.part").read_bytes(), kept)
        self.script(serve_file(DATA))
        self.client().download("files/x", directory / "sales.1", resume=True, sha256=DATA_SHA)
        self.assertEqual(self.requests[-1].headers["Range"], f"bytes={len(kept)}-")
        self.assertEqual(sorted(os.listdir(directory)), ["sales", "sales.1"])
        sent = [(r.path, r.headers["Range"]) for r in self.requests]
        resumed = ("/api/v1/files/x", f"bytes={len(kept)}-")
        self.assertEqual(sent, [("/api/v1/files/x", None), ("/api/v1/files/y", None), resumed])


class FileTestCase(ServerTestCase):
    """The file tests' base: a file another user made (as_stranger, in a sticky directory),
    a FIFO's reader, the command line in this process. In-process; a real second user is
    .ci/second_user_checks.py's.
    """

    STRANGER = 4242  # a uid no one here has: files "another user" made (chown needs root)

    def as_stranger(self, path: Path) -> Path:
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user")
        os.chown(path, self.STRANGER, self.STRANGER, follow_symlinks=False)
        return path

    def sticky(self) -> Path:
        directory = self.tmp()
        directory.chmod(0o1777)
        return directory

    def cli(self, *argv: str, environment: dict[str, str] | None = None) -> tuple[int, str]:
        """main() with no DATASET_CLIENT_ variables but ``environment``; (exit status, stderr)."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith("DATASET_CLIENT_")}
        err = io.StringIO()
        with (
            mock.patch.dict(
                os.environ, {**kept, "HOME": str(self.tmp()), **(environment or {})}, clear=True
            ),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(err),
        ):
            status = cli.main(list(argv))
        return status, err.getvalue()

    def read_fifo(self, fifo: Path) -> Callable[[], bytes]:
        """Start a reader of ``fifo``; the function returned ends it and gives what it read (also a cleanup)."""
        received = bytearray()
        reader = threading.Thread(target=lambda: received.extend(fifo.read_bytes()), daemon=True)
        reader.start()

        def finish() -> bytes:
            # A writer's open and close let the reader, waiting in open(), read to the end. Until
            # the reader is in open(), a non-blocking writer's open fails (ENXIO): tried again.
            deadline = time.monotonic() + 10
            while reader.is_alive() and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                reader.join(0.01)
            return bytes(received)

        self.addCleanup(finish)
        return finish


class OtherUsersFileTests(FileTestCase):
    """A file another user made or can write: a FIFO planted in a sticky directory, the file the
    command line's skip would trust, a config file.
    """

    def test_a_fifo_another_user_planted_in_a_sticky_directory_is_refused(self) -> None:
        shared = self.sticky()
        os.mkfifo(shared / "report.csv", 0o622)
        self.as_stranger(shared / "report.csv")
        received = self.read_fifo(shared / "report.csv")  # the other user, waiting for it
        with self.assertRaises(PermissionError) as caught:
            self.client().download("files/x", shared / "report.csv")
        self.assertEqual(caught.exception.filename, str(shared / "report.csv"))
        self.assertEqual(received(), b"")
        self.assertIn(
            "a FIFO another user made in a sticky world-writable directory", str(caught.exception)
        )
        self.assertEqual(self.requests, [], "refused before any request")

    def test_fifos_the_kernel_would_let_the_user_open_are_written(self) -> None:
        for case in ("own, sticky", "another's, not sticky", "the directory owner's, sticky"):
            with self.subTest(case):
                directory = self.tmp()
                directory.chmod(0o777 if "not sticky" in case else 0o1777)
                fifo = directory / "out.bin"
                os.mkfifo(fifo)
                if case != "own, sticky":
                    self.as_stranger(fifo)
                if "owner" in case:
                    os.chown(directory, self.STRANGER, self.STRANGER)
                received = self.read_fifo(fifo)
                self.script(serve_file(b"through the FIFO"))
                self.client().download("files/x", fifo)
                self.assertEqual(received(), b"through the FIFO")
                self.assertEqual([p.name for p in directory.iterdir()], ["out.bin"])

    def test_the_clis_skip_trusts_only_the_users_own_file(self) -> None:
        # Found in review: another user's file with the expected sha256 was trusted (and left as it was).
        directory = self.tmp()
        theirs = directory / "out.bin"
        theirs.write_bytes(DATA)
        self.as_stranger(theirs)
        self.script(serve_file(DATA))
        status, err = self.cli(
            "download", self.server.url + "/files/x", str(theirs), "--sha256", DATA_SHA
        )
        self.assertEqual(status, 0, err)
        self.assertNotIn("already has the expected sha256", err)
        self.assertEqual(len(self.requests), 1, "downloaded")
        self.assertEqual(theirs.stat().st_uid, os.geteuid(), "the user's own file now")
        status, err = self.cli(
            "download", self.server.url + "/files/x", str(theirs), "--sha256", DATA_SHA
        )
        self.assertEqual(
            (status, err), (0, f"{theirs} already has the expected sha256: not downloaded again\n")
        )
        self.assertEqual(len(self.requests), 1, "the control: the user's own file is trusted")

    def test_the_clis_skip_never_follows_a_link_the_download_refuses(self) -> None:
        shared, notes = self.sticky(), self.tmp() / "notes.bin"
        notes.write_bytes(DATA)  # the user's own, with the expected sha256
        (shared / "out.bin").symlink_to(notes)
        self.as_stranger(shared / "out.bin")
        status, err = self.cli(
            "download", self.server.url + "/files/x", str(shared / "out.bin"), "--sha256", DATA_SHA
        )
        self.assertEqual(status, 1, err)
        self.assertIn("refusing to follow a symbolic link another user made", err)
        self.assertEqual(self.requests, [])
        self.assertEqual(notes.read_bytes(), DATA)

    def test_a_skipped_download_leaves_no_partial_files(self) -> None:
        # Found in review: after the file was downloaded some other way, the -c partial files stayed for good.
        directory = self.tmp()
        url = self.server.url + "/files/x"
        (directory / ".out.bin.part").write_bytes(DATA[:1000])
        state = {
            "url": url,
            "validator": '"v1"',
            "total": len(DATA),
            "parts": [[0, len(DATA), 1000]],
        }
        # Made as the client saves a state: no one else may write it (whatever the umask).
        (directory / ".out.bin.part.json").touch(0o600)
        (directory / ".out.bin.part.json").write_text(json.dumps(state))
        (directory / "out.bin").write_bytes(DATA)
        status, err = self.cli(
            "download", url, str(directory / "out.bin"), "--sha256", DATA_SHA, "-c"
        )
        self.assertEqual(
            (status, err),
            (0, f"{directory / 'out.bin'} already has the expected sha256: not downloaded again\n"),
        )
        self.assertEqual(self.requests, [])
        self.assertEqual([p.name for p in directory.iterdir()], ["out.bin"])

    def test_a_skipped_download_says_nothing_of_a_neighbours_partial_files(self) -> None:
        # Found in review: a neighbour's .out.bin.part or .out.bin.part.json in a shared directory
        # made the skip warn "not resumable" of a download that never ran (it opened one to clear
        # them, making and removing a .out.bin.part.1); the user's own partial file stayed.
        shared = self.sticky()
        out = shared / "out.bin"
        out.write_bytes(DATA)
        skipped = f"{out} already has the expected sha256: not downloaded again\n"
        theirs = shared / ".out.bin.part"
        theirs.write_bytes(b"theirs")
        self.as_stranger(theirs)
        argv = ("download", self.server.url + "/files/x", str(out), "--sha256", DATA_SHA)
        self.assertEqual(self.cli(*argv), (0, skipped))
        self.assertEqual(sorted(p.name for p in shared.iterdir()), [".out.bin.part", "out.bin"])
        self.assertEqual(theirs.read_bytes(), b"theirs")
        theirs.rename(shared / ".out.bin.part.json")
        (shared / ".out.bin.part").write_bytes(DATA[:1000])
        self.assertEqual(self.cli(*argv), (0, skipped))
        names = sorted(p.name for p in shared.iterdir())
        self.assertEqual(names, [".out.bin.part.json", "out.bin"], "the user's own, removed")
        self.assertEqual(self.requests, [])

    def test_a_download_with_no_partial_file_never_opens_a_state(self) -> None:
        # Found in review: the CLI's look for a -c partial file opened .NAME.part.json before it
        # looked whether there was a .NAME.part at all (one openat more a download).
        out = self.tmp() / "out.bin"
        self.script(serve_file(DATA))
        with mock.patch.object(dc, "_read_state", wraps=dc._read_state) as read_state:
            status, err = self.cli("download", self.server.url + "/files/x", str(out))
        self.assertEqual(status, 0, err)
        self.assertEqual(out.read_bytes(), DATA)
        self.assertEqual([r.headers["Range"] for r in self.requests], [None])
        self.assertEqual(read_state.call_count, 0)

    def config_file(self, *, mode: int = 0o600) -> Path:
        config = self.tmp() / "config.toml"
        config.write_text(f'[default]\nbase_url = "{self.server.url}/api/v1"\napi_key = "{KEY}"\n')
        config.chmod(mode)
        return config

    def test_a_config_file_another_user_owns_or_can_write_is_refused(self) -> None:
        # Found in review: whoever could write the file set base_url, and the key went there.
        theirs = self.as_stranger(self.config_file())
        link = self.tmp() / "config.toml"
        link.symlink_to(theirs)
        writable = self.config_file(mode=0o620)
        self.server.default = reply(body=[])
        for path, said in (
            (
                theirs,
                f"{theirs} is owned by another user (uid {self.STRANGER}): not used; a copy of your own with"
                f" mode 600 works: install -m 600 {theirs} ~/dataset-client.toml and set"
                " DATASET_CLIENT_CONFIG=~/dataset-client.toml",
            ),
            (link, f"{link} is owned by another user (uid {self.STRANGER})"),
            (
                writable,
                f"{writable} is writable by group or others: not used; run chmod go-w {writable}",
            ),
        ):
            with self.subTest(str(path)):
                status, err = self.cli("datasets", environment={"DATASET_CLIENT_CONFIG": str(path)})
                self.assertEqual(status, 2, err)
                self.assertIn(said, err)
                self.assertEqual(self.requests, [], "nothing sent where that file says")
        status, err = self.cli(
            "datasets", environment={"DATASET_CLIENT_CONFIG": str(self.config_file())}
        )
        self.assertEqual(status, 0, err)
        self.assertEqual(
            self.requests[0].headers["Authorization"],
            f"Bearer {KEY}",
            "the control: the user's own",
        )

    def test_a_config_file_that_is_no_regular_file_or_too_large_is_refused_without_waiting(
        self,
    ) -> None:
        # Found in review2: a FIFO as the config file (one's own, or planted where DATASET_CLIENT_CONFIG
        # points) made every command wait in open() for a writer; a huge file was read whole.
        import_or_skip(self, "fcntl")
        fifo, huge, directory = self.tmp() / "fifo.toml", self.config_file(), self.tmp()
        os.mkfifo(fifo, 0o600)
        with huge.open("a") as file:
            file.write("# " + "x" * (1024 * 1024) + "\n")
        self.server.default = reply(body=[])
        for path, said in (
            (fifo, f"{fifo} is not a regular file: not used"),
            (huge, f"{huge} is larger than 1.0 MiB: not used"),
            (directory, f"cannot read the config file {directory}: Is a directory"),
        ):
            with self.subTest(str(path)):
                outcome: list[tuple[int, str]] = []
                environment = {"DATASET_CLIENT_CONFIG": str(path)}
                run = threading.Thread(
                    target=lambda seen, env: seen.append(self.cli("datasets", environment=env)),
                    args=(outcome, environment),
                    daemon=True,
                )
                run.start()
                run.join(10)
                if (
                    run.is_alive()
                ):  # waiting in open(): a writer's open and close lets it read an empty file
                    os.close(os.open(fifo, os.O_WRONLY))
                    run.join(10)
                self.assertEqual(len(outcome), 1)
                status, err = outcome[0]
                self.assertEqual((status, err), (2, f"dataset-client: error: {said}\n"))
                self.assertEqual(self.requests, [], "nothing sent")


class FifoAndDescriptorTests(FileTestCase):
    """FIFOs and descriptors as destinations: streams written at their position."""

    def test_a_fifo_whose_reader_goes_away_is_a_failed_download(self) -> None:
        # Found in this pass: the CLI took the FIFO's broken pipe for stdout's `| head` and exited 0.
        fifo = self.tmp() / "out.bin"
        os.mkfifo(fifo)

        def read_a_little() -> None:
            with fifo.open("rb") as reading:
                reading.read(1000)

        reader = threading.Thread(target=read_a_little, daemon=True)
        reader.start()
        self.script(serve_file(DATA))
        status, err = self.cli("download", self.server.url + "/files/x", str(fifo))
        reader.join(10)
        self.assertEqual(
            (status, err),
            (
                1,
                f"dataset-client: error: cannot write {fifo}: its reader went away (Broken pipe)\n",
            ),
        )
        self.assertEqual(len(self.requests), 1)

    def test_descriptors_are_streams_written_at_their_position(self) -> None:
        # Found in review: `download URL /dev/stdout >> t.log` resolved /dev/stdout to t.log and replaced it.
        log = self.tmp() / "t.log"
        log.write_bytes(b"earlier lines\n")
        inode = log.stat().st_ino
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)  # as the shell's >> opens it
        self.addCleanup(os.close, fd)
        link = self.tmp() / "to-the-log"
        link.symlink_to(f"/dev/fd/{fd}")
        descriptors = link.with_name("descriptors")
        descriptors.symlink_to("/proc/self/fd")  # a link to their directory
        expected = b"earlier lines\n"
        names = (
            f"/dev/fd/{fd}",
            f"/proc/self/fd/{fd}",
            f"/proc/{os.getpid()}/fd/{fd}",
            str(link),
            f"{descriptors}/{fd}",
        )
        for name in names:
            with self.subTest(name):
                self.script(serve_file(b"appended\n"))
                self.client().download("files/x", name)
                expected += b"appended\n"
                self.assertEqual(log.read_bytes(), expected)
                self.assertEqual(
                    log.stat().st_ino, inode, "the log itself, never a file moved over it"
                )
                self.assertEqual([p.name for p in log.parent.iterdir()], ["t.log"])
        with self.assertRaises(
            OSError
        ) as caught:  # no such descriptor: an OSError, never an OverflowError
            self.client().download("files/x", "/dev/fd/" + "9" * 30)
        self.assertEqual(caught.exception.errno, errno.EBADF)
        self.assertEqual(
            len(self.requests), len(names), "nothing asked for a descriptor there is not"
        )

    def test_a_socket_at_the_destination_fails_at_once(self) -> None:
        # Found in review (issue 35, L3): opening a socket fails with ENXIO, as a FIFO with no
        # reader yet does: the download waited for a reader until its deadline (for ever without
        # one). curl fails at once. A socket file, and another process's descriptor of a socket.
        listening = socket.socket(socket.AF_UNIX)
        self.addCleanup(listening.close)
        listening.bind(str(self.tmp() / "out.bin"))
        code = "import socket, sys; s = socket.socket(); print(s.fileno(), flush=True)"
        code += "; sys.stdin.read()"
        holder = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.addCleanup(holder.wait, 10)
        self.addCleanup(holder.stdin.close)  # type: ignore[union-attr]
        # Left open, its ResourceWarning came when collected: in another test's captured stderr.
        self.addCleanup(holder.stdout.close)  # type: ignore[union-attr]
        descriptor = int(holder.stdout.readline())  # type: ignore[union-attr]
        for name in (listening.getsockname(), f"/proc/{holder.pid}/fd/{descriptor}"):
            with self.subTest(name):
                with self.assertRaises(OSError) as caught:
                    self.client().download("files/x", name, deadline=5)
                self.assertEqual(caught.exception.errno, errno.ENXIO)
                self.assertEqual(caught.exception.filename, name)
        self.assertEqual(self.requests, [])

    def test_a_descriptor_named_with_a_trailing_slash_is_the_same_stream(self) -> None:
        # Found in review2: "download URL /dev/fd/1/" was "invalid literal for int() with base 10: ''", exit 2.
        log = self.tmp() / "t.log"
        log.write_bytes(b"earlier lines\n")
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        self.addCleanup(os.close, fd)
        for name in (f"/dev/fd/{fd}/", f"/proc/self/fd/{fd}//"):
            with self.subTest(name):
                self.script(serve_file(b"appended\n"))
                self.client().download("files/x", name)
        self.assertEqual(log.read_bytes(), b"earlier lines\n" + b"appended\n" * 2)
        self.assertEqual([p.name for p in log.parent.iterdir()], ["t.log"])
        self.assertEqual(len(self.requests), 2)


class LockFileTests(ServerTestCase):
    """Without flock (Windows), ``.NAME.part.lock`` holds the downloading process's id."""

    def test_a_stale_lock_taken_over_by_another_download_meanwhile_is_left_to_it(self) -> None:
        # Found in review: two downloads both found the lock abandoned; the second removed the lock the
        # first had just made, and both wrote into one partial file.
        directory = self.tmp()
        lock = directory / ".out.bin.part.lock"
        lock.write_text("4194303")  # a process that is gone
        judge = dc._abandoned_lock
        looks: list[str] = []

        def another_takes_it_over_meanwhile(at: Any, name: str) -> os.stat_result | None:
            status = judge(at, name)
            if (
                not looks
            ):  # right after this download's look: the other one replaces it with its own
                lock.with_name("other").write_text(str(os.getpid()))
                os.replace(lock.with_name("other"), lock)
            looks.append(name)
            return status

        with (
            mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
            mock.patch.object(dc, "_abandoned_lock", another_takes_it_over_meanwhile),
            dc._FileTarget(dc._Directory(str(directory / "out.bin")), resume=False) as target,
        ):
            self.assertFalse(target._lock_with_a_file(), "the other download's lock was taken")
        self.assertEqual(
            lock.read_text(), str(os.getpid()), "the other download's lock is in place"
        )
        self.assertEqual(sorted(p.name for p in directory.iterdir()), [".out.bin.part.lock"])

    def test_a_lock_left_by_a_process_that_is_gone_is_taken_over(self) -> None:
        directory = self.tmp()
        (directory / ".out.bin.part.lock").write_text("4194303")
        with (
            mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
            dc._FileTarget(dc._Directory(str(directory / "out.bin")), resume=False) as target,
        ):
            self.assertTrue(target._lock_with_a_file())
            self.assertEqual((directory / ".out.bin.part.lock").read_text(), str(os.getpid()))
            target._unlock()
        self.assertEqual(list(directory.iterdir()), [])

    def test_an_abandoned_lock_of_a_name_of_any_length_is_taken_over(self) -> None:
        # Found in review (issue 37, L2): names of 229 bytes and more never resumed after kill -9
        # and left their side files for ever: the takeover's claim,
        # .NAME.part.lock.<dev hex>-<ino hex>.claim, was past NAME_MAX (ENAMETOOLONG, swallowed).
        directory = self.tmp()
        for length in (100, 119, 120, 200, 229, 254, 255):
            destination = str(directory / ("d" * length))
            with (
                self.subTest(length=length),
                mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
                dc._FileTarget(dc._Directory(destination), resume=False) as target,
            ):
                lock = directory / (target.stem + ".part.lock")
                lock.write_text("4194303")  # a process that is gone
                self.assertTrue(target._lock_with_a_file())
                self.assertEqual(lock.read_text(), str(os.getpid()))
                target._unlock()
            self.assertEqual(list(directory.iterdir()), [])

    def test_every_side_files_name_fits_ecryptfs_name_max(self) -> None:
        # Found in review: the names short enough not to ask the directory's NAME_MAX were sized
        # for .part.json.<8 hex>.tmp, one byte short of the takeover's .part.lock.<7 hex>.claim.
        directory = dc._Directory(str(self.tmp()))
        longest = max((".part.json.01234567.tmp", ".part.lock.0123456.claim"), key=len)
        try:
            for length in range(100, 144):
                with mock.patch.object(dc.os, "pathconf", lambda path, name: 143):
                    stem = dc._hidden_stem(directory, "d" * length)
                self.assertLessEqual(len(stem + longest), 143, length)
        finally:
            directory.close()

    def test_an_empty_or_garbled_lock_is_abandoned_once_it_is_a_few_seconds_old(self) -> None:
        # Found in review: an empty lock (a process killed before it wrote) was never taken over, and
        # a pid too large for os.kill raised OverflowError.
        directory = self.tmp()
        lock = directory / ".out.bin.part.lock"
        for content in (b"", b"12ab", b"9" * 40, b"0", b"-5", b"\xff7"):
            with (
                self.subTest(content=content),
                dc._FileTarget(dc._Directory(str(directory / "out.bin")), resume=False) as target,
            ):
                lock.write_bytes(content)
                self.assertFalse(
                    target._lock_with_a_file(), "young: a process may be writing it now"
                )
                self.assertEqual(lock.read_bytes(), content)
                os.utime(lock, (time.time() - 60, time.time() - 60))
                self.assertTrue(target._lock_with_a_file())
                self.assertEqual(lock.read_text(), str(os.getpid()))
                target._unlock()
            self.assertEqual([p.name for p in directory.iterdir()], [])

    def test_three_take_overs_of_one_abandoned_lock_make_one_holder_in_any_interleaving(
        self,
    ) -> None:
        # Found in review: A and B both judged a lock abandoned; B moved it away and made its own; A then
        # moved B's live lock away, C created one in the gap, and two processes wrote one .part.
        judge, take_over = dc._abandoned_lock, dc._take_over_abandoned_lock
        for pause in (1, 2):  # A paused after its first look, or after its claim and second look
            with self.subTest(pause_after_look=pause):
                directory = self.tmp()
                lock = directory / ".out.bin.part.lock"
                lock.write_text("4194303")  # a process that is gone
                looks: list[str] = []
                others: list[bool] = []
                held = dc._Directory(str(directory / "out.bin"))
                self.addCleanup(held.close)

                def look_then_let_the_others_run(
                    at_: Any,
                    name: str,
                    at: int = pause,
                    seen: list[str] = looks,
                    done: list[bool] = others,
                ) -> os.stat_result | None:
                    status = judge(at_, name)
                    seen.append(name)
                    if len(seen) == at and not done:  # A has looked: B, then C, take their turn
                        done.append(take_over(at_, name))
                        done.append(take_over(at_, name))
                    return status

                with (
                    mock.patch.object(dc, "_process_exists", lambda pid: pid == os.getpid()),
                    mock.patch.object(dc, "_abandoned_lock", look_then_let_the_others_run),
                ):
                    first = take_over(held, lock.name)
                self.assertEqual([first, *others].count(True), 1, f"A {first}, B and C {others}")
                self.assertEqual(
                    first, pause == 2, "the claim's holder goes on; without it, the first to claim"
                )
                self.assertEqual(lock.read_text(), str(os.getpid()))
                self.assertEqual(
                    [p.name for p in directory.iterdir()], [lock.name], "no claim or new file left"
                )


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    """Each name in ``directory``: its inode and bytes (a link: its target)."""
    seen = {}
    for path in directory.iterdir():
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        seen[path.name] = (path.lstat().st_ino, data)
    return seen


class DescriptorLinkTests(FileTestCase):
    """Issue 35: another user's link to /proc/PID/fd is refused as every link of theirs."""

    def setUp(self) -> None:
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root to give a link to another user")
        self.log = self.tmp() / "t.log"
        self.log.write_bytes(b"earlier lines\n")
        self.fd = os.open(self.log, os.O_WRONLY | os.O_APPEND)
        self.addCleanup(os.close, self.fd)

    def test_a_teammates_link_to_a_descriptor_directory_is_refused_before_any_request(
        self,
    ) -> None:
        # Issue 35: team/inbox -> /proc/<victim's pid>/fd, a teammate's: the download appended the
        # server's bytes to what the victim's process had open (realpath resolved their link).
        team = self.tmp()
        team.chmod(0o2777)
        for number, target in enumerate((f"/proc/{os.getpid()}/fd", "/proc/self/fd", "/dev/fd")):
            with self.subTest(target=target):
                inbox = team / f"inbox{number}"
                inbox.symlink_to(target)
                os.chown(inbox, self.STRANGER, self.STRANGER, follow_symlinks=False)
                self.script(serve_file(b"the server's bytes\n"))
                with self.assertRaises(PermissionError) as caught:
                    self.client().download("files/x", f"{inbox}/{self.fd}")
                self.assertEqual(caught.exception.filename, str(inbox))
                self.assertIn(dc._NOT_FOLLOWED, str(caught.exception))
                self.assertEqual(self.requests, [], "refused before any request")
                self.assertEqual(self.log.read_bytes(), b"earlier lines\n")
                self.server.script.clear()

    def test_the_users_own_links_to_descriptors_are_written_through(self) -> None:
        own = self.tmp() / "mine"
        own.symlink_to("/proc/self/fd")
        for name in (f"{own}/{self.fd}", f"/dev/fd/{self.fd}", f"/proc/self/fd/{self.fd}"):
            with self.subTest(name):
                self.script(serve_file(b"appended\n"))
                self.client().download("files/x", name)
        self.assertEqual(self.log.read_bytes(), b"earlier lines\n" + b"appended\n" * 3)


class SwappedDirectoryTests(FileTestCase):
    """Issue 35 (the fourth review): a teammate's directory swapped for their link at the moment a
    side file is made, saved or removed changes nothing outside the directory walked."""

    def setUp(self) -> None:
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root to give a link to another user")
        team = self.tmp()
        team.chmod(0o2777)
        self.box = team / "box"
        self.box.mkdir()
        # The victim's other directory, with another download's partial file and state there.
        self.elsewhere = self.tmp()
        (self.elsewhere / ".data.csv.part").write_bytes(b"the other download's first bytes")
        state = {"url": "http://example.com/other", "validator": '"o"', "total": 99}
        (self.elsewhere / ".data.csv.part.json").write_text(json.dumps(state))
        self.before = snapshot(self.elsewhere)

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """box moved away and the teammate's link to the victim's other directory put there."""
        away = self.box.with_name("box.away")
        self.box.rename(away)
        self.box.symlink_to(self.elsewhere)
        os.chown(self.box, self.STRANGER, self.STRANGER, follow_symlinks=False)
        try:
            yield
        finally:
            self.box.unlink()
            away.rename(self.box)

    def swap_around(self, name: str, moment: Callable[..., bool]) -> Any:
        """``os.NAME`` wrapped: box swapped while each call ``moment(*args)`` says is done."""
        call = getattr(os, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not moment(*args, **kwargs):
                return call(*args, **kwargs)
            with self.swapped():
                return call(*args, **kwargs)

        return mock.patch.object(os, name, wrapped)

    def check(self, outcome: object, *, committed: bool = True) -> None:
        self.assertEqual(snapshot(self.elsewhere), self.before, f"the download: {outcome!r}")
        if committed:
            self.assertIsNone(outcome)
            self.assertEqual((self.box / "data.csv").read_bytes(), DATA)
        left = sorted(path.name for path in self.box.iterdir())
        self.assertIn(left, [["data.csv"], [".data.csv.part", ".data.csv.part.json"], []])

    def download(self, **options: Any) -> object:
        destination = self.box / "data.csv"
        return outcome_of(lambda: self.client().download("files/x", destination, **options))

    def test_swapped_as_the_temporary_or_partial_file_is_made(self) -> None:
        def making(path: Any, flags: int, *args: Any, **kwargs: Any) -> bool:
            return bool(flags & os.O_CREAT) and ".data.csv" in str(path)

        for resume in (False, True):
            with self.subTest(resume=resume):
                self.script(serve_file(DATA))
                with self.swap_around("open", making):
                    self.check(self.download(resume=resume))

    def test_swapped_as_the_state_is_saved(self) -> None:
        def saving(path: Any, *args: Any, **kwargs: Any) -> bool:
            return ".part.json" in str(path)

        self.script(serve_file(DATA))
        with self.swap_around("open", saving), self.swap_around("replace", saving):
            self.check(self.download(resume=True))

    def test_swapped_as_the_partial_file_and_state_are_removed(self) -> None:
        def removing(path: Any, *args: Any, **kwargs: Any) -> bool:
            return ".data.csv.part" in str(path)

        self.script(serve_file(DATA))
        with self.swap_around("unlink", removing):
            outcome = self.download(resume=True, sha256="0" * 64)
        self.assertIsInstance(outcome, dc.ChecksumMismatchError)
        self.check(outcome, committed=False)
        self.script(serve_file(DATA))
        with self.swap_around("unlink", removing):
            self.check(self.download(resume=True))

    def test_swapped_as_the_free_space_is_looked_at(self) -> None:
        # Found in review (issue 35, L1): the free space was looked at by path: box swapped for a
        # link to /proc at that moment failed the download, "not enough space ... (0 B free)".
        reserve, away = dc._FileTarget.reserve, self.box.with_name("box.away")

        def looked_at_through_a_link_to_proc(target: Any, size: int | None) -> None:
            self.box.rename(away)
            self.box.symlink_to("/proc")
            try:
                reserve(target, size)
            finally:
                self.box.unlink()
                away.rename(self.box)

        self.script(serve_file(DATA))
        with mock.patch.object(dc._FileTarget, "reserve", looked_at_through_a_link_to_proc):
            self.check(self.download())
        self.assertEqual([(r.method, r.path) for r in self.requests], [("GET", "/api/v1/files/x")])


class NeighboursStateFileTests(FileTestCase):
    """Issue 35: a download removes only the state it found or saved, never a file put there."""

    def test_a_file_put_at_the_states_name_after_it_was_looked_at_is_left_alone(self) -> None:
        # Found by .ci/second_user_checks.py's neighbour loop: reset() and the end of a failed
        # download removed .NAME.part.json whoever had put it there since.
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user")
        directory = self.tmp()
        theirs = directory / ".out.bin.part.json"
        lock = dc._FileTarget._lock

        def planted_after_the_look(target: Any, fd: int) -> bool:
            theirs.write_bytes(b"the neighbour's")
            os.chown(theirs, self.STRANGER, self.STRANGER)
            return lock(target, fd)  # type: ignore[no-any-return]

        self.script(reply(404, {"message": "gone"}))
        with (
            mock.patch.object(dc._FileTarget, "_lock", planted_after_the_look),
            self.assertRaises(dc.ServiceError),
        ):
            self.client().download("files/x", directory / "out.bin", resume=True)
        self.assertEqual(theirs.read_bytes(), b"the neighbour's")
        self.assertEqual([path.name for path in directory.iterdir()], [theirs.name])

    def test_a_directory_made_at_the_states_name_makes_the_download_not_resumable(self) -> None:
        # Found in review (issue 35, M2): a neighbour's mkdir of .NAME.part.json once .NAME.part
        # appeared made the download fail (IsADirectoryError from the state's rename), in a
        # team directory: 30 of 60.
        lock = dc._FileTarget._lock
        for holding in ("", "theirs"):
            with self.subTest(empty=not holding):
                directory = self.tmp()
                state = directory / ".out.bin.part.json"

                def made_after_the_look(
                    target: Any, fd: int, inside: str = holding, at: Path = state
                ) -> bool:
                    at.mkdir()
                    if inside:
                        (at / inside).write_bytes(b"")
                    return lock(target, fd)  # type: ignore[no-any-return]

                self.script(serve_file(DATA))
                with (
                    mock.patch.object(dc._FileTarget, "_lock", made_after_the_look),
                    self.assertLogs("dataset_client", "WARNING") as logged,
                ):
                    self.client().download("files/x", directory / "out.bin", resume=True)
                self.assertEqual((directory / "out.bin").read_bytes(), DATA)
                self.assertEqual(sorted(os.listdir(directory)), [state.name, "out.bin"])
                self.assertEqual(os.listdir(state), [holding] if holding else [])
                self.assertIn(f"{state.name}: not resumable", logged.output[0])
                # One GET of the whole file: nothing was taken up, nothing asked again.
                sent = [(r.method, r.path, r.headers["Range"]) for r in self.requests[-1:]]
                self.assertEqual(sent, [("GET", "/api/v1/files/x", None)])

    def test_a_neighbours_entry_at_a_resumable_name_is_said_not_resumable(self) -> None:
        # Found in review (issue 37, F1): another user's file, a directory or a dangling link at
        # .NAME.part.json, or another user's empty .NAME.part, turned resume=True off without a
        # word: a download cut then kept nothing, and no one was told why.
        cases = [
            (".out.bin.part.json", "another user's file"),
            (".out.bin.part.json", "a directory"),
            (".out.bin.part.json", "a dangling link"),
            (".out.bin.part", "another user's empty file"),
        ]
        for name, kind in cases:
            with self.subTest(name, kind=kind):
                directory = self.sticky()
                planted = directory / name
                if kind == "a directory":
                    planted.mkdir()
                elif kind == "a dangling link":
                    planted.symlink_to("nowhere")
                else:
                    planted.write_bytes(b"")
                    self.as_stranger(planted)
                self.script(cut(DATA, 1_200_000, {"ETag": '"v1"'}))
                with (
                    self.assertLogs("dataset_client", "WARNING") as logged,
                    self.assertRaises(dc.DatasetClientError),
                ):
                    self.client(max_retries=0).download(
                        "files/x", directory / "out.bin", resume=True
                    )
                self.assertIn(f"{name}: not resumable (", logged.output[0])
                self.assertIn("another user's", logged.output[0])
                self.assertEqual(os.listdir(directory), [name], "theirs is left alone")
                # The server was asked for the whole file: nothing of theirs was taken up.
                sent = [(r.method, r.path, r.headers["Range"]) for r in self.requests[-1:]]
                self.assertEqual(sent, [("GET", "/api/v1/files/x", None)])


class FileModeTests(FileTestCase):
    """The file written is the user's alone until the commit gives it its mode."""

    def test_the_file_is_private_until_the_commit_gives_it_the_destinations_mode(self) -> None:
        # Found in review (issue 35, H2, L6): with umask 002 the temporary and .part files were
        # 0664, and a teammate wrote into them after the bytes were hashed: the download said
        # sha256 verified. A 0600 destination downloaded again became 0644 (curl -o keeps 0600).
        umask = os.umask(0o002)
        self.addCleanup(os.umask, umask)
        for resume in (False, True):
            for earlier in (None, 0o600, 0o640, "another user's 0600"):
                with self.subTest(resume=resume, earlier=earlier):
                    directory = self.tmp()
                    destination = directory / "out.bin"
                    if earlier is not None:
                        destination.write_bytes(b"earlier")
                        destination.chmod(0o600 if isinstance(earlier, str) else earlier)
                    if isinstance(earlier, str):
                        self.as_stranger(destination)
                    modes: set[int] = set()

                    def look(
                        done: int, total: int | None, seen: set[int] = modes, at: Path = directory
                    ) -> None:
                        for path in at.iterdir():
                            with contextlib.suppress(FileNotFoundError):
                                if path.name != "out.bin":
                                    seen.add(path.lstat().st_mode & 0o777)

                    self.script(serve_file(DATA))
                    asked = len(self.requests)
                    self.client().download("files/x", destination, resume=resume, progress=look)
                    self.assertEqual(modes, {0o600})
                    sent = [(r.path, r.headers["Range"]) for r in self.requests[asked:]]
                    self.assertEqual(sent, [("/api/v1/files/x", None)])
                    final = earlier if isinstance(earlier, int) else 0o664
                    self.assertEqual(destination.stat().st_mode & 0o777, final)
                    self.assertEqual(destination.read_bytes(), DATA)

    def test_without_proc_the_umask_is_read_by_setting_it_back(self) -> None:
        umask = os.umask(0o027)
        self.addCleanup(os.umask, umask)
        with mock.patch.object(dc, "open", side_effect=FileNotFoundError, create=True):
            self.assertEqual(dc._final_mode(None), 0o640)
        self.assertEqual(os.umask(0o027), 0o027, "set back")

"""What each protection on a download's path costs per file: the client with one taken out at a time.

    python3 benchmarks/per_file_costs.py                   # 1,000 files of 64 KiB, 7 rounds (about a minute)
    python3 benchmarks/per_file_costs.py --instructions    # and callgrind's count per file (a few minutes more)
    python3 benchmarks/per_file_costs.py --quick           # 100 files, 2 rounds: a smoke run

Issue 35 asked for at most 1.5x the bare ``http.client`` loop per file (``many_files.py``), with
every protection kept. This measures what each one costs: a copy of ``dataset_client.py`` with
one protection cut out (a textual patch below; never shipped, never imported by the tests), in
many_files.py's world (nginx on 127.0.0.1, tmpfs, one kept-alive connection), its rounds
interleaved with the whole client and the bare loop; then every protection cut out at once.
Each variant's files are checked as many_files.py checks them. A patch that no longer applies
stops the run, naming it: the library changed under it.

``--instructions`` adds user-space instructions per file (valgrind's callgrind, 250 files less 50
in separate processes): whatever the machine's load, though a few thousand a file apart between
runs (unchanged code), and blind to the kernel's share (the umask read is nearly all kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# What is cut out: (what it is, [(text in dataset_client.py, what replaces it)]).
PATCHES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "umask": (
        "the umask read from /proc/self/status (the new file's mode: 0644 instead)",
        [("    # Read (line 2; line 1 is at most 67 bytes), not set and set back: racing other threads.\n",
          "    return 0o644\n")],
    ),
    "url": (
        "the download URL's checks and resolution (the URL taken as given)",
        [("    _check_url_characters(download_url, \"download_url\")\n    parts =",
          "    return download_url\n    parts =")],
    ),
    "walk": (
        "the walk by descriptor (the parent opened by path, links followed)",
        # The parent opened in place of the walk's first directory ("/" or "."), not after it.
        [("        self.fd = os.open(self.path or \".\", _WALK_FLAGS) if _HAS_DIRECTORY_DESCRIPTORS else None\n",
          "        self.names = [os.path.basename(path)]\n"
          "        self.path = os.path.dirname(path)\n"
          "        self.fd = os.open(self.path or \".\", _WALK_FLAGS)\n")],
    ),
    "probes": (
        "the probes for what a killed download left (.NAME.part.2 and .3)",
        [("    for slot in range(1, _SLOTS + 1):\n", "    for slot in range(1, 2):\n")],
    ),
    "lock": (
        "the temporary's lock (flock) and its link count, once locked",
        [("            if fcntl is not None:\n                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
          "            if os.fstat(fd).st_nlink:", "            if True:")],
    ),
    "space": (
        "the free space asked before the body (fstatvfs)",
        [("        if size is None:\n            return\n        directory = self.directory.path",
          "        if True:\n            return\n        directory = self.directory.path")],
    ),
    "tamper": (
        "the commit's two checks that the file moved is the one written (lstat before, after)",
        [("            if not self.directory.holds(status, self.temporary):", "            if False:"),
         ("            if not self.directory.holds(status, self.name):", "            if False:")],
    ),
    "poll": (
        "the idle connection's check that the server has not closed it (poll)",
        [("                    if hasattr(select, \"poll\"):",
          "                    readable = []\n                    if False:"),
         ("                    else:\n                        readable = select.select([connection.sock], [], [], 0)[0]",
          "                    elif False:\n                        pass")],
    ),
}  # fmt: skip
ALL = "all of them"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 files, 2 rounds")
    parser.add_argument("--runs", type=int, help="rounds of interleaved runs (default 7)")
    parser.add_argument("--instructions", action="store_true", help="callgrind's count too")
    args = parser.parse_args()
    count = 100 if args.quick else 1000
    runs = args.runs or (2 if args.quick else 7)
    sys.path.insert(0, HERE)
    import many_files
    import run

    if not run.find_program("nginx"):
        raise SystemExit("missing nginx (python3 benchmarks/run.py --install)")
    if args.instructions and not shutil.which("valgrind"):
        raise SystemExit("missing valgrind (apt-get install valgrind)")
    python = run.ensure_venv()
    library = os.path.join(REPO, "dataset_client.py")
    with open(library) as file:
        source = file.read()
    with many_files.world(run, count, 0, library) as files:
        libraries = {"client": files.library}
        for cut in [*PATCHES, ALL]:
            directory = os.path.join(files.work, f"without-{cut.replace(' ', '-')}")
            os.makedirs(directory)
            with open(os.path.join(directory, "dataset_client.py"), "w") as out:
                out.write(patched(source, list(PATCHES) if cut == ALL else [cut]))
            libraries[cut] = directory

        def one_run(variant: str) -> dict[str, float]:
            kind = "bare" if variant == "bare" else "client"
            library = libraries.get(variant, "")
            result: dict[str, float] = many_files.start_measuring(
                run, python, files, kind, library=library
            )
            many_files.check_and_clear(files, kind)
            return result

        result = run.interleaved(runs, ["bare", *libraries], one_run)
        instructions = {}
        if args.instructions:
            for variant in ["bare", *libraries]:
                instructions[variant] = per_file(run, python, files, variant, libraries)
    print("\n".join(report(run, result, instructions, count, runs, many_files.describe(library))))


def patched(source: str, cuts: list[str]) -> str:
    for cut in cuts:
        for old, new in PATCHES[cut][1]:
            if source.count(old) != 1:
                raise SystemExit(f"the patch {cut!r} no longer applies: dataset_client.py changed")
            source = source.replace(old, new)
    return source


def per_file(run: Any, python: str, files: Any, variant: str, libraries: dict[str, str]) -> float:
    """User-space instructions per file: a run of 250 files (or all, if fewer) less one of a
    fifth as many, each a process."""
    kind = "bare" if variant == "bare" else "client"
    most = min(250, len(files.names))
    numbers = (most // 5, most)
    counts = []
    with tempfile.TemporaryDirectory(dir=files.work) as scratch:
        for number in numbers:
            manifest = os.path.join(scratch, f"{number}.json")
            with open(manifest, "w") as out:
                json.dump({"names": files.names[:number], "digests": files.digests}, out)
            destination = os.path.join(scratch, f"into-{number}")
            os.makedirs(destination)
            command = [os.path.join(HERE, "many_files.py"), "measure", kind, files.base]
            command += [destination, manifest, libraries.get(variant, files.library)]
            world = argparse.Namespace(python=python)
            environment = run.clean_environment(PYTHONHASHSEED="0")
            counts.append(run.callgrind(world, command, scratch, environment))
    return (counts[1] - counts[0]) / (numbers[1] - numbers[0])


def report(
    run: Any,
    result: dict[str, dict[str, float]],
    instructions: dict[str, float],
    count: int,
    runs: int,
    library: str,
) -> list[str]:
    bare = result["bare"]["wall"] / count * 1e6
    client = result["client"]["wall"] / count * 1e6
    columns = ["variant", "us per file", "to bare", "saved a file (us)"]
    if instructions:
        columns += ["instructions a file", "saved"]
    rows = []
    for variant, figures in result.items():
        wall = figures["wall"] / count * 1e6
        name = {"bare": "bare loop", "client": "the client, whole"}.get(variant)
        shown = name or f"without {PATCHES[variant][0] if variant in PATCHES else ALL}"
        row = [shown, f"{wall:.0f}", f"{wall / bare:.2f}x", "" if name else f"{client - wall:.0f}"]
        if instructions:
            saved = instructions["client"] - instructions[variant]
            row += [f"{instructions[variant]:,.0f}", "" if name else f"{saved:,.0f}"]
        rows.append(row)
    note = (
        f"{count:,} files of 64 KiB from nginx on 127.0.0.1, one kept-alive connection, to tmpfs; "
        f"medians of {runs} interleaved rounds. Library: {library}."
    )
    return run.table("What each protection costs per file", note, columns, rows)


if __name__ == "__main__":
    main()

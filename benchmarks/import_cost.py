"""What importing the library costs, in instructions (valgrind's callgrind), with a bytecode cache
and without one (PYTHONDONTWRITEBYTECODE=1, nothing cached: every line compiled at each start,
as in containers that never write bytecode), against ``import json, urllib.request``.

    python3 benchmarks/import_cost.py                  # this checkout's dataset_client.py
    python3 benchmarks/import_cost.py --also 4e75648   # and that commit's, counted in the same run

The whole process is counted (start-up and shutdown included), PYTHONHASHSEED=0; the standard
library's own bytecode is cached in both cases, as every installed Python has it. Goals: at most
1.9x without a cache, 1.06x with one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = "import json, urllib.request"


def instructions(code: str, directory: str, cached: bool) -> int:
    """Instructions callgrind counts for ``python -c code`` in ``directory`` (a copy of its own: nothing
    cached there at first); ``cached``: run once first, so that its bytecode is written beside it."""
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
    }
    with tempfile.TemporaryDirectory() as scratch:
        if cached:
            subprocess.run([sys.executable, "-c", code], cwd=directory, env=environment, check=True)
        else:  # the standard library's bytecode is still read from where it is installed
            environment["PYTHONDONTWRITEBYTECODE"] = "1"
            shutil.rmtree(os.path.join(directory, "__pycache__"), ignore_errors=True)
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={scratch}/out",
            sys.executable,
        ]
        done = subprocess.run(
            [*command, "-c", code], cwd=directory, env=environment, capture_output=True, text=True
        )
    found = [line for line in done.stderr.splitlines() if "Collected :" in line]
    if done.returncode != 0 or not found:
        raise SystemExit(f"callgrind failed:\n{done.stderr[-2000:]}")
    return int(found[-1].split(":")[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--also", action="append", default=[], metavar="COMMIT", help="a commit to count too"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        directories = {}
        for name in ("this checkout", *args.also):
            directories[name] = os.path.join(work, str(len(directories)))
            os.mkdir(directories[name])
            with open(os.path.join(REPO, "dataset_client.py"), "rb") as file:
                source = file.read()
            if name != "this checkout":
                git = ["git", "show", f"{name}:dataset_client.py"]
                source = subprocess.run(git, cwd=REPO, capture_output=True, check=True).stdout
            with open(os.path.join(directories[name], "dataset_client.py"), "wb") as file:
                file.write(source)
        print(f"Python {sys.version.split()[0]}; instructions of the whole process (callgrind)")
        print("| import | bytecode cached | ratio | no bytecode cache | ratio |")
        print("|---|---|---|---|---|")
        reference = (instructions(REFERENCE, work, True), instructions(REFERENCE, work, False))
        print(f"| `{REFERENCE}` | {reference[0]:,} | 1.00x | {reference[1]:,} | 1.00x |")
        for name, directory in directories.items():
            compiled = instructions("import dataset_client", directory, False)
            cached = instructions("import dataset_client", directory, True)
            print(
                f"| dataset_client ({name}) | {cached:,} | {cached / reference[0]:.3f}x"
                f" | {compiled:,} | {compiled / reference[1]:.3f}x |"
            )


if __name__ == "__main__":
    main()

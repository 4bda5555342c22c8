"""The download and command-line tests once more, as on a platform without ``os.pwrite``,
``os.pread``, ``fcntl``, ``os.register_at_fork`` and ``signal.SIGHUP`` (Windows, which CI cannot run).

Those names are removed before anything imports dataset_client, in the test process and in
every Python it starts (the CLI tests run ``python -m dataset_client``), by a
``sitecustomize`` module put first on ``PYTHONPATH``.

    python3 .ci/without_posix_extras.py                 # the tests in TESTS
    python3 .ci/without_posix_extras.py ResumeTests     # or only these
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The download and CLI tests (a class, or Class.test_name), of any test module: add or drop
# names here.
TESTS = [
    "DownloadTests",
    "DestinationTests",
    "ResumeTests",
    "ResumeAcrossRunsTests",
    "ParallelDownloadTests",
    "StateFileTests",
    "HostileResponseTests",
    "DownloadFaultTests",
    "SharedDirectoryTests",
    "SecondReviewFileTests",
    "LockFileTests",
    "HostileServerSecretTests",
    "CommandLineTests",
    "CommandLineTerminalTests",
    "StandInProcessTests",
    "CompletionTests",
]

SITECUSTOMIZE = """\
import os, random, signal, sys  # random registers its at-fork hook on import: before the name goes

for name in ("pwrite", "pread", "register_at_fork"):
    if hasattr(os, name):
        delattr(os, name)
if hasattr(signal, "SIGHUP"):
    del signal.SIGHUP
sys.modules["fcntl"] = None  # `import fcntl` raises ImportError, as on Windows
"""

PROBE = """\
import os, signal, sys
names = [("os.pwrite", os, "pwrite"), ("os.pread", os, "pread"), ("os.register_at_fork", os, "register_at_fork"),
         ("SIGHUP", signal, "SIGHUP")]
missing = [shown for shown, module, name in names if not hasattr(module, name)]
try:
    import fcntl
except ImportError:
    missing.append("fcntl")
sys.exit(0 if len(missing) == 5 else "the stand-in is not in place: only " + ", ".join(missing) + " missing")
"""


def main(names: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="without-posix-extras-") as directory:
        Path(directory, "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        paths = [directory, *filter(None, [os.environ.get("PYTHONPATH")])]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        subprocess.run([sys.executable, "-c", PROBE], env=environment, check=True)
        print(
            "== without os.pwrite, os.pread, fcntl, os.register_at_fork, signal.SIGHUP (a stand-in for Windows):",
            flush=True,
        )
        command = [
            sys.executable,
            str(root / ".ci" / "unittest_summary.py"),
            *(names or TESTS),
        ]
        return subprocess.run(command, env=environment, cwd=root).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

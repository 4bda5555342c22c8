"""The README's test command (`python -m unittest` discovery), closing with 'tests: N passed, N failed' line.

    python .ci/unittest_summary.py                      # every test_*.py here
    python .ci/unittest_summary.py TestClass ...        # only these classes of test_dataset_client

Used by the .ci scripts that run the suite somewhere else (a chroot's Python, a stand-in
for Windows), so that each closes on the same plain line as .ci/run's own runs.
"""

from __future__ import annotations

import os
import sys
import unittest


def suite_of(names: list[str]) -> unittest.TestSuite:
    loader = unittest.defaultTestLoader
    if not names:
        return loader.discover(".", pattern="test_*.py")
    sys.path.insert(0, os.getcwd())  # as `python -m unittest` does; a script's own directory is .ci/
    return loader.loadTestsFromNames(f"test_dataset_client.{name}" for name in names)


def run(names: list[str]) -> int:
    print("==", sys.executable, sys.version.replace("\n", " "), flush=True)
    result = unittest.TextTestRunner(verbosity=1).run(suite_of(names))
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"tests: {passed} passed, {failed} failed, {len(result.skipped)} skipped", flush=True)
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

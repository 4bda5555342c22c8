"""The README's test command (`python -m unittest` discovery), closing with 'tests: N passed, N failed' line.

    python .ci/unittest_summary.py                      # every test_*.py here and in tests/
    python .ci/unittest_summary.py TestClass ...        # only these classes (of any test module)
    python .ci/unittest_summary.py TestClass.test_x ... # or these tests

Used by the .ci scripts that run the suite somewhere else (a chroot's Python, a stand-in
for Windows), so that each closes on the same plain line as .ci/run's own runs.
"""

from __future__ import annotations

import glob
import importlib
import os
import sys
import unittest


def suite_of(names: list[str]) -> unittest.TestSuite:
    loader = unittest.defaultTestLoader
    if not names:
        return loader.discover(".", pattern="test_*.py")
    sys.path.insert(
        0, os.getcwd()
    )  # as `python -m unittest` does; a script's own directory is .ci/
    return loader.loadTestsFromNames(f"{module_of(name.split('.')[0])}.{name}" for name in names)


def module_of(name: str) -> str:
    """The test module that defines the class ``name``: test_dataset_client or one in tests/."""
    paths = sorted(glob.glob("test_*.py")) + sorted(glob.glob("tests/test_*.py"))
    for module in (path[: -len(".py")].replace("/", ".") for path in paths):
        defined = getattr(importlib.import_module(module), name, None)
        if getattr(defined, "__module__", None) == module:
            return module
    raise SystemExit(f"no test class {name} in {', '.join(paths)}")


def run(names: list[str]) -> int:
    print("==", sys.executable, sys.version.replace("\n", " "), flush=True)
    result = unittest.TextTestRunner(verbosity=1).run(suite_of(names))
    outcomes = [test for test, _ in result.failures + result.errors] + result.unexpectedSuccesses
    # A test whose subtests failed counts once, as the test it is part of.
    failed = len({getattr(test, "test_case", test).id() for test in outcomes})
    passed = result.testsRun - failed - len(result.skipped)
    print(f"tests: {passed} passed, {failed} failed, {len(result.skipped)} skipped", flush=True)
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

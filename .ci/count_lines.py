"""The two files' measures (the contract's "Two files by audience"), and every function longer than
60 lines in them, the stand-in and the Parquet writer.

python3 .ci/count_lines.py    # prints the measures; exit 1 when one is past its limit
"""

from __future__ import annotations

import ast
import sys

LIBRARY, CLI = "dataset_client.py", "dataset_client_cli.py"
CHECKED = (LIBRARY, CLI, "examples/local_service.py", "examples/parquet_writer.py")
LONGEST_FUNCTION = 60  # lines, from its first decorator or def to its last line, docstring included
LONGEST_LINE = 100  # characters
MOST_LINES = {LIBRARY: 4400, CLI: 2000}
MOST_BYTES = {LIBRARY: 180 * 1024}
MOST_PRIVATE_NAMES = 6  # of the library, used by the command line
# tomllib is not among them: from_profile reads the config file (importing it there, when called).
CLI_ONLY_MODULES = ("argparse", "subprocess", "difflib", "csv", "shlex", "signal")


def long_functions(path: str, tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > LONGEST_FUNCTION:
                found.append(
                    f"{path}:{first}: {node.name} has {length} lines (at most {LONGEST_FUNCTION})"
                )
    return found


def imported_modules(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def private_library_names(tree: ast.Module) -> list[str]:
    """The library's private names the command line imports or reaches as ``dataset_client._name``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dataset_client":
            names.update(alias.name for alias in node.names if alias.name.startswith("_"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names.update(
                [node.attr]
                if node.value.id == "dataset_client" and node.attr.startswith("_")
                else []
            )
    return sorted(names - {"__version__"})


def main() -> int:
    problems: list[str] = []
    for path in CHECKED:
        with open(path, encoding="utf-8") as file:
            source = file.read()
        tree = ast.parse(source)
        problems += long_functions(path, tree)
        if path not in MOST_LINES:
            continue
        lines = source.splitlines()
        wide = [number for number, line in enumerate(lines, 1) if len(line) > LONGEST_LINE]
        size = len(source.encode())
        print(
            f"{path}: {len(lines)} lines, {size / 1024:.1f} KiB, {len(wide)} over {LONGEST_LINE} characters"
        )
        if len(lines) > MOST_LINES[path]:
            problems.append(f"{path}: {len(lines)} lines (at most {MOST_LINES[path]})")
        if size > MOST_BYTES.get(path, size):
            problems.append(
                f"{path}: {size / 1024:.1f} KiB (at most {MOST_BYTES[path] // 1024} KiB)"
            )
        if wide:
            problems.append(f"{path}:{wide[0]}: {len(wide)} lines over {LONGEST_LINE} characters")
        if path == LIBRARY:
            cli_only = sorted(imported_modules(tree) & set(CLI_ONLY_MODULES))
            print(f"{path}: command-line-only modules imported: {', '.join(cli_only) or 'none'}")
            if cli_only:
                problems.append(
                    f"{path} imports {', '.join(cli_only)}, which only the command line needs"
                )
        else:
            private = private_library_names(tree)
            print(f"{path}: {len(private)} private names of the library: {', '.join(private)}")
            if len(private) > MOST_PRIVATE_NAMES:
                problems.append(
                    f"{path} uses {len(private)} private names of the library (at most 6)"
                )
    print("\n".join(problems) or "every measure within its limit")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

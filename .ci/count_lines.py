"""The two files' measures (the contract's "Two files by audience"), every function longer than
60 lines in them, the stand-in and the Parquet writer, and the library's regions against the map in
its docstring.

python3 .ci/count_lines.py    # prints the measures; exit 1 when one is past its limit
"""

from __future__ import annotations

import ast
import itertools
import re
import sys

LIBRARY, CLI = "dataset_client.py", "dataset_client_cli.py"
CHECKED = (LIBRARY, CLI, "examples/local_service.py", "examples/parquet_writer.py")
LONGEST_FUNCTION = 60  # lines, from its first decorator or def to its last line, docstring included
LONGEST_LINE = 100  # characters
MOST_LINES = {LIBRARY: 4600, CLI: 2000}
MOST_BYTES = {LIBRARY: 195 * 1024}
# The library's regions: each under a banner ("# " and 40 or more "=" or "#", then its title on a
# comment line of its own), each title in the module docstring's map, in the same order.
LEAST_REGIONS = 10
BANNER = re.compile(r"\s*# [=#]{40,}")
TITLE = re.compile(r"\s*# (\S.*)")
MAP_START = "The file's regions, each under a banner, in the order a call flows::"
MAP_ENTRY = re.compile(r"    (\S[^:]*): ")  # indented four; its continuation lines, eight
MOST_PRIVATE_NAMES = 3  # of the library, used by the command line, attribute reaches counted
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


def private_members(library: ast.Module) -> set[str]:
    """The private names of what the library's classes hold: their methods and attributes
    (``def _x``, ``_x: int``, ``self._x = ...``)."""
    members = set()
    for cls in (node for node in ast.walk(library) if isinstance(node, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                members.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                members.add(node.target.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                members.update([node.attr] if node.value.id == "self" else [])
    return {name for name in members if name.startswith("_") and not name.endswith("__")}


def private_library_names(tree: ast.Module, members: set[str]) -> list[str]:
    """The library's private names the command line imports or reaches: ``dataset_client._name``,
    and ``client._name`` for a private member of one of the library's classes (``members``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dataset_client":
            names.update(alias.name for alias in node.names if alias.name.startswith("_"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = node.value.id == "dataset_client" and node.attr.startswith("_")
            reach = node.value.id != "self" and node.attr in members
            names.update(
                [f"{node.value.id}.{node.attr}" if reach else node.attr] if module or reach else []
            )
    return sorted(name for name in names if not name.endswith("__"))  # __version__, __file__


def region_titles(lines: list[str]) -> list[str]:
    """The title under each banner (a closing banner, followed by no title, is not one)."""
    titles = []
    for line, after in itertools.pairwise(lines):
        title = TITLE.fullmatch(after)
        if BANNER.fullmatch(line) and title and not BANNER.fullmatch(after):
            titles.append(title[1])
    return titles


def map_titles(tree: ast.Module) -> list[str] | None:
    """The region titles the module docstring's map names, in its order; None: no map."""
    lines = (ast.get_docstring(tree) or "").splitlines()
    if MAP_START not in lines:
        return None
    entries = [MAP_ENTRY.match(line) for line in lines[lines.index(MAP_START) + 1 :]]
    return [entry[1] for entry in entries if entry]


def region_problems(path: str, lines: list[str], tree: ast.Module) -> list[str]:
    """Fewer regions than LEAST_REGIONS, or a map that does not name them all, in order."""
    regions, listed = region_titles(lines), map_titles(tree)
    print(f"{path}: {len(regions)} regions under banners: {', '.join(regions)}")
    problems = []
    if len(regions) < LEAST_REGIONS:
        problems.append(f"{path}: {len(regions)} regions under banners (at least {LEAST_REGIONS})")
    if listed is None:
        problems.append(f"{path}: the module docstring has no map (a line {MAP_START!r})")
    elif sorted(listed) == sorted(regions) and listed != regions:
        problems.append(f"{path}: the docstring's map names the regions in another order: {listed}")
    elif listed != regions:
        unlisted = [title for title in regions if title not in listed] or "none"
        stale = [title for title in listed if title not in regions] or "none"
        problems.append(
            f"{path}: the docstring's map is stale: regions it does not name: {unlisted};"
            f" titles it names that no banner has: {stale}"
        )
    return problems


def main() -> int:
    problems: list[str] = []
    with open(LIBRARY, encoding="utf-8") as file:
        members = private_members(ast.parse(file.read()))
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
            problems += region_problems(path, lines, tree)
            cli_only = sorted(imported_modules(tree) & set(CLI_ONLY_MODULES))
            print(f"{path}: command-line-only modules imported: {', '.join(cli_only) or 'none'}")
            if cli_only:
                problems.append(
                    f"{path} imports {', '.join(cli_only)}, which only the command line needs"
                )
        else:
            private = private_library_names(tree, members)
            print(f"{path}: {len(private)} private names of the library: {', '.join(private)}")
            if len(private) > MOST_PRIVATE_NAMES:
                problems.append(
                    f"{path} uses {len(private)} private names of the library"
                    f" (at most {MOST_PRIVATE_NAMES})"
                )
    print("\n".join(problems) or "every measure within its limit")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

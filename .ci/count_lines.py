"""Lines of code in dataset_client.py (not blank, not comments, not docstrings), the library and the CLI
apart; and every function longer than 60 lines in the module, the stand-in and the Parquet writer.

python3 .ci/count_lines.py    # prints the counts; exit 1 when a function is longer than 60 lines
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize

MODULE = "dataset_client.py"
CHECKED = (MODULE, "examples/local_service.py", "examples/parquet_writer.py")
LONGEST_FUNCTION = 60  # lines, from its first decorator or def to its last line, docstring included


def code_lines(source: str, tree: ast.Module) -> set[int]:
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code: set[int] = set()
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            code.update(range(token.start[0], token.end[0] + 1))
    return code - docstrings


def long_functions(path: str, tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > LONGEST_FUNCTION:
                found.append(f"{path}:{first}: {node.name} has {length} lines (at most {LONGEST_FUNCTION})")
    return found


too_long = []
for path in CHECKED:
    with open(path, encoding="utf-8") as file:
        source = file.read()
    tree = ast.parse(source)
    too_long += long_functions(path, tree)
    if path == MODULE:
        code = code_lines(source, tree)
        marker = "# The command line"  # the banner comment that opens the CLI section
        cli_start = next(number for number, line in enumerate(source.splitlines(), 1) if line.startswith(marker))
        library = sum(1 for number in code if number < cli_start)
        print(f"{MODULE}: {library} lines of library code, {len(code) - library} of command line")
print("\n".join(too_long) or f"no function longer than {LONGEST_FUNCTION} lines in {', '.join(CHECKED)}")
sys.exit(1 if too_long else 0)

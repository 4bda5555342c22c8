"""Lines of code in dataset_client.py: not blank, not comments, not docstrings; the library and the CLI apart.

python3 .ci/count_lines.py [--limit N]    # exit 1 when the library has more than N lines
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--limit", type=int, help="fail above this many library lines")
parser.add_argument("path", nargs="?", default="dataset_client.py")
args = parser.parse_args()
with open(args.path, encoding="utf-8") as file:
    source = file.read()
tree = ast.parse(source)
docstrings: set[int] = set()
for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
code: set[int] = set()
skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type not in skipped:
        code.update(range(token.start[0], token.end[0] + 1))
code -= docstrings
marker = "# The command line"  # the banner comment that opens the CLI section
cli_start = next(number for number, line in enumerate(source.splitlines(), 1) if line.startswith(marker))
library = sum(1 for number in code if number < cli_start)
print(f"dataset_client.py: {library} lines of library code, {len(code) - library} of command line")
sys.exit(1 if args.limit is not None and library > args.limit else 0)

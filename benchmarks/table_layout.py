"""How long does laying out a table for the terminal take? A figure, not a test.

    python3 benchmarks/table_layout.py

Lays out (``_table_lines``, what ``--output table`` prints) 20 columns of 100,000 characters
each, ASCII and not, at 80 columns (one block per record, the values wrapped), 400 and 2,000
(columns narrowed to fit), and prints the CPU seconds each took. The contract: linear in the
size of the result, well under a second (narrowing the widest column one at a time took 8.6 s).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dataset_client_cli  # the copy in this checkout, not an installed one


def main() -> None:
    columns = [f"column_{index}" for index in range(20)]
    for character in ("x", "é", "数"):
        rows = [[character * 100_000 for _ in columns]]
        for width in (80, 400, 2000):
            started = time.process_time()
            lines = dataset_client_cli._table_lines(columns, rows, width)
            took = time.process_time() - started
            print(
                f"20 x 100,000 {character!r} at {width:>4} columns: {len(lines):>7} lines, {took:.3f} s CPU"
            )


if __name__ == "__main__":
    main()

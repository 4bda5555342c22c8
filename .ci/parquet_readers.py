"""CI: every dataset's parquet export, read by pyarrow, DuckDB and Polars, equals its csv export.

Run by .ci/run with a throwaway virtual environment's Python that has the three readers
(never dependencies of the library or the examples). For each dataset of the stand-in it
exports everything as parquet and as csv, and compares, reader by reader: the column
names, their types, the row count and every value (as the csv writes it).
"""

from __future__ import annotations

import csv
import datetime
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "examples")]

import duckdb  # noqa: E402
import local_service  # noqa: E402
import polars  # noqa: E402
import pyarrow.parquet  # noqa: E402

import dataset_client  # noqa: E402

# The stand-in's column types, as each reader names the type it reads.
EXPECTED = {
    "pyarrow": {"DATE": "date32[day]", "TEXT": "string", "REAL": "double", "INTEGER": "int64"},
    "duckdb": {"DATE": "DATE", "TEXT": "VARCHAR", "REAL": "DOUBLE", "INTEGER": "BIGINT"},
    "polars": {"DATE": "Date", "TEXT": "String", "REAL": "Float64", "INTEGER": "Int64"},
}


def read_with_pyarrow(path: str) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    table = pyarrow.parquet.read_table(path)
    rows = [tuple(row.values()) for row in table.to_pylist()]
    return table.column_names, [str(field.type) for field in table.schema], rows


def read_with_duckdb(path: str) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    relation = duckdb.sql(f"SELECT * FROM read_parquet('{path}')")
    return relation.columns, [str(kind) for kind in relation.types], relation.fetchall()


def read_with_polars(path: str) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    frame = polars.read_parquet(path)
    return frame.columns, [str(kind) for kind in frame.dtypes], frame.rows()


READERS: dict[str, Callable[[str], tuple[list[str], list[str], list[tuple[Any, ...]]]]] = {
    "pyarrow": read_with_pyarrow,
    "duckdb": read_with_duckdb,
    "polars": read_with_polars,
}


def as_csv_text(value: Any) -> str:
    """A value as Python's csv module writes it: dates in ISO form, floats by repr."""
    return value.isoformat() if isinstance(value, datetime.date) else str(value)


def main() -> int:
    failures = []
    checked = 0
    with (
        local_service.running(api_key="ci") as server,
        dataset_client.DatasetClient(server.base_url, "ci") as client,
        tempfile.TemporaryDirectory() as directory,
    ):
        for dataset in client.list_datasets():
            name, types = (
                dataset["name"],
                {column["name"]: column["type"] for column in dataset["columns"]},
            )
            everything = {key: dataset[key] for key in ("symbols", "start_date", "end_date")}
            paths = {}
            for file_format in ("parquet", "csv"):
                export = client.create_export(name, **everything, format=file_format)
                paths[file_format] = os.path.join(directory, f"{name}.{file_format}")
                client.download(export["download_url"], paths[file_format], sha256=export["sha256"])
            with open(paths["csv"], encoding="utf-8", newline="") as file:
                header, *rows = list(csv.reader(file))
            for reader, read in READERS.items():
                columns, column_types, values = read(paths["parquet"])
                expected_types = [EXPECTED[reader][types[column]] for column in header]
                text = [[as_csv_text(value) for value in row] for row in values]
                for what, got, want in (
                    ("columns", columns, header),
                    ("types", column_types, expected_types),
                    ("row count", len(values), len(rows)),
                ):
                    if got != want:
                        failures.append(f"{name}, {reader}: {what} {got} != {want}")
                wrong = [
                    index
                    for index, (got, want) in enumerate(zip(text, rows, strict=False))
                    if got != want
                ]
                if wrong:
                    first = wrong[0]
                    failures.append(
                        f"{name}, {reader}: row {first} is {text[first]}, the csv has {rows[first]}"
                    )
            checked += 1
            print(
                f"{name}: {len(rows)} rows, {len(header)} columns: pyarrow, duckdb and polars read the csv's values"
            )
    versions = (
        f"pyarrow {pyarrow.__version__}, duckdb {duckdb.__version__}, polars {polars.__version__}"
    )
    for failure in failures:
        print(f"MISMATCH {failure}")
    print(
        f"parquet: {checked} datasets checked with {versions}: {'FAILED' if failures else 'equal to csv'}"
    )
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())

"""A small Parquet writer, standard library only: what the stand-in service needs for its exports.

    write_parquet("bars.parquet", [("date", "date"), ("symbol", "string"), ("close", "double")], rows)

Columns are required (no nulls) and of four kinds: ``string`` (BYTE_ARRAY annotated
STRING, with the UTF8 converted type old readers need), ``date`` (INT32 days since
1970-01-01 annotated DATE; values are ``datetime.date`` or ISO strings), ``int64`` and
``double``. Rows are split into row groups; each column chunk is one data page (v1,
PLAIN encoding), uncompressed or GZIP. The layout, from apache/parquet-format: "PAR1",
the column chunks, the FileMetaData in Thrift's compact protocol, its length as 4 bytes
little endian, "PAR1" (README.md "File format"; field ids from parquet.thrift;
Encodings.md "Plain"; LogicalTypes.md "Compatibility").
"""

from __future__ import annotations

import datetime
import gzip
import itertools
import struct
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

KINDS = ("string", "date", "int64", "double")
_EPOCH = datetime.date(1970, 1, 1)
# parquet.thrift: Type, ConvertedType, the LogicalType union's field, and the codecs.
_PHYSICAL = {"string": 6, "date": 1, "int64": 2, "double": 5}  # BYTE_ARRAY, INT32, INT64, DOUBLE
_CONVERTED = {"string": 0, "date": 6}  # UTF8, DATE
_LOGICAL = {"string": 1, "date": 6}  # LogicalType.STRING, LogicalType.DATE
_CODECS = {None: 0, "gzip": 2}  # UNCOMPRESSED, GZIP
_PLAIN, _RLE, _DATA_PAGE, _REQUIRED = 0, 3, 0, 0
# Thrift compact protocol types (the few used here).
_I32, _I64, _BINARY, _LIST, _STRUCT = 5, 6, 8, 9, 12

Struct = list[
    tuple[int, int, Any]
]  # a Thrift struct: (field id, compact type, value), ids ascending


def write_parquet(
    file: str | BinaryIO,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[Sequence[Any]],
    *,
    compression: str | None = "gzip",
    row_group_rows: int = 65536,
    compresslevel: int = 1,
) -> int:
    """Write ``rows`` (sequences in ``columns`` order) to ``file``; return the number of rows.

    ``columns`` are ``(name, kind)`` pairs, kind one of ``KINDS``. ``compression`` is
    ``"gzip"`` (RFC 1952 frames, which every reader takes) or None; level 1 wrote 3.4 times
    as many rows a second as level 6, for files 12% larger (benchmarks/run.py --only parquet).
    """
    for name, kind in columns:
        if kind not in KINDS:
            raise ValueError(
                f"column {name!r}: kind must be one of {', '.join(KINDS)}, not {kind!r}"
            )
    if compression not in _CODECS:
        raise ValueError(f"compression must be 'gzip' or None, not {compression!r}")
    if isinstance(file, str):
        with open(file, "wb") as out:
            return write_parquet(
                out,
                columns,
                rows,
                compression=compression,
                row_group_rows=row_group_rows,
                compresslevel=compresslevel,
            )
    file.write(b"PAR1")
    position, row_groups, total = 4, [], 0
    remaining = iter(rows)
    while batch := list(itertools.islice(remaining, row_group_rows)):
        chunks, size = [], 0
        for index, (name, kind) in enumerate(columns):
            page, page_size = _data_page(
                [row[index] for row in batch], kind, compression, compresslevel
            )
            chunks.append(
                _column_chunk(name, kind, compression, len(batch), position, len(page), page_size)
            )
            file.write(page)
            position, size = position + len(page), size + page_size
        row_groups.append([(1, _LIST, (_STRUCT, chunks)), (2, _I64, size), (3, _I64, len(batch))])
        total += len(batch)
    schema = [[(4, _BINARY, "schema"), (5, _I32, len(columns))]] + [
        _schema_element(n, k) for n, k in columns
    ]
    footer = _struct([
        (1, _I32, 1),  # version
        (2, _LIST, (_STRUCT, schema)),
        (3, _I64, total),
        (4, _LIST, (_STRUCT, row_groups)),
        (6, _BINARY, "dataset-client stand-in (examples/parquet_writer.py)"),  # created_by
    ])  # fmt: skip
    file.write(footer + struct.pack("<I", len(footer)) + b"PAR1")
    return total


def _plain(values: list[Any], kind: str) -> bytes:
    """Values back to back, little endian; a byte array after its 4-byte length (Encodings.md, Plain)."""
    if kind == "string":
        encoded = [value.encode("utf-8") for value in values]
        return b"".join(struct.pack("<I", len(data)) + data for data in encoded)
    if kind == "date":
        days = [
            (datetime.date.fromisoformat(v) if isinstance(v, str) else v).toordinal()
            for v in values
        ]
        return struct.pack(f"<{len(days)}i", *(day - _EPOCH.toordinal() for day in days))
    return struct.pack(f"<{len(values)}{'q' if kind == 'int64' else 'd'}", *values)


def _data_page(
    values: list[Any], kind: str, compression: str | None, compresslevel: int
) -> tuple[bytes, int]:
    """A data page (v1) of required values: its header and body, and its uncompressed size with the header."""
    body = _plain(values, kind)  # a required column has no repetition or definition levels
    stored = gzip.compress(body, compresslevel, mtime=0) if compression else body
    header = _struct([
        (1, _I32, _DATA_PAGE),
        (2, _I32, len(body)),
        (3, _I32, len(stored)),
        (5, _STRUCT, [(1, _I32, len(values)), (2, _I32, _PLAIN), (3, _I32, _RLE), (4, _I32, _RLE)]),
    ])  # fmt: skip
    return header + stored, len(header) + len(body)


def _column_chunk(
    name: str, kind: str, compression: str | None, count: int, offset: int, stored: int, size: int
) -> Struct:
    metadata = [
        (1, _I32, _PHYSICAL[kind]),
        (2, _LIST, (_I32, [_PLAIN])),  # encodings
        (3, _LIST, (_BINARY, [name])),  # path_in_schema
        (4, _I32, _CODECS[compression]),
        (5, _I64, count),  # num_values
        (6, _I64, size),  # total_uncompressed_size, page header included
        (7, _I64, stored),  # total_compressed_size
        (9, _I64, offset),  # data_page_offset
    ]
    return [(2, _I64, offset), (3, _STRUCT, metadata)]  # file_offset, meta_data


def _schema_element(name: str, kind: str) -> Struct:
    element = [(1, _I32, _PHYSICAL[kind]), (3, _I32, _REQUIRED), (4, _BINARY, name)]
    if kind in _LOGICAL:  # both annotations: LogicalTypes.md, "Compatibility"
        element += [(6, _I32, _CONVERTED[kind]), (10, _STRUCT, [(_LOGICAL[kind], _STRUCT, [])])]
    return element


def _struct(fields: Struct) -> bytes:
    """A struct in Thrift's compact protocol: each field's header (id delta and type), its value; a stop byte."""
    out = bytearray()
    last = 0
    for field_id, kind, value in fields:
        delta = field_id - last
        out += (
            bytes([delta << 4 | kind])
            if 0 < delta <= 15
            else bytes([kind]) + _varint(_zigzag(field_id))
        )
        out += _value(kind, value)
        last = field_id
    return bytes(out + b"\x00")


def _value(kind: int, value: Any) -> bytes:
    if kind in (_I32, _I64):
        return _varint(_zigzag(value))
    if kind == _BINARY:
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return _varint(len(data)) + data
    if kind == _STRUCT:
        return _struct(value)
    element, items = value  # a list: its size and element type, then the elements
    size = (
        bytes([len(items) << 4 | element])
        if len(items) < 15
        else bytes([0xF0 | element]) + _varint(len(items))
    )
    return size + b"".join(_value(element, item) for item in items)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)

"""PostgreSQL column types as lake (Arrow, Delta, Iceberg) types, and how they are read.

One table (:data:`SCALARS`) says what each PostgreSQL type becomes in the lake and whether
its value is read as it is or as its text (``json`` keeps its exact text, a ``uuid`` its
canonical form).  A type with no faithful counterpart is refused with one line naming the
column (:class:`TypeRefused`): ``add-table`` checks every column before anything is
registered, so replay and the copy never meet one.  ``docs/lakehouse.md`` prints the table.

Arrow is imported inside the functions: the worker of a node without lake tables never
loads it for this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from pgferry.errors import TableError

if TYPE_CHECKING:  # Arrow: imported where rows are read or written
    import psycopg
    import pyarrow as pa


class TypeRefused(TableError):
    """A column whose type has no faithful lake type."""


# PostgreSQL type (format_type's text without a modifier) -> (Arrow type name, read as text)
SCALARS: dict[str, tuple[str, bool]] = {
    "smallint": ("int16", False),
    "integer": ("int32", False),
    "bigint": ("int64", False),
    "real": ("float32", False),
    "double precision": ("float64", False),
    "boolean": ("bool", False),
    "text": ("string", False),
    "character varying": ("string", False),
    "character": ("string", False),
    "name": ("string", False),
    "bytea": ("binary", False),
    "date": ("date32", False),
    "timestamp without time zone": ("timestamp", False),
    "timestamp with time zone": ("timestamptz", False),
    "json": ("string", True),
    "jsonb": ("string", True),
    "uuid": ("string", True),
    "inet": ("string", True),
    "cidr": ("string", True),
    "macaddr": ("string", True),
}
# Refused, with why (the rest of unknown types: "no lake type").
REFUSED = {
    "numeric": "numeric without a precision has no fixed decimal type: declare numeric(p,s)",
    "interval": "Delta and Iceberg have no interval type",
    "time without time zone": "Delta has no time-of-day type",
    "time with time zone": "neither format has a time with an offset",
    "money": "money depends on lc_monetary: use numeric(p,2)",
}
MAX_PRECISION = 38  # decimal128
_NUMERIC = re.compile(r"^numeric\((\d+)(?:,(\d+))?\)$")
_MODIFIER = re.compile(r"\(\d+(?:,\d+)?\)")


@dataclass(frozen=True)
class LakeColumn:
    """One column: its name, PostgreSQL type text and lake type (an Arrow type name, or
    ``decimal(p,s)``, with ``[]`` for a one-dimensional array of it)."""

    name: str
    pg_type: str
    lake_type: str
    as_text: bool  # read as ::text (json, uuid, addresses)

    def select(self, alias: str | None = None) -> sql.Composable:
        """The column in a SELECT that reads its lake value."""
        ident = sql.Identifier(alias, self.name) if alias else sql.Identifier(self.name)
        if self.as_text:
            cast = "::text[]" if self.lake_type.endswith("[]") else "::text"
            return sql.SQL("{}" + cast + " as {}").format(ident, sql.Identifier(self.name))
        return ident


# Lake types a CSV reader parses from PostgreSQL's text exactly (the load's fast path):
# the others (binary, lists) are read row by row.
_CSV_TYPES = {"int16", "int32", "int64", "float32", "float64", "bool", "string", "date32",
              "timestamp", "timestamptz"}  # fmt: skip
_US = "YYYY-MM-DD HH24:MI:SS.US"
NO_LAKE_VALUE = "no lake value: "  # the text csv_select gives a timestamp without one


def csv_ready(columns: Sequence[LakeColumn]) -> bool:
    """Whether every column can travel as CSV text (see :func:`csv_select`)."""
    return all(c.lake_type in _CSV_TYPES or c.lake_type.startswith("decimal(") for c in columns)


def csv_select(column: LakeColumn) -> sql.Composable:
    """The column as the text a CSV reader parses into its lake type: timestamps as UTC
    (``timestamptz``) or as written, to the microsecond, without an offset.  A timestamp
    the lake has no value for (``infinity``, a year BC) becomes text no reader parses, so
    the batch fails naming it rather than writing NULL or a year AD."""
    ident = sql.Identifier(column.name)
    if column.lake_type in ("timestamptz", "timestamp"):
        value = (
            sql.SQL("({} at time zone 'UTC')").format(ident)
            if column.lake_type == "timestamptz"
            else ident
        )
        return sql.SQL(
            "case when isfinite({v}) and {v} >= '0001-01-01' then to_char({v}, {fmt})"
            " else {why} || {v}::text end"
        ).format(v=value, fmt=sql.Literal(_US), why=sql.Literal(NO_LAKE_VALUE))
    return column.select()


def csv_type(column: LakeColumn) -> pa.DataType:
    """The Arrow type the CSV reader parses the column's text as."""
    import pyarrow as pa

    return (
        pa.timestamp("us")
        if column.lake_type.startswith("timestamp")
        else arrow_type(column.lake_type)
    )


def csv_tables(
    messages: Iterable[bytes | memoryview],
    columns: Sequence[LakeColumn],
    schema: pa.Schema,
    piece_bytes: int = 32 << 20,
) -> Iterator[pa.Table]:
    """Arrow tables of ``schema`` from the messages of a ``COPY (select csv_select(c) ...)
    TO STDOUT (format csv)``, parsed by Arrow's multithreaded reader in pieces of about
    ``piece_bytes`` (COPY sends one message per row: a piece always ends with a whole row)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    read = pcsv.ReadOptions(column_names=[c.name for c in columns])
    parse = pcsv.ParseOptions(newlines_in_values=True)
    convert = pcsv.ConvertOptions(
        column_types={c.name: csv_type(c) for c in columns},
        null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False,
        true_values=["t"], false_values=["f"],
    )  # fmt: skip
    buf = bytearray()
    for message in messages:
        buf += message
        if len(buf) >= piece_bytes:
            yield pcsv.read_csv(pa.py_buffer(buf), read, parse, convert).cast(schema)
            buf = bytearray()
    if buf:
        yield pcsv.read_csv(pa.py_buffer(buf), read, parse, convert).cast(schema)


def lake_column(name: str, pg_type: str, enum: bool = False) -> LakeColumn:
    """The lake column of a PostgreSQL column (``format_type`` text); TypeRefused otherwise.
    ``enum``: the type is an enum (stored as its label)."""
    base, array = (pg_type[:-2], "[]") if pg_type.endswith("[]") else (pg_type, "")
    if enum:
        return LakeColumn(name, pg_type, "string" + array, True)
    match = _NUMERIC.match(base.replace(" ", ""))
    if match:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if precision > MAX_PRECISION:
            raise TypeRefused(
                f"column {name}: {pg_type} is wider than the lake's {MAX_PRECISION} digits"
            )
        return LakeColumn(name, pg_type, f"decimal({precision},{scale}){array}", False)
    plain = _MODIFIER.sub("", base)
    if plain in SCALARS:
        lake, as_text = SCALARS[plain]
        return LakeColumn(name, pg_type, lake + array, as_text)
    why = REFUSED.get(plain, "no faithful lake type")
    raise TypeRefused(f"column {name}: type {pg_type} refused for the lake ({why})")


def lake_columns(
    names: Sequence[str], types: Sequence[str], enums: Sequence[bool] = ()
) -> tuple[LakeColumn, ...]:
    """The lake columns of a table (TypeRefused for the first column that has none)."""
    flags = list(enums) or [False] * len(names)
    return tuple(lake_column(n, t, e) for n, t, e in zip(names, types, flags, strict=True))


def arrow_type(lake_type: str) -> pa.DataType:
    """The pyarrow type of a lake type name."""
    import pyarrow as pa

    if lake_type.endswith("[]"):
        return pa.list_(arrow_type(lake_type[:-2]))
    if lake_type.startswith("decimal("):
        precision, scale = lake_type[8:-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    if lake_type == "timestamp":
        return pa.timestamp("us")
    if lake_type == "timestamptz":
        return pa.timestamp("us", tz="UTC")
    return {
        "int16": pa.int16(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float32": pa.float32(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "string": pa.string(),
        "binary": pa.binary(),
        "date32": pa.date32(),
    }[lake_type]


def arrow_schema(columns: Sequence[LakeColumn], not_null: Sequence[str] = ()) -> pa.Schema:
    """The pyarrow schema of the lake table (key columns NOT NULL)."""
    import pyarrow as pa

    return pa.schema(
        [pa.field(c.name, arrow_type(c.lake_type), nullable=c.name not in not_null)
         for c in columns]
    )  # fmt: skip


def table_columns(
    conn: psycopg.Connection, relation: str, only: Sequence[str] | None = None
) -> tuple[LakeColumn, ...]:
    """The lake columns of a local table (or a stage; ``only`` these columns), from the
    catalog; TypeRefused for a column without a lake type."""
    rows = conn.execute(
        """
        select a.attname, format_type(a.atttypid, a.atttypmod),
               coalesce(e.typtype, t.typtype) = 'e'
          from pg_attribute a
          join pg_type t on t.oid = a.atttypid
          left join pg_type e on e.oid = t.typelem and t.typcategory = 'A'
         where a.attrelid = to_regclass(%s) and a.attnum > 0 and not a.attisdropped
           and a.attgenerated = ''
         order by a.attnum
        """,
        (relation,),
    ).fetchall()
    return tuple(lake_column(n, t, e) for n, t, e in rows if only is None or n in only)


def rows_to_arrow(
    columns: Sequence[LakeColumn], rows: Sequence[Sequence[Any]], schema: pa.Schema | None = None
) -> pa.Table:
    """A pyarrow table of rows (tuples in the order of ``columns``)."""
    import pyarrow as pa

    schema = schema if schema is not None else arrow_schema(columns)
    arrays = [
        pa.array([r[i] for r in rows], type=schema.field(c.name).type)
        for i, c in enumerate(columns)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)

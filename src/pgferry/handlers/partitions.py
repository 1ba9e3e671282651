"""Time partitions of a table, for the ``dispatch`` handler: names, creation, retention.

A partition holds one *period* (an hour, day, month or year) of rows.  Its name comes from
a template (``part_name``) in Python's ``%(key)s`` style, with the keys ``parent`` (the
table's own name), ``year``, ``month``, ``day`` and ``hour`` (zero-padded); the same
template, read backwards, tells which of the table's partitions this handler made, so
retention drops those only.  Periods are taken in UTC for ``timestamptz`` values (and for
the batch's or an event's time), as they are for ``date`` and ``timestamp`` ones.

Two kinds of parent:

* a plain table: each partition is ``create table P (like parent including all) inherits
  (parent)``, so a query of the parent sees every partition's rows; with a date field it
  also gets a CHECK constraint on the period;
* a declaratively partitioned table (``partition by range (field)``): each partition is
  ``create table P partition of parent for values from (start) to (end)``, and rows are
  inserted into the parent, which routes them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

PERIODS = ("hour", "day", "month", "year")
# The keys a name must hold for each period: without them two periods share one name.
_NEEDED = {
    "year": ("year",),
    "month": ("year", "month"),
    "day": ("year", "month", "day"),
    "hour": ("year", "month", "day", "hour"),
}
_KEYS = ("parent", "year", "month", "day", "hour")
_DIGITS = {"year": 4, "month": 2, "day": 2, "hour": 2}
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
NAMEDATALEN = 63  # PostgreSQL's longest identifier, in bytes


def default_template(period: str) -> str:
    """``%(parent)s_%(year)s_%(month)s...``, down to the period."""
    return "%(parent)s_" + "_".join(f"%({k})s" for k in _NEEDED[period])


def check_template(template: str, period: str) -> None:
    """ValueError unless ``template`` names one partition per ``period``."""
    try:
        template % dict.fromkeys(_KEYS, "0")
    except (KeyError, ValueError, TypeError) as exc:
        keys = ", ".join(f"%({k})s" for k in _KEYS)
        raise ValueError(
            f"part_name {template!r} is not a name template ({exc}); it may use {keys}"
        ) from None
    used = set(_PLACEHOLDER.findall(template))
    missing = [k for k in _NEEDED[period] if k not in used]
    if missing:
        raise ValueError(
            f"part_name {template!r} lacks %({missing[0]})s: partitions of one {period} each"
            " need a name of their own"
        )
    if "%" in _PLACEHOLDER.sub("", template).replace("%%", ""):
        raise ValueError(f"part_name {template!r}: a lone % (write %% for one)")


def _aligned(start: datetime, period: str) -> bool:
    """Whether ``start`` is the first moment of a period."""
    fields = {"hour": (), "day": ("hour",), "month": ("hour", "day"),
              "year": ("hour", "day", "month")}[period]  # fmt: skip
    first = {"hour": 0, "day": 1, "month": 1}
    return not start.minute and all(getattr(start, f) == first[f] for f in fields)


def end_of(start: datetime, period: str) -> datetime:
    if period == "hour":
        return start + timedelta(hours=1)
    if period == "day":
        return start + timedelta(days=1)
    if period == "month":
        year, month = divmod(start.month, 12)
        return start.replace(year=start.year + year, month=month + 1)
    return start.replace(year=start.year + 1)


@dataclass(frozen=True)
class Naming:
    """The partitions of one parent table: their names and periods."""

    schema: str
    parent: str
    template: str
    period: str

    def name(self, start: datetime) -> str:
        values = {
            "parent": self.parent,
            "year": f"{start.year:04d}",
            "month": f"{start.month:02d}",
            "day": f"{start.day:02d}",
            "hour": f"{start.hour:02d}",
        }
        return self.template % values

    def check_length(self) -> None:
        """ValueError when the names would be cut by PostgreSQL (and so collide)."""
        longest = self.name(datetime(2000, 12, 31, 23))
        if len(longest.encode()) > NAMEDATALEN:
            raise ValueError(
                f"partition names like {longest!r} are longer than {NAMEDATALEN} bytes"
            )

    def parse(self, name: str) -> datetime | None:
        """The start of the period a partition of this name holds; None for a name this
        template does not make."""
        match = self._pattern().fullmatch(name)
        if match is None:
            return None
        got = {k: int(v) for k, v in match.groupdict().items()}
        try:
            start = datetime(got.get("year", 1), got.get("month", 1), got.get("day", 1),
                             got.get("hour", 0))  # fmt: skip
        except ValueError:
            return None
        return start if _aligned(start, self.period) else None

    def _pattern(self) -> re.Pattern[str]:
        out, seen = [], set()
        for i, part in enumerate(_PLACEHOLDER.split(self.template)):
            if i % 2 == 0:
                out.append(re.escape(part.replace("%%", "%")))
            elif part == "parent":
                out.append(re.escape(self.parent))
            elif part in seen:
                out.append(f"(?P={part})")
            else:
                seen.add(part)
                out.append(f"(?P<{part}>\\d{{{_DIGITS[part]}}})")
        return re.compile("".join(out))

    def ident(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name)

    @property
    def parent_ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.parent)


def bound(start: datetime, field_type: str | None) -> str:
    """A range bound's text for a partition key of ``field_type``."""
    if field_type == "date":
        return start.strftime("%Y-%m-%d")
    text = start.strftime("%Y-%m-%d %H:%M:%S")
    return text + "+00" if field_type == "timestamp with time zone" else text


def missing(conn: psycopg.Connection, naming: Naming, starts: list[datetime]) -> list[datetime]:
    """Which of the periods have no partition of their name yet."""
    names = [naming.ident(naming.name(s)).as_string(conn) for s in starts]
    rows = conn.execute(
        "select i from unnest(%s::text[]) with ordinality as n(name, i)"
        " where to_regclass(n.name) is null",
        (names,),
    ).fetchall()
    return [starts[r[0] - 1] for r in rows]


def create(
    conn: psycopg.Connection,
    naming: Naming,
    start: datetime,
    *,
    declarative: bool,
    field: str | None,
    field_type: str | None,
) -> bool:
    """Create the partition of the period starting at ``start``; False when a declarative
    parent already has another partition for (part of) it."""
    name = naming.name(start)
    lo, hi = bound(start, field_type), bound(end_of(start, naming.period), field_type)
    if declarative:
        stmt = sql.SQL("create table {} partition of {} for values from ({}) to ({})").format(
            naming.ident(name), naming.parent_ident, sql.Literal(lo), sql.Literal(hi)
        )
        try:
            with conn.transaction():  # a savepoint: the batch goes on
                conn.execute(stmt)
        except psycopg.errors.InvalidObjectDefinition as exc:  # "would overlap partition"
            log.info("Partition %s not created: %s", name, str(exc).strip())
            return False
    else:
        check = sql.SQL("")
        if field is not None:
            check = sql.SQL(", check ({f} >= {lo} and {f} < {hi})").format(
                f=sql.Identifier(field), lo=sql.Literal(lo), hi=sql.Literal(hi)
            )
        conn.execute(
            sql.SQL("create table {} (like {} including all{}) inherits ({})").format(
                naming.ident(name), naming.parent_ident, check, naming.parent_ident
            )
        )
    log.info("Created partition %s.%s", naming.schema, name)
    return True


def drop_older(conn: psycopg.Connection, naming: Naming, retention: str) -> list[str]:
    """Drop the parent's partitions of this naming whose whole period is older than
    ``retention`` (an interval) before now; returns their names."""
    cutoff = conn.execute(
        "select (now() - %s::interval) at time zone 'UTC'", (retention,)
    ).fetchone()[0]
    children = conn.execute(
        """
        select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid
         where i.inhparent = %s::regclass and c.relnamespace = %s::regnamespace
         order by c.relname
        """,
        (naming.parent_ident.as_string(conn), sql.Identifier(naming.schema).as_string(conn)),
    ).fetchall()
    dropped = []
    for (name,) in children:
        start = naming.parse(name)
        if start is not None and end_of(start, naming.period) <= cutoff:
            conn.execute(sql.SQL("drop table {}").format(naming.ident(name)))
            log.info("Dropped partition %s.%s (older than %s)", naming.schema, name, retention)
            dropped.append(name)
    return dropped


@dataclass(frozen=True)
class Parent:
    """What replay needs to know of the parent table, a plain or a range-partitioned one
    (read once per handler object)."""

    columns: dict[str, str]  # insertable column -> type (format_type)
    pk: tuple[str, ...]  # the parent's primary key
    declarative: bool  # partition by range (field)


def read_parent(conn: psycopg.Connection, fq: str) -> Parent:
    cols = conn.execute(
        """
        select a.attname, format_type(a.atttypid, a.atttypmod)
          from pg_attribute a
         where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped
           and a.attgenerated = ''
         order by a.attnum
        """,
        (fq,),
    ).fetchall()
    kind = conn.execute("select relkind from pg_class where oid = %s::regclass", (fq,)).fetchone()
    pk = conn.execute(
        """
        select a.attname
          from pg_index i
          cross join lateral unnest(i.indkey) with ordinality as k(attnum, ord)
          join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
         where i.indrelid = %s::regclass and i.indisprimary
         order by k.ord
        """,
        (fq,),
    ).fetchall()
    return Parent(
        {c[0]: c[1] for c in cols},
        tuple(r[0] for r in pk),
        bool(kind and kind[0] == "p"),
    )


def range_key(conn: psycopg.Connection, fq: str) -> str | None:
    """The one column a range-partitioned table is partitioned by (None otherwise)."""
    row = conn.execute(
        """
        select p.partstrat, p.partnatts, a.attname
          from pg_partitioned_table p
          left join pg_attribute a on a.attrelid = p.partrelid and a.attnum = p.partattrs[0]
         where p.partrelid = %s::regclass
        """,
        (fq,),
    ).fetchone()
    if row is None or row[0] != "r" or row[1] != 1:
        return None
    return row[2]


def split(conn: psycopg.Connection, fq: str) -> tuple[str, str]:
    row = conn.execute(
        "select n.nspname, c.relname from pg_class c join pg_namespace n"
        " on n.oid = c.relnamespace where c.oid = %s::regclass",
        (fq,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]

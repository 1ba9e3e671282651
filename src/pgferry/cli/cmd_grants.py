"""``grants``: print the SQL a superuser runs once so that a node runs without a superuser.

The roles are grouped by what they are for, as PgQ groups its reader, writer and admin
roles: the node's admin (a login role, owner of the pgferry schemas, which runs every
command and daemon of the node), what a provider gives (``PREFIXprovider``: reading the
replicated tables and sequences, attaching capture triggers) and what a subscriber takes
(``PREFIXsubscriber``: writing them, deny triggers, ``session_replication_role``).  A writer
of replicated tables gets nothing: it needs only its own privileges on them.  The admin is
the ``user`` of the node's ``db`` connect string when it names one, ``PREFIXadmin``
otherwise.  The text is printed, never run, and holds no password; running it again changes
nothing (roles are made only when missing, GRANT repeats harmlessly).  docs/security.md
says what each grant is for and what runs with which rights.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgferry import settings
from pgferry.cli.registry import Context, command
from pgferry.errors import UsageError
from pgferry.registry.names import fold, split_name

DEFAULT_PREFIX = "ferry_"
# The dollar quote of the DO blocks; a name holding it is refused rather than quoted.
_TAG = "$pgferry$"


def _text(part: sql.Composable) -> str:
    return part.as_string(None)


def _ident(*names: str) -> str:
    return _text(sql.Identifier(*names))


def _names(raw: str) -> tuple[str, str]:
    """``schema.name`` as typed (unquoted parts folded, ``"Quoted"`` kept): its two names."""
    parts = split_name(raw.strip())
    if len(parts) != 2 or any(p.is_glob for p in parts):
        raise UsageError(f"grants: expected schema.name, not {raw!r}")
    schema, name = (p.text if p.quoted else fold(p.text) for p in parts)
    return schema, name


def _do(*statements: str) -> str:
    body = "\n".join(f"  {s}" for s in statements)
    return f"DO {_TAG}\nBEGIN\n{body}\nEND\n{_TAG};"


def _if_exists(test: str, name: str, statement: str) -> str:
    """``statement`` run only when ``test`` (a catalog lookup of ``name``) finds it: on a
    subscriber, add-table --create / add-seq --create may make it later, as the admin's."""
    return _do(f"IF {test.format(_text(sql.Literal(name)))} THEN", f"  {statement}", "END IF;")


_SCHEMA_EXISTS = "EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = {})"
_RELATION_EXISTS = "pg_catalog.to_regclass({}) IS NOT NULL"


def _make_role(role: str, login: bool) -> str:
    kind = "LOGIN" if login else "NOLOGIN"
    name = _text(sql.Literal(role))
    return _do(
        f"IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {name}) THEN",
        f"  CREATE ROLE {_ident(role)} {kind};",
        "END IF;",
    )


def grant_script(
    admin: str,
    prefix: str,
    provider: bool,
    subscriber: bool,
    tables: list[str],
    seqs: list[str],
) -> str:
    """The script's text; ``tables`` and ``seqs`` as the operator typed them."""
    for name in (admin, prefix, *tables, *seqs):
        if _TAG in name:
            raise UsageError(f"grants: a name may not hold {_TAG}")
    if (tables or seqs) and not (provider or subscriber):
        raise UsageError("grants: --table and --seq go with --provider or --subscriber")
    table_names = [_names(t) for t in tables]
    seq_names = [_names(s) for s in seqs]
    schema_names = list(dict.fromkeys(n[0] for n in [*table_names, *seq_names]))
    relations = [_ident(*n) for n in table_names]
    sequences = [_ident(*n) for n in seq_names]
    schemas = [_ident(n) for n in schema_names]
    adm = _ident(admin)
    out = [
        "-- pgferry: the roles of one node, for the database this runs in.",
        "-- Run once as a superuser (psql -v ON_ERROR_STOP=1 -f FILE); running it again changes",
        "-- nothing.  No password is set here: give the admin one (\\password), or let it in",
        "-- by peer, certificate or a .pgpass entry.  See docs/security.md.",
        "BEGIN;",
        "",
        f"-- {admin}: the node's admin, trusted.  It owns the schemas ferry_queue, ferry_node,",
        "-- ferry and ferry_copy (create-root / create-branch / create-leaf make them as it) and",
        "-- runs every command and daemon of the node: the worker, the ticker (which writes the",
        "-- queue's ticks, its own tables), compare and repair.",
        _make_role(admin, login=True),
        "-- CREATE: the pgferry schemas, and the schemas add-table --create makes.",
        _do(
            "EXECUTE pg_catalog.format('GRANT CONNECT, CREATE ON DATABASE %I TO %I',"
            f" pg_catalog.current_database(), {_text(sql.Literal(admin))});"
        ),
    ]
    if provider:
        role = prefix + "provider"
        rol = _ident(role)
        out += [
            "",
            f"-- {role}: what a provider (the root or a branch) lets its admin do to the",
            "-- replicated tables: read them (the subscribers' copies, compare, repair and",
            "-- replay read them as this node's admin) and attach the capture triggers",
            "-- (add-table).  A table under row-level security is read only by its owner",
            f"-- or a role with BYPASSRLS (ALTER ROLE {adm} BYPASSRLS); otherwise the copy stops",
            "-- and names it.",
            _make_role(role, login=False),
            f"GRANT {rol} TO {adm};",
        ]
        out += [f"GRANT USAGE ON SCHEMA {s} TO {rol};" for s in schemas]
        out += [f"GRANT SELECT, TRIGGER ON TABLE {r} TO {rol};" for r in relations]
        if sequences:
            out.append("-- sequences: their values are published to the subscribers (add-seq)")
            out += [f"GRANT SELECT ON SEQUENCE {s} TO {rol};" for s in sequences]
    if subscriber:
        role = prefix + "subscriber"
        rol = _ident(role)
        out += [
            "",
            f"-- {role}: what a subscriber's worker needs beside owning its replicated",
            "-- tables.  Replay, the copy and repair --apply run with session_replication_role",
            "-- = replica, so that the deny triggers (which stop every other writer) let them",
            "-- through: PostgreSQL 15 grants that setting; before 15 only a superuser may set it.",
            _make_role(role, login=False),
            f"GRANT {rol} TO {adm};",
            _do(
                "IF pg_catalog.current_setting('server_version_num')::int >= 150000 THEN",
                "  EXECUTE pg_catalog.format('GRANT SET ON PARAMETER session_replication_role"
                f" TO %I', {_text(sql.Literal(role))});",
                "ELSE",
                "  RAISE WARNING 'before PostgreSQL 15 only a superuser may set"
                " session_replication_role: a subscriber''s worker must run as one';",
                "END IF;",
            ),
        ]
        if schemas:
            out += [
                "-- Schemas: USAGE, and CREATE: the copy builds the tables' indexes again there",
                "-- (a schema not there yet is made by add-table --create, as the admin's).",
            ]
        out += [
            _if_exists(_SCHEMA_EXISTS, n, f"GRANT USAGE, CREATE ON SCHEMA {_ident(n)} TO {rol};")
            for n in schema_names
        ]
        if relations:
            out += [
                "-- The tables: the copy drops their indexes and keys for its load and builds",
                "-- them again, which only their owner may do, and captured DDL runs as their",
                "-- owner: the admin owns them (as it owns those add-table --create makes), and",
                "-- so may write them.",
            ]
        out += [f"ALTER TABLE IF EXISTS {r} OWNER TO {adm};" for r in relations]
        if sequences:
            out.append("-- sequences: set to the provider's published values (setval)")
            out += [
                _if_exists(
                    _RELATION_EXISTS,
                    seq,
                    f"GRANT SELECT, UPDATE ON SEQUENCE {seq} TO {rol};",
                )
                for seq in sequences
            ]
    out += [
        "",
        "-- A writer of replicated tables (an application role, on any node) gets nothing",
        "-- here: it needs only its own privileges on the tables it writes.  The capture",
        "-- triggers queue its rows through functions the admin owns.",
        "COMMIT;",
    ]
    return "\n".join(out) + "\n"


@command("grants", "print the SQL that makes this node's roles (run once by a superuser)")
def cmd_grants(ctx: Context, argv: list[str]) -> int:
    parser = ctx.parser(
        "[--provider] [--subscriber] [--table T...] [--seq S...] [--role-prefix P]",
        description="Print, never run, the roles and grants of this node; docs/security.md.",
    )
    parser.add_argument(
        "--provider", action="store_true", help="this node provides tables (root, branch)"
    )
    parser.add_argument(
        "--subscriber", action="store_true", help="this node receives tables (branch, leaf)"
    )
    parser.add_argument(
        "--table", nargs="+", action="extend", default=[], metavar="T", help="replicated tables"
    )
    parser.add_argument(
        "--seq", nargs="+", action="extend", default=[], metavar="S", help="replicated sequences"
    )
    parser.add_argument(
        "--role-prefix",
        default=DEFAULT_PREFIX,
        metavar="P",
        help=f"prefix of the group roles (default {DEFAULT_PREFIX})",
    )
    args = parser.parse_args(argv)
    if not args.role_prefix:
        raise UsageError("grants: --role-prefix may not be empty")
    config = ctx.config()
    try:
        user = conninfo_to_dict(config.get(settings.DB)).get("user")
    except psycopg.ProgrammingError as exc:  # the connect string does not parse
        raise UsageError(f"grants: db: {exc}") from None
    admin = str(user) if user else args.role_prefix + "admin"
    print(
        grant_script(admin, args.role_prefix, args.provider, args.subscriber, args.table, args.seq),
        end="",
    )
    return 0

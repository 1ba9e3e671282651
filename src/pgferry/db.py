"""The one seam between pgferry and the database driver (psycopg 3).

Every connection goes through :func:`connect`, which turns driver errors into one-line
:class:`~pgferry.errors.DatabaseError` messages that never contain a password, and gives it
:data:`NETWORK_DEFAULTS`: TCP keepalives and a TCP user timeout, so that a peer whose
network stops answering (packets dropped, not refused) breaks the connection within a
bounded time instead of leaving a read or a write waiting forever.  The same libpq keywords
in a connect string win (docs/nodes.md, "A network that stops answering").

Every connection also gets :data:`SESSION_SETTINGS`, whatever its connect string says:
``search_path = pg_catalog, pg_temp``, so that no function or operator a role could create
in ``public`` (or any schema) is picked by a name pgferry writes unqualified, and
``row_security = off``, so that a row-level security policy that would hide rows from the
role makes the statement fail instead of reading or writing a silent subset
(docs/nodes.md, "What every session runs with").
"""

from __future__ import annotations

import os
import re
import select
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import conninfo, pq

from pgferry.errors import DatabaseError, WaitTimeout
from pgferry.polling import wait_until

APPLICATION_NAME = "pgferry"

# libpq keywords every connection gets unless its connect string sets them.  A quiet
# connection sends its first probe after keepalives_idle seconds; a peer that stopped
# answering is given up tcp_user_timeout ms after the last byte it acknowledged (Linux:
# this also ends the keepalive probing), i.e. about a minute for a waiting read or write.
NETWORK_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}

# How long a reconnect waits for a connect string naming several servers (a primary and
# its standbys, target_session_attrs=read-write) to offer one again after the connection
# was lost: while a failover runs, the old primary refuses and the standby is still
# read-only.  Patroni's defaults (ttl 30 s, loop_wait 10 s) promote within about 40 s.
FAILOVER_WAIT = 60.0
FAILOVER_POLL = 0.5  # a connection attempt per poll: two hosts tried each time

# Server settings every session runs with, after (so over) any ``-c`` of the connect
# string's ``options`` or of PGOPTIONS: pgferry's own SQL relies on them.
SESSION_SETTINGS = {
    "search_path": "pg_catalog, pg_temp",
    "row_security": "off",
}

# What a policy that would filter rows says with row_security off (sqlstate 42501).
_RLS_REFUSED = "query would be affected by row-level security policy"
RLS_FIX = "run it as the table's owner or as a role with BYPASSRLS"

# libpq keywords whose values must never reach a log line or the terminal (and PGPASSWORD,
# should an environment be printed).  libpq's keywords are lower case; masking ignores case,
# so a misspelt PASSWORD= that libpq refuses is not shown in the error that says so either.
_SECRET_KEYS = ("pgpassword", "sslpassword", "password", "sslkey")
# libpq's whitespace (isspace() in the C locale): a value ends at these, never at others.
_SPACE = " \t\n\r\f\v"
# ``password = value`` in key=value text or ``?password=value`` / ``&password=value`` in a
# URI's query; what precedes the keyword must not be a word character (``my_password=``).
_SECRET_KEYWORD = re.compile(
    rf"(?<![\w])({'|'.join(_SECRET_KEYS)})([{_SPACE}]*=[{_SPACE}]*)", re.IGNORECASE
)
# A URI's user:password@, the password up to the last @ before the path or the line's end
# (libpq takes the first @, and a raw space: neither may leave a password's tail in sight).
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^/\n]*)(@)", re.IGNORECASE)
# A Python dict's repr of conninfo parameters: 'password': '...'.
_DICT_SECRET = re.compile(
    rf"""(['"])({"|".join(_SECRET_KEYS)})\1(\s*:\s*)('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?)""",
    re.IGNORECASE,
)


def _keyvalue_end(text: str, pos: int) -> int:
    """Where the key=value value starting at ``pos`` ends, as libpq reads it: up to
    whitespace, a backslash escaping the next character (``a\\ b``), a quoted part
    ``'...'`` taking whitespace and ``\\'`` in.  Characters glued after a closing quote
    (``'it''s'``, which libpq refuses) are taken too: masking errs on the long side."""
    end = len(text)
    while pos < end and text[pos] not in _SPACE:
        if text[pos] == "'":
            pos += 1
            while pos < end and text[pos] != "'":
                pos += 2 if text[pos] == "\\" else 1
            pos += 1
        elif text[pos] == "\\":
            pos += 2
        else:
            pos += 1
    return min(pos, end)


def _uri_param_end(text: str, pos: int) -> int:
    """Where a URI query value starting at ``pos`` ends: at ``&``, ``#`` or whitespace
    (its own ``&`` and spaces are percent-encoded)."""
    end = pos
    while end < len(text) and text[end] not in f"&#{_SPACE}":
        end += 1
    return end


def mask_connstr(connstr: str) -> str:
    """Return ``connstr`` with every secret replaced by ``[...]``.

    Works on key=value strings in every quoting libpq reads, on URIs (user:password@ and
    query parameters), and on any text that holds either (a log line, an error message).
    """
    masked = _URI_PASSWORD.sub(r"\1[...]\3", connstr)
    masked = _DICT_SECRET.sub(r"\1\2\1\3'[...]'", masked)
    parts: list[str] = []
    done = 0
    for match in _SECRET_KEYWORD.finditer(masked):
        if match.start() < done:  # inside a value already masked
            continue
        start = match.end()
        in_query = match.start() > 0 and masked[match.start() - 1] in "?&"
        end = _uri_param_end(masked, start) if in_query else _keyvalue_end(masked, start)
        parts += [masked[done:start], "[...]"]
        done = end
    parts.append(masked[done:])
    return "".join(parts)


def describe(connstr: str) -> str:
    """A short, secret-free description of where ``connstr`` points (host:port/dbname)."""
    try:
        params = conninfo.conninfo_to_dict(connstr)
    except psycopg.ProgrammingError:
        return mask_connstr(connstr)
    hosts = str(params.get("host") or params.get("hostaddr") or "local").split(",")
    ports = str(params.get("port") or "5432").split(",")
    if len(ports) != len(hosts):  # one port for every host (or a list libpq refuses)
        ports = [ports[0]] * len(hosts)
    dbname = params.get("dbname") or params.get("user") or ""
    # Every server of a multi-host string, each with its own port: h1:p1,h2:p2/db.
    pairs = zip(hosts, ports, strict=True)
    servers = ",".join(f"{host or 'local'}:{port or '5432'}" for host, port in pairs)
    return f"{servers}/{dbname}"


def server_of(conn: psycopg.Connection) -> str:
    """host:port of the server ``conn`` reached: of a multi-host connect string, the one
    libpq chose (e.g. the primary, with ``target_session_attrs=read-write``)."""
    info = conn.info
    host = info.host or getattr(info, "hostaddr", "") or "local"
    return f"{host}:{info.port}"


def host_count(connstr: str) -> int:
    """How many servers ``connstr`` names (1 for text libpq cannot read)."""
    try:
        params = conninfo.conninfo_to_dict(connstr)
    except psycopg.ProgrammingError:
        return 1
    return len(str(params.get("host") or params.get("hostaddr") or "").split(","))


def error_text(exc: BaseException) -> str:
    """One line describing a driver error, secrets masked."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else exc.__class__.__name__
    if first.startswith(_RLS_REFUSED):
        # The server's line names the table; pgferry never reads or writes a subset.
        first = f"{first}: {RLS_FIX}"
    return mask_connstr(first)


def session_options(options: str | None) -> str:
    """libpq ``options`` with :data:`SESSION_SETTINGS` after those given (the last wins)."""
    # libpq splits options on spaces: one inside a value is escaped with a backslash.
    pinned = " ".join(
        f"-c {key}=" + value.replace(" ", "\\ ") for key, value in SESSION_SETTINGS.items()
    )
    return f"{options} {pinned}" if options and options.strip() else pinned


def replica_dsn(dsn: str) -> str:
    """``dsn`` whose sessions run with session_replication_role = replica.

    A copy's TRUNCATE and COPY and repair's fix must pass the subscriber's deny-write
    triggers.
    """
    params = conninfo.conninfo_to_dict(dsn)
    opts = str(params.get("options") or "")
    params["options"] = f"{opts} -c session_replication_role=replica".strip()
    return conninfo.make_conninfo(**params)


def session_conninfo(
    connstr: str, application_name: str = APPLICATION_NAME, connect_timeout: int = 10
) -> str:
    """``connstr`` with every connection's defaults and its pinned session settings.

    Raises psycopg.ProgrammingError for a string libpq cannot parse.
    """
    params = conninfo.conninfo_to_dict(connstr)
    params.setdefault("application_name", application_name)
    params.setdefault("connect_timeout", str(connect_timeout))
    for key, value in NETWORK_DEFAULTS.items():
        params.setdefault(key, value)
    # libpq reads PGOPTIONS only when the string has no options: keep it by merging.
    params["options"] = session_options(params.get("options") or os.environ.get("PGOPTIONS"))
    return conninfo.make_conninfo(**params)


def connect(
    connstr: str,
    *,
    autocommit: bool = False,
    application_name: str = APPLICATION_NAME,
    connect_timeout: int = 10,
    **kwargs,
) -> psycopg.Connection:
    """Open a connection; failures raise DatabaseError naming the target without secrets."""
    try:
        dsn = session_conninfo(connstr, application_name, connect_timeout)
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(f"invalid connection string: {error_text(exc)}") from None
    try:
        return psycopg.connect(dsn, autocommit=autocommit, **kwargs)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect to {describe(connstr)}: {error_text(exc)}") from None


def reconnect(connstr: str, *, wait: float = FAILOVER_WAIT, **kwargs) -> psycopg.Connection:
    """:func:`connect` again after a lost connection.  A connect string that names several
    servers is tried until one accepts, for up to ``wait`` seconds: its primary may be
    failing over.  A single server's refusal is raised at once, as :func:`connect` does."""
    if host_count(connstr) < 2:
        return connect(connstr, **kwargs)
    last: list[DatabaseError] = []

    def attempt() -> psycopg.Connection | None:
        try:
            return connect(connstr, **kwargs)
        except DatabaseError as exc:
            last[:] = [exc]
            return None

    try:
        return wait_until(attempt, timeout=wait, interval=FAILOVER_POLL, what="a server")
    except WaitTimeout:
        raise DatabaseError(f"{last[0]} (tried for {wait:g} s)") from None


@contextmanager
def connection(connstr: str, **kwargs) -> Iterator[psycopg.Connection]:
    """``with connection(dsn) as conn``: commit on success, roll back on error, then close."""
    conn = connect(connstr, **kwargs)
    try:
        with conn:
            yield conn
    except psycopg.Error as exc:
        raise DatabaseError(f"{describe(connstr)}: {error_text(exc)}") from None


def run_prepared(conn: psycopg.Connection, name: bytes) -> pq.abc.PGresult:
    """The one-row result of the prepared statement ``name`` (no parameters) on ``conn``.

    libpq's calls, not psycopg's execute(): for a daemon that wakes up for one statement
    (the ticker's idle round), psycopg's cursor, query conversion and wait were half of
    the wake-up's CPU.  It waits in poll(), so a signal handler still runs during a query.
    """
    pgconn = conn.pgconn
    pgconn.send_query_prepared(name, None)
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLOUT)
    while pgconn.flush():  # psycopg's connections do not block: the rest when writable
        poller.poll()
    poller.modify(pgconn.socket, select.POLLIN)
    result = error = None
    while True:
        while pgconn.is_busy():
            poller.poll()
            pgconn.consume_input()
        res = pgconn.get_result()
        if res is None:
            break
        if res.status != pq.ExecStatus.TUPLES_OK:
            error = error or res
        elif result is None:
            result = res
    if error is not None:
        raise psycopg.errors.error_from_result(error, encoding=conn.info.encoding)
    if result is None or result.ntuples != 1:
        raise psycopg.InterfaceError(f"{name.decode()} did not return one row")
    return result

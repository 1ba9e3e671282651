"""Connect strings given on the command line without a password in argv.

Every command argument that is a connect string (``diff``'s SRC_CONNSTR and DST_CONNSTR,
``create-*``'s PUBLIC_CONNSTR and ``--provider=``) takes three forms:

- ``@PATH``: the connect string is the text of the file PATH (surrounding whitespace,
  the final newline included, dropped; key=value pairs may stand on several lines);
- ``env:NAME``: it is the value of the environment variable NAME;
- anything else: the connect string itself, as londiste3 takes it.

Neither ``@`` nor ``env:`` can begin a libpq connect string (key=value text begins with a
keyword, a URI with ``postgres``), so a plain connect string never reads as either form.
Whatever the form, libpq's own ways stay open: ``service=``, ``~/.pgpass`` (or
``PGPASSFILE``) and ``PGPASSWORD`` give the password when the connect string has none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import conninfo

from pgferry.db import error_text
from pgferry.errors import UsageError

FILE_PREFIX = "@"
ENV_PREFIX = "env:"
# Keywords whose values stay out of a location stored in the node tables.
PASSWORD_KEYS = ("password", "sslpassword")


@dataclass(frozen=True)
class ConnstrArg:
    """A connect string from the command line: its text, and whether it was read from a
    file or the environment (rather than written in argv)."""

    text: str
    indirect: bool


def read_connstr(value: str, what: str) -> ConnstrArg:
    """``value`` as given for ``what`` (an argument's name, for the error line) resolved to
    its connect string; UsageError in one line when the file or variable gives none."""
    if value.startswith(FILE_PREFIX):
        path = Path(value[len(FILE_PREFIX) :]).expanduser()
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise UsageError(f"{what}: cannot read a connect string in {path}: {reason}") from None
        if not text:
            raise UsageError(f"{what}: {path} holds no connect string")
        return ConnstrArg(text, True)
    if value.startswith(ENV_PREFIX):
        name = value[len(ENV_PREFIX) :]
        text = os.environ.get(name, "").strip() if name else ""
        if not text:
            raise UsageError(f"{what}: environment variable {name or '(none)'} is not set")
        return ConnstrArg(text, True)
    return ConnstrArg(value, False)


def has_password(connstr: str) -> bool:
    """Whether ``connstr`` carries a password (False for text libpq cannot read)."""
    try:
        params = conninfo.conninfo_to_dict(connstr)
    except psycopg.ProgrammingError:
        return False
    return any(params.get(key) for key in PASSWORD_KEYS)


def without_password(connstr: str, what: str) -> str:
    """``connstr`` with its password keywords left out (key=value text; a URI comes back
    as key=value), for a location other nodes will read from the node tables."""
    try:
        params = conninfo.conninfo_to_dict(connstr)
    except psycopg.ProgrammingError as exc:
        raise UsageError(f"{what}: invalid connection string: {error_text(exc)}") from None
    if not any(key in params for key in PASSWORD_KEYS):
        return connstr
    return conninfo.make_conninfo(
        **{key: value for key, value in params.items() if key not in PASSWORD_KEYS}
    )

"""mask_connstr over every form libpq reads a password in: generated passwords, each
written in key=value text (psycopg's quoting, backslash escapes unquoted, single quotes,
spaces around ``=``), in a URI's user:password@ and in its query.  libpq's own parser
reads the password back from the text (so the form is real), and the masked text is the
same text with the value replaced by ``[...]``: nothing of the password is left."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgferry.db import mask_connstr

pytestmark = pytest.mark.pure

# Any character a password may hold (libpq strings end at NUL; surrogates are not text).
PASSWORDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)
SPACES = st.text(alphabet=" \t\n", max_size=3)
KEYWORDS = st.sampled_from(["password", "sslpassword"])


def unquoted(value: str) -> str:
    """The value without quotes: a backslash before whitespace, quotes and backslashes."""
    return "".join("\\" + c if c in " \t\n\r\f\v\\'" else c for c in value)


def quoted(value: str) -> str:
    """The value in single quotes, backslash escapes inside."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@given(pw=PASSWORDS, keyword=KEYWORDS, style=st.sampled_from([unquoted, quoted]),
       before=SPACES, after=SPACES)  # fmt: skip
def test_keyvalue_forms(pw: str, keyword: str, style, before: str, after: str) -> None:
    head, tail = "host=db1 port=5432 ", " dbname=app user=ferry"
    text = f"{head}{keyword}{before}={after}{style(pw)}{tail}"
    assert conninfo_to_dict(text)[keyword] == pw  # libpq reads this password from it
    assert mask_connstr(text) == f"{head}{keyword}{before}={after}[...]{tail}"


@given(pw=PASSWORDS)
def test_psycopg_made_conninfo(pw: str) -> None:
    text = make_conninfo(host="db1", password=pw, dbname="app", application_name="x y")
    assert conninfo_to_dict(text)["password"] == pw
    masked = mask_connstr(text)
    assert masked == mask_connstr(make_conninfo(host="db1", password="p", dbname="app",
                                                application_name="x y"))  # fmt: skip
    assume(len(pw) >= 4 and pw not in "host=db1 dbname=app application_name='x y' [...]")
    assert pw not in masked


@given(pw=PASSWORDS)
def test_uri_user_password(pw: str) -> None:
    text = f"postgresql://ferry:{quote(pw, safe='')}@h1,h2:5433/app?sslmode=prefer"
    assert conninfo_to_dict(text)["password"] == pw
    assert mask_connstr(text) == "postgresql://ferry:[...]@h1,h2:5433/app?sslmode=prefer"


@given(pw=PASSWORDS, keyword=KEYWORDS)
def test_uri_query_password(pw: str, keyword: str) -> None:
    text = f"postgresql://ferry@h1,h2/app?{keyword}={quote(pw, safe='')}&sslmode=prefer"
    assert conninfo_to_dict(text)[keyword] == pw
    expected = f"postgresql://ferry@h1,h2/app?{keyword}=[...]&sslmode=prefer"
    assert mask_connstr(text) == expected


@given(pw=PASSWORDS.filter(lambda p: not set(p) & set("@/%\n")))
def test_uri_raw_characters(pw: str) -> None:
    """A password written into a URI without percent-encoding, spaces and all."""
    text = f"postgres://ferry:{pw}@db1/app"
    assert mask_connstr(text) == "postgres://ferry:[...]@db1/app"


@given(pw=PASSWORDS, keyword=st.sampled_from(["PASSWORD", "Password", "SSLPassword"]))
def test_keywords_in_any_case(pw: str, keyword: str) -> None:
    """libpq refuses them, and says so naming the option: the value stays hidden anyway."""
    text = f"host=db1 {keyword}={quoted(pw)} dbname=app"
    assert mask_connstr(text) == f"host=db1 {keyword}=[...] dbname=app"


def test_the_forms_written_out() -> None:
    cases = {
        r"password=a\ b host=x": "password=[...] host=x",
        "password='a b' host=x": "password=[...] host=x",
        r"password = 'it\'s' host=x": "password = [...] host=x",
        "password = 'it''s' host=x": "password = [...] host=x",  # libpq refuses it; hidden
        "postgresql://u:p@h1,h2/db?password=x": "postgresql://u:[...]@h1,h2/db?password=[...]",
        "postgresql://u:p@ss@h/db": "postgresql://u:[...]@h/db",
        "failed: sslpassword=abcd sslkey=/k": "failed: sslpassword=[...] sslkey=[...]",
        "{'password': 'abcd', 'host': 'x'}": "{'password': '[...]', 'host': 'x'}",
        "PGPASSWORD=abcd pgferry": "PGPASSWORD=[...] pgferry",
        "my_password=abcd": "my_password=abcd",
        "password=": "password=[...]",
    }
    for text, expected in cases.items():
        assert mask_connstr(text) == expected, text

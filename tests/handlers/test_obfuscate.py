"""The obfuscate handler: no original value of an obfuscated column reaches a leaf (copy
and replay), kept columns are equal, hashes are the HMAC-SHA256 of the value (the same on
two leaves with one key), and bad rule files or settings fail add-table in one line."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import psycopg
import pytest

from pgferry.config import load_config
from pgferry.handlers import obfuscate_rules
from pgferry.handlers import registry as handler_registry
from pgferry.pipeline import copy as copy_pipeline

KEY = "s3cret-obfuscator-key"
RULES = """
public.users:
  id: keep
  email: hash
  phone: skip
  ref: hash64
  score: hash32
  vip: bool
  note: keep
  profile:
    name: hash
    age: keep
    address:
      city: keep
      street: hash
public.accounts:
  login: hash
  balance: keep
"""
USERS = (
    "create table users (id int primary key, email text, phone text, ref bigint,"
    " score int, vip boolean, note text, profile jsonb)"
)
ACCOUNTS = "create table accounts (login text primary key, balance int)"


def _mac(value: object) -> bytes:
    return hmac.new(KEY.encode(), str(value).encode(), hashlib.sha256).digest()


def _hash(value: object) -> str | None:
    return None if value is None else _mac(value).hex()


def _int(value: object, size: int) -> int | None:
    return None if value is None else int.from_bytes(_mac(value)[:size], "big", signed=True)


def _bool(text: str | None) -> bool | None:
    return None if text is None else text not in ("", "0", "f", "false")


def _profile(doc: object) -> dict | None:
    if not isinstance(doc, dict):
        return None  # not an object: NULL
    out = {}
    if "name" in doc:
        out["name"] = _hash(doc["name"])
    if "age" in doc:
        out["age"] = doc["age"]
    if isinstance(doc.get("address"), dict):
        addr = doc["address"]
        out["address"] = {k: (v if k == "city" else _hash(v)) for k, v in addr.items()
                          if k in ("city", "street")}  # fmt: skip
    return out


def _expected_users(source: list[tuple]) -> list[tuple]:
    return sorted(
        (i, _hash(email), None, _int(ref, 8), _int(score, 4), _bool(vip_text), note,
         _profile(profile))
        for i, email, _phone, ref, score, vip_text, note, profile in source
    )  # fmt: skip


SOURCE_USERS = "select id, email, phone, ref, score, vip::text, note, profile from users"
LEAF_USERS = "select id, email, phone, ref, score, vip, note, profile from users order by id"


def _check_leaf(c, leaf: str) -> None:
    source = c.sql("root", SOURCE_USERS)
    held = c.sql(leaf, LEAF_USERS)
    assert held == _expected_users(source)
    # No original value of an obfuscated column anywhere in the leaf's rows.
    originals = set()
    for _i, email, phone, ref, score, _vip, _note, profile in source:
        originals |= {str(v) for v in (email, phone, ref, score) if v is not None}
        if isinstance(profile, dict):
            originals |= {str(profile.get("name")), str(profile.get("secret"))}
            originals.add(str((profile.get("address") or {}).get("street")))
    originals -= {"None"}
    texts = [r[0] for r in c.sql(leaf, "select u::text from users u")]
    for value in originals:
        if not value.lstrip("-").isdigit():  # short numbers occur in any hex text
            assert not any(value in text for text in texts), value
    for col in ("ref", "score"):  # numbers: no obfuscated value equals an original one
        mine = {r[0] for r in c.sql(leaf, f"select {col} from users where {col} is not null")}
        assert not mine & {r[0] for r in c.sql("root", f"select {col} from users")}
    accounts = c.sql("root", "select login, balance from accounts")
    assert c.sql(leaf, "select login, balance from accounts order by login") == sorted(
        (_hash(login), balance) for login, balance in accounts
    )
    logins = {r[0] for r in accounts}
    assert not logins & {r[0] for r in c.sql(leaf, "select login from accounts")}


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES, encoding="utf-8")
    return path


def test_obfuscated_copy_and_replay(
    make_cascade, db_a, db_b, new_db_b, rules_file, pg_b, monkeypatch
):
    # The copy runs as a Spark job, as for a large table (the settings travel to its tasks).
    monkeypatch.setattr(copy_pipeline, "LOCAL_PAGES", 0)
    c = make_cascade(obfuscator_key=KEY, obfuscator_map=str(rules_file))
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    c.node("leaf2", new_db_b(None), "leaf", "root")
    for node in ("root", "leaf", "leaf2"):
        c.sql(node, USERS)
        c.sql(node, ACCOUNTS)
    c.add("root", "users", "accounts")
    c.sql(
        "root",
        "insert into users select g, 'obfmark' || g || '@example.org', '+100' || g, 9000 + g,"
        " 70 + g, g % 3 = 0, 'note ' || g, jsonb_build_object('name', 'Name' || g, 'age', g,"
        " 'secret', 'hidden' || g, 'address', jsonb_build_object('city', 'C', 'street',"
        " 'Street ' || g, 'zip', '99' || g)) from generate_series(1, 60) g",
    )
    c.sql("root", "insert into users (id, email) values (61, null)")
    c.sql("root", "insert into accounts select 'login' || g, g * 10 from generate_series(1, 30) g")
    c.add("leaf", "users", "accounts", handler="obfuscate")
    c.add("leaf2", "users", "accounts", handler="obfuscate")
    c.catch_up("leaf", "leaf2")
    _check_leaf(c, "leaf")  # the copy
    c.sql("root", "insert into users (id, email, phone, profile) values"
                  " (62, 'obfmark-new', '+555', '[1, 2]')")  # fmt: skip
    c.sql("root", "update users set email = 'obfmark-changed' || id, score = -score, vip = null,"
                  " note = 'kept ' || id where id <= 10")  # fmt: skip
    c.sql("root", "delete from users where id between 20 and 25")
    c.sql("root", "update accounts set balance = -1 where login = 'login3'")
    c.sql("root", "delete from accounts where login = 'login4'")
    c.sql("root", "insert into accounts values ('login99', 990)")
    c.catch_up("leaf", "leaf2")
    _check_leaf(c, "leaf")  # replayed inserts, updates and deletes
    # Not even the leaves' WAL has seen an original e-mail (the stage is a temporary table).
    c.sql("leaf", "select pg_switch_wal()")
    for wal in (pg_b.datadir / "pg_wal").iterdir():
        if wal.is_file():
            assert b"obfmark" not in wal.read_bytes(), wal
    # Deterministic: a second leaf with the same key holds the same rows.
    for query in (LEAF_USERS, "select * from accounts order by login"):
        assert c.sql("leaf", query) == c.sql("leaf2", query)
    # The key is stored nowhere, and its fingerprint only.
    shown = c.cli("leaf", "tables", "--json")
    assert KEY not in shown.out
    attrs = {t["table_name"]: t["table_attrs"] for t in json.loads(shown.out)}
    assert attrs["public.users"]["handler_args"]["key_id"] == obfuscate_rules.key_id(KEY)
    assert json.loads(attrs["public.accounts"]["handler_args"]["rules"]) == {
        "balance": {"rule": "keep", "type": "integer"},
        "login": {"rule": "hash", "type": "text"},
    }


def test_sql_hmac_is_hmac_sha256(db_a):
    ipad, opad = obfuscate_rules.pads(KEY)
    long_key = "k" * 100
    lipad, lopad = obfuscate_rules.pads(long_key)
    expr = obfuscate_rules.column_expr("v", "hash", "text")
    with psycopg.connect(db_a, autocommit=True) as conn:
        for (i, o), key in (((ipad, opad), KEY), ((lipad, lopad), long_key)):
            conn.execute("select set_config(%s, %s, false)", (obfuscate_rules.IPAD, i))
            conn.execute("select set_config(%s, %s, false)", (obfuscate_rules.OPAD, o))
            for text in ("", "abc", "ünïcode ✓"):
                got = conn.execute(f"select {expr} from (select %s::text as v) s", (text,))
                want = hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()
                assert got.fetchone()[0] == want


def test_changed_key_is_refused(tmp_path: Path, rules_file: Path):
    ini = tmp_path / "n.ini"
    ini.write_text("[pgferry]\ndb = x\nqueue_name = q\nobfuscator_key = other\n")
    context = handler_registry.context(load_config(ini))
    stored = {"rules": json.dumps({"a": {"rule": "hash", "type": "text"}}),
              "key_id": obfuscate_rules.key_id(KEY)}  # fmt: skip
    configured = handler_registry.configure("obfuscate", [], context)
    handler = handler_registry.build(handler_registry.with_computed(configured, stored), context)
    with pytest.raises(Exception, match="not the key the table was added with"):
        handler.copy_settings()


def test_bad_obfuscate_inputs(make_cascade, db_a, db_b, new_db_b, tmp_path, rules_file):
    c = make_cascade(obfuscator_key=KEY)
    c.node("root", db_a, "root")
    c.node("leaf", db_b, "leaf", "root")
    for node in ("root", "leaf"):
        c.sql(node, USERS)
        c.sql(node, "create table other (id int primary key, v text)")
    c.add("root", "users", "other")

    def rules(text: str) -> str:
        path = tmp_path / f"r{abs(hash(text))}.yaml"
        path.write_text(text, encoding="utf-8")
        return f"--handler-arg=map={path}"

    good = RULES.split("public.accounts")[0]
    cases = [
        ([], "needs a rule file"),
        (["--handler-arg=map=/no/such/rules.yaml"], "cannot read rule file /no/such/rules.yaml"),
        ([rules("public.users: [unclosed")], "(line 1)"),
        ([rules("- a list")], "must map tables to their columns"),
        ([rules("public.nobody:\n  id: keep\n")], "has no rules for public.users"),
        ([rules(good.replace("phone: skip", "phone: md5"))], "unknown rule 'md5'"),
        ([rules(good + "  zzz: keep\n")], "has no column zzz"),
        ([rules(good.replace("  note: keep\n", ""))], "no rule for column note"),
        ([rules(good.replace("score: hash32", "score: hash"))], "hash cannot write column score"),
        ([rules(good.replace("id: keep", "id: skip"))], "key column id may only be"),
        ([rules(good.replace("ref: hash64", "ref:\n    x: keep"))], "json cannot write column ref"),
        ([rules(good + "  rules: keep\n")], "has no column rules"),
        (["--handler-arg=rules={}"], "has no argument rules"),
    ]
    for args, message in cases:
        result = c.cli("leaf", "add-table", "users", "--handler=obfuscate", *args)
        assert result.code != 0 and "Traceback" not in result.err, result.err
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.err)
        assert KEY not in result.err
        assert c.sql("leaf", "select count(*) from ferry.table_info where local")[0][0] == 0
    # Without the key in the ini.
    bare = tmp_path / "bare.ini"
    bare.write_text(c.paths["leaf"].read_text().replace(f"obfuscator_key = {KEY}\n", ""))
    c.paths["bare"] = bare
    result = c.cli("bare", "add-table", "users", "--handler=obfuscate", rules(good))
    assert result.code != 0 and "needs the ini setting obfuscator_key" in result.err
    # Not on a branch (it would pass the original values on), nor on a root.
    c.node("branch", new_db_b(None), "branch", "root")
    c.sql("branch", USERS)
    result = c.cli("branch", "add-table", "users", "--handler=obfuscate", rules(good))
    assert result.code != 0 and "obfuscate is for leaf nodes" in result.err
    # show-handlers lists what an operator gives, not what add-table stores.
    listed = c.cli("leaf", "show-handlers")
    line = next(x for x in listed.out.splitlines() if x.startswith("obfuscate"))
    assert "[map]" in line and "rules" not in line and "key_id" not in line
    result = c.cli("root", "add-table", "other", "--force", "--handler=obfuscate")
    assert result.code != 0 and "for branch and leaf nodes only" in result.err

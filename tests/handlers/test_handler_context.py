"""Each worker's handlers have a context of their own: two workers in one process (as
``testing/cascade.Runner`` runs them, in threads) with different ini settings each apply
with their own, and what handlers keep between batches is never shared."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from pgferry import settings
from pgferry.config import Config
from pgferry.handlers import registry as handler_registry
from pgferry.handlers.api import HandlerContext
from pgferry.handlers.dispatch import RetentionRuns
from pgferry.handlers.lake import LakeMemory

KEYS = {"leaf1": "first-leaf-key", "leaf2": "second-leaf-key"}
RULES = "public.people:\n  id: keep\n  email: hash\n"
PEOPLE = "create table people (id int primary key, email text)"


def _hashed(key: str, rows: list[tuple]) -> list[tuple]:
    return sorted(
        (i, hmac.new(key.encode(), e.encode(), hashlib.sha256).hexdigest()) for i, e in rows
    )


def test_two_workers_apply_with_their_own_settings(
    make_cascade, db_a, db_b, new_db_b, tmp_path: Path
) -> None:
    """Two obfuscating leaves of different keys, their workers run side by side in this
    process: each leaf's rows are hashed with its own key, copied and replayed (with one
    config for every handler of the process, the last one given to a worker or command,
    the first leaf's handlers had the second's key, which they refuse as not the key its
    table was added with)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES, encoding="utf-8")
    c = make_cascade(obfuscator_map=str(rules))
    c.node("root", db_a, "root")
    c.node("leaf1", db_b, "leaf", "root", obfuscator_key=KEYS["leaf1"])
    c.node("leaf2", new_db_b(None), "leaf", "root", obfuscator_key=KEYS["leaf2"])
    for node in ("root", "leaf1", "leaf2"):
        c.sql(node, PEOPLE)
    c.add("root", "people")
    c.sql("root", "insert into people select g, 'person' || g || '@example.org'"
                  " from generate_series(1, 20) g")  # fmt: skip
    c.start("leaf1", "leaf2")  # one thread each
    c.add("leaf1", "people", handler="obfuscate")  # copied and replayed by running workers
    c.add("leaf2", "people", handler="obfuscate")
    c.catch_up("leaf1", "leaf2")  # the copy
    c.sql("root", "insert into people values (21, 'new@example.org')")
    c.sql("root", "update people set email = 'changed' || id where id <= 5")
    c.catch_up("leaf1", "leaf2")  # replayed
    source = c.sql("root", "select id, email from people")
    for leaf, key in KEYS.items():
        assert c.sql(leaf, "select id, email from people order by id") == _hashed(key, source)


def _config(path: Path, **values: str) -> Config:
    return Config(path, "pgferry", {"db": "dbname=x", "queue_name": "q", **values})


@pytest.mark.pure
def test_each_context_builds_handlers_of_its_own_config(tmp_path: Path) -> None:
    """A handler sees the config of the context it was built with, and keeps its state in
    that context: another context, of another config, shares neither."""
    one = handler_registry.context(_config(tmp_path / "one.ini", lake_path="/lake/one"))
    two = handler_registry.context(_config(tmp_path / "two.ini", lake_path="/lake/two"))
    configured = handler_registry.configure("lake", [], one)
    first = handler_registry.build(configured, one, computed=False)
    second = handler_registry.build(configured, two, computed=False)
    assert first.config is not None and second.config is not None
    assert first.config.get(settings.LAKE_PATH) == "/lake/one"
    assert second.config.get(settings.LAKE_PATH) == "/lake/two"
    first.context.state(LakeMemory).parts["app"] = (1, 2, 3)
    assert second.context.state(LakeMemory).parts == {}
    assert one.state(LakeMemory) is first.context.state(LakeMemory)  # kept between builds
    assert one.state(RetentionRuns) is not two.state(RetentionRuns)
    assert handler_registry.build_default(HandlerContext()).config is None

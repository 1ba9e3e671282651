"""What a segment is planned with, without a database: the routes and columns of the rows
queued before a script that renames or drops (pgferry.apply.replay.shapes), and the tables
whose rows may carry other columns than the provider's catalog says.  Whether a
batch's segments are planned in ev_id ranges is the strategy's
(tests/apply/test_strategy.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pgferry.apply.replay.script_shapes import LaterChanges
from pgferry.apply.replay.shapes import TableShapes, columns_carried, provider_routes
from pgferry.registry.routes import Route

pytestmark = pytest.mark.pure


def _route(name: str) -> Route:
    schema, table = name.split(".")
    return Route(
        table_name=name, dest_schema=schema, dest_name=table, pk=("id",),
        columns=("id", "v"), types=("integer", "text"), merge_state="ok",
        copy_condition=None, copy_snapshot=None, skip_truncate=False, dest_fq=name,
    )  # fmt: skip


ROUTES = {"public.a": _route("public.a"), "public.b": _route("public.b")}


def test_a_table_renamed_later_is_read_with_the_providers_name() -> None:
    later = LaterChanges(renamed={"public.a": "public.a_new"})
    routes = provider_routes(ROUTES, later)
    assert routes["public.a"].source_type == "public.a_new"
    assert routes["public.a"].table_name == "public.a"  # the registry's name stays
    assert routes["public.b"] is ROUTES["public.b"]


@pytest.mark.parametrize("later", [None, LaterChanges()], ids=["no-scripts", "nothing-renamed"])
def test_without_a_later_rename_the_routes_are_the_same(later: LaterChanges | None) -> None:
    assert provider_routes(ROUTES, later) is ROUTES


def test_columns_a_later_script_takes_away_are_added_back() -> None:
    src: dict[str, frozenset[str] | None] = {
        "public.a": frozenset({"id", "w"}),
        "public.b": frozenset({"id", "v"}),
        "public.gone": None,  # no such table on the provider
    }
    later = LaterChanges(going={"public.a": {"v"}, "public.gone": {"x"}})
    assert columns_carried(src, later) == {
        "public.a": frozenset({"id", "w", "v"}),
        "public.b": frozenset({"id", "v"}),
        "public.gone": None,
    }
    assert columns_carried(src, LaterChanges()) is src
    assert columns_carried(src, None) is src


def test_tables_short_of_columns_on_the_provider_are_decided_before_the_summary() -> None:
    """A table with a column here that the provider lacks, or none there at all, is short;
    a column only on the provider, or the same columns, is not.  Decided again when the
    route or the provider's columns change."""
    shapes = TableShapes()
    routes = [
        _route("public.a"),
        _route("public.b"),
        _route("public.c"),
        replace(_route("public.d"), columns=("id", "v", "mine"), types=("integer",) * 3),
    ]
    src: dict[str, frozenset[str] | None] = {
        "public.a": frozenset({"id", "v"}),
        "public.b": frozenset({"id", "v", "theirs"}),
        "public.c": None,  # renamed on the provider
        "public.d": frozenset({"id", "v"}),
    }
    assert shapes.short_tables(routes, src) == {"public.c", "public.d"}
    # The provider's table came back with its columns; public.a lost v there.
    src = {**src, "public.c": frozenset({"id", "v"}), "public.a": frozenset({"id"})}
    assert shapes.short_tables(routes, src) == {"public.a", "public.d"}
    # The subscriber's route changed: public.d has no column of its own any more.
    routes[3] = _route("public.d")
    assert shapes.short_tables(routes, src) == {"public.a"}

"""What a segment is planned with, without a database: the routes and columns of the rows
queued before a script that renames or drops (pgferry.apply.shapes).  Whether a batch's
segments are planned in ev_id ranges is the strategy's (tests/apply/test_strategy.py)."""

from __future__ import annotations

import pytest

from pgferry.apply.script_shapes import LaterChanges
from pgferry.apply.shapes import columns_carried, provider_routes
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

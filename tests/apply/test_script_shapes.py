"""What the scripts later in a batch change of its tables, read from their text alone."""

import pytest

from pgferry.apply.replay.script_shapes import LaterChanges, later_changes

pytestmark = pytest.mark.pure


def test_later_scripts_give_the_columns_going_and_the_providers_name() -> None:
    changes = later_changes(
        [
            "alter table app.t drop column a; alter table app.t rename to t2",
            "this is not sql",  # fails when it runs, with its own message
            'alter table app.t2 rename column "B" to b2; alter table app.t2 set schema old',
            "alter table app.other rename to other2",
        ],
        {"app.t", "app.u"},
    )
    assert changes.going == {"app.t": {"a"}, "app.t2": {"B"}}
    # Renamed twice: the rows before both carry the old name, the provider knows the last.
    assert changes.renamed == {"app.t": "old.t2"}


def test_no_script_changes_nothing() -> None:
    assert later_changes([], {"app.t"}) == LaterChanges()

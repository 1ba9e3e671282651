"""Delta and Iceberg answer the same calls: the ``LakeFormat`` protocol, held at run time.

mypy checks the modules against the protocol where ``formats.module`` hands them out; this
holds the same at run time, without a lake or a format's package: every call of the
protocol is a function of both modules, taking the same parameters in the same order.
"""

from __future__ import annotations

import inspect

import pytest

from pgferry.lake import delta, formats, iceberg
from pgferry.lake.formats import LakeFormat
from pgferry.lake.spec import LakeError

pytestmark = pytest.mark.pure

CALLS = [
    name
    for name, member in vars(LakeFormat).items()
    if inspect.isfunction(member) and not name.startswith("_")
]


def test_the_protocol_names_what_replay_load_and_repair_call() -> None:
    assert {"merge", "multiset", "truncate", "applied_version", "newest_tick", "tick_time_of",
            "maintain", "prepare", "commit_files", "read", "repair"} <= set(CALLS)  # fmt: skip


@pytest.mark.parametrize("module", [delta, iceberg], ids=["delta", "iceberg"])
def test_each_format_module_has_every_call(module) -> None:
    for name in CALLS:
        found = getattr(module, name, None)
        assert inspect.isfunction(found), f"{module.__name__} lacks {name}"
        expected = list(inspect.signature(getattr(LakeFormat, name)).parameters)[1:]  # self
        assert list(inspect.signature(found).parameters) == expected, name


def test_an_unknown_format_is_one_line() -> None:
    with pytest.raises(LakeError, match="unknown lake format 'parquet'"):
        formats.module("parquet")

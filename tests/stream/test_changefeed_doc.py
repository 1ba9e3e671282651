"""The capture options docs/changefeed.md tells a reader to add a table with are ones
add-table takes: each ``--trigger-flags=`` / ``--trigger-arg=`` written there parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgferry.registry.capture_spec import CaptureSpec

pytestmark = pytest.mark.pure

DOC = Path(__file__).resolve().parents[2] / "docs" / "changefeed.md"


def test_capture_options_of_the_doc_parse() -> None:
    found = re.findall(r"--trigger-(flags|arg)=([^\s`|,)]+)", DOC.read_text(encoding="utf-8"))
    assert found  # the old row of an update: the doc says how to ask for it
    for kind, value in found:
        flags, args = (value, []) if kind == "flags" else (None, [value])
        spec = CaptureSpec.parse(flags, args)
        if value == "backup":
            assert spec.backup

"""What the scripts still to come in a batch do to its tables, that the provider shows now.

Replay reads a table's columns, and decodes copy conditions and handler filters with its row
type, from the provider's catalog as it is when the batch is applied.  Rows queued before a
script that renamed or dropped a column, or renamed the table, were written in the old
shape: the segments before such a script are read with the columns it takes away added
back, and with the table's current name for its row type.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LaterChanges:
    """Columns dropped or renamed per table, tables renamed (old -> the provider's name);
    what a segment is read with because of them is :mod:`.shapes`' part."""

    going: dict[str, set[str]] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)


def later_changes(scripts: list[str], tables: set[str]) -> LaterChanges:
    """What ``scripts`` (in queue order) change of ``tables`` (registry names)."""
    out = LaterChanges()
    if not scripts:
        return out
    # Here, not at the top: the SQL parser takes a tenth of a second to import, which
    # every worker's start would pay for batches that seldom carry a script.
    from pgferry.scripts.translate import shape_changes

    final: dict[str, str] = {}
    for script in reversed(scripts):  # the last name is the provider's
        changes = shape_changes(script)  # each script parsed once
        for table, columns in changes.going.items():
            out.going.setdefault(table, set()).update(columns)
        for old, new in changes.renames:
            final[old] = final.get(new, new)
    out.renamed = {old: new for old, new in final.items() if old in tables}
    return out

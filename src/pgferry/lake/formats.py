"""The module of a lake format, imported when first asked for.

Above :mod:`.delta` and :mod:`.iceberg` (which import only :mod:`.spec`): the format's
package (``deltalake``, ``pyiceberg``) is loaded only by a node that uses that format, and
a missing one is one line naming the extra to install.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from pgferry.lake import storage
from pgferry.lake.spec import FORMATS, LakeError, LakeSpec

# What each format leaves in a table's directory: found without the format's package.
_FOOTPRINTS = {"delta": "_delta_log", "iceberg": "metadata"}


def module(fmt: str) -> ModuleType:
    """The format's module (LakeError when its package is missing)."""
    if fmt == "delta":
        from pgferry.lake import delta

        delta.check_installed()
        return delta
    if fmt == "iceberg":
        from pgferry.lake import iceberg

        iceberg.check_installed()
        return iceberg
    raise LakeError(f"unknown lake format {fmt!r} (known: {', '.join(FORMATS)})")


def other_format(spec: LakeSpec) -> tuple[str, str] | None:
    """(format, owner) of a table of another format at ``spec``'s location (owner "" when
    it is not known: not pgferry's, or that format's package is missing here), None when
    there is none. Two formats in one directory would read and delete each other's files."""
    for fmt, footprint in _FOOTPRINTS.items():
        if fmt == spec.format or not storage.is_dir(
            storage.join(spec.location, footprint), spec.storage
        ):
            continue
        try:
            owner = module(fmt).owner_of(dataclasses.replace(spec, format=fmt))
        except LakeError:  # the package is missing: the files say enough
            owner = ""
        return fmt, owner or ""
    return None

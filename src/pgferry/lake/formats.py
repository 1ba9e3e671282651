"""The module of a lake format, imported when first asked for.

Above :mod:`.delta` and :mod:`.iceberg` (which import only :mod:`.spec`): the format's
package (``deltalake``, ``pyiceberg``) is loaded only by a node that uses that format, and
a missing one is one line naming the extra to install.
"""

from __future__ import annotations

from types import ModuleType

from pgferry.lake.spec import FORMATS, LakeError


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

"""The systemd units under contrib/systemd pass ``systemd-analyze verify``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "contrib" / "systemd"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
@pytest.mark.parametrize("unit", ["pgferry-worker@.service", "pgferry-ticker@.service"])
def test_unit_verifies(unit: str, tmp_path: Path) -> None:
    text = (UNITS / unit).read_text()
    assert "ExecReload=/usr/local/bin/pgferry -r " in text and "User=pgferry" in text
    # verify checks that the program exists: point it at this environment's pgferry.
    pgferry = Path(sys.executable).with_name("pgferry")
    instance = tmp_path / unit.replace("@.", "@node1.")
    instance.write_text(text.replace("/usr/local/bin/pgferry", str(pgferry)))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(instance)], capture_output=True, text=True
    )
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr

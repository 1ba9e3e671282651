"""The built wheel carries everything: installed into a fresh venv, away from the checkout,
it prints its version and template and passes the walkthrough test.

The fresh venv gets only the wheel, installed by this environment's pip; its dependencies
are reached through a path entry to this environment's site-packages (so nothing is
downloaded again).  That entry is added by a ``.pth`` line, which does not run the ``.pth``
files inside it: the checkout's editable install stays out of sight, and ``import pgferry``
must find the wheel.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900):
    return subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.slow
def test_wheel_in_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = run(sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(CHECKOUT),
                cwd=tmp_path)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("pgferry-*.whl")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    fresh = tmp_path / "fresh"
    # No pip of its own (ensurepip took seconds): this environment's pip installs into it.
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    installed = run(sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel), cwd=tmp_path, env=env)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    purelib = run(str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                  cwd=tmp_path, env=env).stdout.strip()  # fmt: skip
    Path(purelib, "dependencies.pth").write_text(
        "\n".join(p for p in site.getsitepackages() if "site-packages" in p) + "\n"
    )
    where = run(str(python), "-c", "import pgferry; print(pgferry.__file__)", cwd=tmp_path,
                env=env)  # fmt: skip
    assert where.stdout.startswith(purelib), where.stdout + where.stderr
    pgferry = str(fresh / "bin" / "pgferry")
    version = run(pgferry, "--version", cwd=tmp_path, env=env)
    assert version.returncode == 0 and version.stdout.startswith("pgferry "), version.stderr
    template = run(pgferry, "--ini", cwd=tmp_path, env=env)
    assert template.returncode == 0 and "queue_name" in template.stdout
    # Every SQL file of the checkout is in the wheel.
    sql_files = {p.relative_to(CHECKOUT / "src").as_posix()
                 for p in (CHECKOUT / "src" / "pgferry" / "sql").rglob("*.sql")}  # fmt: skip
    listed = run(str(python), "-c", "import importlib.metadata as m;"
                 " print('\\n'.join(str(f) for f in m.files('pgferry')))", cwd=tmp_path,
                 env=env).stdout.split()  # fmt: skip
    assert sql_files <= set(listed)
    assert "pgferry/py.typed" in listed  # the package's type hints are for its users too

    walkthrough = run(
        str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
        str(CHECKOUT), str(CHECKOUT / "tests" / "e2e" / "test_walkthrough.py"),
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert walkthrough.returncode == 0, walkthrough.stdout[-3000:]
    assert " passed" in walkthrough.stdout

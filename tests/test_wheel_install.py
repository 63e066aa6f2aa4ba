"""An installed wheel, not the checkout, runs the demo: the broker, the streaming job
(``python -m sparklog.jobs.stream_to_delta``) and its default conf all come from the package.

The wheel is built from a copy of what the build reads (so nothing of the checkout's own
``build/`` can slip in), installed with its pinned dependencies into a fresh venv outside the
repository (pip's cache makes that quick), and run from a directory outside the repository
with an environment that names nothing of the checkout or of the development venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "pyspark_sparklog.py", "sparklog")
EXTENSIONS = ("sparklog.record._columns", "sparklog.storage._offset_map")
"""The compiled modules (setup.py): the wheel build must compile them."""
# what could point Python, Spark or the jobs back at the checkout or the development venv
CLEARED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON",
               "PYSPARK_DRIVER_PYTHON", "SPARKLOG_CONF_DIR", "SPARK_HOME")


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
    return done.stdout


def _install(root: Path, env: dict[str, str]) -> Path:
    """A fresh venv in ``root`` with a wheel of the repository installed; its python."""
    source, wheels = root / "source", root / "wheels"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
        else:
            shutil.copy(REPO / name, source / name)
    pip = ["-m", "pip", "--disable-pip-version-check", "--quiet"]
    _run([sys.executable, *pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source)],
         root, env, 300)
    (wheel,) = wheels.glob("sparklog-*.whl")
    _run([sys.executable, "-m", "venv", str(root / "venv")], root, env, 120)
    python = root / "venv" / "bin" / "python"
    _run([str(python), *pip, "install", "-c", str(REPO / "constraints.txt"), str(wheel)],
         root, env, 600)
    return python


@pytest.mark.timeout(1500)  # a venv with pyspark, then Spark and a job; ~2-3 min with a cache
def test_a_wheel_installed_outside_the_repository_runs_the_demo(tmp_path: Path) -> None:
    assert not tmp_path.is_relative_to(REPO)
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    python = _install(tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"

    found = json.loads(_run([str(python), "-c", "import json, sys, sparklog; "
                             f"import {', '.join(EXTENSIONS)}; "
                             "print(json.dumps([sparklog.__file__, sys.path, "
                             f"{', '.join(e + '.__file__' for e in EXTENSIONS)}]))"],
                            elsewhere, env, 60))
    module, path = Path(found[0]), [Path(p) for p in found[1] if p]
    assert module.is_relative_to(tmp_path / "venv"), module
    for extension in found[2:]:  # compiled into the wheel, not taken from the checkout
        assert Path(extension).is_relative_to(tmp_path / "venv"), extension
        assert extension.endswith(".so"), extension
    assert not [p for p in path if p.resolve().is_relative_to(REPO)], path

    out = _run([str(python), "-m", "sparklog.demo"], elsewhere, env, 900)
    assert "running python -m sparklog.jobs.stream_to_delta --topic events" in out
    assert "Delta table: 9800 rows, 9800 distinct ids (expected 9800)" in out
    assert "dead-letter topic events.dlq: 200 records (expected 200)" in out
    assert "status page and Prometheus metrics (/metrics) on http://127.0.0.1:" in out
    assert "metrics: records in events 10000, events.dlq 200" in out
    assert out.rstrip().endswith("demo finished")
    assert str(REPO) not in out

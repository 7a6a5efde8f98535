"""The project as a pip user gets it: the wheel built from the sources (compiled by mypyc: this machine has a C
compiler), installed with `--no-deps` into a fresh venv with the dependencies it declares and nothing else (plus
the extras and clients a test names); beside it the pure-Python wheel built with PYBROKER_PURE_PYTHON=1.

Built once per test session, shared by the test workers (a file lock in the session's base temporary directory):
the build (`python -m build`, sdist then the wheel from it) and the install (pip, from the package index and pip's
own cache, so a second session downloads nothing) take tens of seconds.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "pybroker")
EXTRAS = ("console", "testing")  # the console (without any charting library) and the pytest plugin's needs
CLIENTS = ("confluent-kafka>=2.6", "kafka-python>=2.2", "aiokafka>=0.11")  # what a user's tests bring themselves


@dataclass(frozen=True)
class WheelVenv:
    wheel: Path
    sdist: Path
    pure_wheel: Path
    venv: Path
    installed: tuple[str, ...]  # the requirements installed beside the wheel

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"


def declared_requirements(wheel: Path, extras: tuple[str, ...]) -> list[str]:
    """The wheel's Requires-Dist for this platform: the base ones and those of ``extras``."""
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    chosen = []
    for line in lines:
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist: "))
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            requirement.marker = None
            chosen.append(str(requirement))
    return chosen


def _build(root: Path) -> WheelVenv:
    source = root / "src"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for name in SOURCES:  # a copy: the shared tree gets no build/ or egg-info writes
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info",
                                                                                  "*.so", "*.pyd"))
        else:
            shutil.copy2(path, source / name)
    dist = root / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)], capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    pure = root / "dist-pure"
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(pure), str(source)],
                           capture_output=True, text=True, timeout=600, env={**os.environ, "PYBROKER_PURE_PYTHON": "1"})
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [pure_wheel] = pure.glob("*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
           "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, timeout=300)
    requirements = declared_requirements(wheel, EXTRAS) + list(CLIENTS)
    installed = subprocess.run([*pip, *requirements], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return WheelVenv(wheel, sdist, pure_wheel, venv, tuple(requirements))


def wheel_venv(base_temp: Path) -> WheelVenv:
    """The session's wheel venv, built by the first worker that asks for it."""
    root = (base_temp.parent if os.environ.get("PYTEST_XDIST_WORKER") else base_temp) / "wheel-venv"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "ready.json"
        if done.exists():
            saved = json.loads(done.read_text())
            return WheelVenv(Path(saved["wheel"]), Path(saved["sdist"]), Path(saved["pure_wheel"]),
                             Path(saved["venv"]), tuple(saved["installed"]))
        built = _build(root)
        done.write_text(json.dumps({"wheel": str(built.wheel), "sdist": str(built.sdist),
                                    "pure_wheel": str(built.pure_wheel), "venv": str(built.venv),
                                    "installed": list(built.installed)}))
        return built

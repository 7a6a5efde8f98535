"""The project as users get it: `python -m build` makes a wheel and an sdist; the wheel carries the
`pybroker` command and the pytest plugin and no tests or data; installed into a fresh venv it serves
a broker (through pybroker.testing) and runs the plugin's fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "pybroker")
NOT_SHIPPED = ("tests/", "benchmarks/", "chaos/", "tools/", "config/", "data/", "logs/", "pybroker/spark_jobs/checkpoints/")


def build(tmp_path: Path) -> tuple[Path, Path]:
    """Builds from a copy of the sources, so the shared tree gets no build/ or egg-info writes."""
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path / "dist"
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return wheel, sdist


def test_the_wheel_installs_into_a_fresh_venv_and_serves(tmp_path: Path) -> None:
    wheel, sdist = build(tmp_path)
    assert sdist.stat().st_size > 0
    assert wheel.name.endswith("-py3-none-any.whl")  # pure Python: installs with no compiler
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "[console_scripts]\npybroker = pybroker.__main__:main" in text
    assert "[pytest11]\npybroker = pybroker.testing.plugin" in text
    assert "pybroker/testing/plugin.py" in names
    assert not [n for n in names if n.startswith(NOT_SHIPPED) or "__pycache__" in n or n.endswith(".pyc")]

    # A venv of its own; the dependencies come from this interpreter's site-packages (no network), and
    # the wheel's pybroker, installed in the venv, comes first on its path.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "outer-site-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", str(wheel)], check=True, timeout=300)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    work = tmp_path / "work"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=120)

    located = run(str(python), "-c", "import pybroker; print(pybroker.__file__)")
    assert located.stdout.strip().startswith(str(site)), located.stdout + located.stderr
    help_text = run(str(venv / "bin" / "pybroker"), "--help")
    assert help_text.returncode == 0 and "serve" in help_text.stdout

    (work / "test_from_wheel.py").write_text(
        "from confluent_kafka import Producer\n\n\n"
        "def test_produce(kafka_broker, kafka_topic):\n"
        "    import pybroker\n"
        f"    assert pybroker.__file__.startswith({str(site)!r})\n"
        "    producer = Producer({'bootstrap.servers': kafka_broker.bootstrap_servers, 'acks': 'all'})\n"
        "    producer.produce(kafka_topic, b'from the wheel')\n"
        "    assert producer.flush(10) == 0\n")
    tests = run(str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_from_wheel.py")
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert "1 passed" in tests.stdout

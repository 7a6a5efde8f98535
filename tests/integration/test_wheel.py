"""The project as pip users get it: `python -m build` makes a wheel and an sdist; the wheel (compiled: this machine
has a C compiler) carries the hot modules as extensions beside their sources, the `pybroker`
command, Kafka's script names, the samples and the pytest plugin, and no tests, no top-level packages but
`pybroker` (and mypyc's shared library of the compiled code); installed with `--no-deps` into a fresh venv beside the dependencies it declares (with the `console` and
`testing` extras, without numpy or any charting library), it serves with zero configuration.

The user's session runs in a sandbox of its own (sandbox.py): `pybroker serve` with no argument and no config file
binds 127.0.0.1:9092 there and keeps its data in the user data directory under a temporary HOME; then a kcat round
trip, Kafka's script names, the pytest plugin running docs/testing.md's examples, and `pybroker console`.
"""

from __future__ import annotations

import importlib.machinery
import sys
import zipfile
from pathlib import Path

from pybroker.common.native import COMPILED, GROUP
from tests.integration.doc_blocks import REPO, fenced_blocks
from tests.integration.sandbox import Plan, Step, report, run_plan
from tests.integration.wheel_venv import WheelVenv

NOT_SHIPPED = ("tests/", "benchmarks/", "chaos/", "tools/", "config/", "data/", "logs/", "docs/")
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # this Python's, e.g. .cpython-311-x86_64-linux-gnu.so
RECORDS = 200  # one kcat batch: more than validation.MIN_RECORDS, so the pure-Python walk checks it (no numpy)


def test_the_wheel_holds_the_package_its_commands_and_its_samples(installed_wheel: WheelVenv) -> None:
    assert installed_wheel.sdist.stat().st_size > 0
    assert f"-cp{sys.version_info.major}{sys.version_info.minor}-" in installed_wheel.wheel.name
    with zipfile.ZipFile(installed_wheel.wheel) as archive:
        names = archive.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    sources = {name.replace(".", "/") + ".py" for name in COMPILED}
    assert sources <= set(names) and {source.replace(".py", SUFFIX) for source in sources} <= set(names)
    assert "pybroker = pybroker.__main__:main" in text
    assert "kafka-topics = pybroker.__main__:kafka_script" in text
    assert "[pytest11]\npybroker = pybroker.testing.plugin" in text
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"pybroker", GROUP + SUFFIX}  # the Spark jobs are pybroker.spark_jobs, not a package
    assert "pybroker/spark_jobs/aggregate.py" in names and "pybroker/samples/server.properties" in names
    assert not [n for n in names if n.startswith(NOT_SHIPPED) or "__pycache__" in n or n.endswith((".pyc", ".c"))]
    installed = " ".join(installed_wheel.installed)
    assert "numpy" not in installed and "plotly" not in installed


def test_the_pure_wheel_installs_with_no_compiler(installed_wheel: WheelVenv) -> None:
    """PYBROKER_PURE_PYTHON=1 at build time (or no C compiler): one wheel for every platform, no extension."""
    assert installed_wheel.pure_wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(installed_wheel.pure_wheel) as archive:
        names = archive.namelist()
    assert "pybroker/protocol/frame.py" in names and not [n for n in names if n.endswith((".so", ".pyd"))]


def docs_examples(work: Path) -> list[str]:
    """docs/testing.md's Python examples as files: the tests for pytest, the others as scripts."""
    tests = work / "docs_tests"
    tests.mkdir()
    scripts = []
    for index, block in enumerate(fenced_blocks(REPO / "docs" / "testing.md", "python")):
        if "def test_" in block.text:
            (tests / f"test_example_{index}.py").write_text(block.text)
        else:
            (work / f"example_{index}.py").write_text(block.text)
            scripts.append(f"example_{index}.py")
    assert len(list(tests.iterdir())) >= 3 and len(scripts) >= 3
    return scripts


def test_a_pip_user_serves_with_no_configuration(installed_wheel: WheelVenv, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    scripts = docs_examples(work)
    env = {"PATH": f"{installed_wheel.bin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    steps = [
        Step("clean install", "run", "python -c 'import pybroker, sys; print(pybroker.__file__)'\n"
                                      "! python -c 'import numpy' 2>/dev/null\n! python -c 'import plotly' 2>/dev/null"),
        Step("pybroker serve", "server", "pybroker serve", ports=(9092,)),
        Step("kcat round trip", "run",
             f"seq 1 {RECORDS} | kcat -P -b 127.0.0.1:9092 -t from-the-wheel -X linger.ms=200\n"
             f"test \"$(kcat -C -b 127.0.0.1:9092 -t from-the-wheel -e -q | wc -l)\" = {RECORDS}"),
        Step("Kafka's script names", "run", "kafka-topics --bootstrap-server 127.0.0.1:9092 --list | grep -x from-the-wheel"),
        Step("samples", "run", "pybroker sample-config server | grep -x 'listeners=PLAINTEXT://127.0.0.1:9092'"),
        Step("pytest plugin", "run", "python -m pytest -q -p no:cacheprovider docs_tests", timeout=180),
        *[Step(f"docs/testing.md {script}", "run", f"python {script}", timeout=120) for script in scripts],
        Step("pybroker console", "server", "pybroker console --bootstrap-server 127.0.0.1:9092", ports=(8080,)),
        Step("console pages", "run",
             "python - <<'EOF'\nimport urllib.request\n"
             "for page in ('/', '/topics', '/charts'):\n"
             "    body = urllib.request.urlopen('http://127.0.0.1:8080' + page, timeout=30).read().decode()\n"
             "    assert '<html' in body, page\n"
             "assert '<svg' in body  # the charts, drawn without a charting library\nEOF"),
    ]
    outcomes = run_plan(Plan(steps, work, env), python=str(installed_wheel.python))
    assert len(outcomes) == len(steps) and all(o.ok for o in outcomes), report(outcomes, len(steps))
    served = next(o for o in outcomes if o.name == "pybroker serve").output
    data = home / ".local" / "share" / "pybroker" / "kafka-logs"
    assert f"No config file given: a development single node (`pybroker sample-config server`), data in {data}" \
        in served
    assert "listening on 127.0.0.1:9092" in served and "Event loop: uvloop" in served
    assert f"Build: compiled (mypyc) {', '.join(COMPILED)}; the rest pure Python" in served
    assert (data / "from-the-wheel-0").is_dir()
    assert "passed" in next(o for o in outcomes if o.name == "pytest plugin").output

"""Compile and run the Java client scenarios (tests/java) against one of the Java clients in ../shared/jvm-clients.

The scenarios common to both clients are tests/java/*.java; each client adds its own folder (v39/, v42/) with a
``VersionScenarios`` class: what only that client's API has. They run in one JVM per module (a JVM per scenario would
cost about half a second each), and print ``@@@ NAME PASS|FAIL MILLIS`` per scenario. Codec and logging jars come from
pyspark's jars/ folder (the [spark] extra).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from tests.integration.broker_process import REPO, BrokerProcess

JAVA_SOURCES = REPO / "tests" / "java"
JVM_CLIENTS = REPO.parent / "shared" / "jvm-clients"
# kafka-clients' runtime dependencies, and log4j2 as its slf4j binding (tests/java/log4j2.properties: warnings to stderr).
RUNTIME_JARS = ("slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-", "log4j-slf4j2-impl-", "log4j-api-", "log4j-core-")
# javac and the scenarios' JVM live for seconds: with only the C1 compiler and the serial collector they spend less
# on compiling and collecting (javac of the 4.2 scenarios: 7.5-8.6 s -> 4.1 s, and half the CPU) for the same output.
SHORT_LIVED_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@dataclass
class Outcome:
    passed: bool
    millis: int
    detail: str


def _runtime_classpath() -> list[Path]:
    jars_dir = Path(pyspark.__file__).parent / "jars"
    jars = []
    for prefix in RUNTIME_JARS:
        found = sorted(jars_dir.glob(prefix + "[0-9]*.jar"))
        assert found, f"no {prefix}*.jar in {jars_dir}"
        jars.append(found[-1])
    return jars


def compile_scenarios(classes: Path, client_jars: list[Path], version_dir: str, lint: str) -> str:
    """The common scenarios and ``version_dir``'s compiled into ``classes`` against ``client_jars``; the classpath
    to run them. Skips with a reason when ../shared (the jars) is absent."""
    if not all(jar.exists() for jar in client_jars):
        pytest.skip(f"{JVM_CLIENTS} is absent (../shared is not checked out beside the repository)")
    javac = shutil.which("javac")
    assert javac, "javac not found: run tools/install-system-deps.sh (default-jdk-headless)"
    classpath = [*client_jars, *_runtime_classpath()]
    sources = [*sorted(JAVA_SOURCES.glob("*.java")), *sorted((JAVA_SOURCES / version_dir).glob("*.java"))]
    compiled = subprocess.run([javac, *(f"-J{flag}" for flag in SHORT_LIVED_JVM), lint, "-Werror", "-d", str(classes),
                               "-cp", ":".join(map(str, classpath)), *map(str, sources)],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return ":".join(map(str, [classes, *classpath]))


def _parse(stdout: str) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    current: str | None = None
    for line in stdout.splitlines():
        if line.startswith("@@@ "):
            _, name, verdict, millis = line.split()
            outcomes[name] = Outcome(verdict == "PASS", int(millis), "")
            current = name
        elif current is not None:
            outcomes[current].detail += line + "\n"
    return outcomes


def run_scenarios(request: pytest.FixtureRequest, scenarios: list[str], classpath: str,
                  broker: BrokerProcess) -> tuple[dict[str, Outcome], str]:
    """One JVM runs the scenarios of this module's selected tests, in ``scenarios`` order; outcomes and stderr."""
    selected = {item.callspec.params["scenario"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    names = [name for name in scenarios if name in selected]
    run = subprocess.run(["java", *SHORT_LIVED_JVM, f"-Dlog4j2.configurationFile={JAVA_SOURCES / 'log4j2.properties'}",
                          "-cp", classpath, "Scenarios", broker.bootstrap, *names],
                         capture_output=True, text=True, timeout=90 + 60 * len(names))
    return _parse(run.stdout), run.stderr


def check_outcome(scenario: str, outcomes: dict[str, Outcome], stderr: str, broker: BrokerProcess) -> None:
    assert scenario in outcomes, f"the JVM reported nothing for {scenario}:\n{stderr[-5000:]}"
    outcome = outcomes[scenario]
    assert outcome.passed, (f"{scenario} failed after {outcome.millis} ms:\n{outcome.detail}\n"
                            f"--- client log (last lines) ---\n{stderr[-3000:]}\n"
                            f"--- broker log (last lines) ---\n" + "\n".join(broker.log_lines[-30:]))

"""Apache Kafka's Java client (kafka-clients 3.9.1) against the broker: producer, consumer groups, transactions, Admin.

The scenarios are Java (tests/java), compiled once per session against the jar in ../shared/jvm-clients and run in one
JVM per module (a JVM per scenario would cost about half a second each); each scenario is its own test here, failing
with the scenario's mismatch or stack trace. Codec and logging jars come from pyspark's jars/ folder (the [spark] extra).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyspark
import pytest

from tests.integration.broker_process import REPO, BrokerProcess

JAVA_SOURCES = REPO / "tests" / "java"
CLIENT_JAR = REPO.parent / "shared" / "jvm-clients" / "kafka-clients-3.9.1.jar"
# kafka-clients' runtime dependencies, and log4j2 as its slf4j binding (tests/java/log4j2.properties: warnings to stderr).
RUNTIME_JARS = ("slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-", "log4j-slf4j2-impl-", "log4j-api-", "log4j-core-")

SCENARIOS = [
    "produce_none", "produce_gzip", "produce_snappy", "produce_lz4", "produce_zstd", "produce_log_append_time",
    "consumer_group_rebalance", "transactions_read_committed", "transactions_fencing",
    "admin_topics", "admin_configs", "admin_cluster", "admin_list_offsets", "admin_consumer_groups",
    "admin_producers_transactions", "admin_elect_leaders", "admin_reassignments", "admin_fence_producers",
    "admin_remove_members", "admin_legacy_alter_configs", "admin_delete_records", "admin_log_dirs",
]


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


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The scenarios compiled into a temporary directory, and the classpath to run them."""
    if not CLIENT_JAR.exists():
        pytest.skip(f"{CLIENT_JAR.parent} is absent (../shared is not checked out beside the repository)")
    javac = shutil.which("javac")
    assert javac, "javac not found: run tools/install-system-deps.sh (default-jdk-headless)"
    classes = tmp_path_factory.mktemp("java-classes")
    classpath = [CLIENT_JAR, *_runtime_classpath()]
    compiled = subprocess.run([javac, "-Xlint:all", "-Werror", "-d", str(classes),
                               "-cp", ":".join(map(str, classpath)), *map(str, sorted(JAVA_SOURCES.glob("*.java")))],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return ":".join(map(str, [classes, *classpath]))


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # No initial rebalance delay: the group scenarios join and rejoin empty groups several times.
    process = BrokerProcess(tmp_path_factory.mktemp("java-broker"), {"group.initial.rebalance.delay.ms": "0"}).start()
    yield process
    process.kill()


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


@pytest.fixture(scope="module")
def java_outcomes(request: pytest.FixtureRequest, java_classpath: str,
                  java_broker: BrokerProcess) -> tuple[dict[str, Outcome], str]:
    """One JVM runs the scenarios of this module's selected tests, in SCENARIOS order; returns outcomes and stderr."""
    selected = {item.callspec.params["scenario"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    names = [name for name in SCENARIOS if name in selected]
    run = subprocess.run(["java", f"-Dlog4j2.configurationFile={JAVA_SOURCES / 'log4j2.properties'}",
                          "-cp", java_classpath, "Scenarios", java_broker.bootstrap, *names],
                         capture_output=True, text=True, timeout=90 + 60 * len(names))
    return _parse(run.stdout), run.stderr


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_java_client(scenario: str, java_outcomes: tuple[dict[str, Outcome], str], java_broker: BrokerProcess) -> None:
    outcomes, stderr = java_outcomes
    assert scenario in outcomes, f"the JVM reported nothing for {scenario}:\n{stderr[-5000:]}"
    outcome = outcomes[scenario]
    assert outcome.passed, (f"{scenario} failed after {outcome.millis} ms:\n{outcome.detail}\n"
                            f"--- client log (last lines) ---\n{stderr[-3000:]}\n"
                            f"--- broker log (last lines) ---\n" + "\n".join(java_broker.log_lines[-30:]))

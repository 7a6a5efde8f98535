"""Share groups (KIP-932) with Apache Kafka's 4.2 KafkaShareConsumer: the scenarios of tests/java_share, compiled
against the 4.2 client jar in ../shared/jvm-clients and run in one JVM against one broker (as test_java_client.py
runs the 3.9 client's).

The broker sets the delivery count limit to Kafka's least, 2. A lock timeout is tested in
test_share_groups_confluent.py with a holder that sends nothing more: with a Java consumer as the holder the
scenario was flaky (one run in five here): the holder's client went on fetching in the background while the
application held the records, re-acquired them when their lock expired (the broker's log showed it), and they were
archived at the limit of 2 before the other member's turn. Kafka's broker would do the same.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_java_client import JAVA_SOURCES, Outcome, _parse, _runtime_classpath

SHARE_SOURCES = REPO / "tests" / "java_share"
JVM_CLIENTS = REPO.parent / "shared" / "jvm-clients"
CLIENT_JARS = sorted(JVM_CLIENTS.glob("kafka-clients-4.2*.jar"))
# The 4.2 client's telemetry classes need these at run time (they ship beside it).
TELEMETRY_JARS = ("opentelemetry-proto-", "protobuf-java-")

SCENARIOS = [
    "more_consumers_than_partitions", "explicit_accept", "release_redelivers",
    "delivery_count_limit_archives", "admin_lists_and_describes",
]


@pytest.fixture(scope="module")
def share_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not CLIENT_JARS:
        pytest.skip("no kafka-clients-4.2 jar in ../shared/jvm-clients")
    javac = shutil.which("javac")
    assert javac, "javac not found: run tools/install-system-deps.sh (default-jdk-headless)"
    classes = tmp_path_factory.mktemp("java-share-classes")
    classpath = [CLIENT_JARS[-1], *_runtime_classpath(),
                 *(sorted(JVM_CLIENTS.glob(prefix + "*.jar"))[-1] for prefix in TELEMETRY_JARS)]
    compiled = subprocess.run([javac, "-Xlint:all", "-Werror", "-d", str(classes), "-cp", ":".join(map(str, classpath)),
                               *map(str, sorted(SHARE_SOURCES.glob("*.java")))],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return ":".join(map(str, [classes, *classpath]))


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-broker"), {"group.share.delivery.count.limit": "2"}).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def share_outcomes(request: pytest.FixtureRequest, share_classpath: str,
                   share_broker: BrokerProcess) -> tuple[dict[str, Outcome], str]:
    selected = {item.callspec.params["scenario"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    names = [name for name in SCENARIOS if name in selected]
    run = subprocess.run(["java", f"-Dlog4j2.configurationFile={JAVA_SOURCES / 'log4j2.properties'}",
                          "-cp", share_classpath, "ShareScenarios", share_broker.bootstrap, *names],
                         capture_output=True, text=True, timeout=90 + 60 * len(names))
    return _parse(run.stdout), run.stderr


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_share_consumer(scenario: str, share_outcomes: tuple[dict[str, Outcome], str],
                        share_broker: BrokerProcess) -> None:
    outcomes, stderr = share_outcomes
    assert scenario in outcomes, f"the JVM reported nothing for {scenario}:\n{stderr[-5000:]}"
    outcome = outcomes[scenario]
    assert outcome.passed, (f"{scenario} failed after {outcome.millis} ms:\n{outcome.detail}\n"
                            f"--- client log (last lines) ---\n{stderr[-3000:]}\n"
                            f"--- broker log (last lines) ---\n" + "\n".join(share_broker.log_lines[-30:]))

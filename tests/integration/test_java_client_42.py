"""Apache Kafka's Java client 4.2 against the broker: the scenarios the 3.9 client runs (tests/java), with the 4.2
request versions, and the 4.2 client's own (tests/java/v42): transactions V2 (the broker finalizes
transaction.version 2, so the producer bumps its epoch at every commit and abort and adds no partition itself), the
consumer group protocol (KIP-848) and the Admin calls whose 4.2 versions carry new fields.

The 4.2 client is unshaded: it needs opentelemetry-proto and protobuf-java beside it (../shared/jvm-clients/SOURCE.md).
Deprecation warnings are allowed in this compilation: the common scenarios use calls 4.x deprecates.
"""

from __future__ import annotations


import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.java_scenarios import JVM_CLIENTS, Outcome, check_outcome, compile_scenarios, run_scenarios
from tests.integration.test_java_client import SCENARIOS as COMMON_AND_39

CLIENT_JARS = [JVM_CLIENTS / "kafka-clients-4.2.2-SNAPSHOT-ccs-d26e8523.jar",
               JVM_CLIENTS / "opentelemetry-proto-1.0.0-alpha.jar", JVM_CLIENTS / "protobuf-java-3.25.5.jar"]

SCENARIOS = [name for name in COMMON_AND_39 if name != "admin_legacy_alter_configs"] + [
    "transactions_v2_epoch_per_transaction", "consumer_protocol_group", "admin_describe_42"]


@pytest.fixture(scope="session")
def java42_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_scenarios(tmp_path_factory.mktemp("java42-classes"), CLIENT_JARS, "v42",
                             "-Xlint:all,-deprecation,-removal")


@pytest.fixture(scope="module")
def java42_outcomes(request: pytest.FixtureRequest, java42_classpath: str,
                    shared_broker: BrokerProcess) -> tuple[dict[str, Outcome], str]:
    return run_scenarios(request, SCENARIOS, java42_classpath, shared_broker)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_java_client_42(scenario: str, java42_outcomes: tuple[dict[str, Outcome], str],
                        shared_broker: BrokerProcess) -> None:
    outcomes, stderr = java42_outcomes
    check_outcome(scenario, outcomes, stderr, shared_broker)

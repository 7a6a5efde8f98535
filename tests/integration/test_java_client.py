"""Apache Kafka's Java client (kafka-clients 3.9.1) against the broker: producer, consumer groups, transactions, Admin.

The scenarios are Java (tests/java and tests/java/v39, see java_scenarios.py), compiled once per session against the
jar in ../shared/jvm-clients and run in one JVM per module; each scenario is its own test here, failing with the
scenario's mismatch or stack trace.
"""

from __future__ import annotations


import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.java_scenarios import JVM_CLIENTS, Outcome, check_outcome, compile_scenarios, run_scenarios

CLIENT_JAR = JVM_CLIENTS / "kafka-clients-3.9.1.jar"

SCENARIOS = [
    "produce_none", "produce_gzip", "produce_snappy", "produce_lz4", "produce_zstd", "produce_log_append_time",
    "consumer_group_rebalance", "transactions_read_committed", "transactions_fencing",
    "admin_topics", "admin_configs", "admin_cluster", "admin_list_offsets", "admin_consumer_groups",
    "admin_producers_transactions", "admin_elect_leaders", "admin_reassignments", "admin_fence_producers",
    "admin_remove_members", "admin_legacy_alter_configs", "admin_delete_records", "admin_log_dirs",
]


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_scenarios(tmp_path_factory.mktemp("java-classes"), [CLIENT_JAR], "v39", "-Xlint:all")


@pytest.fixture(scope="module")
def java_outcomes(request: pytest.FixtureRequest, java_classpath: str,
                  shared_broker: BrokerProcess) -> tuple[dict[str, Outcome], str]:
    return run_scenarios(request, SCENARIOS, java_classpath, shared_broker)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_java_client(scenario: str, java_outcomes: tuple[dict[str, Outcome], str], shared_broker: BrokerProcess) -> None:
    outcomes, stderr = java_outcomes
    check_outcome(scenario, outcomes, stderr, shared_broker)

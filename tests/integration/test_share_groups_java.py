"""Share groups (KIP-932) with Apache Kafka's 4.2 KafkaShareConsumer and Admin: the share scenarios of
tests/java/v42/ShareScenarios.java, compiled with the 4.2 client's scenarios (java_scenarios.py) and run in one JVM
against a broker whose delivery count limit is Kafka's least, 2.

A lock timeout is tested in test_share_groups_confluent.py with a holder that sends nothing more: with a Java
consumer as the holder the scenario was flaky (one run in five here): the holder's client went on fetching in the
background while the application held the records, re-acquired them when their lock expired (the broker's log
showed it), and they were archived at the limit of 2 before the other member's turn. Kafka's broker would do the same.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.java_scenarios import Outcome, check_outcome, run_scenarios
from tests.integration.test_java_client_42 import java42_classpath  # noqa: F401 (the same compiled v42 scenarios)

SCENARIOS = [
    "more_consumers_than_partitions", "explicit_accept", "release_redelivers", "delivery_count_limit_archives",
    "admin_lists_and_describes", "admin_share_group_offsets",
]


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-broker"), {"group.share.delivery.count.limit": "2"}).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def share_outcomes(request: pytest.FixtureRequest, java42_classpath: str,  # noqa: F811
                   share_broker: BrokerProcess) -> tuple[dict[str, Outcome], str]:
    return run_scenarios(request, SCENARIOS, java42_classpath, share_broker)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_share_consumer(scenario: str, share_outcomes: tuple[dict[str, Outcome], str],
                        share_broker: BrokerProcess) -> None:
    outcomes, stderr = share_outcomes
    check_outcome(scenario, outcomes, stderr, share_broker)

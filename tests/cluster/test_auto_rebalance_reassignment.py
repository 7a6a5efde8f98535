"""ZooKeeper mode: the automatic preferred-leader rebalance does not run while any partition is being reassigned,
as Kafka's KafkaController.checkAndTriggerAutoLeaderRebalance (no candidate partition while
partitionsBeingReassigned is not empty); once the move ends, the next check hands leadership back.

A partition led by its second replica (its preferred leader was restarted) stays so through rebalance checks that
run (the controller logs each one it skips) while another topic's move cannot end; before this change the first
check moved it back at once."""

from __future__ import annotations

from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import controller_id, partition_states, wait_for_full_isr
from tests.cluster.test_topic_deletion_pending import TOPIC, _move, _moving
from tests.eventually import eventually
from tests.integration.admin_wire import create_topics

IMBALANCED = "imbalanced"
SKIPPED = "auto leader rebalance skipped"


def test_no_auto_rebalance_while_a_partition_is_being_reassigned(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster:
        controller = controller_id(cluster)
        stuck, preferred = [b for b in range(3) if b != controller]
        at_controller = cluster.brokers[controller].bootstrap
        created = create_topics(at_controller, {IMBALANCED: [[preferred, controller]], TOPIC: [[stuck]]}, 30000)
        assert created == {IMBALANCED: ErrorCode.NONE, TOPIC: ErrorCode.NONE}
        for name in created:
            wait_for_full_isr(cluster, name)
        cluster.brokers[stuck].stop()  # the only in-sync replica of TOPIC: its move cannot end
        assert _move(at_controller, [preferred]) == ErrorCode.NONE
        assert _moving(at_controller) == {f"{TOPIC}-0": [preferred, stuck]}

        cluster.brokers[preferred].stop()  # controlled shutdown: the controller leads IMBALANCED
        cluster.brokers[preferred].start()
        eventually(lambda: (s := partition_states(cluster, IMBALANCED)[0])[0] == controller and sorted(s[2]) == sorted(
            [preferred, controller]), "the preferred leader back in the ISR, not leading")
        log = cluster.brokers[controller]
        checked = log.log_text().count(SKIPPED)
        eventually(lambda: log.log_text().count(SKIPPED) >= checked + 2, "two more rebalance checks")
        assert partition_states(cluster, IMBALANCED)[0][0] == controller

        cluster.brokers[stuck].start()  # the move ends; the next check hands leadership back
        eventually(lambda: _moving(at_controller) == {}, "the move to end", timeout=60)
        eventually(lambda: partition_states(cluster, IMBALANCED)[0][0] == preferred, "the preferred leader back",
                   timeout=60)

"""A broker that has just restarted answers Metadata with the controller and every registered broker at
once, before the controller's first UpdateMetadata reaches it.

librdkafka's admin client sends CreateTopics to the controller named in Metadata. Told "no controller",
it asks once more and then waits for a broker state change; if the second answer comes from the same
broker within the same window, nothing changes and the request hangs until its timeout. A restarted
broker whose answers lacked the controller until the UpdateMetadata arrived made an admin client
bootstrapped on it time out about one time in two.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import controller_id


def test_a_restarted_broker_names_the_controller_and_every_broker_at_once(cluster: Cluster) -> None:
    controller = controller_id(cluster)
    restarted = cluster.brokers[next(b for b in range(len(cluster.brokers)) if b != controller)]
    for round_ in range(3):
        restarted.kill()
        restarted.start()
        admin = AdminClient({"bootstrap.servers": restarted.bootstrap})
        metadata = admin.list_topics(timeout=10)
        assert (metadata.controller_id, sorted(metadata.brokers)) == (controller, [0, 1, 2])
        name = f"after-restart-{round_}"
        admin.create_topics([NewTopic(name, 3, 3)])[name].result(30)

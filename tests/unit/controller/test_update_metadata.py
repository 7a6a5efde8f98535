"""The controller's UpdateMetadata is incremental (Kafka's ControllerBrokerRequestBatch): the states of
the partitions that changed, every partition only when asked for the whole view, deleted topics'
partitions with leader -2, to the brokers asked for."""

from __future__ import annotations

from typing import Any

from pybroker.zk import paths as zp
from pybroker.controller.context import ControllerContext
from pybroker.controller.requests import BrokerRequests


class Recording:
    """Stands in for the controller's broker channel: keeps what would be sent, by broker."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []

    def send(self, broker_id: int, request: Any, version: int, response_type: Any) -> None:
        self.sent.append((broker_id, request))


def cluster() -> tuple[BrokerRequests, Recording]:
    ctx = ControllerContext(brokers={b: zp.BrokerRegistration(b, "h", 9092 + b, None, epoch=10 + b) for b in (0, 1)})
    for topic in ("a", "b"):
        ctx.assignments[topic] = zp.TopicAssignment({0: (0, 1), 1: (1, 0)}, None)
        for p in (0, 1):
            ctx.states[(topic, p)] = zp.LeaderAndIsr(p, 3, (0, 1), 1, 4)
    channel = Recording()
    return BrokerRequests(ctx, channel, 0), channel  # type: ignore[arg-type]


def states(request: Any) -> dict[tuple[str, int], int]:
    return {(t.topic_name, p.partition_index): p.leader for t in request.topic_states for p in t.partition_states}


def test_only_the_changed_partitions_go_to_every_broker() -> None:
    requests, channel = cluster()
    requests.update_metadata(5, {("a", 1)})
    assert [b for b, _ in channel.sent] == [0, 1]
    for broker_id, request in channel.sent:
        assert states(request) == {("a", 1): 1}
        assert [b.id for b in request.live_brokers] == [0, 1] and request.broker_epoch == 10 + broker_id


def test_the_whole_view_to_a_started_broker_and_deletions_marked() -> None:
    requests, channel = cluster()
    requests.update_metadata(5, to={1})
    assert [b for b, _ in channel.sent] == [1]
    assert set(states(channel.sent[0][1])) == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    channel.sent.clear()
    requests.update_metadata(5, set(), deleted={"b": [0, 1]})
    assert [states(request) for _, request in channel.sent] == [{("b", 0): -2, ("b", 1): -2}] * 2

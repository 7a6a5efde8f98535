"""log.flush.interval.messages=1: every acknowledged produce was fsynced (on the pybroker-io threads,
see tests/unit/log/test_log_flush_offloop.py) before its answer, so the recovery point the broker
checkpoints reaches every acknowledged offset and a SIGKILL loses nothing."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.log.checkpoint import OffsetCheckpointFile
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import consume_all


def test_flush_per_message_answers_after_fsync_and_survives_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"log.flush.interval.messages": "1",
                                      "log.flush.offset.checkpoint.interval.ms": "200"}).start()
    try:
        topic = "flush-each"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "4000"})])[topic].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": True})
        acked: list[int] = []
        for i in range(300):
            producer.produce(topic, value=f"v{i:04d}".encode() * 10, partition=0,
                             on_delivery=lambda err, msg: acked.append(msg.offset()) if err is None else None)
            producer.poll(0)
        assert producer.flush(30) == 0
        assert len(acked) == 300
        checkpoint = Path(broker.data_dir, "logs", "recovery-point-offset-checkpoint")
        recovery = eventually(lambda: checkpoint.exists() and (point := OffsetCheckpointFile(str(checkpoint)).read().get(
            (topic, 0), 0)) >= max(acked) + 1 and point, "the recovery point past the acknowledged records")
        assert recovery == max(acked) + 1
        broker.kill()
        broker.start()
        assert "unclean" in broker.log_text()
        received = consume_all(broker.bootstrap, topic, 300, partitions=1)
        assert sorted(r.offset for r in received) == list(range(300))
    finally:
        broker.kill()

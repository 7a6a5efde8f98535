"""Share-group metrics on /metrics after confluent-kafka's ShareConsumer accepted, released and rejected records and a
silent member's locks timed out: acknowledgements per type, records acquired and archived, lock timeouts, in-flight
records and the share-group count, labelled by group, topic and partition. Acknowledgements count only once they
took effect (raw ShareAcknowledge frames: refused, or undone after a failed state write, they count nothing), and a
RENEW is not written."""

from __future__ import annotations

import re
import urllib.request
import uuid
from pathlib import Path
from typing import Callable

from confluent_kafka import AcknowledgeType
from prometheus_client.parser import text_string_to_metric_families

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    MetadataRequest,
    MetadataResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_confluent import _consumer, _poll_some, _produce, _topic_and_group
from tests.integration.test_share_groups_wire import ACCEPT, RENEW, _fetch, _held_by_m1, _join

GROUP, TOPIC = "metered-share", "metered-queue"
PARTITION = {"group": GROUP, "topic": TOPIC, "partition": "0"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(broker: BrokerProcess) -> Samples:
    port = re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.log_text())
    assert port is not None
    text = urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5).read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def scraped_once(broker: BrokerProcess, condition: Callable[[Samples], bool], what: str) -> Samples:
    last: list[Samples] = [{}]

    def met() -> tuple[Samples] | None:
        last[0] = scrape(broker)
        return (last[0],) if condition(last[0]) else None
    return eventually(met, lambda: f"{what} on /metrics", 30, interval=0.2)[0]


def acks(samples: Samples, ack_type: str) -> float | None:
    return value(samples, "kafka_server_sharegroupmetrics_recordacknowledgements_total", **PARTITION,
                 ack_type=ack_type)


def test_share_metrics_count_what_a_share_consumer_did(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"metrics.port": "0", "group.share.min.record.lock.duration.ms": "1000"}).start()
    try:
        _topic_and_group(broker.bootstrap, TOPIC, GROUP, **{"share.record.lock.duration.ms": "1000"})
        _produce(broker.bootstrap, TOPIC, ["accept0", "accept1", "release", "reject"])
        with _consumer(broker.bootstrap, GROUP, explicit=True) as consumer:
            consumer.subscribe([TOPIC])
            done = 0
            while done < 4:  # "release" is released once, then accepted
                for message in _poll_some(consumer):
                    text = message.value().decode()
                    if text == "release" and message.delivery_count() == 1:
                        consumer.acknowledge(message, AcknowledgeType.RELEASE)
                        continue
                    consumer.acknowledge(message, AcknowledgeType.REJECT if text == "reject"
                                         else AcknowledgeType.ACCEPT)
                    done += 1
                consumer.commit_sync()
            # Scraped while the consumer's share session is open: the share-partition (and its series) goes when
            # the group's last share session on the broker ends, as Kafka drops it on its group-empty event.
            seen = scraped_once(broker, lambda s: acks(s, "Accept") == 3, "three accepted records")
            holder = WireClient(broker.bootstrap)  # acquires the two records and then falls silent
            _join(holder, GROUP, "holder", [TOPIC])
            topic_id = holder.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                                      MetadataResponse).topics[0].topic_id
            assert _fetch(holder, GROUP, "holder", 0, topic_id).responses[0].partitions[0].acquired_records == []
        assert (acks(seen, "Release"), acks(seen, "Reject"), acks(seen, "Renew")) == (1, 1, 0)
        assert value(seen, "pybroker_share_records_acquired_total", **PARTITION) == 5
        assert value(seen, "pybroker_share_records_archived_total", **PARTITION) == 1
        assert value(seen, "kafka_server_sharepartitionmetrics_inflightmessagecount", **PARTITION) == 0

        _produce(broker.bootstrap, TOPIC, ["held0", "held1"])
        epochs = iter(range(1, 1000))
        held = eventually(lambda: _fetch(holder, GROUP, "holder", next(epochs), topic_id).responses[0].partitions[0]
                          .acquired_records, "the holder to acquire the two records")
        assert [(a.first_offset, a.last_offset) for a in held] == [(4, 5)]
        holding = scrape(broker)
        assert value(holding, "kafka_server_sharepartitionmetrics_inflightmessagecount", **PARTITION) == 2
        assert value(holding, "kafka_server_group_coordinator_metrics_share_group_count", state="stable") == 1
        with _consumer(broker.bootstrap, GROUP, explicit=False) as other:  # gets them once the locks expire
            other.subscribe([TOPIC])
            taken: list = []
            while len(taken) < 2:
                taken += _poll_some(other)
            other.commit_sync()
            after = scraped_once(broker, lambda s: acks(s, "Accept") == 5, "five accepted records")
        assert {m.delivery_count() for m in taken} == {2}
        holder.close()
        assert value(after, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **PARTITION) == 2
        assert value(after, "pybroker_share_records_acquired_total", **PARTITION) == 9
        assert value(after, "kafka_server_sharepartitionmetrics_inflightmessagecount", **PARTITION) == 0
    finally:
        broker.kill()


def _acknowledge_v2(client: WireClient, epoch: int, topic_id: uuid.UUID,
                    batches: list[tuple[int, int, list[int]]], renew: bool = False) -> ErrorCode:
    """A ShareAcknowledge v2 of m1 in ``GROUP`` (IsRenewAck with ``renew``); the partition's error code."""
    R = ShareAcknowledgeRequest
    answer = client.request(R(group_id=GROUP, member_id="m1", share_session_epoch=epoch, is_renew_ack=renew,
                              topics=[R.AcknowledgeTopic(topic_id=topic_id, partitions=[R.AcknowledgePartition(
                                  partition_index=0, acknowledgement_batches=[
                                      R.AcknowledgementBatch(first_offset=first, last_offset=last,
                                                             acknowledge_types=types)
                                      for first, last, types in batches])])]),
                            2, ShareAcknowledgeResponse)
    return ErrorCode(answer.responses[0].partitions[0].error_code)


def _delete_state(client: WireClient, topic_id: uuid.UUID) -> None:
    """Delete the share-partition's state at the share coordinator under its leader: every later write of it is
    refused (INVALID_REQUEST), as in test_share_groups_wire's rollback test."""
    R = DeleteShareGroupStateRequest
    deleted = client.request(R(group_id=GROUP, topics=[R.DeleteStateData(topic_id=topic_id, partitions=[
        R.PartitionData(partition=0)])]), 0, DeleteShareGroupStateResponse)
    assert deleted.results[0].partitions[0].error_code == ErrorCode.NONE


def test_acknowledgements_count_only_once_they_took_effect(tmp_path: Path) -> None:
    """m1 holds offsets 0-2. Accepting 0 counts one; accepting 1 with 7 (not held) in one request is refused as a
    whole and undone, and counts nothing; once the state is deleted under the leader, accepting 1-2 is refused by the
    share coordinator and undone, and counts nothing either. Kafka's SharePartitionManager.acknowledge records
    RecordAcknowledgementsPerSec only when the acknowledge future completes without an exception; pybroker counted
    each batch when it applied it (Accept ended at 5)."""
    broker = BrokerProcess(tmp_path, {"metrics.port": "0"}).start()
    try:
        client = WireClient(broker.bootstrap)
        topic_id = _held_by_m1(client, TOPIC, GROUP)
        assert _acknowledge_v2(client, 2, topic_id, [(0, 0, [ACCEPT])]) is ErrorCode.NONE
        assert acks(scrape(broker), "Accept") == 1
        assert _acknowledge_v2(client, 3, topic_id, [(1, 1, [ACCEPT]), (7, 7, [ACCEPT])]) \
            is ErrorCode.INVALID_RECORD_STATE
        assert acks(scrape(broker), "Accept") == 1
        _delete_state(client, topic_id)
        assert _acknowledge_v2(client, 4, topic_id, [(1, 2, [ACCEPT])]) is ErrorCode.INVALID_REQUEST
        assert _acknowledge_v2(client, 5, topic_id, [(1, 2, [ACCEPT])]) is ErrorCode.INVALID_REQUEST  # still held
        assert acks(scrape(broker), "Accept") == 1
        client.close()
    finally:
        broker.kill()


def test_a_renewal_is_not_written(tmp_path: Path) -> None:
    """With the share-partition's state deleted under its leader (every write of it refused), m1 still renews the
    lock of the records it holds: Kafka's SharePartition persists nothing for a RENEW (acknowledgeCompleteBatch,
    acknowledgePerOffsetBatchRecords) and answers at once; pybroker wrote the state and answered the write's
    INVALID_REQUEST. A RENEW with an ACCEPT in one request has only the ACCEPT written, refused and undone: the
    records are still held (the next ACCEPT is refused by the coordinator again, not INVALID_RECORD_STATE), and
    only the renewals count."""
    broker = BrokerProcess(tmp_path, {"metrics.port": "0"}).start()
    try:
        client = WireClient(broker.bootstrap)
        topic_id = _held_by_m1(client, TOPIC, GROUP)
        _delete_state(client, topic_id)
        assert _acknowledge_v2(client, 2, topic_id, [(0, 2, [RENEW])], renew=True) is ErrorCode.NONE
        assert _acknowledge_v2(client, 3, topic_id, [(0, 2, [RENEW, ACCEPT, RENEW])], renew=True) \
            is ErrorCode.INVALID_REQUEST
        assert _acknowledge_v2(client, 4, topic_id, [(0, 2, [ACCEPT])]) is ErrorCode.INVALID_REQUEST
        samples = scrape(broker)
        assert (acks(samples, "Renew"), acks(samples, "Accept")) == (3, 0)
        client.close()
    finally:
        broker.kill()

"""Share-group metrics on /metrics after confluent-kafka's ShareConsumer accepted, released and rejected records and a
silent member's locks timed out: acknowledgements per type, records acquired and archived, lock timeouts, in-flight
records and the share-group count, labelled by group, topic and partition."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Callable

from confluent_kafka import AcknowledgeType
from prometheus_client.parser import text_string_to_metric_families

from pybroker.protocol.messages import MetadataRequest, MetadataResponse
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_confluent import _consumer, _poll_some, _produce, _topic_and_group
from tests.integration.test_share_groups_wire import _fetch, _join

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

"""Share groups' Prometheus metrics (KIP-932, KIP-1103), named as the JMX exporter renders Kafka's:

- ``kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec,ackType=...`` as
  ``kafka_server_sharegroupmetrics_recordacknowledgements_total{ack_type=...}``;
- ``kafka.server:type=SharePartitionMetrics,name=AcquisitionLockTimeoutPerSec|InFlightMessageCount|
  InFlightBatchCount,group=,topic=,partition=`` as ``kafka_server_sharepartitionmetrics_...``;
- the group coordinator's ``share-group-count`` per state as ``kafka_server_group_coordinator_metrics_share_group_count``.

Kafka's acknowledgement meter is broker-wide; here it also carries the group, topic and partition, so that
``sum by (group)`` gives the per-group figures. Records acquired and archived have no Kafka metric: they are
``pybroker_share_records_acquired_total`` and ``pybroker_share_records_archived_total``. Every per-partition series
comes from the share-partition's ``ShareCounters`` and goes away with it (a partition no longer led here, a deleted
group or topic), as Kafka removes a SharePartition's metrics.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pybroker.replication.share.counters import ACK_TYPE_NAMES
from pybroker.server.share_service import ShareService

__all__ = ["ShareCollector"]

PARTITION_LABELS = ["group", "topic", "partition"]
GROUP_STATES = ("Empty", "Stable", "Dead")


class ShareCollector(Collector):
    """Read at scrape time, on the event loop (see ``metrics``), like the broker's other gauges."""

    def __init__(self, share: ShareService) -> None:
        self._share = share

    def collect(self) -> Iterable[Metric]:
        groups = list(self._share.groups.groups.values())
        count = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_count",
                                  "Share groups this coordinator manages, per state.", labels=["state"])
        for state in GROUP_STATES:
            count.add_metric([state.lower()], sum(1 for group in groups if group.state == state))
        yield count
        acknowledged = CounterMetricFamily("kafka_server_sharegroupmetrics_recordacknowledgements",
                                           "Records acknowledged, per acknowledgement type (RELEASE included).",
                                           labels=[*PARTITION_LABELS, "ack_type"])
        acquired = CounterMetricFamily("pybroker_share_records_acquired",
                                       "Records handed to share consumers, redeliveries included.",
                                       labels=PARTITION_LABELS)
        archived = CounterMetricFamily("pybroker_share_records_archived", "Records archived by a REJECT, or by a "
                                       "RELEASE or a lock timeout at group.share.delivery.count.limit.",
                                       labels=PARTITION_LABELS)
        timeouts = CounterMetricFamily("kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
                                       "Records whose acquisition lock expired before they were acknowledged.",
                                       labels=PARTITION_LABELS)
        messages = GaugeMetricFamily("kafka_server_sharepartitionmetrics_inflightmessagecount",
                                     "Offsets between the share-partition start offset and the next one to deliver.",
                                     labels=PARTITION_LABELS)
        batches = GaugeMetricFamily("kafka_server_sharepartitionmetrics_inflightbatchcount",
                                    "In-flight batches (runs of offsets in one state) of the share-partition.",
                                    labels=PARTITION_LABELS)
        for (group_id, topic, index), share in list(self._share.partitions.items()):
            labels = [group_id, topic, str(index)]
            counters = share.counters
            for ack_type in ACK_TYPE_NAMES.values():
                acknowledged.add_metric([*labels, ack_type], counters.acknowledged[ack_type])
            acquired.add_metric(labels, counters.acquired)
            archived.add_metric(labels, counters.archived)
            timeouts.add_metric(labels, counters.lock_timeouts)
            messages.add_metric(labels, share.in_flight())
            batches.add_metric(labels, len(share.spans))
        yield from (acknowledged, acquired, archived, timeouts, messages, batches)

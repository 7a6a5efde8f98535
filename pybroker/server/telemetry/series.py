"""The metrics clients pushed (OTLP MetricsData), kept as the latest value of each series for /metrics.

Kafka hands pushed metrics to a ClientTelemetryReceiver plugin and keeps nothing; pybroker keeps the last
value of each gauge and the running total of each sum so that its own Prometheus endpoint can show them
with client labels. Bounded twice: a client that has not pushed for ``EXPIRY_INTERVALS`` of its push
interval is dropped, and no more than ``max_series`` series are held (new ones beyond it are dropped and
counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

if TYPE_CHECKING:  # protobuf and the OTLP classes load with the first push, not at the broker's start
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData, NumberDataPoint

EXPIRY_INTERVALS = 3
DEFAULT_MAX_SERIES = 10_000
GAUGE, COUNTER = "gauge", "counter"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")

#: (prometheus metric name, sorted point labels)
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


class InvalidPayload(ValueError):
    """The pushed bytes are not an OTLP MetricsData message (Kafka answers INVALID_RECORD)."""


def prometheus_name(name: str) -> str:
    """``org.apache.kafka.producer.node.request.latency.avg`` -> ``org_apache_kafka_producer_node_request_latency_avg``."""
    safe = _UNSAFE.sub("_", name)
    return f"_{safe}" if safe[:1].isdigit() else safe


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    return "" if kind is None else str(getattr(value, kind))


def _number(point: NumberDataPoint) -> float:
    return float(point.as_double if point.WhichOneof("value") == "as_double" else point.as_int)


@dataclass(slots=True)
class Sample:
    kind: str
    value: float
    doc: str


@dataclass(slots=True)
class ClientSeries:
    """One client instance's labels and series."""

    labels: Mapping[str, str]
    expires_ms: int
    samples: dict[SeriesKey, Sample] = field(default_factory=dict)


def decode(payload: bytes) -> MetricsData:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    data = MetricsData()
    try:
        data.ParseFromString(payload)
    except DecodeError as exc:
        raise InvalidPayload(f"cannot decode OTLP MetricsData: {exc}") from exc
    return data


def _points(data: MetricsData) -> Iterator[tuple[str, str, str, NumberDataPoint, bool]]:
    """(name, doc, kind, point, is a delta) of every gauge and sum data point (histograms are not kept)."""
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_DELTA

    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                which = metric.WhichOneof("data")
                if which == "gauge":
                    for point in metric.gauge.data_points:
                        yield metric.name, metric.description, GAUGE, point, False
                elif which == "sum":
                    delta = metric.sum.aggregation_temporality == AGGREGATION_TEMPORALITY_DELTA
                    kind = COUNTER if metric.sum.is_monotonic else GAUGE
                    for point in metric.sum.data_points:
                        yield metric.name, metric.description, kind, point, delta


class ClientSeriesStore:
    """Pushed series per client instance id."""

    def __init__(self, max_series: int = DEFAULT_MAX_SERIES) -> None:
        self.max_series = max_series
        self.clients: dict[str, ClientSeries] = {}
        self.dropped_series = 0
        self._count = 0

    def record(self, instance_id: str, labels: Mapping[str, str], data: MetricsData, now_ms: int,
               push_interval_ms: int) -> None:
        client = self.clients.get(instance_id)
        if client is None:
            client = self.clients[instance_id] = ClientSeries(dict(labels), 0)
        client.expires_ms = now_ms + EXPIRY_INTERVALS * push_interval_ms
        for name, doc, kind, point, delta in _points(data):
            key = (prometheus_name(name), tuple(sorted(
                (prometheus_name(a.key), _text(a.value)) for a in point.attributes)))
            value = _number(point)
            sample = client.samples.get(key)
            if sample is None:
                if self._count >= self.max_series:
                    self.dropped_series += 1
                    continue
                self._count += 1
                client.samples[key] = Sample(kind, value, doc)
            elif delta and kind == COUNTER:
                sample.value += value
            else:
                sample.value = value

    def expire(self, now_ms: int) -> None:
        for instance_id in [i for i, c in self.clients.items() if c.expires_ms <= now_ms]:
            self._count -= len(self.clients.pop(instance_id).samples)

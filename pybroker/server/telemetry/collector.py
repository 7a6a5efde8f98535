"""The metrics clients pushed, on the broker's Prometheus endpoint, labelled with the client
(client_instance_id, client_id, client_software_name, client_software_version) and the data point's own
attributes. Expired clients are dropped when scraped.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pybroker.common.clock import Clock
from pybroker.server.telemetry.manager import ClientMetricsManager
from pybroker.server.telemetry.series import COUNTER


class ClientTelemetryCollector(Collector):
    def __init__(self, manager: ClientMetricsManager, clock: Clock) -> None:
        self._manager = manager
        self._clock = clock  # pushed series expire on it

    def collect(self) -> Iterable[Metric]:
        series = self._manager.series
        series.expire(self._clock.wall_ms())
        families: dict[str, Metric] = {}
        for client in series.clients.values():
            for (name, point_labels), sample in client.samples.items():
                # a counter's family name has no "_total", its samples have exactly one
                base = name.removesuffix("_total") if sample.kind == COUNTER else name
                family = families.get(base)
                if family is None:
                    family = families[base] = Metric(base, sample.doc or "Pushed by clients (KIP-714).", sample.kind)
                labels = dict(point_labels)
                labels.update(client.labels)
                family.add_sample(f"{base}_total" if sample.kind == COUNTER else base, labels, sample.value)
        yield from families.values()
        yield GaugeMetricFamily("pybroker_client_telemetry_dropped_series",
                                "Pushed series dropped because the series cap was reached.", series.dropped_series)
        yield GaugeMetricFamily("kafka_server_clientmetrics_instance_count",
                                "Client metrics instances the broker manages.", len(self._manager.instances))

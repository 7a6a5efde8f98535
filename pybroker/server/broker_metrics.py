"""Prometheus metrics of one broker, with names shaped like Kafka's JMX metrics as the JMX exporter renders them.

Each ``BrokerMetrics`` owns its own ``CollectorRegistry`` (never prometheus_client's global one), so
several brokers in one process keep separate figures. Traffic counters are bumped where the work
happens (the dispatcher for requests and bytes out, the produce handler for bytes and messages in);
state gauges (under-replicated and offline partitions, active controller, groups) are read from the
broker when scraped.

``/metrics`` is served by an asyncio handler on the broker's own event loop rather than by
prometheus_client's threaded HTTP server: collecting on the loop's thread reads the partition,
controller and group state between two event-loop steps, so a scrape never sees a dict mid-change
and the broker's state needs no locks.

The broker imports this module only when ``metrics.port`` is set: prometheus_client's package pulls in
http.server, wsgiref, email and urllib.request (~2 MiB of a broker's resident memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Iterable, Mapping, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pybroker.coordinator.consumer_group import ConsumerGroupState
from pybroker.coordinator.group import GroupState
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.protocol.schema import Records
from pybroker.server.metrics import request_name
from pybroker.server.request_channel import RequestQueue
from pybroker.server.services import Services
from pybroker.server.share_metrics import ShareCollector
from pybroker.server.telemetry.collector import ClientTelemetryCollector

log = logging.getLogger("pybroker.metrics")

FIRST_TOPIC_ID_FETCH_VERSION = 13
FIRST_REPLICA_STATE_FETCH_VERSION = 15
# Request latencies from a fast metadata call to a fetch long-polling for max.wait.ms.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
MAX_REQUEST_HEAD_BYTES = 8192


class SocketStats(Protocol):
    """The socket server's figures, as the network gauges read them (`socket_server.SocketServer`)."""

    @property
    def open_count(self) -> int: ...

    @property
    def refused(self) -> Mapping[str, int]: ...

    @property
    def closed(self) -> Mapping[str, int]: ...

    @property
    def queue(self) -> RequestQueue: ...


class BrokerMetrics:
    """The registry of one broker and the counters that the request path updates."""

    def __init__(self, services: Services, sockets: SocketStats) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._services = services
        self.bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "Record batch bytes appended by producers.",
                                ["topic"], registry=self.registry)
        self.messages_in = Counter("kafka_server_brokertopicmetrics_messagesin",
                                   "Records appended by producers (from batch headers).", ["topic"],
                                   registry=self.registry)
        self.bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout",
                                 "Record batch bytes sent to consumers (follower fetches excluded).", ["topic"],
                                 registry=self.registry)
        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests handled, per API and version "
                                "(RequestsPerSec's request and version tags, KIP-272).", ["request", "version"],
                                registry=self.registry)
        self.latency = Histogram("kafka_network_requestmetrics_totaltime_seconds",
                                 "Time from a request's decoding to its response being ready, per API.", ["request"],
                                 buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.registry.register(_StateCollector(services, sockets))
        self.registry.register(ClientTelemetryCollector(services.client_metrics, services.clock))
        self.registry.register(_QuotaCollector(services))
        self.registry.register(ShareCollector(services.share))
        self._server: asyncio.base_events.Server | None = None
        self.bound_port: int | None = None

    # Request path

    def observe_request(self, api_key: int, version: int, started: float) -> None:
        name = request_name(api_key)
        self.requests.labels(request=name, version=str(version)).inc()
        self.latency.labels(request=name).observe(time.perf_counter() - started)

    def record_produce(self, topic: str, size: int, records: int) -> None:
        self.bytes_in.labels(topic=topic).inc(size)
        self.messages_in.labels(topic=topic).inc(records)

    def record_fetch(self, version: int, request: FetchRequest, response: FetchResponse) -> None:
        """Bytes out per topic from the response's record sets (whole batches or file slices, never decoded)."""
        follower_id = request.replica_state.replica_id if version >= FIRST_REPLICA_STATE_FETCH_VERSION \
            else request.replica_id
        if follower_id >= 0:
            return
        for topic in response.responses:
            name = topic.topic if version < FIRST_TOPIC_ID_FETCH_VERSION else self._topic_name(topic.topic_id)
            size = sum(_record_set_size(partition.records) for partition in topic.partitions)
            if name and size:
                self.bytes_out.labels(topic=name).inc(size)

    def remove_topic(self, topic: str) -> None:
        """Forget a deleted topic's series, as Kafka removes its BrokerTopicMetrics."""
        for counter in (self.bytes_in, self.messages_in, self.bytes_out):
            counter.remove(topic)

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        metadata = self._services.started_metadata
        info = metadata.topic_by_id(topic_id) if metadata is not None else None
        return info.name if info is not None else None

    # HTTP endpoint

    async def serve(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve_connection, host, port, reuse_address=True)
        self.bound_port = self._server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", host, self.bound_port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A scraper that leaves mid-request, or sends a head past the limit, gets nothing more.
        try:
            with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                head = await reader.readuntil(b"\r\n\r\n")
                status, body, content_type = self._answer(head[:MAX_REQUEST_HEAD_BYTES])
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}"
                             f"\r\nConnection: close\r\n\r\n".encode() + body)
                await writer.drain()
        finally:
            writer.close()

    def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3:
            return "400 Bad Request", b"bad request\n", "text/plain"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target != b"/metrics":
            return "404 Not Found", b"only /metrics is served\n", "text/plain"
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", b"use GET\n", "text/plain"
        body = generate_latest(self.registry)
        return "200 OK", b"" if method == b"HEAD" else body, CONTENT_TYPE_LATEST


def _record_set_size(records: Records | None) -> int:
    if records is None:
        return 0
    return len(records) if isinstance(records, (bytes, bytearray, memoryview)) else records.size


class _StateCollector(Collector):
    """Gauges read from the broker's state at scrape time, as Kafka's gauges are."""

    def __init__(self, services: Services, sockets: SocketStats) -> None:
        self._services = services
        self._sockets = sockets

    def collect(self) -> Iterable[Metric]:
        services = self._services
        leaders = [p for p in services.replica_manager.partitions() if p.is_leader]
        yield _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                     "Partitions led here whose ISR is smaller than their replica set.",
                     sum(1 for p in leaders if len(p.isr) < len(p.replicas)))
        yield _gauge("kafka_server_replicamanager_partitioncount", "Partitions hosted here.",
                     sum(1 for _ in services.replica_manager.partitions()))
        yield _gauge("kafka_server_replicamanager_leadercount", "Partitions led here.", len(leaders))
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks made by this leader.",
                                  value=services.replica_manager.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions made by this leader.",
                                  value=services.replica_manager.isr_expands)
        active = self._is_active_controller()
        yield _gauge("kafka_controller_kafkacontroller_activecontrollercount",
                     "1 on the broker that is the active controller, else 0.", int(active))
        yield _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                     "Partitions without a leader (reported by the active controller only).",
                     self._offline_partitions() if active else 0)
        yield from self._network(self._sockets)
        cold = CounterMetricFamily("pybroker_io_cold_reads", "Reads that found their pages out of the page cache "
                                   "and were done on an I/O thread instead of the event loop, per path.",
                                   labels=["path"])
        for path in ("fetch", "response"):
            cold.add_metric([path], services.io.cold_reads[path])
        yield cold
        groups = list(services.groups.coordinator.groups.values())
        yield _gauge("kafka_coordinator_group_groupmetadatamanager_numgroups", "Groups this coordinator manages.",
                     len(groups))
        for state in GroupState:
            yield _gauge(f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.value.lower()}",
                         f"Groups in state {state.value}.", sum(1 for g in groups if g.state is state))
        consumer = GaugeMetricFamily("kafka_server_group_coordinator_metrics_consumer_group_count",
                                     "Consumer-protocol (KIP-848) groups per state.", labels=["state"])
        for consumer_state in ConsumerGroupState:
            consumer.add_metric([consumer_state.value.lower()], sum(1 for g in groups if g.state is consumer_state))
        yield consumer
        yield CounterMetricFamily("kafka_server_group_coordinator_metrics_consumer_group_rebalance",
                                  "Consumer-protocol group epoch bumps (rebalances); rate() gives rebalances per "
                                  "second.", value=services.groups.coordinator.consumer.rebalances)

    @staticmethod
    def _network(server: SocketStats) -> Iterable[Metric]:
        """The socket server's bounds: connections, refusals and closes per config key, queue use."""
        yield _gauge("kafka_server_socket_server_metrics_connection_count", "Open client connections.",
                     server.open_count)
        refused = CounterMetricFamily("kafka_network_socketserver_refusedconnections",
                                      "Connections closed at accept by a connection quota, per config key "
                                      "(max.connection.creation.rate: accepts delayed).", labels=["limit"])
        for key in ("max.connections.per.ip", "connection_creation_rate", "max.connection.creation.rate"):
            refused.add_metric([key], server.refused[key])
        yield refused
        expired = CounterMetricFamily("kafka_network_socketserver_expiredconnections",
                                      "Connections closed by the broker for idleness or a request received too "
                                      "slowly, per config key.", labels=["limit"])
        for key in ("connections.max.idle.ms", "request.receive.timeout.ms"):
            expired.add_metric([key], server.closed[key])
        yield expired
        yield _gauge("kafka_network_requestchannel_requestqueuesize", "Requests being handled (queued.max.requests).",
                     server.queue.requests)
        yield _gauge("kafka_network_socketserver_memorypoolused",
                     "Bytes reserved for large requests being received or handled (queued.max.request.bytes).",
                     server.queue.bytes)

    def _is_active_controller(self) -> bool:
        zk_mode = self._services.zk_mode
        if zk_mode is None:  # a one-node cluster with embedded metadata controls itself
            return self._services.started_metadata is not None
        return zk_mode.controller is not None and zk_mode.controller.active

    def _offline_partitions(self) -> int:
        metadata = self._services.started_metadata
        if metadata is None:
            return 0
        return sum(1 for topic in metadata.topics().values()
                   for partition in topic.partitions.values() if partition.leader < 0)


class _QuotaCollector(Collector):
    """Each quota sensor's figures, as Kafka's ClientQuotaManager registers them: group = the quota
    type (``kafka.server:type=Produce,user=alice,client-id=app``), ``throttle-time`` (the average
    throttle in ms) and the measured rate (``byte-rate``, ``request-time``, ``mutation-rate``, and
    the controller mutation bucket's ``tokens``), read at scrape time as Kafka's metrics are."""

    #: Kafka's rate metric name per quota type (clientRateMetricName)
    RATE_NAMES = {"Produce": "byte_rate", "Fetch": "byte_rate", "Request": "request_time",
                  "ControllerMutation": "mutation_rate"}
    LABELS = ["user", "client_id"]

    def __init__(self, services: Services) -> None:
        self._services = services

    def collect(self) -> Iterable[Metric]:
        now_ms = self._services.clock.wall_ms()
        for manager in self._services.quotas.managers.all:
            group = f"kafka_server_{manager.quota_type.lower()}"
            throttle = GaugeMetricFamily(f"{group}_throttle_time", f"Average throttle time in ms per user/client-id "
                                         f"({manager.quota_type} quota).", labels=self.LABELS)
            rate = GaugeMetricFamily(f"{group}_{self.RATE_NAMES[manager.quota_type]}",
                                     f"The {manager.key} measure per user/client-id over the quota windows.",
                                     labels=self.LABELS)
            tokens = GaugeMetricFamily(f"{group}_tokens", "Remaining tokens in the token bucket per "
                                       "user/client-id.", labels=self.LABELS)
            for (user, client_id), sensor in list(manager.sensors.items()):
                throttle.add_metric([user, client_id], sensor.throttle_time.measure(now_ms))
                rate.add_metric([user, client_id], sensor.rate.measure(now_ms))
                if sensor.bucket is not None and sensor.limit is not None:
                    tokens.add_metric([user, client_id], sensor.bucket.measure(sensor.limit, now_ms))
            yield throttle
            yield rate
            if manager.quota_type == "ControllerMutation":
                yield tokens


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


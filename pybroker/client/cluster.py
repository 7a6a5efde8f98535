"""Bootstrap and per-broker connections: the cluster as seen through Metadata.

A client starts from any reachable `host:port` of the bootstrap list, learns the brokers and the
controller from Metadata, and opens further connections lazily by broker id.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError, KafkaConnectionError, KafkaTimeoutError, ResponseError
from pybroker.client.sasl import SaslCredentials
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import MetadataRequest, MetadataResponse

AUTHENTICATION_ERRORS = frozenset({ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                   ErrorCode.ILLEGAL_SASL_STATE})
MIN_METADATA_VERSION = 1  # v0 reads an empty topic list as "all topics"
RETRY_BACKOFF_MAX = 1.0


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def parse_bootstrap(servers: str | Iterable[str]) -> list[BrokerAddress]:
    """`host:port[,host:port...]` (or a list of them) as addresses; ValueError names a bad entry."""
    entries = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"Invalid url in bootstrap.servers: {entry}")
        addresses.append(BrokerAddress(host, int(port)))
    if not addresses:
        raise ValueError("No resolvable bootstrap urls given in bootstrap.servers")
    return addresses


class KafkaClient:
    """Connections to the brokers of one cluster, found from a bootstrap list.

    ``timeout`` (seconds) bounds reaching the cluster (all bootstrap addresses are retried with
    backoff until it expires) and, separately, each request.
    """

    def __init__(self, bootstrap: str | Sequence[str], *, tls: ssl.SSLContext | None = None,
                 client_id: str = "pybroker-admin",
                 timeout: float = 30.0, sasl: SaslCredentials | None = None) -> None:
        self.bootstrap_addresses = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.tls = tls  # security.protocol SSL or SASL_SSL: every connection uses TLS
        self.sasl = sasl
        self.brokers: dict[int, BrokerNode] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._bootstrap: Connection | None = None
        self._nodes: dict[int, Connection] = {}

    async def __aenter__(self) -> KafkaClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> Connection:
        """A connection to some bootstrap broker, retrying every address until the timeout."""
        if self._bootstrap is not None:
            return self._bootstrap
        deadline = time.monotonic() + self.timeout
        backoff = 0.05
        failures: dict[BrokerAddress, str] = {}
        while True:
            for address in self.bootstrap_addresses:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    self._bootstrap = await Connection.open(address.host, address.port, tls=self.tls,
                                                            client_id=self.client_id,
                                                            timeout=min(remaining, self.timeout), sasl=self.sasl)
                    return self._bootstrap
                except ResponseError as exc:
                    if exc.code in AUTHENTICATION_ERRORS:  # as Kafka's clients, never retried
                        raise
                    failures[address] = str(exc)
                except KafkaClientError as exc:
                    failures[address] = str(exc)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reasons = "; ".join(failures.values())
                raise KafkaTimeoutError(f"Timed out after {self.timeout * 1000:.0f} ms waiting for a connection "
                                        f"to a bootstrap broker" + (f" ({reasons})" if reasons else ""))
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX)

    async def metadata(self, topics: Sequence[str] | None = None, *, auto_create: bool = False) -> MetadataResponse:
        """Metadata for ``topics`` (None: all topics); refreshes the broker list.

        ``auto_create`` lets the broker create missing topics (if its `auto.create.topics.enable` allows),
        as producers and consumers ask; admin requests never do."""
        connection = await self.connect()
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create)
        response = await connection.send(request, MetadataResponse, min_version=MIN_METADATA_VERSION)
        self.brokers = {b.node_id: BrokerNode(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.controller_id = response.controller_id
        self.cluster_id = response.cluster_id
        return response

    async def node(self, node_id: int) -> Connection:
        """The connection to one broker by id, opened on first use."""
        existing = self._nodes.get(node_id)
        if existing is not None:
            return existing
        if node_id not in self.brokers:
            await self.metadata([])
        broker = self.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError(f"Broker {node_id} is not in the cluster metadata")
        bootstrap = await self.connect()
        if (bootstrap.host, bootstrap.port) == (broker.host, broker.port):
            connection = bootstrap
        else:
            connection = await Connection.open(broker.host, broker.port, tls=self.tls, client_id=self.client_id,
                                               timeout=self.timeout, sasl=self.sasl)
        self._nodes[node_id] = connection
        return connection

    async def controller(self) -> Connection:
        """The controller, where topic creation and deletion go; any broker when none is known."""
        if self.controller_id < 0:
            await self.metadata([])
        if self.controller_id < 0:
            return await self.connect()
        return await self.node(self.controller_id)

    async def close(self) -> None:
        connections = {id(c): c for c in (self._bootstrap, *self._nodes.values()) if c is not None}
        self._bootstrap = None
        self._nodes.clear()
        for connection in connections.values():
            await connection.close()

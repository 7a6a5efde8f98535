"""The ``_schemas`` topic as the registry's log: one reader replays it into the view, the leader appends.

The registry is a client of its cluster, as Confluent's is: it reaches the brokers on the inter-broker
listener with the broker's own credentials, creates the compacted single-partition topic when it is
missing, and reads it from offset 0 at start-up. A write returns once this broker's reader has applied
it, so a client always reads what it wrote; before choosing an id the leader appends a NOOP and reads
up to it, so its view holds everything written before (by an earlier leader too).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Sequence

from pybroker.client.admin import AdminClient, NewTopic
from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import KafkaClientError, ResponseError
from pybroker.client.fetcher import Fetcher, FetchSettings
from pybroker.client.producer import Producer
from pybroker.client.sasl import SaslCredentials
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records import RecordInput
from pybroker.schema_registry import errors, records
from pybroker.schema_registry.records import Key
from pybroker.schema_registry.state import RegistryState

log = logging.getLogger("pybroker.schema_registry")
RETRY_BACKOFF_S = 0.2


class KafkaStore:
    def __init__(self, bootstrap: str, *, topic: str, replication_factor: int, timeout_ms: int,
                 tls: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None) -> None:
        self.topic = topic
        self.partition = TopicPartition(topic, 0)
        self.replication_factor = replication_factor
        self.timeout_s = timeout_ms / 1000
        self.client = KafkaClient(bootstrap, tls=tls, sasl=sasl, client_id="pybroker-schema-registry",
                                  timeout=self.timeout_s)
        self.state = RegistryState()
        self.position = 0  # next offset to apply
        self._advanced = asyncio.Condition()
        self._reader: asyncio.Task[None] | None = None
        self._producer = Producer(self.client, acks=-1, timeout_ms=timeout_ms, auto_create_topics=False)
        self._fetcher = Fetcher(self.client, FetchSettings(max_wait_ms=500))
        self._started: asyncio.Future[None] | None = None

    @property
    def started(self) -> bool:
        """Started, or starting: asked once, and not failed."""
        return self._started is not None and (not self._started.done() or self._started.exception() is None)

    async def ensure_started(self) -> None:
        """Creates the topic if needed and replays it, once; a failed start is tried again by the next caller."""
        if self._started is None or (self._started.done() and self._started.exception() is not None):
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        try:
            await self._ensure_topic()
        except (KafkaClientError, OSError) as exc:
            raise errors.store_error(f"Error initializing the _schemas store: {exc}") from None
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_loop(), name="schema-registry-reader")
        await self.catch_up()

    async def _ensure_topic(self) -> None:
        admin = AdminClient(self.client)
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while True:
            try:
                existing = await admin.describe_topics([self.topic])
                if self.topic in existing:
                    return
            except ResponseError as exc:
                if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
            brokers = await admin.describe_cluster()
            result = (await admin.create_topics([NewTopic(
                self.topic, 1, max(1, min(self.replication_factor, len(brokers))),
                configs={"cleanup.policy": "compact"})]))[self.topic]
            if result.error is None or result.error.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return
            if asyncio.get_running_loop().time() > deadline:
                result.raise_error()
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _read_loop(self) -> None:
        while True:
            try:
                fetched = (await self._fetcher.fetch({self.partition: self.position}))[self.partition]
            except (KafkaClientError, OSError) as exc:
                log.debug("Reading %s failed (%s); retrying", self.topic, exc)
                self._fetcher = Fetcher(self.client, self._fetcher.settings)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if fetched.error is not None:
                if fetched.error.code == ErrorCode.OFFSET_OUT_OF_RANGE:  # compacted or truncated: start over
                    log.warning("%s offset %d is out of range; replaying from the start", self.topic, self.position)
                    self.state, self.position = RegistryState(), 0
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            for record in fetched.records:
                self.state.apply(record.key, record.value)
            if fetched.next_offset != self.position:
                async with self._advanced:
                    self.position = fetched.next_offset
                    self._advanced.notify_all()

    async def wait_for(self, offset: int) -> None:
        """Until this broker's view has applied ``offset``; 50002 after the store timeout."""
        async def reached() -> None:
            async with self._advanced:
                await self._advanced.wait_for(lambda: self.position > offset)

        try:
            await asyncio.wait_for(reached(), self.timeout_s)
        except asyncio.TimeoutError:
            raise errors.operation_timeout(f"Timed out waiting for the _schemas reader to reach offset {offset}") \
                from None

    async def write(self, entries: Sequence[tuple[Key, bytes | None]]) -> int:
        """Appends ``entries`` as one batch (all or nothing) and waits until they are applied; their last offset."""
        batch = [RecordInput(key.encode(), value) for key, value in entries]
        try:
            result = (await self._producer.send({self.partition: batch}))[self.partition]
        except (KafkaClientError, OSError) as exc:
            self._producer = Producer(self.client, acks=-1, timeout_ms=int(self.timeout_s * 1000),
                                      auto_create_topics=False)
            raise errors.store_error(f"Error while writing to the _schemas topic: {exc}") from None
        if result.error is not None:
            if result.error.code == ErrorCode.MESSAGE_TOO_LARGE or result.error.code == ErrorCode.RECORD_LIST_TOO_LARGE:
                raise errors.RegistryError(422, errors.SCHEMA_TOO_LARGE, f"Schema too large: {result.error}")
            raise errors.store_error(f"Error while writing to the _schemas topic: {result.error}")
        last = result.base_offset + len(batch) - 1
        await self.wait_for(last)
        return last

    async def catch_up(self) -> int:
        """Appends a NOOP and reads up to it: afterwards the view holds every record written before."""
        return await self.write([(records.NOOP_KEY, None)])

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        await self.client.close()

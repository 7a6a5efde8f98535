"""Workloads driven by confluent-kafka (librdkafka) threads; every operation goes to the History.

queue: idempotent acks=all producers send unique values round-robin over the partitions, with keys; a
group of consumers polls and commits synchronously. table: an idempotent producer overwrites a few
dozen keys in a compacted topic whose segments roll every second, so the cleaner runs during the round.
txn: a transactional producer commits or aborts batches at random, flushing them first so that aborted
records reach the log, and classifies every transaction (commit, abort, unknown: in doubt), read back by
a read_committed group; and a consume-transform-produce loop reads `queue` in a group (read_committed)
and writes each value, tagged with its attempt, to `ctp` in a transaction that also commits the
group's offsets (sendOffsetsToTransaction): exactly once means no input appears in two committed
outputs. drain (drain.py): after healing, fresh consumers read every partition from offset 0 to its end.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chaos.checker import CTP_PREFIX
from chaos.history import History
from chaos.txn_v2 import JavaTxnWorkload

QUEUE_TOPIC = "queue"
TABLE_TOPIC = "table"
TXN_TOPIC = "txn"
CTP_TOPIC = "ctp"
GROUP = "chaos"
QUEUE_KEYS = 32
TABLE_KEYS = 24
# The table's segments roll every second and are cleaned as soon as anything is dirty (with the brokers'
# log.cleaner.backoff.ms, cluster.py), so replicas compact on their own during the round.
TABLE_CONFIG = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
                "min.compaction.lag.ms": "0", "delete.retention.ms": "1000"}


def topics_of(with_txn: bool) -> list[str]:
    return [QUEUE_TOPIC, TABLE_TOPIC] + ([TXN_TOPIC, CTP_TOPIC] if with_txn else [])


def create_topics(admin: AdminClient, partitions: int, unclean: bool, with_txn: bool) -> None:
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": str(unclean).lower()}
    topics = [NewTopic(name, partitions, 3, config={**config, **(TABLE_CONFIG if name == TABLE_TOPIC else {})})
              for name in topics_of(with_txn)]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(60)


def _producer_config(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "message.timeout.ms": 20000, "request.timeout.ms": 5000, "linger.ms": 5,
            "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 1000, "log_level": 3}


# librdkafka's own words when its idempotent producer decides to bump its epoch (debug context "eos"):
# the drain it begins for the bump, its reason, and the sequence gap that caused it.
EPOCH_BUMP_MARKS = ("epoch bump", "bumped epoch", "skipped sequence numbers")


class _EpochBumpRecorder(logging.Handler):
    """Puts each epoch-bump line of one producer's librdkafka log into the History as `epoch-bump`: the
    checker explains a later copy of a value under a higher epoch only by a bump its producer recorded."""

    def __init__(self, history: History, process: str) -> None:
        super().__init__(logging.DEBUG)
        self.history, self.process = history, process

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if any(mark in line for mark in EPOCH_BUMP_MARKS):
            self.history.add("epoch-bump", process=self.process, detail=line)


def _queue_producer(bootstrap: str, history: History, process: str) -> Producer:
    logger = logging.getLogger(f"chaos.rdkafka.{process}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.handlers = [_EpochBumpRecorder(history, process)]  # this round's history: rounds share the logger
    return Producer({**_producer_config(bootstrap), "debug": "eos", "log_level": 7, "logger": logger})


def _kafka_error_of(exc: Exception) -> KafkaException:
    """The KafkaException a call of the queue producer raised. When librdkafka logs in the same poll
    after a fatal error, confluent-kafka calls the Python logger with that error already set, and the
    call fails as a SystemError caused by it: the same fatal error, which must not end the thread."""
    if isinstance(exc, KafkaException):
        return exc
    if isinstance(exc, SystemError) and isinstance(exc.__cause__, KafkaException):
        return exc.__cause__
    raise exc


def _flush(producer: Producer, timeout: float) -> int:
    """`producer.flush`: the messages left; a fatal error raised meanwhile ends the wait early (they fail
    as they are purged, and their callbacks record that)."""
    try:
        return producer.flush(timeout)
    except (KafkaException, SystemError) as exc:
        _kafka_error_of(exc)
        return len(producer)


def value_text(message: Message) -> str:
    """The text of a record the workloads wrote: every one has a value, so a null one is the broker's fault."""
    value = message.value()
    if value is None:
        raise ValueError(f"{message.topic()}-{message.partition()}@{message.offset()} has a null value")
    return value.decode()


def partition_of(message: Message) -> int:
    """The partition of a consumed record (the client leaves it unset only on error events)."""
    partition = message.partition()
    if partition is None:
        raise ValueError(f"a record of {message.topic()} at offset {message.offset()} has no partition")
    return partition


def consumer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 2000, "log_level": 3, **extra}


def subscribe(consumer: Consumer, topic: str,
              changed: Callable[[str, list[TopicPartition]], None] | None = None) -> None:
    """Subscribe with rebalance callbacks that assign and unassign themselves (eager protocol), after
    telling `changed` ("assign"/"revoke"). Without them confluent-kafka does it in C after asking librdkafka
    for the rebalance protocol, which can wait forever when the consumer is closing (librdkafka #4041): a
    round hung there, holding the GIL, as its consume-transform-produce loop closed its consumer."""
    def assigned(own: Consumer, partitions: list[TopicPartition]) -> None:
        if changed is not None:
            changed("assign", partitions)
        own.assign(partitions)

    def revoked(own: Consumer, partitions: list[TopicPartition]) -> None:
        if changed is not None:
            changed("revoke", partitions)
        own.unassign()

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)


class Workload:
    """Threads that run until `stop()`; each loop is bounded by the stop flag and a deadline."""

    def __init__(self, history: History, bootstrap: str, partitions: int, seed: int, *,
                 producers: int = 2, consumers: int = 2, rate: float = 40.0, table_rate: float = 20.0,
                 with_txn: bool = False, txn_version: int = 1):
        self.history = history
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.seed = seed
        self.producers = producers
        self.consumers = consumers
        self.rate = rate
        self.table_rate = table_rate
        self.with_txn = with_txn
        self.java_txn = JavaTxnWorkload(history, bootstrap, partitions, seed) if with_txn and txn_version == 2 else None
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, deadline: float) -> None:
        targets = [(self._produce, f"p{i}") for i in range(self.producers)]
        targets += [(self._consume, f"c{i}") for i in range(self.consumers)]
        targets.append((self._overwrite, "k0"))
        if self.with_txn:
            targets.append((self._consume_committed, "rc0"))
        if self.java_txn is not None:
            self.java_txn.start(deadline)  # t0 and x0 with transactions V2 producers (txn_v2.py)
        elif self.with_txn:
            targets += [(self._transact, "t0"), (self._transform, "x0")]
        for target, name in targets:
            thread = threading.Thread(target=target, args=(name, deadline), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        if self.java_txn is not None:
            self.java_txn.stop()
        for thread in self.threads:
            thread.join(60)

    def _running(self, deadline: float) -> bool:
        return not self.stopping.is_set() and time.monotonic() < deadline

    # -- queue ------------------------------------------------------------------------------------

    def _produce(self, name: str, deadline: float) -> None:
        """Unique values round-robin over the queue's partitions, keyed."""
        self._keep_producing(name, deadline, QUEUE_TOPIC, self.rate,
                             lambda n: (f"k{n % QUEUE_KEYS}", n % self.partitions))

    def _overwrite(self, name: str, deadline: float) -> None:
        """Unique values over a few keys of the compacted table, each key always to the same partition."""
        self._keep_producing(name, deadline, TABLE_TOPIC, self.table_rate,
                             lambda n: (f"key-{n % TABLE_KEYS}", (n % TABLE_KEYS) % self.partitions))

    def _keep_producing(self, name: str, deadline: float, topic: str, rate: float,
                        place: Callable[[int], tuple[str, int]]) -> None:
        history = self.history
        producer = _queue_producer(self.bootstrap, history, name)

        def delivered(err: Any, msg: Any) -> None:
            value, key = msg.value().decode(), msg.key().decode()
            if err is None:
                history.add("ack", process=name, topic=topic, key=key, value=value, partition=msg.partition(),
                            offset=msg.offset())
            else:
                history.add("fail", process=name, topic=topic, key=key, value=value, error=str(err))

        n = 0
        while self._running(deadline):
            value = f"{name}-{n}"
            key, partition = place(n)
            try:
                producer.produce(topic, value.encode(), key.encode(), partition=partition, on_delivery=delivered)
                history.add("send", process=name, topic=topic, value=value, partition=partition)
                n += 1
                producer.poll(1.0 / rate)
            except BufferError:
                producer.poll(1.0 / rate)
            except (KafkaException, SystemError) as exc:  # fatal (e.g. a sequence gap): a new producer id
                history.add("producer-fatal", process=name, error=str(_kafka_error_of(exc).args[0]))
                _flush(producer, 5)
                producer = _queue_producer(self.bootstrap, history, name)
        left = _flush(producer, 30)
        history.add("producer-closed", process=name, undelivered=left)

    def _consume(self, name: str, deadline: float) -> None:
        self._group_consumer(name, deadline, QUEUE_TOPIC, GROUP, {})

    def _group_consumer(self, name: str, deadline: float, topic: str, group: str, extra: dict[str, Any]) -> None:
        history = self.history

        def changed(event: str, partitions: list[TopicPartition]) -> None:
            history.add(event, process=name, partitions=[[p.topic, p.partition] for p in partitions])

        consumer = Consumer(consumer_config(self.bootstrap, **{"group.id": group, **extra}))
        subscribe(consumer, topic, changed)
        since_commit = time.monotonic()
        try:
            while self._running(deadline):
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    history.add("poll", process=name, group=group, topic=msg.topic(), partition=msg.partition(),
                                offset=msg.offset(), value=value_text(msg))
                if time.monotonic() - since_commit > 1.0:
                    since_commit = time.monotonic()
                    self._commit(name, consumer, topic, group)
        finally:
            consumer.close()

    def _commit(self, name: str, consumer: Consumer, topic: str, group: str) -> None:
        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self.history.add("commit-fail", process=name, topic=topic, group=group, error=str(exc.args[0]))
            return
        offsets = {str(tp.partition): tp.offset for tp in done or [] if tp.error is None and tp.offset >= 0}
        if offsets:
            self.history.add("commit", process=name, topic=topic, group=group, offsets=offsets)

    # -- transactions -----------------------------------------------------------------------------

    def _transact(self, name: str, deadline: float) -> None:
        """Transactions of 1-4 values over the txn topic's partitions, 60% committed, the rest aborted after a
        flush (so that the aborted records are in the log, where read_committed must skip them). Every value
        the broker acknowledged is an `ack` (committed or aborted, it must stay in the log); every
        transaction a `txn` with its outcome: commit, abort, or unknown (in doubt, judged for atomicity).
        After an unknown outcome the producer is replaced: the new one's InitProducerId fences it and has
        the coordinator finish its transaction, one way or the other."""
        rng = random.Random(self.seed)
        history = self.history

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                history.add("ack", process=name, topic=TXN_TOPIC, value=msg.value().decode(),
                            partition=msg.partition(), offset=msg.offset(), txn=True)

        producer = self._transactional_producer(name, deadline)
        n = 0
        while producer is not None and self._running(deadline):
            values = [f"{name}-{n}-{i}" for i in range(rng.randint(1, 4))]
            commit = rng.random() < 0.6
            n += 1
            try:
                producer.begin_transaction()
                for i, value in enumerate(values):
                    producer.produce(TXN_TOPIC, value.encode(), partition=(n + i) % self.partitions,
                                     on_delivery=delivered)
                outcome, error = self._end(producer, commit)
            except KafkaException as exc:
                outcome, error = self._end_after(producer, exc.args[0])
            history.add("txn", process=name, txn=n, values=values, outcome=outcome,
                        **({"error": error} if error else {}))
            if outcome == "unknown":
                producer = self._transactional_producer(name, deadline)
            time.sleep(0.1)

    def _transactional_producer(self, name: str, deadline: float) -> Producer | None:
        """A transactional producer whose InitProducerId succeeded (tried until the deadline), or None."""
        while self._running(deadline):
            producer = Producer({**_producer_config(self.bootstrap), "transactional.id": f"chaos-{name}",
                                 "transaction.timeout.ms": 30000})
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:
                self.history.add("txn-init-fail", process=name, error=str(exc.args[0]))
        return None

    def _end(self, producer: Producer, commit: bool) -> tuple[str, str | None]:
        """Commit, or flush and abort; a call that fails retriably is made again (librdkafka allows it)."""
        for _ in range(3):
            try:
                if commit:
                    producer.commit_transaction(15)
                else:
                    _flush(producer, 15)
                    producer.abort_transaction(15)
                return ("commit" if commit else "abort"), None
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or error.txn_requires_abort():
                    return self._end_after(producer, error)
        return "unknown", str(error)

    @staticmethod
    def _end_after(producer: Producer, error: Any) -> tuple[str, str | None]:
        """After an abortable error the transaction is aborted (what was sent flushed first); any other
        error, or a failed abort, leaves its outcome unknown."""
        if error.txn_requires_abort():
            try:
                _flush(producer, 5)
                producer.abort_transaction(15)
                return "abort", str(error)
            except KafkaException as exc:
                error = exc.args[0]
        return "unknown", str(error)

    def _transform(self, name: str, deadline: float) -> None:
        """Consume-transform-produce: each batch polled from `queue` goes to `ctp` in one transaction
        with the group's new offsets; after a failed or aborted transaction the consumer goes back to
        the group's committed offsets, so the batch is transformed again under a new attempt."""
        consumer = Consumer(consumer_config(self.bootstrap, **{"group.id": GROUP + "-ctp",
                                                                "isolation.level": "read_committed"}))
        producer = Producer({**_producer_config(self.bootstrap), "transactional.id": f"chaos-{name}",
                             "transaction.timeout.ms": 30000})
        subscribe(consumer, QUEUE_TOPIC)
        try:
            producer.init_transactions(30)
        except KafkaException as exc:
            self.history.add("txn-init-fail", process=name, error=str(exc.args[0]))
            consumer.close()
            return
        attempt = 0
        try:
            while self._running(deadline):
                messages = [m for m in consumer.consume(20, 0.5) if m.error() is None]
                if not messages:
                    continue
                attempt += 1
                values = [f"{CTP_PREFIX}{attempt}:{value_text(m)}" for m in messages]
                try:
                    producer.begin_transaction()
                    for message, value in zip(messages, values):
                        producer.produce(CTP_TOPIC, value.encode(), partition=partition_of(message))
                    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                         consumer.consumer_group_metadata(), 15)
                    producer.commit_transaction(15)
                    self.history.add("txn", process=name, txn=attempt, values=values, outcome="commit")
                except KafkaException as exc:
                    if not self._abort(name, producer, attempt, values, exc.args[0]):
                        return  # the outcome is unknown: going on could transform its inputs twice
                    self._rewind(consumer)
        finally:
            consumer.close()

    def _abort(self, name: str, producer: Producer, attempt: int, values: list[str], error: Any) -> bool:
        """After an abortable error the transaction is aborted (its outputs must never be read); any
        other error leaves its outcome unknown and ends the loop (False)."""
        outcome, detail = self._end_after(producer, error)
        self.history.add("txn", process=name, txn=attempt, values=values, outcome=outcome, error=detail)
        return outcome == "abort"

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """Back to the group's committed offsets (the aborted batch is read again)."""
        try:
            for tp in consumer.committed(consumer.assignment(), timeout=10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException:
            pass  # a rebalance under way: the new assignment starts from the committed offsets anyway

    def _consume_committed(self, name: str, deadline: float) -> None:
        self._group_consumer(name, deadline, TXN_TOPIC, GROUP + "-txn", {"isolation.level": "read_committed"})

"""Workloads driven by confluent-kafka (librdkafka) threads; every operation goes to the History.

queue: idempotent acks=all producers send unique values round-robin over the partitions; a group of
consumers polls and commits synchronously. txn: a transactional producer commits or aborts batches
at random, read back by read_committed consumers; and a consume-transform-produce loop reads `queue`
in a group (read_committed) and writes each value, tagged with its attempt, to `ctp` in a
transaction that also commits the group's offsets (sendOffsetsToTransaction): exactly once means no
input appears in two committed outputs. drain: after healing, a fresh consumer reads every
partition from offset 0 to its end.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chaos.checker import CTP_PREFIX
from chaos.history import History

QUEUE_TOPIC = "queue"
TXN_TOPIC = "txn"
CTP_TOPIC = "ctp"
GROUP = "chaos"


def create_topics(admin: AdminClient, partitions: int, unclean: bool, with_txn: bool) -> None:
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": str(unclean).lower()}
    topics = [NewTopic(QUEUE_TOPIC, partitions, 3, config=config)]
    if with_txn:
        topics += [NewTopic(TXN_TOPIC, partitions, 3, config=config), NewTopic(CTP_TOPIC, partitions, 3, config=config)]
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


def _consumer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 2000, "log_level": 3, **extra}


class Workload:
    """Threads that run until `stop()`; each loop is bounded by the stop flag and a deadline."""

    def __init__(self, history: History, bootstrap: str, partitions: int, seed: int, *,
                 producers: int = 2, consumers: int = 2, rate: float = 40.0, with_txn: bool = False):
        self.history = history
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.seed = seed
        self.producers = producers
        self.consumers = consumers
        self.rate = rate
        self.with_txn = with_txn
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, deadline: float) -> None:
        targets = [(self._produce, f"p{i}") for i in range(self.producers)]
        targets += [(self._consume, f"c{i}") for i in range(self.consumers)]
        if self.with_txn:
            targets += [(self._transact, "t0"), (self._consume_committed, "rc0"), (self._transform, "x0")]
        for target, name in targets:
            thread = threading.Thread(target=target, args=(name, deadline), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def _running(self, deadline: float) -> bool:
        return not self.stopping.is_set() and time.monotonic() < deadline

    # -- queue ------------------------------------------------------------------------------------

    def _produce(self, name: str, deadline: float) -> None:
        history = self.history
        producer = _queue_producer(self.bootstrap, history, name)

        def delivered(err: Any, msg: Any) -> None:
            value = msg.value().decode()
            if err is None:
                history.add("ack", process=name, topic=QUEUE_TOPIC, value=value, partition=msg.partition(),
                            offset=msg.offset())
            else:
                history.add("fail", process=name, topic=QUEUE_TOPIC, value=value, error=str(err))

        n = 0
        while self._running(deadline):
            value = f"{name}-{n}"
            partition = n % self.partitions
            try:
                producer.produce(QUEUE_TOPIC, value.encode(), partition=partition, on_delivery=delivered)
                history.add("send", process=name, topic=QUEUE_TOPIC, value=value, partition=partition)
                n += 1
                producer.poll(1.0 / self.rate)
            except BufferError:
                producer.poll(1.0 / self.rate)
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

        def assigned(_consumer: Any, partitions: list[TopicPartition]) -> None:
            history.add("assign", process=name, partitions=[[p.topic, p.partition] for p in partitions])

        def revoked(_consumer: Any, partitions: list[TopicPartition]) -> None:
            history.add("revoke", process=name, partitions=[[p.topic, p.partition] for p in partitions])

        consumer = Consumer(_consumer_config(self.bootstrap, **{"group.id": group, **extra}))
        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
        since_commit = time.monotonic()
        try:
            while self._running(deadline):
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    history.add("poll", process=name, topic=msg.topic(), partition=msg.partition(),
                                offset=msg.offset(), value=msg.value().decode())
                if time.monotonic() - since_commit > 1.0:
                    since_commit = time.monotonic()
                    self._commit(name, consumer, topic)
        finally:
            consumer.close()

    def _commit(self, name: str, consumer: Consumer, topic: str) -> None:
        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self.history.add("commit-fail", process=name, topic=topic, error=str(exc.args[0]))
            return
        offsets = {str(tp.partition): tp.offset for tp in done or [] if tp.error is None and tp.offset >= 0}
        if offsets:
            self.history.add("commit", process=name, topic=topic, offsets=offsets)

    # -- transactions -----------------------------------------------------------------------------

    def _transact(self, name: str, deadline: float) -> None:
        rng = random.Random(self.seed)
        producer = Producer({**_producer_config(self.bootstrap), "transactional.id": f"chaos-{name}",
                             "transaction.timeout.ms": 30000})
        try:
            producer.init_transactions(30)
        except KafkaException as exc:
            self.history.add("txn-init-fail", process=name, error=str(exc.args[0]))
            return
        n = 0
        while self._running(deadline):
            values = [f"{name}-{n}-{i}" for i in range(rng.randint(1, 4))]
            commit = rng.random() < 0.6
            n += 1
            try:
                producer.begin_transaction()
                for i, value in enumerate(values):
                    producer.produce(TXN_TOPIC, value.encode(), partition=(n + i) % self.partitions)
                if commit:
                    producer.commit_transaction(15)
                else:
                    producer.abort_transaction(15)
                self.history.add("txn", process=name, txn=n, values=values, outcome="commit" if commit else "abort")
            except KafkaException as exc:
                error = exc.args[0]
                self.history.add("txn", process=name, txn=n, values=values, outcome="unknown", error=str(error))
                if not self._recover(producer, error):
                    return
            time.sleep(0.1)

    def _transform(self, name: str, deadline: float) -> None:
        """Consume-transform-produce: each batch polled from `queue` goes to `ctp` in one transaction
        with the group's new offsets; after a failed or aborted transaction the consumer goes back to
        the group's committed offsets, so the batch is transformed again under a new attempt."""
        consumer = Consumer(_consumer_config(self.bootstrap, **{"group.id": GROUP + "-ctp",
                                                                "isolation.level": "read_committed"}))
        producer = Producer({**_producer_config(self.bootstrap), "transactional.id": f"chaos-{name}",
                             "transaction.timeout.ms": 30000})
        consumer.subscribe([QUEUE_TOPIC])
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
                values = [f"{CTP_PREFIX}{attempt}:{m.value().decode()}" for m in messages]
                try:
                    producer.begin_transaction()
                    for message, value in zip(messages, values):
                        producer.produce(CTP_TOPIC, value.encode(), partition=message.partition())
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
        if error.txn_requires_abort():
            try:
                producer.abort_transaction(15)
            except KafkaException as exc:
                error = exc.args[0]
            else:
                self.history.add("txn", process=name, txn=attempt, values=values, outcome="abort", error=str(error))
                return True
        self.history.add("txn", process=name, txn=attempt, values=values, outcome="unknown", error=str(error))
        return False

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """Back to the group's committed offsets (the aborted batch is read again)."""
        try:
            for tp in consumer.committed(consumer.assignment(), timeout=10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException:
            pass  # a rebalance under way: the new assignment starts from the committed offsets anyway

    def _recover(self, producer: Producer, error: Any) -> bool:
        """Abort after an abortable error; a fatal one ends the transactional producer."""
        if error.txn_requires_abort():
            try:
                producer.abort_transaction(15)
            except KafkaException:
                return False
            return True
        return error.retriable()

    def _consume_committed(self, name: str, deadline: float) -> None:
        self._group_consumer(name, deadline, TXN_TOPIC, GROUP + "-txn", {"isolation.level": "read_committed"})


RETRY_END_OFFSET = (KafkaError._UNKNOWN_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE)


def _end_offset(consumer: Consumer, partition: TopicPartition, deadline: float) -> int:
    """The partition's end (the LSO, read_committed), asked again while the new consumer's metadata
    does not know the partition yet ("Unknown partition") or still names a broker that has since
    handed leadership on (after the heal, preferred leaders take over), or the call times out, until
    `deadline`."""
    while True:
        try:
            offsets = consumer.get_watermark_offsets(partition, timeout=10)
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise
            error = exc.args[0]
            if not (error.retriable() or error.code() in RETRY_END_OFFSET):
                raise
            time.sleep(0.2)
            continue
        if offsets is not None:
            return offsets[1]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no end offset for {partition.topic}-{partition.partition}")


def drain(history: History, bootstrap: str, topics: list[str], partitions: int, timeout: float) -> None:
    """Read every partition of `topics` from offset 0 to its high watermark (read_committed)."""
    consumer = Consumer(_consumer_config(bootstrap, **{"group.id": "chaos-drain", "isolation.level": "read_committed"}))
    try:
        ends: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + timeout
        for topic in topics:
            for p in range(partitions):
                ends[(topic, p)] = _end_offset(consumer, TopicPartition(topic, p), deadline)
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        position = {tp: 0 for tp in ends}
        while time.monotonic() < deadline and any(position[tp] < ends[tp] for tp in ends):
            msg = consumer.poll(0.5)
            if msg is None:
                # read_committed skips control records: ask where the consumer stands
                for tp in consumer.position([TopicPartition(t, p) for t, p in ends]):
                    if tp.offset >= 0:
                        position[(tp.topic, tp.partition)] = max(position[(tp.topic, tp.partition)], tp.offset)
                continue
            if msg.error() is not None:
                continue
            history.add("read", process="drain", topic=msg.topic(), partition=msg.partition(),
                        offset=msg.offset(), value=msg.value().decode())
            position[(msg.topic(), msg.partition())] = msg.offset() + 1
        behind = {f"{t}-{p}": [position[(t, p)], ends[(t, p)]] for t, p in ends if position[(t, p)] < ends[(t, p)]}
        history.add("drain", complete=not behind, behind=behind, ends={f"{t}-{p}": e for (t, p), e in ends.items()})
    finally:
        consumer.close()

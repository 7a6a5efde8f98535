"""A consumer-group member run as a child process by the group tests, which SIGKILL it.

    python -m tests.integration.group_member CLIENT BOOTSTRAP TOPIC GROUP SESSION_MS HEARTBEAT_MS ASSIGNOR

Prints ``assigned P P ...`` (sorted partitions) each time its assignment changes, and polls forever.
"""

from __future__ import annotations

import asyncio
import sys


def announce(partitions: set[int], last: list[set[int] | None]) -> None:
    if partitions != last[0]:
        last[0] = set(partitions)
        print("assigned", *sorted(partitions), flush=True)


def run_confluent(bootstrap: str, topic: str, group: str, session_ms: int, heartbeat_ms: int, assignor: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": session_ms,
                         "heartbeat.interval.ms": heartbeat_ms, "partition.assignment.strategy": assignor,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    last: list[set[int] | None] = [None]
    while True:
        consumer.poll(0.1)
        announce({tp.partition for tp in consumer.assignment()}, last)


def run_kafka_python(bootstrap: str, topic: str, group: str, session_ms: int, heartbeat_ms: int,
                     assignor: str) -> None:
    from kafka import KafkaConsumer

    from tests.integration.test_groups_kafka_python import ASSIGNORS

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=session_ms,
                             heartbeat_interval_ms=heartbeat_ms, partition_assignment_strategy=[ASSIGNORS[assignor]],
                             enable_auto_commit=False, auto_offset_reset="earliest")
    # The topic's metadata before the first join, so that a leader never rejoins on its own metadata change
    # (a kafka-python 3.0.12 bug can lose that join: test_groups_kafka_python.Member says how).
    consumer.topics()
    last: list[set[int] | None] = [None]
    while True:
        consumer.poll(timeout_ms=100)
        announce({tp.partition for tp in consumer.assignment()}, last)


async def run_aiokafka(bootstrap: str, topic: str, group: str, session_ms: int, heartbeat_ms: int,
                       assignor: str) -> None:
    from aiokafka import AIOKafkaConsumer

    from tests.integration.test_groups_aiokafka import ASSIGNORS

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=session_ms,
                                heartbeat_interval_ms=heartbeat_ms, partition_assignment_strategy=[ASSIGNORS[assignor]],
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    last: list[set[int] | None] = [None]
    while True:
        await consumer.getmany(timeout_ms=100)
        announce({tp.partition for tp in consumer.assignment()}, last)


def main() -> None:
    client, bootstrap, topic, group, session_ms, heartbeat_ms, assignor = sys.argv[1:8]
    args = (bootstrap, topic, group, int(session_ms), int(heartbeat_ms), assignor)
    if client == "confluent":
        run_confluent(*args)
    elif client == "kafka-python":
        run_kafka_python(*args)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(*args))
    else:
        raise SystemExit(f"unknown client {client}")


if __name__ == "__main__":
    main()

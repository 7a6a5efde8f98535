"""One member of the share workload's group, as a process of its own so that the workload can SIGKILL it while it
holds acquisition locks: `python -m chaos.share_member JSON`.

It polls with confluent-kafka's ShareConsumer in explicit mode and acknowledges each record on its own (accept,
release or reject, drawn with the given weights), sending each acknowledgement alone with commit_sync so that the
answer is about that record only. Now and then it sits on what it holds past the lock duration. Every delivery and
every acknowledgement (before it is sent, and with its answer) is a JSON line on stdout (share_workload.py puts them in the history); once the `accept_all`
file exists it accepts everything, so that the round can drain.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

ACK_TYPES = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE, "reject": AcknowledgeType.REJECT}
POLL_S = 0.5
COMMIT_TIMEOUT_S = 10.0


def emit(type_: str, **fields: Any) -> None:
    print(json.dumps({"type": type_, **fields}), flush=True)


def main(p: dict[str, Any]) -> None:
    rng = random.Random(p["seed"])
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopping.append(True))
    consumer = ShareConsumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                              "share.acknowledgement.mode": "explicit", "socket.timeout.ms": 5000, "log_level": 3})
    consumer.subscribe([p["topic"]])
    member = p["member"]
    try:
        while not stopping:
            messages = [m for m in consumer.poll(POLL_S) if m.error() is None]
            for message in messages:
                emit("share-deliver", member=member, partition=message.partition(), offset=message.offset(),
                     dc=message.delivery_count(), value=bytes(message.value() or b"").decode(), wall=time.time())
            if messages and rng.random() < p["hold_chance"] and not os.path.exists(p["accept_all"]):
                time.sleep(p["hold_s"])  # past the lock duration: the broker hands them to someone else
            for message in messages:
                draining = os.path.exists(p["accept_all"])
                ack = "accept" if draining else rng.choices(list(ACK_TYPES), weights=p["weights"])[0]
                consumer.acknowledge(message, ACK_TYPES[ack])
                partition = message.partition()
                assert partition is not None  # a record's message always has one
                sent = {"member": member, "partition": partition, "offset": message.offset(),
                        "dc": message.delivery_count(), "ack": ack, "wall": time.time()}
                emit("share-acking", **sent)  # if this process is killed before the answer, the ack is in doubt
                emit("share-ack", **sent, error=_commit(consumer, partition))
    finally:
        consumer.close()


def _commit(consumer: ShareConsumer, partition: int) -> str | None:
    """Send the one pending acknowledgement; None when the broker answered it without error."""
    try:
        results = consumer.commit_sync(COMMIT_TIMEOUT_S)
    except KafkaException as exc:
        return str(exc)
    answers = [error for tp, error in results.items() if tp.partition == partition]
    if not answers:
        return "no answer for the partition"
    return None if answers[0] is None else str(answers[0])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

"""The message set every client test produces, and the checks every consumer result must pass."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
MESSAGE_COUNT = 10_000
PARTITIONS = 3
BASE_TIMESTAMP = 1_700_000_000_000


@dataclass(frozen=True)
class Sent:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass(frozen=True)
class Received:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def messages(tag: str, count: int = MESSAGE_COUNT) -> list[Sent]:
    """Keyed messages with two headers each; 50 distinct keys spread them over the partitions."""
    return [
        Sent(key=f"key-{i % 50}".encode(), value=f"{tag}-value-{i}-".encode() + bytes(range(i % 7)) * 3,
             headers=(("seq", str(i).encode()), ("tag", tag.encode())), timestamp=BASE_TIMESTAMP + i)
        for i in range(count)
    ]


def verify(sent: list[Sent], received: list[Received], *, check_timestamps: bool = True) -> None:
    """Everything arrived once, intact, and each key's messages kept their order within a partition."""
    assert len(received) == len(sent), f"received {len(received)} of {len(sent)}"
    by_seq = {}
    for item in received:
        headers = dict(item.headers)
        by_seq[int(headers["seq"].decode())] = item
    assert sorted(by_seq) == list(range(len(sent)))
    partition_of_key: dict[bytes, int] = {}
    for seq, message in enumerate(sent):
        got = by_seq[seq]
        assert got.key == message.key
        assert got.value == message.value
        assert got.headers == message.headers
        if check_timestamps:
            assert got.timestamp == message.timestamp
        assert partition_of_key.setdefault(message.key, got.partition) == got.partition, "a key changed partition"
    offsets: dict[int, list[int]] = defaultdict(list)
    sequences: dict[int, list[int]] = defaultdict(list)
    for item in received:
        offsets[item.partition].append(item.offset)
        sequences[item.partition].append(int(dict(item.headers)["seq"].decode()))
    for partition, partition_offsets in offsets.items():
        assert partition_offsets == sorted(partition_offsets), f"partition {partition} out of offset order"
        assert len(set(partition_offsets)) == len(partition_offsets), "duplicate offsets"
        assert sequences[partition] == sorted(sequences[partition]), f"partition {partition} reordered messages"
    assert len(offsets) == PARTITIONS, "50 keys should land on every one of the 3 partitions"

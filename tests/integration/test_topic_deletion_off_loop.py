"""Deleting a topic does not stall the event loop: on the loop its partitions only stop being served, close
their files and have their directories renamed ``<topic>-<partition>.<uuid>-delete`` (Kafka's asyncDelete);
the files are removed on the I/O threads, so other clients are answered while that runs.

The stall is observed by ordering alone, as in test_topic_creation_off_loop.py: from the DeleteTopics
request until the topic's directories are all gone, another connection's ApiVersions requests, sent one
after another, are answered many times. With the removal on the loop (before this change) only those sent
while the metadata file was written were, as the directories went in the same step of the loop: 2 or 3 in
runs here, against 196 to 734 with the change."""

from __future__ import annotations

from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import RequestHeader, encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_topic_creation_off_loop import _create_answer, _produce, _send_create

PARTITIONS = 250
ANSWERED_WHILE_DELETING = 50
"""Far more than the requests answered while the metadata file is written (before the partitions' logs go)."""


def _topic_dirs(broker: BrokerProcess, topic: str) -> list[Path]:
    """The topic's partition directories, those renamed to be deleted included."""
    return [path for path in Path(broker.data_dir, "logs").iterdir() if path.name.startswith(f"{topic}-")]


def _create(client: WireClient, topic: str, partitions: int) -> None:
    _send_create(client, topic, partitions)
    result = _create_answer(client)
    assert result.error_code == ErrorCode.NONE, result


def _send_delete(client: WireClient, topic: str) -> None:
    client.correlation += 1
    header = RequestHeader(request_api_key=DeleteTopicsRequest.API_KEY, request_api_version=4,
                           correlation_id=client.correlation, client_id="deleter")
    client.sock.sendall(encode_request(header, DeleteTopicsRequest(topic_names=[topic], timeout_ms=120_000), 4))


def _delete_answer(client: WireClient) -> DeleteTopicsResponse.DeletableTopicResult:
    return DeleteTopicsResponse.decode(client.read_frame()[5:], 4).responses[0]  # v4: flexible header, one tag byte


def _problems(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_lines if "Traceback" in line or " ERROR " in line]


def test_other_clients_are_answered_while_a_topic_is_deleted(shared_broker: BrokerProcess) -> None:
    deleter, other = WireClient(shared_broker.bootstrap), WireClient(shared_broker.bootstrap)
    _create(deleter, "deleted-big", PARTITIONS)
    assert len(_topic_dirs(shared_broker, "deleted-big")) == PARTITIONS
    _send_delete(deleter, "deleted-big")
    answered = 0
    while _topic_dirs(shared_broker, "deleted-big"):
        version = other.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                ApiVersionsResponse)
        assert version.error_code == ErrorCode.NONE
        answered += 1
    result = _delete_answer(deleter)
    assert result.error_code == ErrorCode.NONE, result
    assert answered >= ANSWERED_WHILE_DELETING, f"only {answered} ApiVersions answered while the topic was deleted"
    assert not _problems(shared_broker)
    deleter.close()
    other.close()


def test_a_topic_created_again_right_after_its_deletion_starts_afresh(shared_broker: BrokerProcess) -> None:
    client = WireClient(shared_broker.bootstrap)
    _create(client, "recreated", PARTITIONS // 5)
    for _ in range(3):
        assert _produce(client, "recreated", 0).error_code == ErrorCode.NONE
    _send_delete(client, "recreated")
    assert _delete_answer(client).error_code == ErrorCode.NONE
    _create(client, "recreated", 2)  # while the old files may still be being removed
    answer = _produce(client, "recreated", 0)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)  # a new log, not the old one's offset 3
    def left() -> list[str]:
        return sorted(path.name for path in _topic_dirs(shared_broker, "recreated"))

    eventually(lambda: left() == ["recreated-0", "recreated-1"], lambda: f"only the new logs left, not {left()}")
    assert not _problems(shared_broker)
    client.close()

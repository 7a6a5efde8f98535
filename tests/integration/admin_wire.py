"""CreateTopics, CreatePartitions and DeleteTopics sent as raw requests with a chosen timeout_ms, each topic's error
code returned: what a test of the timeout's handling needs (clients pick the timeout themselves). `send_and_leave`
sends one and closes the connection without reading the answer: a client that goes away."""

from __future__ import annotations

from typing import Any, Mapping

from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    RequestHeader,
)
from tests.integration.test_bad_input import WireClient

#: a socket timeout above any answer's wait here (the code before timeout_ms applied waited 10 s per topic)
SOCKET_TIMEOUT_S = 60


def _request(bootstrap: str, message: Any, version: int, response_class: Any) -> Any:
    client = WireClient(bootstrap)
    client.sock.settimeout(SOCKET_TIMEOUT_S)
    try:
        return client.request(message, version, response_class)
    finally:
        client.close()


def send_and_leave(bootstrap: str, message: Any, version: int) -> None:
    """Send ``message`` and close the connection at once, its answer unread."""
    client = WireClient(bootstrap)
    header = RequestHeader(request_api_key=message.API_KEY, request_api_version=version, correlation_id=1,
                           client_id="leaving-client")
    try:
        client.sock.sendall(encode_request(header, message, version))
    finally:
        client.close()


def delete_topics_request(names: list[str], timeout_ms: int) -> DeleteTopicsRequest:
    """DeleteTopics, to send as v4."""
    return DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms)


def delete_topics(bootstrap: str, names: list[str], timeout_ms: int) -> dict[str, int]:
    """DeleteTopics v4: each topic's error code."""
    answer = _request(bootstrap, delete_topics_request(names, timeout_ms), 4, DeleteTopicsResponse)
    return {r.name: int(r.error_code) for r in answer.responses}


def create_topics_request(assignments: Mapping[str, list[list[int]]], timeout_ms: int,
                          validate_only: bool = False) -> CreateTopicsRequest:
    """CreateTopics of topics given by their replica assignment, to send as v5."""
    topics = [CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=-1, replication_factor=-1,
        assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=replicas)
                     for p, replicas in enumerate(plan)]) for name, plan in assignments.items()]
    return CreateTopicsRequest(topics=topics, timeout_ms=timeout_ms, validate_only=validate_only)


def create_topics(bootstrap: str, assignments: Mapping[str, list[list[int]]], timeout_ms: int,
                  validate_only: bool = False) -> dict[str, int]:
    """CreateTopics v5 of topics given by their replica assignment: each one's error code."""
    answer = _request(bootstrap, create_topics_request(assignments, timeout_ms, validate_only), 5, CreateTopicsResponse)
    return {t.name: int(t.error_code) for t in answer.topics}


def create_partitions_request(name: str, count: int, added: list[list[int]],
                              timeout_ms: int) -> CreatePartitionsRequest:
    """CreatePartitions growing ``name`` to ``count`` partitions placed on ``added``, to send as v1."""
    return CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count, assignments=[
            CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=replicas) for replicas in added])],
        timeout_ms=timeout_ms)


def create_partitions(bootstrap: str, name: str, count: int, added: list[list[int]], timeout_ms: int) -> int:
    """CreatePartitions v1 growing ``name`` to ``count`` partitions placed on ``added``: its error code."""
    answer = _request(bootstrap, create_partitions_request(name, count, added, timeout_ms), 1, CreatePartitionsResponse)
    return int(answer.results[0].error_code)

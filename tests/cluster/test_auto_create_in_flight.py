"""ZooKeeper mode: a Metadata request for a topic whose auto-creation this broker has in flight is answered
UNKNOWN_TOPIC_OR_PARTITION at once, as Kafka's AutoTopicCreationManager answers it (filterCreatableTopics: a topic in
its inflightTopics); the request that creates it is answered LEADER_NOT_AVAILABLE once the topic is written.

Before this change the second request started a creation of its own, waited for ZooKeeper as the first did, and
was answered LEADER_NOT_AVAILABLE (its write found the topic there). The creation stays in flight while ZooKeeper is
frozen (SIGSTOP, for less than the sessions' timeout)."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request, response_header_version
from pybroker.protocol.messages import MetadataRequest, MetadataResponse, RequestHeader
from tests.cluster.conftest import running_cluster
from tests.integration.admin_wire import SOCKET_TIMEOUT_S
from tests.integration.test_bad_input import WireClient

TOPIC = "made-once"
VERSION = 9
ANSWER_S = 3.0
"""How long the test waits for the in-flight answer with ZooKeeper frozen: well below the 10 s session timeout
ZooKeeper grants (tickTime 500), far above the time a request takes that needs no ZooKeeper."""


def send_metadata(client: WireClient) -> None:
    """Metadata v9 for TOPIC, auto-creation allowed; not waiting for the answer."""
    header = RequestHeader(request_api_key=MetadataRequest.API_KEY, request_api_version=VERSION, correlation_id=1,
                           client_id="in-flight-test")
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                              allow_auto_topic_creation=True)
    client.sock.sendall(encode_request(header, request, VERSION))


def answer_code(client: WireClient) -> ErrorCode:
    frame = client.read_frame()
    body = 4 + (1 if response_header_version(MetadataRequest.API_KEY, VERSION) == 1 else 0)
    [topic] = MetadataResponse.decode(frame[body:], VERSION).topics
    return ErrorCode(topic.error_code)


def test_a_metadata_request_for_a_topic_being_auto_created_here_is_unknown_at_once(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=1) as cluster:
        bootstrap = cluster.brokers[0].bootstrap
        clients = [WireClient(bootstrap), WireClient(bootstrap)]
        for client in clients:
            client.sock.settimeout(SOCKET_TIMEOUT_S)
        zookeeper = cluster.zookeeper.process
        assert zookeeper is not None
        os.kill(zookeeper.pid, signal.SIGSTOP)
        try:
            for client in clients:
                send_metadata(client)
            readable, _, _ = select.select([c.sock for c in clients], [], [], ANSWER_S)
            answered = [c for c in clients if c.sock in readable]
            in_flight = [answer_code(c) for c in answered]
        finally:
            os.kill(zookeeper.pid, signal.SIGCONT)
        # Either request may have been the one to start the creation; the other is answered while it is in flight.
        assert in_flight == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        [creator] = [c for c in clients if c not in answered]
        assert answer_code(creator) == ErrorCode.LEADER_NOT_AVAILABLE
        for client in clients:
            client.close()

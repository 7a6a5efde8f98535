"""ZooKeeper mode: a share coordinator request (InitializeShareGroupState, sent by a group coordinator's persister)
that starts the creation of ``__share_group_state`` is answered at once: NOT_COORDINATOR, as the other coordinators
answer a partition they do not lead (``test_coordinator_requests_at_once.py``); the persister retries it with a
backoff, and gets through once the controller has elected the leaders.

Before, the share coordinator (and the persister, before sending) waited up to 10 s for the new topic's leaders,
holding the request. The leaders not elected are those of a topic created while the controller is frozen (SIGSTOP).
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import InitializeShareGroupStateRequest, InitializeShareGroupStateResponse
from tests.cluster.conftest import running_cluster
from tests.cluster.test_admin_timeouts import SESSION_TIMEOUT_MS
from tests.cluster.test_cluster import controller_id
from tests.cluster.test_coordinator_requests_at_once import AT_ONCE_S, timed
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

GROUP = "a-share-group"
TOPIC_ID = uuid.uuid4()  # the share coordinator keys on the id alone


def initialize(client: WireClient) -> ErrorCode:
    I = InitializeShareGroupStateRequest
    answer = client.request(I(group_id=GROUP, topics=[I.InitializeStateData(topic_id=TOPIC_ID, partitions=[
        I.PartitionData(partition=0, state_epoch=0, start_offset=0)])]), 0, InitializeShareGroupStateResponse)
    return ErrorCode(answer.results[0].partitions[0].error_code)


def test_a_share_state_request_that_creates_the_topic_is_answered_at_once_and_a_retry_gets_through(
        tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2, extra={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}) as cluster:
        controller = controller_id(cluster)
        at_other = cluster.brokers[1 - controller].bootstrap
        frozen = cluster.brokers[controller].process
        assert frozen is not None
        os.kill(frozen.pid, signal.SIGSTOP)  # nobody elects the leaders of __share_group_state
        try:
            code, elapsed = timed(at_other, initialize)
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        assert code == ErrorCode.NOT_COORDINATOR
        assert elapsed < AT_ONCE_S
        answers: list[ErrorCode] = []

        def initialized() -> bool:  # at whichever broker leads the key's partition, once elected and loaded
            answers[:] = [timed(broker.bootstrap, initialize)[0] for broker in cluster.brokers]
            return ErrorCode.NONE in answers

        eventually(initialized, lambda: f"the share-partition initialized (last answers {answers})")

"""A topic of the longest legal name (249 characters) is deleted and created again: its log's ``-delete``
directory name is cut to 255 characters as Kafka cuts it (logDirNameWithSuffixCappedLength). Before, the rename
to ``<249 characters>-0.<32 hex>-delete`` (291 characters) failed ENAMETOOLONG: DeleteTopics answered
KAFKA_STORAGE_ERROR and creating the topic again failed, its old log still in the way."""

from __future__ import annotations

from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_topic_creation_off_loop import _produce
from tests.integration.test_topic_deletion_off_loop import _create, _delete_answer, _send_delete

LONGEST = "n" * 249


def test_the_longest_topic_name_is_deleted_and_created_again(shared_broker: BrokerProcess) -> None:
    client = WireClient(shared_broker.bootstrap)
    try:
        _create(client, LONGEST, 1)
        assert _produce(client, LONGEST, 0).error_code == ErrorCode.NONE
        _send_delete(client, LONGEST)
        assert _delete_answer(client).error_code == ErrorCode.NONE
        _create(client, LONGEST, 1)
        answer = eventually(lambda: (a := _produce(client, LONGEST, 0)).error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER
                            and a, "the topic created again to be served")
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)

        def left() -> list[str]:
            return sorted(p.name for p in Path(shared_broker.data_dir, "logs").iterdir() if p.name.startswith("nnn"))

        eventually(lambda: left() == [f"{LONGEST}-0"], lambda: f"only the new log left, not {left()}")
    finally:
        client.close()

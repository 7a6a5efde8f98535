"""CreateTopics on a full log dir answers KAFKA_STORAGE_ERROR, as Kafka does, not UNKNOWN_SERVER_ERROR.

The log dir is a tiny tmpfs (this needs root and `mount`; the test is skipped without them) whose
inodes are used up once the broker runs, so creating a partition directory fails with ENOSPC.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, MetadataResponse
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient, metadata_ok
from tests.integration.tmpfs import mounted_tmpfs


@pytest.fixture
def small_log_dir(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "small", "size=1m,nr_inodes=64") as mount_point:
        yield mount_point


def _use_up_inodes(directory: Path) -> None:
    filler = directory / "filler"
    filler.mkdir()
    for i in range(10_000):
        try:
            (filler / str(i)).touch()
        except OSError:
            return
    raise AssertionError("the tmpfs never ran out of inodes")


def test_create_topics_on_a_full_log_dir_is_a_storage_error(tmp_path: Path, small_log_dir: Path) -> None:
    broker = BrokerProcess(tmp_path, {"log.dirs": str(small_log_dir)}).start()
    try:
        _use_up_inodes(small_log_dir)
        client = WireClient(broker.bootstrap)
        request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="answers-full-disk", num_partitions=2, replication_factor=1)])
        result = client.request(request, 7, CreateTopicsResponse).topics[0]
        assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR, result
        assert result.error_message
        assert metadata_ok(broker.bootstrap)
        # The failed create left nothing behind: not in Metadata, and once there is room it succeeds.
        listed = client.request(MetadataRequest(topics=None), 9, MetadataResponse)
        assert "answers-full-disk" not in {t.name for t in listed.topics}
        shutil.rmtree(small_log_dir / "filler")
        assert client.request(request, 7, CreateTopicsResponse).topics[0].error_code == ErrorCode.NONE
        client.close()
    finally:
        broker.kill()

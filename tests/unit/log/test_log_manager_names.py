"""The log manager turns topic names into directories, so it refuses any name that is not a legal
topic name before touching the filesystem: a controller request naming ``../x`` cannot escape the
log dir, whatever the layers above let through."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybroker.log.config import LogConfig
from pybroker.log.errors import IllegalTopicNameError
from pybroker.log.manager import LogManager


@pytest.mark.parametrize("topic", ["../escape", "..", ".", "", "a/b", "x" * 250, "topic\x00"])
def test_illegal_topic_names_create_nothing(tmp_path: Path, topic: str) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    manager = LogManager([str(log_dir)], LogConfig())
    manager.startup(now_ms=0)
    with pytest.raises(IllegalTopicNameError):
        manager.get_or_create_log(topic, 0)
    with pytest.raises(IllegalTopicNameError):
        manager.get_or_create_log("legal", -1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
    assert [p.name for p in log_dir.iterdir() if p.is_dir()] == []
    assert manager.delete_log(topic, 0) is False
    manager.get_or_create_log("legal.name_-1", 0)  # the whole legal alphabet still works
    assert (log_dir / "legal.name_-1-0").is_dir()
    manager.shutdown()

"""The committed generated code matches the specs, and the public surface is intact."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SPEC_DIRS = [REPO.parent / "shared" / "kafka-protocol" / d for d in ("4.2/message", "message", "coordinator-records")]


@pytest.mark.skipif(not all(d.is_dir() for d in SPEC_DIRS),
                    reason=f"Kafka specs not present at {SPEC_DIRS} (../shared is absent)")
def test_generated_files_are_up_to_date() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "gen_protocol.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_tables() -> None:
    from pybroker.protocol import messages
    from pybroker.protocol.api_keys import ApiKey

    assert messages.API_NAMES[0] == "Produce" and messages.API_NAMES[18] == "ApiVersions"
    assert set(messages.REQUEST_CLASSES) == set(range(93)) == set(messages.RESPONSE_CLASSES)
    for key, cls in messages.REQUEST_CLASSES.items():
        assert cls.API_KEY == key and cls.__name__ == messages.API_NAMES[key] + "Request"
        assert messages.RESPONSE_CLASSES[key].__name__ == messages.API_NAMES[key] + "Response"
    assert [k for k in ApiKey][:4] == [ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
                                       ApiKey.METADATA]
    assert ApiKey.API_VERSIONS == 18 and len(ApiKey) == 93
    for name in messages.__all__:
        assert getattr(messages, name) is not None


def test_class_attributes_and_struct_access() -> None:
    from pybroker.protocol.messages import (
        ConsumerProtocolSubscription,
        FetchResponse,
        MetadataResponse,
        ProduceRequest,
        RequestHeader,
    )

    assert (ProduceRequest.API_KEY, ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION,
            ProduceRequest.FLEXIBLE_MIN, ProduceRequest.LATEST_VERSION_UNSTABLE) == (0, 3, 13, 9,
                                                                                      False)
    assert ConsumerProtocolSubscription.API_KEY == -1 and RequestHeader.API_KEY == -1
    assert ProduceRequest.TopicProduceData and ProduceRequest.PartitionProduceData
    assert FetchResponse.PartitionData and MetadataResponse.MetadataResponseTopic
    p = MetadataResponse.MetadataResponsePartition()
    assert p.isr_nodes == [] and p.leader_epoch == -1
    assert not hasattr(p, "__dict__")  # slots


def test_repr_and_equality_are_those_of_a_dataclass() -> None:
    """The generated classes share Struct's __repr__ (not one compiled per class): same results, and equality is still
    dataclasses' own."""
    from pybroker.protocol.messages import ApiVersionsRequest, ProduceRequest

    partition = ProduceRequest.PartitionProduceData(index=1, records=b"x")
    request = ProduceRequest(transactional_id="t'x", acks=-1, timeout_ms=5,
                             topic_data=[ProduceRequest.TopicProduceData(name="a", partition_data=[partition])])
    assert repr(request) == (
        "ProduceRequest(transactional_id=\"t'x\", acks=-1, timeout_ms=5, topic_data=[ProduceRequest.TopicProduceData("
        "name='a', topic_id=UUID('00000000-0000-0000-0000-000000000000'), partition_data=["
        "ProduceRequest.PartitionProduceData(index=1, records=b'x')])])")
    assert request == dataclasses.replace(request) and not request != dataclasses.replace(request)
    assert request != dataclasses.replace(request, acks=1)
    assert ProduceRequest.PartitionProduceData(index=1) != ProduceRequest.PartitionProduceData(index=2)
    assert ApiVersionsRequest() == ApiVersionsRequest() and ApiVersionsRequest() != ProduceRequest()
    assert request.__eq__(object()) is NotImplemented
    with pytest.raises(TypeError, match="unhashable"):
        hash(request)
    nested = ProduceRequest.TopicProduceData(name="a")
    nested.partition_data.append(nested)  # type: ignore[arg-type]  # a cycle prints as "...", as with dataclasses
    assert repr(nested).endswith("partition_data=[...])")


def test_importing_one_message_loads_only_its_module() -> None:
    """The start-up cost of the codecs is the modules loaded: one message's import must not build every class."""
    code = ("import sys; import pybroker.protocol.frame, pybroker.protocol.messages; "
            "from pybroker.protocol.messages import ProduceRequest; "
            "print(sorted(m for m in sys.modules if m.startswith('pybroker.protocol.messages.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=True)
    assert proc.stdout.strip() == str(["pybroker.protocol.messages." + name  # the frame reads the headers
                                       for name in ("produce", "request_header", "response_header")])


def test_full_load_does_not_exec_code() -> None:
    """Generated modules must be plain data + dataclasses: no exec/compile/eval calls."""
    for path in (REPO / "pybroker" / "protocol" / "messages").glob("*.py"):
        text = path.read_text()
        assert "exec(" not in text and "compile(" not in text and "eval(" not in text, path
        assert text.startswith("# GENERATED by tools/gen_protocol.py"), path
    from pybroker.protocol import messages

    assert len(messages.REQUEST_CLASSES) == 93

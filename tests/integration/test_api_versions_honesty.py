"""ApiVersions tells the truth: what it advertises is answered, what it leaves out is refused as Kafka refuses it.

Every (API, version) the broker advertises gets a schema-built request (the null-fields test's machinery) and must
come back as a decodable answer that does not say UNSUPPORTED_VERSION. Every other API key in Kafka's specs, and
every served API one version past what is advertised, closes the connection without an answer: Kafka's
SocketServer.parseRequestHeader throws InvalidRequestException for an API key or version its ApiVersionManager
does not enable, and the processor closes that connection. ApiVersions itself is the exception (KIP-511), answered
at v0 with UNSUPPORTED_VERSION; test_bad_input covers that.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import Any


from pybroker.protocol.api_keys import REQUEST_VERSIONS, ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import REQUEST_CLASSES, ApiVersionsRequest, ApiVersionsResponse, RequestHeader
from pybroker.protocol.schema import Struct
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient, metadata_ok
from tests.integration.test_null_fields import advertised_answers

# Why each API key in the specs that a ZooKeeper-mode pybroker does not serve is left out.
NOT_SERVED: dict[int, str] = {
    ApiKey.CREATE_DELEGATION_TOKEN: "delegation tokens are not implemented",
    ApiKey.RENEW_DELEGATION_TOKEN: "delegation tokens are not implemented",
    ApiKey.EXPIRE_DELEGATION_TOKEN: "delegation tokens are not implemented",
    ApiKey.DESCRIBE_DELEGATION_TOKEN: "delegation tokens are not implemented",
    ApiKey.VOTE: "KRaft controllers only",
    ApiKey.BEGIN_QUORUM_EPOCH: "KRaft controllers only",
    ApiKey.END_QUORUM_EPOCH: "KRaft controllers only",
    ApiKey.DESCRIBE_QUORUM: "KRaft only",
    ApiKey.ENVELOPE: "KRaft request forwarding only",
    ApiKey.FETCH_SNAPSHOT: "KRaft only",
    ApiKey.BROKER_REGISTRATION: "KRaft controllers only",
    ApiKey.BROKER_HEARTBEAT: "KRaft controllers only",
    ApiKey.UNREGISTER_BROKER: "KRaft only",
    ApiKey.CONTROLLER_REGISTRATION: "KRaft controllers only",
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: "KRaft controllers only",
    ApiKey.ADD_RAFT_VOTER: "KRaft controllers only",
    ApiKey.REMOVE_RAFT_VOTER: "KRaft controllers only",
    ApiKey.UPDATE_RAFT_VOTER: "KRaft controllers only",
    ApiKey.STREAMS_GROUP_HEARTBEAT: "streams groups (KIP-1071) are not implemented",
    ApiKey.STREAMS_GROUP_DESCRIBE: "streams groups (KIP-1071) are not implemented",
}


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    client = WireClient(bootstrap)
    try:
        keys = client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).api_keys
    finally:
        client.close()
    return {key.api_key: (key.min_version, key.max_version) for key in keys}


def error_codes(message: Any) -> Iterator[int]:
    """Every error code in an answer, at any depth."""
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        if field.name == "error_code":
            yield value
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Struct):
                yield from error_codes(item)


def closes_without_answer(bootstrap: str, api_key: int, version: int) -> bool:
    """Send a request for `api_key` at `version` (the body is the spec's default at the nearest valid version)."""
    low, high = REQUEST_VERSIONS[api_key]
    body_version = min(max(version, low), high)
    header = RequestHeader(request_api_key=api_key, request_api_version=body_version, correlation_id=7,
                           client_id="honesty")
    frame = bytearray(encode_request(header, REQUEST_CLASSES[api_key](), body_version))
    frame[6:8] = struct.pack(">h", version)
    client = WireClient(bootstrap)
    try:
        client.sock.sendall(bytes(frame))
        return client.is_closed_by_peer()
    finally:
        client.close()


def test_every_advertised_version_is_within_kafkas_specs(shared_broker: BrokerProcess) -> None:
    for api_key, (low, high) in advertised(shared_broker.bootstrap).items():
        spec_low, spec_high = REQUEST_VERSIONS[api_key]
        assert spec_low <= low <= high <= spec_high, ApiKey(api_key).name


def test_every_advertised_api_and_version_is_answered(shared_broker: BrokerProcess) -> None:
    unanswered = []
    for answer in advertised_answers(shared_broker.bootstrap):
        name = f"{ApiKey(answer.api_key).name} v{answer.version}"
        if answer.failure is not None:
            unanswered.append(f"{name}: {answer.failure}")
        elif ErrorCode.UNSUPPORTED_VERSION in set(error_codes(answer.response)):
            unanswered.append(f"{name}: UNSUPPORTED_VERSION")
    assert unanswered == [], "\n".join(unanswered)


def test_every_api_key_not_advertised_has_a_reason_and_closes_the_connection(shared_broker: BrokerProcess) -> None:
    served = advertised(shared_broker.bootstrap)
    missing = sorted(set(ApiKey) - set(served))
    assert [ApiKey(key).name for key in missing if key not in NOT_SERVED] == []
    assert [ApiKey(key).name for key in NOT_SERVED if key in served] == [], "served now: drop its reason"
    still_open = [ApiKey(key).name for key in missing
                  if not closes_without_answer(shared_broker.bootstrap, key, REQUEST_VERSIONS[key][0])]
    assert still_open == []
    assert metadata_ok(shared_broker.bootstrap)


def test_a_version_past_the_advertised_range_closes_the_connection(shared_broker: BrokerProcess) -> None:
    served = advertised(shared_broker.bootstrap)
    still_open = [ApiKey(key).name for key, (_, high) in served.items()
                  if key != ApiKey.API_VERSIONS and not closes_without_answer(shared_broker.bootstrap, key, high + 1)]
    assert still_open == []
    assert metadata_ok(shared_broker.bootstrap)

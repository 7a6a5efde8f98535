"""Features on a single node: ApiVersions v3+ carries them, UpdateFeatures validates as Kafka's controller does,
and `pybroker features` prints kafka-features.sh's lines.

The broker supports `share.version` 0-1 and `transaction.version` 0-2, and a new single node finalizes
`share.version=1` and `transaction.version=2` (as a newly formatted Kafka 4.2 cluster does), at epoch 0; a change is
kept in the log dir across a restart. Every other feature is refused as "not supported". At `share.version` 0 the
share-group APIs answer UNSUPPORTED_VERSION, as Kafka 4.2's do with share groups disabled.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_bad_input import WireClient

NOT_SUPPORTED = "Could not apply finalized feature update because the provided feature is not supported."
NOT_FINALIZED = "Can not delete non-existing finalized feature."


def update(bootstrap: str, version: int, *items: tuple[str, int, int], validate_only: bool = False
           ) -> UpdateFeaturesResponse:
    """UpdateFeatures with (feature, level, upgrade type) items; v0 sends upgrade type >= 2 as AllowDowngrade."""
    request = UpdateFeaturesRequest(validate_only=validate_only, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=kind,
                                               allow_downgrade=kind >= 2) for name, level, kind in items])
    client = WireClient(bootstrap)
    try:
        return client.request(request, version, UpdateFeaturesResponse)
    finally:
        client.close()


def results(response: UpdateFeaturesResponse) -> dict[str, tuple[int, str | None]]:
    return {r.feature: (r.error_code, r.error_message) for r in response.results}


def features_of(bootstrap: str, version: int = 3) -> ApiVersionsResponse:
    client = WireClient(bootstrap)
    try:
        return client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), version,
                              ApiVersionsResponse)
    finally:
        client.close()


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_carries_share_and_transaction_versions_finalized_on_a_new_node(shared_broker,
                                                                                   version: int) -> None:
    response = features_of(shared_broker.bootstrap, version)
    assert [(f.name, f.min_version, f.max_version) for f in response.supported_features] == [
        ("share.version", 0, 1), ("transaction.version", 0, 2)]
    assert response.finalized_features_epoch == 0
    assert [(f.name, f.min_version_level, f.max_version_level) for f in response.finalized_features] == [
        ("share.version", 1, 1), ("transaction.version", 2, 2)]
    assert response.zk_migration_ready is False


def test_update_features_refuses_each_feature_with_kafkas_reason(shared_broker) -> None:
    answer = update(shared_broker.bootstrap, 1, ("transaction.version", 2, 1), ("group.version", 0, 2),
                    ("metadata.version", 0, 1), ("kraft.version", 1, 9), ("", 1, 1))
    assert answer.error_code == ErrorCode.NONE
    assert results(answer) == {
        "transaction.version": (ErrorCode.INVALID_REQUEST, "Can not upgrade a finalized feature: "
                                "'transaction.version' from existing versionLevel:2 to the same value."),
        "group.version": (ErrorCode.INVALID_REQUEST, NOT_FINALIZED),
        "metadata.version": (ErrorCode.INVALID_REQUEST, "Can not provide versionLevel: 0 less than 1 without setting "
                                                        "the SAFE_DOWNGRADE (or UNSAFE_DOWNGRADE) flag in the request."),
        "kraft.version": (ErrorCode.INVALID_REQUEST, "Received unknown upgrade type."),
        "": (ErrorCode.INVALID_REQUEST, "Feature name can not be empty."),
    }


def test_update_features_v0_reads_allow_downgrade_and_v2_answers_one_top_level_error(shared_broker) -> None:
    v0 = update(shared_broker.bootstrap, 0, ("group.version", 0, 2), ("group.version.x", 0, 1))
    assert results(v0)["group.version"] == (ErrorCode.INVALID_REQUEST, NOT_FINALIZED)
    assert results(v0)["group.version.x"][1].startswith("Can not provide versionLevel: 0 less than 1")
    v2 = update(shared_broker.bootstrap, 2, ("transaction.version", 1, 2), ("group.version", 1, 1),
                validate_only=True)
    assert (v2.error_code, v2.error_message, v2.results) == (ErrorCode.INVALID_REQUEST, NOT_SUPPORTED, [])


def features_tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "features", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def test_features_tool_prints_kafka_features_lines(shared_broker) -> None:
    described = features_tool(shared_broker.bootstrap, "describe")
    assert (described.returncode, described.stderr) == (0, "")
    assert described.stdout.splitlines() == ["Feature: share.version\tSupportedMinVersion: 0\t"
                                             "SupportedMaxVersion: 1\tFinalizedVersionLevel: 1\tEpoch: 0",
                                             "Feature: transaction.version\tSupportedMinVersion: 0\t"
                                             "SupportedMaxVersion: 2\tFinalizedVersionLevel: 2\tEpoch: 0"]

    upgraded = features_tool(shared_broker.bootstrap, "upgrade", "--feature", "group.version=1")
    assert upgraded.returncode == 1
    assert upgraded.stdout.splitlines() == [f"Could not upgrade group.version to 1. {NOT_SUPPORTED}"]
    assert upgraded.stderr.strip() == "1 out of 1 operation(s) failed."

    disabled = features_tool(shared_broker.bootstrap, "disable", "--feature", "metadata.version")
    assert (disabled.returncode, disabled.stdout.strip()) == (1, f"Could not disable metadata.version. {NOT_FINALIZED}")

    dry = features_tool(shared_broker.bootstrap, "downgrade", "--unsafe", "--dry-run", "--feature", "group.version=1")
    assert dry.stdout.strip() == f"Can not downgrade group.version to 1. {NOT_SUPPORTED}"

    malformed = features_tool(shared_broker.bootstrap, "upgrade", "--feature", "w=tf")
    assert malformed.returncode == 1
    assert "Can't parse feature=level string w=tf: unable to parse tf as a short." in malformed.stderr


def test_transaction_version_downgrade_and_upgrade_are_kept_across_a_restart(tmp_path) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        downgraded = features_tool(broker.bootstrap, "downgrade", "--feature", "transaction.version=1")
        assert (downgraded.returncode, downgraded.stdout.strip()) == (0, "transaction.version was downgraded to 1.")
        broker.stop()
        broker.start()
        response = features_of(broker.bootstrap)
        assert response.finalized_features_epoch == 1
        assert [(f.name, f.max_version_level) for f in response.finalized_features] == [
            ("share.version", 1), ("transaction.version", 1)]
        upgraded = features_tool(broker.bootstrap, "upgrade", "--feature", "transaction.version=2")
        assert (upgraded.returncode, upgraded.stdout.strip()) == (0, "transaction.version was upgraded to 2.")
        assert features_of(broker.bootstrap).finalized_features_epoch == 2
    finally:
        broker.kill()


def test_share_version_0_switches_share_groups_off(tmp_path) -> None:
    """`kafka-features downgrade --feature share.version=0`: the share-group APIs answer UNSUPPORTED_VERSION (still
    listed in ApiVersions, as Kafka 4.2 lists them), across a restart too; an upgrade to 1 serves them again."""
    from pybroker.protocol.messages import (
        ShareFetchRequest,
        ShareFetchResponse,
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
    )
    from tests.integration.test_share_groups_wire import _beat

    broker = BrokerProcess(tmp_path).start()
    try:
        client = WireClient(broker.bootstrap)
        assert _beat(client, "sv-group", "m1", 0, ["t"]).error_code == ErrorCode.NONE
        downgraded = features_tool(broker.bootstrap, "downgrade", "--feature", "share.version=0")
        assert (downgraded.returncode, downgraded.stdout.strip()) == (0, "share.version was downgraded to 0.")
        for restart in (False, True):
            if restart:
                client.close()
                broker.stop()
                broker.start()
                client = WireClient(broker.bootstrap)
            assert _beat(client, "sv-group", "m1", 0, ["t"]).error_code == ErrorCode.UNSUPPORTED_VERSION
            described = client.request(ShareGroupDescribeRequest(group_ids=["sv-group"]), 1, ShareGroupDescribeResponse)
            assert described.groups[0].error_code == ErrorCode.UNSUPPORTED_VERSION
            fetched = client.request(ShareFetchRequest(group_id="sv-group", member_id="m1", share_session_epoch=0,
                                                       max_wait_ms=0, topics=[]), 1, ShareFetchResponse)
            assert fetched.error_code == ErrorCode.UNSUPPORTED_VERSION
            listed = {k.api_key for k in features_of(broker.bootstrap).api_keys}
            assert {76, 77, 78, 79} <= listed
        upgraded = features_tool(broker.bootstrap, "upgrade", "--feature", "share.version=1")
        assert (upgraded.returncode, upgraded.stdout.strip()) == (0, "share.version was upgraded to 1.")
        assert _beat(client, "sv-group", "m2", 0, ["t"]).error_code == ErrorCode.NONE
        client.close()
    finally:
        broker.kill()

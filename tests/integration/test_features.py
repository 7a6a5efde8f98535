"""Features on a single node: ApiVersions v3+ carries them as a ZooKeeper-mode Kafka 3.9 broker does, UpdateFeatures
validates as Kafka's controller does, and `pybroker features` prints kafka-features.sh's lines.

Kafka 3.9's ZooKeeper broker supports no feature (BrokerFeatures.createEmpty()), so every upgrade is refused as
"not supported" and `describe` prints nothing (FeatureCommandTest.testDescribeWithZK); the finalized set is the
empty one of a fresh `/feature` znode, epoch 0.
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
from tests.integration.broker_process import REPO
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


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_carries_the_features_of_a_zookeeper_mode_broker(shared_broker, version: int) -> None:
    client = WireClient(shared_broker.bootstrap)
    try:
        response = client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                  version, ApiVersionsResponse)
    finally:
        client.close()
    assert response.supported_features == []
    assert response.finalized_features_epoch == 0
    assert response.finalized_features == []
    assert response.zk_migration_ready is False


def test_update_features_refuses_each_feature_with_kafkas_reason(shared_broker) -> None:
    answer = update(shared_broker.bootstrap, 1, ("transaction.version", 2, 1), ("group.version", 0, 2),
                    ("metadata.version", 0, 1), ("kraft.version", 1, 9), ("", 1, 1))
    assert answer.error_code == ErrorCode.NONE
    assert results(answer) == {
        "transaction.version": (ErrorCode.INVALID_REQUEST, NOT_SUPPORTED),
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
    v2 = update(shared_broker.bootstrap, 2, ("transaction.version", 2, 1), validate_only=True)
    assert (v2.error_code, v2.error_message, v2.results) == (ErrorCode.INVALID_REQUEST, NOT_SUPPORTED, [])


def features_tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "features", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def test_features_tool_prints_kafka_features_lines(shared_broker) -> None:
    described = features_tool(shared_broker.bootstrap, "describe")
    assert (described.returncode, described.stderr) == (0, "")
    assert described.stdout.startswith("No supported features: ")  # a newcomer sees why the list is empty

    upgraded = features_tool(shared_broker.bootstrap, "upgrade", "--feature", "transaction.version=2",
                             "--feature", "group.version=1")
    assert upgraded.returncode == 1
    assert upgraded.stdout.splitlines() == [f"Could not upgrade transaction.version to 2. {NOT_SUPPORTED}",
                                            f"Could not upgrade group.version to 1. {NOT_SUPPORTED}"]
    assert upgraded.stderr.strip() == "2 out of 2 operation(s) failed."

    disabled = features_tool(shared_broker.bootstrap, "disable", "--feature", "metadata.version")
    assert (disabled.returncode, disabled.stdout.strip()) == (1, f"Could not disable metadata.version. {NOT_FINALIZED}")

    dry = features_tool(shared_broker.bootstrap, "downgrade", "--unsafe", "--dry-run", "--feature", "group.version=1")
    assert dry.stdout.strip() == f"Can not downgrade group.version to 1. {NOT_SUPPORTED}"

    malformed = features_tool(shared_broker.bootstrap, "upgrade", "--feature", "w=tf")
    assert malformed.returncode == 1
    assert "Can't parse feature=level string w=tf: unable to parse tf as a short." in malformed.stderr

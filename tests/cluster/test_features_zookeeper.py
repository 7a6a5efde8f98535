"""Finalized features in ZooKeeper mode live in the `/feature` znode (Kafka's FeatureZNode JSON, epoch = znode
version): a new cluster's finalizes share.version=1, ApiVersions follows a change to it, UpdateFeatures on the
controller writes it, and a broker that is not the controller answers NOT_CONTROLLER."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from tests.eventually import eventually
from tests.cluster.conftest import CHROOT, running_cluster
from tests.integration.test_bad_input import WireClient
from tests.integration.test_features import results, update


def features_of(bootstrap: str) -> tuple[int, dict[str, int]]:
    client = WireClient(bootstrap)
    try:
        response = client.request(ApiVersionsRequest(), 3, ApiVersionsResponse)
    finally:
        client.close()
    return response.finalized_features_epoch, {f.name: f.max_version_level for f in response.finalized_features}


def test_feature_znode_is_the_finalized_features(tmp_path) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        zk = KazooClient(hosts=cluster.zookeeper.connect)
        zk.start()
        try:
            data, stat = zk.get(CHROOT + "/feature")
            # a new cluster: share groups on (share.version=1, as a new Kafka 4.2 cluster), nothing else finalized
            assert json.loads(data) == {"version": 2, "status": 1,
                                        "features": {"share.version": {"max_version_level": 1}}}
            assert all(features_of(b.bootstrap) == (stat.version, {"share.version": 1}) for b in cluster.brokers)

            zk.set(CHROOT + "/feature", json.dumps(
                {"version": 2, "status": 1, "features": {"group.version": {"max_version_level": 1}}}).encode())
            for broker in cluster.brokers:
                eventually(lambda: features_of(broker.bootstrap) == (stat.version + 1, {"group.version": 1}),
                           "ApiVersions to show the new /feature")

            controller = int(json.loads(zk.get(CHROOT + "/controller")[0])["brokerid"])
            other = cluster.brokers[1 - controller].bootstrap
            refused = update(other, 1, ("group.version", 0, 2))
            assert (refused.error_code, refused.results) == (ErrorCode.NOT_CONTROLLER, [])

            done = update(cluster.brokers[controller].bootstrap, 1, ("group.version", 0, 2), ("x", 1, 1))
            assert results(done)["group.version"] == (ErrorCode.NONE, None)
            assert results(done)["x"][0] == ErrorCode.INVALID_REQUEST
            data, stat = zk.get(CHROOT + "/feature")
            assert (json.loads(data)["features"], stat.version) == ({}, 2)
            for broker in cluster.brokers:
                eventually(lambda: features_of(broker.bootstrap) == (2, {}), "ApiVersions to show the deletion")
        finally:
            zk.stop()

"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): the broker's log directories (KIP-113, JBOD).

DescribeLogDirs answers, for every configured log dir in order, its error (KAFKA_STORAGE_ERROR once
offline), its volume's total and usable bytes (v4) and, per partition asked for (null topics: all),
each log's size, offset lag and whether it is a ``-future`` log, as Kafka's
ReplicaManager.describeLogDirs: the lag of a current log is max(its high watermark - its LEO, 0), so
0 on leaders and followers alike; the lag of a future log is the current log's LEO minus its own.
It needs Describe on the cluster; without it the answer lists no dir and (v3+) carries
CLUSTER_AUTHORIZATION_FAILED.

AlterReplicaLogDirs needs Alter on the cluster (each partition refused with
CLUSTER_AUTHORIZATION_FAILED otherwise), then starts moving each replica to the log dir named
(replication/log_dir_mover.py): LOG_DIR_NOT_FOUND for a dir not in ``log.dirs``,
KAFKA_STORAGE_ERROR for an offline one, REPLICA_NOT_AVAILABLE for a partition this broker holds
no replica of, as Kafka's ReplicaManager.alterReplicaLogDirs.
"""

from __future__ import annotations

from itertools import groupby

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from pybroker.replication import log_requests
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.registry import api

Result = DescribeLogDirsResponse.DescribeLogDirsResult


@api(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
async def describe_log_dirs(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    results = []
    for described in log_requests.describe_log_dirs(ctx.services.replica_manager, wanted):
        if not described.online:
            results.append(Result(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=described.path, topics=[]))
            continue
        topics = [DescribeLogDirsResponse.DescribeLogDirsTopic(name=name, partitions=[
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=replica.partition, partition_size=replica.size, offset_lag=replica.offset_lag,
                is_future_key=replica.is_future)
            for replica in group]) for name, group in groupby(described.replicas, key=lambda replica: replica.topic)]
        results.append(Result(error_code=ErrorCode.NONE, log_dir=described.path, topics=topics,
                              total_bytes=described.total_bytes, usable_bytes=described.usable_bytes))
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=results)


@api(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
async def alter_replica_log_dirs(ctx: RequestContext, request: AlterReplicaLogDirsRequest
                                 ) -> AlterReplicaLogDirsResponse:
    allowed = authorize_cluster(ctx, AclOperation.ALTER)
    results: dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]] = {}
    for log_dir in request.dirs:
        for topic in log_dir.topics:
            for index in topic.partitions:
                code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not allowed else _alter(ctx, topic.name, index,
                                                                                         log_dir.path)
                results.setdefault(topic.name, []).append(
                    AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(partition_index=index,
                                                                                  error_code=code))
    return AlterReplicaLogDirsResponse(results=[
        AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(topic_name=name, partitions=partitions)
        for name, partitions in results.items()])


def _alter(ctx: RequestContext, topic: str, index: int, path: str) -> ErrorCode:
    try:
        ctx.services.log_manager.check_dir(path)
        if ctx.services.replica_manager.hosted(topic, index) is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        ctx.services.log_dir_mover.move(topic, index, path)
    except Exception as exc:
        return error_code_for(exc)
    return ErrorCode.NONE

"""Every API handler the broker serves; ApiVersions advertises exactly this list."""

from pybroker.server.handlers import (
    api_versions,
    cluster,
    configs,
    fetch,
    leader_epoch,
    list_offsets,
    metadata,
    produce,
    producer_id,
    topics,
)
from pybroker.server.registry import ApiHandler

ALL_HANDLERS: tuple[ApiHandler, ...] = (
    produce.handle,
    fetch.handle,
    list_offsets.handle,
    metadata.handle,
    api_versions.handle,
    topics.create_topics,
    topics.delete_topics,
    producer_id.handle,
    leader_epoch.handle,
    configs.describe_configs,
    configs.alter_configs,
    topics.create_partitions,
    configs.incremental_alter_configs,
    cluster.handle,
)

"""Admin calls for client quotas: DescribeClientQuotas and AlterClientQuotas.

An entity is a dict of entity type (``user``, ``client-id``) to name, None naming the default
entity; a filter component is (entity type, match) where match is a name, `DEFAULT_MATCH` or
`ANY_SPECIFIED`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

QuotaEntity = dict[str, "str | None"]
DEFAULT_MATCH = object()
ANY_SPECIFIED = object()


async def describe_client_quotas(client: KafkaClient, components: Sequence[tuple[str, object]], strict: bool = False
                                 ) -> list[tuple[QuotaEntity, dict[str, float]]]:
    request = DescribeClientQuotasRequest(components=[], strict=strict)
    for entity_type, match in components:
        if match is DEFAULT_MATCH:
            request.components.append(DescribeClientQuotasRequest.ComponentData(
                entity_type=entity_type, match_type=1, match=None))
        elif match is ANY_SPECIFIED:
            request.components.append(DescribeClientQuotasRequest.ComponentData(
                entity_type=entity_type, match_type=2, match=None))
        else:
            request.components.append(DescribeClientQuotasRequest.ComponentData(
                entity_type=entity_type, match_type=0, match=str(match)))
    response = await (await client.connect()).send(request, DescribeClientQuotasResponse)
    check(response.error_code, response.error_message)
    return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
            for entry in response.entries or ()]


async def alter_client_quotas(client: KafkaClient, alterations: Sequence[tuple[Mapping[str, str | None],
                                                                                Mapping[str, float | None]]],
                              validate_only: bool = False) -> list[ResponseError | None]:
    """Each alteration is (entity, {key: value, or None to remove}); per entity None or the refusal."""
    request = AlterClientQuotasRequest(entries=[], validate_only=validate_only)
    for entity, ops in alterations:
        request.entries.append(AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[AlterClientQuotasRequest.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                 for k, v in ops.items()]))
    response = await (await client.connect()).send(request, AlterClientQuotasResponse)
    return [ResponseError(e.error_code, e.error_message) if e.error_code else None for e in response.entries]

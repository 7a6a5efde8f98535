"""The Admin client's SCRAM calls (describeUserScramCredentials, alterUserScramCredentials).

As in Kafka's Admin client, the password never leaves the client: it sends a random salt and the
salted password (PBKDF2), and the broker derives the stored and server keys from those.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Sequence

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from pybroker.security.sasl.scram import BY_TYPE, DEFAULT_ITERATIONS, DEFAULT_SALT_BYTES, MECHANISMS


@dataclass(frozen=True)
class ScramUpsertion:
    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS


async def describe_user_scram_credentials(client: KafkaClient, users: Sequence[str] | None = None
                                          ) -> dict[str, list[tuple[str, int]] | ResponseError]:
    """user -> [(mechanism, iterations)], or the broker's error for that user (None/empty: every user)."""
    request = DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequest.UserName(name=u) for u in users or ()])
    response = await (await client.connect()).send(request, DescribeUserScramCredentialsResponse)
    check(response.error_code, response.error_message)
    results: dict[str, list[tuple[str, int]] | ResponseError] = {}
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            results[result.user] = ResponseError(result.error_code, result.error_message)
        else:
            results[result.user] = [(BY_TYPE[i.mechanism].name if i.mechanism in BY_TYPE else str(i.mechanism),
                                     i.iterations) for i in result.credential_infos]
    return results


async def alter_user_scram_credentials(client: KafkaClient, upsertions: Sequence[ScramUpsertion],
                                       deletions: Sequence[tuple[str, str]]) -> dict[str, ResponseError | None]:
    """Apply the changes on the controller; user -> None or the broker's refusal."""
    request = AlterUserScramCredentialsRequest(upsertions=[], deletions=[])
    for upsertion in upsertions:
        mechanism = MECHANISMS[upsertion.mechanism]
        salt = secrets.token_bytes(DEFAULT_SALT_BYTES)
        request.upsertions.append(AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=upsertion.user, mechanism=mechanism.type_code, iterations=upsertion.iterations, salt=salt,
            salted_password=mechanism.salted_password(upsertion.password, salt, upsertion.iterations)))
    for user, name in deletions:
        request.deletions.append(AlterUserScramCredentialsRequest.ScramCredentialDeletion(
            name=user, mechanism=MECHANISMS[name].type_code))
    response = await (await client.controller()).send(request, AlterUserScramCredentialsResponse)
    return {r.user: ResponseError(r.error_code, r.error_message) if r.error_code else None for r in response.results}

"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), with Kafka's checks,
messages and error codes (ZkAdminManager): an empty user or a credential asked for twice fails
that user, an unknown mechanism is UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384
UNACCEPTABLE_CREDENTIAL, deleting what is not there RESOURCE_NOT_FOUND. Each user's changes are
written together (one entity config), so a user either gets all of its alterations or none.
With an authorizer, describing needs Describe on the cluster and altering Alter, refused as Kafka's
getErrorResponse does (CLUSTER_AUTHORIZATION_FAILED at the top, or for each user named, sorted).
"""

from __future__ import annotations

from typing import Mapping

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from pybroker.security.sasl.scram import BY_TYPE, MAX_ITERATIONS, MECHANISMS, ScramCredential
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

Describe = DescribeUserScramCredentialsResponse
Alter = AlterUserScramCredentialsResponse
EMPTY_USER = "Username must not be empty"


def _credential_infos(config: Mapping[str, str]) -> list[Describe.CredentialInfo]:
    infos = []
    for name, mechanism in MECHANISMS.items():
        if name in config:
            infos.append(Describe.CredentialInfo(mechanism=mechanism.type_code,
                                                 iterations=ScramCredential.from_text(config[name]).iterations))
    return infos


@api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe(ctx: RequestContext, request: DescribeUserScramCredentialsRequest) -> Describe:
    store = ctx.services.scram_credentials
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return Describe(error_code=refused, error_message=refused.message, results=[])
    if not request.users:
        return Describe(results=[
            Describe.DescribeUserScramCredentialsResult(user=user, credential_infos=infos)
            for user in sorted(store.all_users()) if (infos := _credential_infos(store.all_users()[user]))])
    names = [user.name for user in request.users]
    results = []
    for name in dict.fromkeys(names):
        result = Describe.DescribeUserScramCredentialsResult(user=name, credential_infos=[])
        if not name:
            result.error_code, result.error_message = ErrorCode.RESOURCE_NOT_FOUND, EMPTY_USER
        elif names.count(name) > 1:
            result.error_code = ErrorCode.DUPLICATE_RESOURCE
            result.error_message = ("Cannot describe SCRAM credentials for the same user twice in a single "
                                    f"request: {name}")
        elif not (infos := _credential_infos(store.user_config(name))):
            result.error_code = ErrorCode.RESOURCE_NOT_FOUND
            result.error_message = f"Attempt to describe a user credential that does not exist: {name}"
        else:
            result.credential_infos = infos
        results.append(result)
    return Describe(results=results)


def _refusal(name: str, mechanism: int, iterations: int | None) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER
    scram = BY_TYPE.get(mechanism)
    if scram is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations is not None and iterations < scram.min_iterations:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations is not None and iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


@api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> Alter:
    store = ctx.services.scram_credentials
    if not authorize_cluster(ctx, AclOperation.ALTER):
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return Alter(results=[Alter.AlterUserScramCredentialsResult(user=user, error_code=refused,
                                                                    error_message=refused.message) for user in users])
    errors: dict[str, tuple[ErrorCode, str]] = {}
    changes = [(d.name, d.mechanism, None) for d in request.deletions] + \
              [(u.name, u.mechanism, u) for u in request.upsertions]
    for name, mechanism, upsertion in changes:
        refusal = _refusal(name, mechanism, upsertion.iterations if upsertion is not None else None)
        if refusal is not None and name not in errors:
            errors[name] = refusal
    pairs = [(name, mechanism) for name, mechanism, _ in changes if name not in errors]
    for name, mechanism in pairs:
        if pairs.count((name, mechanism)) > 1:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same "
                                                          "request")
    configs = {name: dict(store.user_config(name)) for name, _ in pairs if name not in errors}
    for name, mechanism, upsertion in changes:
        if name not in configs:
            continue
        scram = BY_TYPE[mechanism]
        if upsertion is None:
            if configs[name].pop(scram.name, None) is None:
                errors[name] = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not "
                                                              "exist")
        else:
            credential = ScramCredential.from_salted_password(scram, upsertion.salt, upsertion.salted_password,
                                                              upsertion.iterations)
            configs[name][scram.name] = credential.to_text()
    results = [Alter.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message)
               for name, (code, message) in errors.items()]
    for name, config in configs.items():
        if name not in errors:
            await store.set_user_config(name, config)
            results.append(Alter.AlterUserScramCredentialsResult(user=name, error_code=ErrorCode.NONE))
    return Alter(results=results)

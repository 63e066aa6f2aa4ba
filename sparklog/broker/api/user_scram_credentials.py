"""DescribeUserScramCredentials (key 50, v0) and AlterUserScramCredentials (key 51, v0): the
SCRAM users (KIP-554), as ``kafka-configs.sh --entity-type users`` and ``sparklog users``
manage them.

Behaviour, as Kafka's:
- Describe with no user list lists every user with credentials; a named user without any
  is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE. Only mechanisms and
  iterations are ever answered, never a salt or key.
- Alter upserts (the client sends salt and SaltedPassword; the broker keeps StoredKey and
  ServerKey) and deletes per user: an unknown mechanism is UNSUPPORTED_SASL_MECHANISM,
  iterations outside 4096-16384 or an empty name UNACCEPTABLE_CREDENTIAL, deleting a missing
  credential RESOURCE_NOT_FOUND, a user's mechanism altered twice in one request
  DUPLICATE_RESOURCE; the first error of a user is its answer and none of that user's
  alterations is applied.
- With an authorizer: Describe needs DESCRIBE and Alter ALTER on the CLUSTER
  (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation
from sparklog.broker.security.scram_credentials import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramStore,
)
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.alter_user_scram_credentials.v0.request import (
        AlterUserScramCredentialsRequest,
    )
    from kio.schema.describe_user_scram_credentials.v0.request import (
        DescribeUserScramCredentialsRequest,
    )

MECHANISMS_BY_ID = {number: name for name, number in MECHANISM_IDS.items()}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, versions=(0, 0))
async def describe_user_scram_credentials(broker: Broker, header: RequestHeader,
                                          request: DescribeUserScramCredentialsRequest) -> Any:
    build = Build(header)
    store = broker.security.scram
    if not broker.security.allows_cluster(Operation.DESCRIBE):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              error_message=None, results=())
    users = store.users()
    names = list(users) if not request.users else [u.name for u in request.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        credentials = users.get(name, {})
        error, message = ErrorCode.NONE, None
        if counts[name] > 1:
            error, message = ErrorCode.DUPLICATE_RESOURCE, (
                "Cannot describe SCRAM credentials for the same user twice in a single request")
        elif not credentials:
            error, message = ErrorCode.RESOURCE_NOT_FOUND, (
                "Attempt to describe a user credential that does not exist")
        infos = () if error != ErrorCode.NONE else tuple(
            build("CredentialInfo", mechanism=MECHANISM_IDS[m], iterations=c.iterations)
            for m, c in sorted(credentials.items()))
        results.append(build("DescribeUserScramCredentialsResult", user=name, error_code=error,
                             error_message=message, credential_infos=infos))
    return build.response(error_code=ErrorCode.NONE, error_message=None, results=tuple(results))


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, versions=(0, 0))
async def alter_user_scram_credentials(broker: Broker, header: RequestHeader,
                                       request: AlterUserScramCredentialsRequest) -> Any:
    build = Build(header)
    store = broker.security.scram
    alterations = [*request.deletions, *request.upsertions]
    counts = Counter((a.name, a.mechanism) for a in alterations)
    allowed = broker.security.allows_cluster(Operation.ALTER)
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    for alteration in alterations:
        if errors.get(alteration.name, (ErrorCode.NONE,))[0] == ErrorCode.NONE:
            errors[alteration.name] = _check(alteration, counts, store) if allowed \
                else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    for deletion in request.deletions:
        if errors[deletion.name][0] == ErrorCode.NONE:
            await broker.security.set_credential(deletion.name,
                                                 MECHANISMS_BY_ID[deletion.mechanism], None)
    for upsertion in request.upsertions:
        if errors[upsertion.name][0] == ErrorCode.NONE:
            mechanism = MECHANISMS_BY_ID[upsertion.mechanism]
            credential = ScramCredential.from_salted_password(
                mechanism, upsertion.salt, upsertion.iterations, upsertion.salted_password)
            await broker.security.set_credential(upsertion.name, mechanism, credential)
    return build.response(results=tuple(
        build("AlterUserScramCredentialsResult", user=name, error_code=code,
              error_message=message) for name, (code, message) in errors.items()))


def _check(alteration: Any, counts: Counter[tuple[str, int]], store: ScramStore
           ) -> tuple[ErrorCode, str | None]:
    if not alteration.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if counts[alteration.name, alteration.mechanism] > 1:
        return ErrorCode.DUPLICATE_RESOURCE, ("A user credential cannot be altered twice in "
                                              "the same request")
    mechanism = MECHANISMS_BY_ID.get(alteration.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    iterations = getattr(alteration, "iterations", None)
    if iterations is None:
        if store.get(alteration.name, mechanism) is None:
            return ErrorCode.RESOURCE_NOT_FOUND, ("Attempt to delete a user credential that "
                                                  "does not exist")
    elif iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (minimum {MIN_ITERATIONS})"
    elif iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (maximum {MAX_ITERATIONS})"
    return ErrorCode.NONE, None

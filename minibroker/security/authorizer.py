"""The ACL authorizer (Kafka's StandardAuthorizer semantics) and the checks handlers call.

Turned on by ``authorizer.class.name`` = ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``
(or ``kafka.security.authorizer.AclAuthorizer``, which minibroker serves alike); empty means no
authorizer: every check passes and the ACL APIs answer SECURITY_DISABLED, as Kafka does.

How one action (principal, client host, operation, resource type and name) is decided:
1. a principal in ``super.users`` is allowed everything;
2. the ACLs that apply to the resource are those of the same type whose pattern matches the name:
   LITERAL with the same name, LITERAL ``*``, PREFIXED with a prefix of the name;
3. of those, an ACL counts when its principal is the caller's or ``User:*``, its host is the caller's
   address or ``*``, and its operation is the one asked, or ALL, or, for ALLOW ACLs only, one that
   implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
4. any counting DENY denies; else any counting ALLOW allows; else, when no ACL applies to the
   resource at all, ``allow.everyone.if.no.acl.found`` decides (default: deny); else deny.

Lookups are indexed: literal ACLs by (type, name), prefixed ones by type and prefix, probed only at
the prefix lengths present, so the cost does not grow with the number of ACLs; decisions are cached per
(principal, host, operation, resource) until the ACLs change. Handlers ask once per distinct name in a
request (``denied``), not per partition.

Handlers call ``authorize``, ``denied`` and ``authorized_operations`` below with the broker and the
request header; with no authorizer configured they return at once (the plaintext hot paths pay one
attribute test).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Iterable
from typing import NamedTuple

from minibroker.errors import ErrorCode
from minibroker.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclStore,
    PatternType,
    PermissionType,
    ResourceType,
)
from minibroker.security.principal import KafkaPrincipal

log = logging.getLogger("minibroker.security")
audit_log = logging.getLogger("minibroker.authorizer")  # Kafka's kafka.authorizer.logger

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
AUTHORIZER_CLASSES = (STANDARD_AUTHORIZER, ACL_AUTHORIZER)

# the error Kafka answers when an action on a resource type is denied (AclEntry.authorizationError)
AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}

_IMPLIES_DESCRIBE = frozenset((AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER))
_IMPLIES_DESCRIBE_CONFIGS = frozenset((AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS))
_CACHE_LIMIT = 16384  # cached decisions; the cache is dropped whole when it fills


@functools.lru_cache(maxsize=4096)
def normalize_host(host: str) -> str:
    """An IP address in one spelling (``::1`` and ``0:0:0:0:0:0:0:1`` alike); anything else as given."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def client_host(header) -> str:
    peer = getattr(header, "peer", None)
    if isinstance(peer, tuple | list) and peer:
        return normalize_host(str(peer[0]))
    return normalize_host(str(peer)) if peer else ""


class IndexedAcl(NamedTuple):
    """An ACL as matching needs it: the parsed principal, the normalized host."""

    principal: KafkaPrincipal
    host: str
    operation: AclOperation
    allow: bool


def _indexed(acl: AclBinding) -> IndexedAcl:
    return IndexedAcl(KafkaPrincipal.parse(acl.principal), WILDCARD if acl.host == WILDCARD
                      else normalize_host(acl.host), acl.operation, acl.permission == PermissionType.ALLOW)


def _operation_matches(acl: IndexedAcl, operation: AclOperation) -> bool:
    if acl.operation == AclOperation.ALL or acl.operation == operation:
        return True
    if not acl.allow:  # implication is for ALLOW ACLs only: DENY READ does not deny DESCRIBE
        return False
    if operation == AclOperation.DESCRIBE:
        return acl.operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    """Decides actions from the AclStore's ACLs, ``super.users`` and ``allow.everyone.if.no.acl.found``.

    Owner of the indexes and the decision cache, rebuilt whenever the store changes; event loop only.
    """

    def __init__(self, store: AclStore, super_users: Iterable[str] = (), allow_if_no_acl: bool = False):
        self.store = store
        self.super_users = frozenset(KafkaPrincipal.parse(p) for p in super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], tuple[IndexedAcl, ...]] = {}
        # resource type -> (prefix lengths present, ascending; prefix -> ACLs)
        self._prefixed: dict[ResourceType, tuple[tuple[int, ...], dict[str, tuple[IndexedAcl, ...]]]] = {}
        self._by_type: dict[ResourceType, list[tuple[AclBinding, IndexedAcl]]] = {}
        self._cache: dict[tuple, bool] = {}
        store.on_change = self.rebuild
        self.rebuild(store.acls)

    @classmethod
    def from_config(cls, config) -> Authorizer | None:
        """The authorizer ``config`` asks for, its ACLs loaded; None when ``authorizer.class.name`` is
        empty. (The config key's validator has refused any other class name at load time.)"""
        if not config["authorizer.class.name"]:
            return None
        super_users = [p.strip() for p in (config["super.users"] or "").split(";") if p.strip()]
        store = AclStore(config.data_dir)
        authorizer = cls(store, super_users, config["allow.everyone.if.no.acl.found"])
        store.load()
        log.info("authorizer on: %d ACLs, super.users=%s, allow.everyone.if.no.acl.found=%s",
                 len(store.acls), ";".join(sorted(map(str, authorizer.super_users))),
                 authorizer.allow_if_no_acl)
        return authorizer

    def rebuild(self, acls: frozenset[AclBinding]) -> None:
        literal: dict[tuple[ResourceType, str], list[IndexedAcl]] = {}
        prefixed: dict[ResourceType, dict[str, list[IndexedAcl]]] = {}
        by_type: dict[ResourceType, list[tuple[AclBinding, IndexedAcl]]] = {}
        for acl in acls:
            entry = _indexed(acl)
            by_type.setdefault(acl.resource_type, []).append((acl, entry))
            if acl.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(acl.resource_type, {}).setdefault(acl.resource_name, []).append(entry)
            else:
                literal.setdefault((acl.resource_type, acl.resource_name), []).append(entry)
        self._literal = {k: tuple(v) for k, v in literal.items()}
        self._prefixed = {rtype: (tuple(sorted({len(p) for p in by_prefix})),
                                  {p: tuple(v) for p, v in by_prefix.items()})
                          for rtype, by_prefix in prefixed.items()}
        self._by_type = by_type
        self._cache = {}

    def _applicable(self, resource_type: ResourceType, name: str) -> list[tuple[IndexedAcl, ...]]:
        """The groups of ACLs whose pattern matches the resource (literal, wildcard, prefixes)."""
        found = []
        exact = self._literal.get((resource_type, name))
        if exact:
            found.append(exact)
        if name != WILDCARD:
            wildcard = self._literal.get((resource_type, WILDCARD))
            if wildcard:
                found.append(wildcard)
        prefixed = self._prefixed.get(resource_type)
        if prefixed is not None:
            lengths, by_prefix = prefixed
            for n in lengths:
                if n > len(name):
                    break
                acls = by_prefix.get(name[:n])
                if acls:
                    found.append(acls)
        return found

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        allowed = self._decide(principal, host, operation, resource_type, name)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache = {}
        self._cache[key] = allowed
        return allowed

    def _decide(self, principal, host, operation, resource_type, name) -> bool:
        if principal in self.super_users:
            return True
        groups = self._applicable(resource_type, name)
        if not groups:
            return self.allow_if_no_acl
        allowed = False
        for acls in groups:
            for acl in acls:
                if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                    continue
                if acl.host != WILDCARD and acl.host != host:
                    continue
                if not _operation_matches(acl, operation):
                    continue
                if not acl.allow:
                    return False  # DENY wins
                allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the caller do ``operation`` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType): an ALLOW (exact operation or ALL) for some pattern that no
        DENY of a matching literal, of a shorter-or-equal prefix, or of the wildcard covers."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):  # super users, defaults
            return True
        deny_literal, deny_prefixed, allow_literal, allow_prefixed = set(), set(), set(), set()
        wildcard_allow = False
        for acl, entry in self._by_type.get(resource_type, ()):
            if entry.host != WILDCARD and entry.host != host:
                continue
            if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
                continue
            if entry.operation != operation and entry.operation != AclOperation.ALL:
                continue
            literal = acl.pattern_type == PatternType.LITERAL
            if not entry.allow:
                if literal and acl.resource_name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(acl.resource_name)
            elif literal and acl.resource_name == WILDCARD:
                wildcard_allow = True
            else:
                (allow_literal if literal else allow_prefixed).add(acl.resource_name)
        if wildcard_allow:
            return True
        for name in allow_literal | allow_prefixed:
            if name in allow_literal and name in deny_literal and name not in allow_prefixed:
                continue
            if not any(name[:n] in deny_prefixed for n in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """Kafka's authorized-operations bit field: bit ``code`` set for each supported operation allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


# -- the checks handlers call --------------------------------------------------------------------------

_NOTHING_DENIED: frozenset[str] = frozenset()


def authorize(broker, header, operation: AclOperation, resource_type: ResourceType,
              name: str = CLUSTER_NAME, *, log_denied: bool = True) -> bool:
    """May this request's principal do ``operation`` on the resource? Always True without an authorizer.
    A denial is logged (``minibroker.authorizer``, info) unless ``log_denied`` is False: a check that only
    picks a path or filters what is shown, as Kafka's logIfDenied=false."""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    allowed = authorizer.authorize(header.principal, client_host(header), operation, resource_type, name)
    if not allowed and log_denied:
        audit_log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                       header.principal, operation.name, client_host(header), resource_type.name, name)
    return allowed


def denied(broker, header, operation: AclOperation, resource_type: ResourceType,
           names: Iterable[str | None], *, log_denied: bool = True) -> frozenset[str]:
    """The names among ``names`` the principal may not do ``operation`` on; each distinct name is decided
    once. Empty without an authorizer. ``None`` names (unknown topic ids) are skipped."""
    authorizer = broker.authorizer
    if authorizer is None:
        return _NOTHING_DENIED
    principal, host = header.principal, client_host(header)
    out = {n for n in set(names) if n is not None
           and not authorizer.authorize(principal, host, operation, resource_type, n)}
    if out and log_denied:
        audit_log.info("Principal = %s is Denied operation = %s from host = %s on %s resources: %s",
                       principal, operation.name, host, resource_type.name, ", ".join(sorted(out)))
    return frozenset(out)


def authorize_by_resource_type(broker, header, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(header.principal, client_host(header), operation,
                                                 resource_type)


def authorized_operations(broker, header, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """The authorized-operations bit field of a resource for this principal: every supported operation
    without an authorizer (as Kafka answers then)."""
    authorizer = broker.authorizer
    if authorizer is None:
        return ALL_SUPPORTED_BITS[resource_type]
    return authorizer.authorized_operations(header.principal, client_host(header), resource_type, name)


ALL_SUPPORTED_BITS = {rtype: sum(1 << op for op in ops) for rtype, ops in SUPPORTED_OPERATIONS.items()}

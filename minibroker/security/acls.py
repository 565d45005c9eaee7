"""ACLs as Kafka defines them (resource types, pattern types, operations, permissions, bindings and
binding filters) and the AclStore that owns the broker's set of them.

An ACL binding says: ``principal`` from ``host`` is ALLOWed (or DENYed) ``operation`` on the resources
a pattern (resource type, name, LITERAL or PREFIXED) matches. Filters (DescribeAcls, DeleteAcls) have
the same fields, any of them open: ANY for the enums, None for the strings, and pattern type MATCH to
find every binding that would apply to one resource name (literal, wildcard ``*`` and prefixes).
The codes are Kafka's (``AclOperation``, ``ResourceType``, ``PatternType``, ``AclPermissionType``).

Persistence: ``minibroker-acls.json`` at the log dir root (minibroker/storage/metadata_file.py), where
Kafka keeps ACLs in its metadata log. The AclStore is the one owner of the set: it is used from the
event loop only, loaded before the broker serves (minibroker/services/__init__.py), and rewrites the file on
every change; a change whose file cannot be written is undone and reported as an OSError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import NamedTuple

from minibroker.errors import ErrorCode, KafkaError
from minibroker.security.principal import KafkaPrincipal

log = logging.getLogger("minibroker.security")

ACLS_FILE = "minibroker-acls.json"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # resource name (LITERAL) or host matching anything
WILDCARD_PRINCIPAL = KafkaPrincipal("User", "*")


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum(cls, code: int):
    """Kafka's ``fromCode``: a code it does not know is UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls.UNKNOWN


_Op = AclOperation
# Kafka's AclEntry.supportedOperations: what authorized-operations fields can report per resource type
# (Kafka 4.0 added the config operations to groups, KIP-848 group configs)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
                         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
                           _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    ResourceType.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}


class AclBinding(NamedTuple):
    """One ACL: a resource pattern and an access control entry. Hashable; the store's set element."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", as given (Kafka compares ACL principals as strings in filters)
    host: str
    operation: AclOperation
    permission: PermissionType

    def to_json(self) -> dict:
        return {"resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permission_type": self.permission.name}

    @classmethod
    def from_json(cls, obj: dict) -> AclBinding:
        binding = cls(ResourceType[obj["resource_type"]], str(obj["resource_name"]),
                      PatternType[obj["pattern_type"]], str(obj["principal"]), str(obj["host"]),
                      AclOperation[obj["operation"]], PermissionType[obj["permission_type"]])
        validate_new_binding(binding)
        return binding


class AclFilter(NamedTuple):
    """A binding filter: None strings and ANY enums match anything; MATCH finds what applies to a name."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def pattern_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def entry_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission == PermissionType.UNKNOWN

    def matches(self, acl: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches and AccessControlEntryFilter.matches together."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != acl.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if pattern == PatternType.ANY or pattern == acl.pattern_type:
                if name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:  # MATCH against a literal ACL
                if name != acl.resource_name and acl.resource_name != WILDCARD:
                    return False
            elif not name.startswith(acl.resource_name):  # MATCH against a prefixed ACL
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission == PermissionType.ANY or self.permission == acl.permission


def invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def validate_new_binding(acl: AclBinding) -> None:
    """What Kafka refuses in CreateAcls (its AclApis and AclControlManager checks, in their order), plus a
    principal that is not ``Type:name`` (Kafka's ZooKeeper-era authorizer refused it too; the KRaft one
    would store it and then fail every authorization that meets it). Raises INVALID_REQUEST."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if acl.resource_name == "":
        raise invalid("Invalid empty resource name")
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise invalid(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise invalid(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise invalid(f"Invalid operation {acl.operation.name}")
    if acl.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        raise invalid(f"Invalid permissionType {acl.permission.name}")
    try:
        KafkaPrincipal.parse(acl.principal)
    except ValueError:
        raise invalid(f"Invalid principal {acl.principal!r}: expected PrincipalType:name") from None


def binding_from_wire(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
                      operation: int, permission: int) -> AclBinding:
    return AclBinding(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal,
                      host, _enum(AclOperation, operation), _enum(PermissionType, permission))


def filter_from_wire(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                     host: str | None, operation: int, permission: int) -> AclFilter:
    return AclFilter(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal,
                     host, _enum(AclOperation, operation), _enum(PermissionType, permission))


class AclStore:
    """The broker's ACLs, loaded from and saved to ``minibroker-acls.json``.

    Owner of the ACL set; event loop only. ``on_change`` (the authorizer's index rebuild) is called
    after every change that was saved.
    """

    def __init__(self, data_dir: str, on_change: Callable[[frozenset[AclBinding]], None] | None = None):
        self.data_dir = data_dir
        self._acls: set[AclBinding] = set()
        self.on_change = on_change

    @property
    def acls(self) -> frozenset[AclBinding]:
        return frozenset(self._acls)

    def load(self) -> None:
        from minibroker.storage.metadata_file import load_metadata

        saved = load_metadata(self.data_dir, ACLS_FILE, {})
        entries = saved.get("acls", []) if isinstance(saved, dict) else []
        for entry in entries:
            try:
                self._acls.add(AclBinding.from_json(entry))
            except (KeyError, TypeError, AttributeError, KafkaError) as e:
                log.warning("ignoring unreadable ACL %r in %s: %s", entry, ACLS_FILE, e)
        if self._acls:
            log.info("loaded %d ACLs from %s", len(self._acls), ACLS_FILE)
        self._changed()

    def _save(self) -> None:
        from minibroker.storage.metadata_file import save_metadata

        acls = sorted((a.to_json() for a in self._acls), key=lambda d: sorted(d.items()))
        save_metadata(self.data_dir, ACLS_FILE, {"version": 1, "acls": acls})

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(frozenset(self._acls))

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add validated bindings (one already present is no change, as in Kafka); raises OSError, with
        nothing changed, when the file cannot be written."""
        new = [b for b in bindings if b not in self._acls]
        if not new:
            return
        self._acls.update(new)
        self._save_or_undo(lambda: self._acls.difference_update(new))

    def _save_or_undo(self, undo) -> None:
        """Persist a change made in memory; when the file cannot be written, ``undo`` it and raise."""
        try:
            self._save()
        except OSError:
            undo()
            raise
        self._changed()

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [a for a in self._acls if acl_filter.matches(a)]

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding any filter matches, all filters against the same set (atomically, as
        Kafka's controller applies them); returns what each filter matched. Raises OSError, with nothing
        changed, when the file cannot be written."""
        matched = [self.matching(f) for f in filters]
        gone = {a for found in matched for a in found}
        if gone:
            self._acls.difference_update(gone)
            self._save_or_undo(lambda: self._acls.update(gone))
        return matched

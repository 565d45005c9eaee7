"""UpdateFeatures: v0-v2.

Behaviour: the feature levels are fixed: those ApiVersions reports (Kafka 4.3's,
minibroker/services/features.py, narrowed to the levels served here; a feature served at no level above 0
supports only 0, as a feature the node does not know). Each update is checked as
Kafka's FeatureControlManager checks it, in its order and with its messages: a known upgrade type (1
upgrade, 2 safe downgrade, 3 unsafe downgrade; v0's allow_downgrade means safe downgrade), a level of 0
or more, a level within the range this node supports ("Local controller N only supports versions ..."),
no downgrade with the upgrade type and no upgrade with a downgrade type. An update that passes and asks
for the level a feature is already at is a no-op success; any other level is refused (levels are fixed:
no behaviour here switches with one). The first failing update fails the request: INVALID_UPDATE_VERSION
at the top level with Kafka's "The update failed for all features since ..." message and no per-feature
results. ``validate_only`` (v1+) changes nothing either way.
Authorization (with an authorizer), as Kafka's controller: ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level.
Version notes: v1 replaces allow_downgrade with upgrade_type and adds validate_only; v0-v1 list a
result per feature on success, v2 none. ApiVersions reports the levels (the same module).
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.api_versions import served_features
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize
from minibroker.services.features import KAFKA_4_3

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


class _Refused(Exception):
    pass


def _range_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _check(node_id: int, served: dict, name: str, level: int, upgrade_type: int) -> None:
    """Kafka's per-feature checks, then minibroker's: the level must be the finalized one."""
    def refuse(why: str):
        raise _Refused(f"Invalid update version {level} for feature {name}. {why}")

    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        refuse("The controller does not support the given upgrade type.")
    feature = served.get(name)  # None: not served beyond level 0, or not a Kafka feature at all
    current = feature.finalized if feature is not None else 0
    if level < 0:
        refuse("A feature version cannot be less than 0.")
    lo, hi = (feature.min_supported, feature.max_supported) if feature is not None else (0, 0)
    if not lo <= level <= hi:
        if hi == 0:
            refuse(f"Local controller {node_id} does not support this feature.")
        refuse(f"Local controller {node_id} only supports versions {_range_text(lo, hi)}")
    if level < current and upgrade_type == UPGRADE:
        refuse("Can't downgrade the version of this feature without setting the upgrade type to either "
               "safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        refuse("Can't downgrade to a newer version.")
    if name not in KAFKA_4_3:
        refuse(f"Feature {name} not found.")
    if level != current:
        refuse(f"minibroker's feature levels are fixed: {name} stays at {current}.")


@handles(57, (0, 2))
def handle_update_features(broker, header, request):
    version = header.api_version
    if not authorize(broker, header, AclOperation.ALTER, ResourceType.CLUSTER):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                      error_message=None, results=[])
    updates: dict[str, tuple[int, int]] = {}  # a repeated feature: the last update counts, as Kafka's map
    for u in request.feature_updates:
        if version == 0:
            upgrade_type = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
        else:
            upgrade_type = u.upgrade_type
        updates[u.feature] = (u.max_version_level, upgrade_type)
    try:
        served = {f.name: f for f in served_features()}
        for name, (level, upgrade_type) in updates.items():
            _check(broker.node_id, served, name, level, upgrade_type)
    except _Refused as refused:
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_UPDATE_VERSION),
                      error_message="The update failed for all features since the following feature had an "
                                    f"error: {refused}", results=[])
    results = [Struct(feature=u.feature, error_code=0, error_message=None) for u in request.feature_updates]
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, results=results)

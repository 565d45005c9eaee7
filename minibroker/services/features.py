"""Feature levels (KIP-584, KIP-1022): the one place ApiVersions (supported and finalized features) and
UpdateFeatures read them from.

``KAFKA_4_3`` is what a freshly formatted one-node Kafka 4.3 cluster (combined broker and controller,
``kafka-storage format --standalone``) reports: each feature's supported range (the lowest production
level to the latest production one) and its finalized level, which is the level Kafka 4.3 bootstraps at
its latest production ``metadata.version`` (4.3-IV0, level 30). ``kraft.version`` 1 is the dynamic
quorum a standalone format writes.

ApiVersions (minibroker/handlers/api_versions.py, ``served_features``) narrows these to the levels whose
behaviour is served here, and UpdateFeatures checks updates against that same narrowed list: minibroker's
levels are fixed, so it accepts only the level a feature is finalized at (a no-op), since no behaviour
here switches with a level.
"""

from __future__ import annotations

from typing import NamedTuple

from minibroker.errors import ErrorCode, KafkaError


class FeatureLevel(NamedTuple):
    name: str
    min_supported: int
    max_supported: int
    finalized: int  # 0 = not finalized: left out of ApiVersions' finalized list, as Kafka does


METADATA_VERSION = "metadata.version"
METADATA_VERSION_4_3 = 30  # 4.3-IV0, Kafka 4.3's latest production metadata.version
METADATA_VERSION_MINIMUM = 7  # 3.3-IV3, the oldest metadata.version Kafka 4 supports

KAFKA_4_3: dict[str, FeatureLevel] = {
    f.name: f
    for f in (
        FeatureLevel(METADATA_VERSION, METADATA_VERSION_MINIMUM, METADATA_VERSION_4_3, METADATA_VERSION_4_3),
        FeatureLevel("kraft.version", 0, 1, 1),
        FeatureLevel("transaction.version", 0, 2, 2),
        FeatureLevel("group.version", 0, 1, 1),
        FeatureLevel("eligible.leader.replicas.version", 0, 1, 1),
        FeatureLevel("share.version", 0, 1, 1),
        FeatureLevel("streams.version", 0, 1, 1),
    )
}

# The finalized features' epoch: the metadata offset of their last change. A one-node cluster reports
# the offset of its bootstrap records; minibroker's levels never change after start.
FINALIZED_FEATURES_EPOCH = 0


ELR_VERSION = "eligible.leader.replicas.version"
MIN_ISR = "min.insync.replicas"


def elr_enabled() -> bool:
    """Whether eligible leader replicas (KIP-966) are on: Kafka 4.1+ finalizes level 1 on a new cluster."""
    return KAFKA_4_3[ELR_VERSION].finalized >= 1


def ensure_elr_min_isr(config) -> str:
    """Kafka's ``maybeGenerateElrSafetyRecords`` at start-up, while ELR is on: a cluster-level
    ``min.insync.replicas`` (the dynamic default) is set to the static value when there is none, and a
    broker-level one is removed. Kafka writes these records when ELR is enabled, which a new 4.1+
    cluster does at its first activation, so every topic then reports ``min.insync.replicas`` as a
    DYNAMIC_DEFAULT_BROKER_CONFIG. Changes ``config``'s dynamic layers in memory; returns what it did
    (empty: nothing), for the log, the caller saves them."""
    if not elr_enabled():
        return ""
    done = []
    if MIN_ISR not in config.dynamic_values(cluster_default=True):
        value = str(config.static_value(MIN_ISR))
        config.set_dynamic(MIN_ISR, value, cluster_default=True)
        done.append(f"set the cluster-level {MIN_ISR} to {value}")
    if MIN_ISR in config.dynamic_values():
        config.set_dynamic(MIN_ISR, None)
        done.append(f"removed the broker-level {MIN_ISR}")
    return "; ".join(done)


def check_elr_min_isr(per_broker: bool, named: set[str], old: dict, new: dict) -> None:
    """Kafka's refusals of a change to ``min.insync.replicas`` while ELR is on (INVALID_CONFIG): none
    at broker level, where ``named`` holds every key the request names (a broker-level value would hide
    the cluster one the ELR is kept by), and no removal of the cluster-level one (``old`` to ``new``)."""
    if not elr_enabled():
        return
    if per_broker and MIN_ISR in named:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Broker-level {MIN_ISR} cannot be altered while ELR is enabled.")
    if not per_broker and MIN_ISR in old and MIN_ISR not in new:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Cluster-level {MIN_ISR} cannot be removed while ELR is enabled.")


def advertised_features() -> list[FeatureLevel]:
    """Kafka 4.3's features, in its order (metadata.version first), before ApiVersions narrows them."""
    return list(KAFKA_4_3.values())

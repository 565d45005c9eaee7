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


def advertised_features() -> list[FeatureLevel]:
    """Kafka 4.3's features, in its order (metadata.version first), before ApiVersions narrows them."""
    return list(KAFKA_4_3.values())

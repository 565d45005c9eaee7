"""ApiVersions: v0-v4.

Behaviour: lists exactly the APIs and version ranges that have handlers, from the registry's static
``SERVED`` table (the handler modules themselves load on their first request).
v3+ adds supported and finalized features (KIP-584) as a one-node Kafka 4.3 cluster reports them
(``minibroker/services/features.py``: metadata.version 4.3-IV0, kraft.version 1, ...), narrowed to the levels
whose behaviour is served here: a feature level that needs APIs is reported only while they are
served at the versions it needs (``transaction.version`` 2, KIP-890 part 2, needs EndTxn v5;
``group.version`` 1 ConsumerGroupHeartbeat; ``share.version`` 1 ShareGroupHeartbeat;
``streams.version`` 1 StreamsGroupHeartbeat), so that clients switching protocols on a finalized
level never pick one that is not served. A feature served at no level beyond 0 is left out of both
lists; one finalized at 0 is left out of the finalized list, as Kafka does. v3+ also carries the
zk-migration flag (false: there is no ZooKeeper).
Version notes: an unsupported ApiVersions version is answered by the connection layer with
error 35 and a v0-format body listing ApiVersions' own range, so every client can downgrade.
"""

from __future__ import annotations

from minibroker.handlers.registry import SERVED, handles, served_versions
from minibroker.protocol.codec import Struct
from minibroker.services.features import FINALIZED_FEATURES_EPOCH, FeatureLevel, advertised_features

API_KEY = 18

# feature -> level -> (api key, lowest max version) the level's behaviour needs
_LEVEL_NEEDS: dict[str, dict[int, tuple[int, int]]] = {
    "transaction.version": {2: (26, 5)},  # KIP-890 part 2: EndTxn v5 bumps the epoch per transaction
    "group.version": {1: (68, 0)},  # KIP-848: ConsumerGroupHeartbeat
    "share.version": {1: (76, 1)},  # KIP-932: ShareGroupHeartbeat
    "streams.version": {1: (88, 0)},  # KIP-1071: StreamsGroupHeartbeat
}


def served_level(name: str, highest: int) -> int:
    """The highest level of feature ``name`` up to ``highest`` whose needed APIs are all served."""
    needs = _LEVEL_NEEDS.get(name, {})
    level = 0
    for candidate in range(1, highest + 1):
        need = needs.get(candidate)
        if need is not None:
            row = SERVED.get(need[0])
            if row is None or row.max_version < need[1]:
                break
        level = candidate
    return level


def served_features() -> list[FeatureLevel]:
    """Kafka 4.3's features narrowed to the levels served here (features served only at 0 left out)."""
    out = []
    for f in advertised_features():
        top = served_level(f.name, f.max_supported)
        if top > 0:
            out.append(FeatureLevel(f.name, f.min_supported, top, min(f.finalized, top)))
    return out


def api_versions_body(error_code: int = 0) -> Struct:
    features = served_features()
    return Struct(
        error_code=error_code,
        api_keys=[Struct(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in served_versions()],
        throttle_time_ms=0,
        supported_features=[Struct(name=f.name, min_version=f.min_supported, max_version=f.max_supported)
                            for f in features],
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=[Struct(name=f.name, max_version_level=f.finalized, min_version_level=f.finalized)
                            for f in features if f.finalized > 0],
        zk_migration_ready=False,
    )


def unsupported_version_body() -> Struct:
    """The v0-shaped error body: error 35 and ApiVersions' own range."""
    row = SERVED[API_KEY]
    return Struct(error_code=35, api_keys=[Struct(api_key=API_KEY, min_version=row.min_version,
                                                   max_version=row.max_version)])


@handles(API_KEY, (0, 4))
def handle_api_versions(broker, header, request):
    connection = getattr(header, "connection", None)
    if connection is not None:  # who the client is, for the live view's client list (v3+ names it)
        connection.client_id = header.client_id
        connection.client_software = (getattr(request, "client_software_name", None),
                                      getattr(request, "client_software_version", None))
    return api_versions_body()

"""ApiVersions: v0-v4.

Behaviour: lists exactly the APIs and version ranges that have handlers (the registry).
v3+ adds supported/finalized features (none on one node beyond metadata.version, which is
reported so KIP-584-aware clients see a finalized epoch) and the zk-migration flag.
Version notes: an unsupported ApiVersions version is answered by the connection layer with
error 35 and a v0-format body listing ApiVersions' own range, so every client can downgrade.
"""

from __future__ import annotations

from minibroker.handlers.registry import HANDLERS, handles, served_versions
from minibroker.protocol.codec import Struct

API_KEY = 18

# metadata.version level of Kafka 3.9 (IBP 3.9-IV0): what KRaft brokers report as finalized.
METADATA_VERSION = 21


def api_versions_body(error_code: int = 0) -> Struct:
    return Struct(
        error_code=error_code,
        api_keys=[Struct(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in served_versions()],
        throttle_time_ms=0,
        supported_features=[Struct(name="metadata.version", min_version=1, max_version=METADATA_VERSION)],
        finalized_features_epoch=0,
        finalized_features=[Struct(name="metadata.version", max_version_level=METADATA_VERSION,
                                   min_version_level=METADATA_VERSION)],
        zk_migration_ready=False,
    )


def unsupported_version_body() -> Struct:
    """The v0-shaped error body: error 35 and ApiVersions' own range."""
    h = HANDLERS[API_KEY]
    return Struct(error_code=35, api_keys=[Struct(api_key=API_KEY, min_version=h.min_version,
                                                   max_version=h.max_version)])


@handles(API_KEY, (0, 4))
def handle_api_versions(broker, header, request):
    return api_versions_body()

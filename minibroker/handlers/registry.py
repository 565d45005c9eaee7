"""The handler registry: ``SERVED``, the table of what is served, and the handlers registered so far.

A handler is ``fn(broker, header, request) -> response | None | Awaitable[response | None]``
registered with ``@handles(api_key, (min_version, max_version))``. ``None`` means no
response (acks=0 produce). A second registration for an API key fails at import.

Handler modules are imported on their API's first request, not at start-up (issue 28): ``SERVED`` says,
without importing any, which module serves each API key at which versions, so ApiVersions answers and
the connection checks versions from it. A registration that differs from its ``SERVED`` row fails at
import, and tests/test_lazy_loading.py imports every handler module and compares the two, so the table
cannot drift from what the handlers serve.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from minibroker.protocol.codec import API_NAMES, REQUESTS
from minibroker.protocol.declarations import in_range


class Served(NamedTuple):
    """One API key's row of ``SERVED``: the handler module (in minibroker/handlers/) and the versions."""

    module: str
    min_version: int
    max_version: int
    advertised: bool = True  # False: answered when asked, but left out of ApiVersions


SERVED: dict[int, Served] = {
    0: Served('produce', 0, 13),  # Produce
    1: Served('fetch', 0, 18),  # Fetch
    2: Served('list_offsets', 0, 11),  # ListOffsets
    3: Served('metadata', 0, 13),  # Metadata
    8: Served('offset_commit', 0, 10),  # OffsetCommit
    9: Served('offset_fetch', 0, 10),  # OffsetFetch
    10: Served('find_coordinator', 0, 6),  # FindCoordinator
    11: Served('join_group', 0, 9),  # JoinGroup
    12: Served('heartbeat', 0, 4),  # Heartbeat
    13: Served('leave_group', 0, 5),  # LeaveGroup
    14: Served('sync_group', 0, 5),  # SyncGroup
    15: Served('describe_groups', 0, 6),  # DescribeGroups
    16: Served('list_groups', 0, 5),  # ListGroups
    17: Served('sasl_handshake', 0, 1),  # SaslHandshake
    18: Served('api_versions', 0, 4),  # ApiVersions
    19: Served('create_topics', 0, 7),  # CreateTopics
    20: Served('delete_topics', 0, 6),  # DeleteTopics
    21: Served('delete_records', 0, 2),  # DeleteRecords
    22: Served('init_producer_id', 0, 5),  # InitProducerId
    23: Served('offset_for_leader_epoch', 0, 4),  # OffsetForLeaderEpoch
    24: Served('add_partitions_to_txn', 0, 5),  # AddPartitionsToTxn
    25: Served('add_offsets_to_txn', 0, 4),  # AddOffsetsToTxn
    26: Served('end_txn', 0, 5),  # EndTxn
    27: Served('write_txn_markers', 0, 2),  # WriteTxnMarkers
    28: Served('txn_offset_commit', 0, 5),  # TxnOffsetCommit
    29: Served('describe_acls', 0, 3),  # DescribeAcls
    30: Served('create_acls', 0, 3),  # CreateAcls
    31: Served('delete_acls', 0, 3),  # DeleteAcls
    32: Served('describe_configs', 0, 4),  # DescribeConfigs
    33: Served('alter_configs', 0, 2),  # AlterConfigs
    34: Served('alter_replica_log_dirs', 1, 2),  # AlterReplicaLogDirs
    35: Served('describe_log_dirs', 0, 5),  # DescribeLogDirs
    36: Served('sasl_authenticate', 0, 2),  # SaslAuthenticate
    37: Served('create_partitions', 0, 3),  # CreatePartitions
    42: Served('delete_groups', 0, 2),  # DeleteGroups
    43: Served('elect_leaders', 0, 2),  # ElectLeaders
    44: Served('incremental_alter_configs', 0, 1),  # IncrementalAlterConfigs
    45: Served('partition_reassignments', 0, 1),  # AlterPartitionReassignments
    46: Served('partition_reassignments', 0, 0),  # ListPartitionReassignments
    47: Served('offset_delete', 0, 0),  # OffsetDelete
    48: Served('describe_client_quotas', 0, 1),  # DescribeClientQuotas
    49: Served('alter_client_quotas', 0, 1),  # AlterClientQuotas
    50: Served('describe_user_scram_credentials', 0, 0),  # DescribeUserScramCredentials
    51: Served('alter_user_scram_credentials', 0, 0),  # AlterUserScramCredentials
    55: Served('describe_quorum', 0, 2),  # DescribeQuorum
    57: Served('update_features', 0, 2),  # UpdateFeatures
    60: Served('describe_cluster', 0, 2),  # DescribeCluster
    61: Served('describe_producers', 0, 0),  # DescribeProducers
    65: Served('describe_transactions', 0, 0),  # DescribeTransactions
    66: Served('list_transactions', 0, 2),  # ListTransactions
    68: Served('consumer_group_heartbeat', 0, 1),  # ConsumerGroupHeartbeat
    69: Served('consumer_group_describe', 0, 1),  # ConsumerGroupDescribe
    71: Served('client_telemetry', 0, 0, advertised=False),  # GetTelemetrySubscriptions
    72: Served('client_telemetry', 0, 0, advertised=False),  # PushTelemetry
    74: Served('list_config_resources', 0, 1),  # ListConfigResources
    75: Served('describe_topic_partitions', 0, 0),  # DescribeTopicPartitions
    76: Served('share_group_heartbeat', 1, 1),  # ShareGroupHeartbeat
    77: Served('share_group_describe', 1, 1),  # ShareGroupDescribe
    78: Served('share_fetch', 1, 2),  # ShareFetch
    79: Served('share_acknowledge', 1, 2),  # ShareAcknowledge
    83: Served('initialize_share_group_state', 0, 0, advertised=False),  # InitializeShareGroupState
    84: Served('read_share_group_state', 0, 0, advertised=False),  # ReadShareGroupState
    85: Served('write_share_group_state', 0, 0, advertised=False),  # WriteShareGroupState
    86: Served('delete_share_group_state', 0, 0, advertised=False),  # DeleteShareGroupState
    87: Served('read_share_group_state_summary', 0, 1, advertised=False),  # ReadShareGroupStateSummary
    90: Served('describe_share_group_offsets', 0, 1),  # DescribeShareGroupOffsets
    91: Served('alter_share_group_offsets', 0, 0),  # AlterShareGroupOffsets
    92: Served('delete_share_group_offsets', 0, 0),  # DeleteShareGroupOffsets
}


class Handler(NamedTuple):
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[..., Any]
    is_async: bool
    advertised: bool = True  # False: answered when asked, but left out of ApiVersions (as Kafka does some)

    @property
    def name(self) -> str:
        return API_NAMES[self.api_key]


HANDLERS: dict[int, Handler] = {}  # the handlers of the modules imported so far
_MODULE = "minibroker.handlers."


class CloseConnection(Exception):
    """Raised by a handler to drop the connection without an answer (acks=0 produce errors)."""


def handles(api_key: int, versions: tuple[int, int], *, advertised: bool = True):
    """Register ``fn`` as the handler of ``api_key`` for the inclusive version range ``versions``.
    ``advertised=False`` serves the API without listing it in ApiVersions (what Kafka does with the
    telemetry APIs when no metrics plugin is configured)."""
    lo, hi = versions
    message = REQUESTS[api_key]
    if not (in_range(lo, message.valid) and in_range(hi, message.valid)):
        raise ValueError(f"{message.name}: versions {versions} outside the schema's {message.valid}")

    def register(fn):
        if inspect.iscoroutinefunction(fn) and _carries_records(message.fields):
            # the connection hands requests over as views of its read buffer; a request with record
            # bytes must be handled before that buffer is reused, i.e. synchronously
            raise RuntimeError(f"{message.name} carries records: its handler must be synchronous")
        if api_key in HANDLERS:
            raise RuntimeError(f"API key {api_key} ({API_NAMES[api_key]}) registered twice")
        row = SERVED.get(api_key)
        if row is None or (fn.__module__, lo, hi, advertised) != (_MODULE + row.module, *row[1:]):
            raise RuntimeError(f"{message.name} registered by {fn.__module__} at v{lo}-v{hi} "
                               f"(advertised={advertised}); registry.SERVED says {row}: update one of them")
        HANDLERS[api_key] = Handler(api_key, lo, hi, fn, inspect.iscoroutinefunction(fn), advertised)
        return fn

    return register


def _carries_records(fields) -> bool:
    return any(f.type == "records" or (f.fields is not None and _carries_records(f.fields)) for f in fields)


def served_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) for every advertised API, sorted by key: what ApiVersions lists."""
    return [(key, row.min_version, row.max_version) for key, row in sorted(SERVED.items()) if row.advertised]


def handler_module(api_key: int) -> str:
    """The module that serves ``api_key`` (a key of ``SERVED``), to import on its first request."""
    return _MODULE + SERVED[api_key].module


def load_handlers() -> None:
    """Import every handler module (the ``apis`` command, the fuzzer, tests)."""
    for key in SERVED:
        if key not in HANDLERS:
            importlib.import_module(handler_module(key))

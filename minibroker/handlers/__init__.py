"""Request handlers, one module per API (see each module's docstring for versions and gaps)."""

from __future__ import annotations

import importlib

HANDLER_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "init_producer_id",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "delete_records",
    "describe_cluster",
    "describe_log_dirs",
    "describe_producers",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "offset_delete",
    "delete_groups",
    "list_groups",
    "describe_groups",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "txn_offset_commit",
    "describe_transactions",
    "list_transactions",
    "describe_client_quotas",
    "alter_client_quotas",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_topic_partitions",
    "elect_leaders",
    "alter_replica_log_dirs",
    "describe_quorum",
    "partition_reassignments",
    "update_features",
    "list_config_resources",
    "client_telemetry",
)


def load_handlers() -> None:
    """Import every handler module once; importing is what registers them."""
    for name in HANDLER_MODULES:
        importlib.import_module(f"minibroker.handlers.{name}")

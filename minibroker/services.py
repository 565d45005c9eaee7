"""Broker services beside the log: coordinators and caches, started in dependency order."""

from __future__ import annotations

import os


def start_services(broker) -> None:
    """Create what the handlers ask besides the logs: replicas, producer ids, fetch sessions, the group
    and transaction coordinators."""
    from minibroker.coordinator.producer_state import ProducerIdAllocator
    from minibroker.fetch_sessions import FetchSessionCache
    from minibroker.replica_manager import ReplicaManager

    broker.replicas = ReplicaManager(broker)
    broker.on_close(broker.replicas.write_snapshots)
    broker.producer_ids = ProducerIdAllocator(os.path.abspath(broker.config.data_dir))
    broker.fetch_sessions = FetchSessionCache(broker.config["max.incremental.fetch.session.cache.slots"])
    from minibroker.coordinator.group_coordinator import GroupCoordinator

    broker.groups = GroupCoordinator(broker)
    broker.groups.start()
    broker.on_close(broker.groups.close)
    from minibroker.coordinator.transaction_coordinator import TransactionCoordinator

    broker.transactions = TransactionCoordinator(broker)
    broker.transactions.start()
    broker.on_close(broker.transactions.close)

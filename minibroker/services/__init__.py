"""Broker services beside the log: coordinators and caches, started in dependency order."""

from __future__ import annotations

import os


def start_services(broker) -> None:
    """Create what the handlers ask besides the logs: the authorizer and its ACLs, client quotas, SASL
    (listeners' mechanisms, SCRAM credentials), replicas, producer ids, fetch sessions, the group and
    transaction coordinators."""
    from minibroker.coordinator.producer_ids import ProducerIdAllocator
    from minibroker.security.authorizer import Authorizer

    broker.authorizer = Authorizer.from_config(broker.config)  # ACLs loaded before the first request
    from minibroker.services.quotas import ClientQuotas

    broker.client_quotas = ClientQuotas.from_config(broker.config)
    broker.client_quotas.load()  # quotas apply from the first request
    from minibroker.security.sasl.authenticator import SaslListeners
    from minibroker.security.scram_credentials import ScramCredentialStore

    broker.scram_credentials = ScramCredentialStore(broker.config.data_dir)  # before the first SASL login
    broker.sasl_listeners = SaslListeners(broker.config, broker.scram_credentials)
    from minibroker.services.fetch_sessions import FetchSessionCache
    from minibroker.services.replica_manager import ReplicaManager

    broker.replicas = ReplicaManager(broker)
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
    from minibroker.coordinator.share_state import ShareStateCoordinator

    # __share_group_state is replayed in the background; callers answer COORDINATOR_LOAD_IN_PROGRESS
    # until share_state.loaded
    broker.share_state = ShareStateCoordinator(broker)
    broker.share_state.start()
    broker.on_close(broker.share_state.close)
    from minibroker.coordinator.share_partition_manager import SharePartitionManager

    # share partitions load from broker.share_state on first use (a ShareFetch), not here
    broker.share_partitions = SharePartitionManager(broker)
    broker.on_close(broker.share_partitions.close)
    from minibroker.services.share_sessions import ShareSessionCache

    # after the share partitions: a session's end releases its member's records there
    broker.share_sessions = ShareSessionCache(broker, broker.config["group.share.max.share.sessions"])
    broker.on_close(broker.share_sessions.close_all)

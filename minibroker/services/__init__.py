"""Broker services beside the log: coordinators and caches, started in dependency order.

A subsystem a broker may never use is built on first use, not at start-up (issue 28): ``LAZY_SERVICES``
names each one's builder, and ``Broker.__getattr__`` (minibroker/server/broker.py) calls it the first
time a handler reads the attribute, on the event loop; the handler module that reads it was imported
off the loop (minibroker/handlers/registry.py), so the builder's own imports are usually done already.
``start_services`` builds one at start-up only when its state is on disk (``__transaction_state``,
``__share_group_state``, ``__consumer_offsets``, saved client quotas) or a listener needs it (SASL).
Code on the request path that only checks a service (are quotas set?) reads ``vars(broker).get(name)``,
which builds nothing: client quotas are None there until one is set.
"""

from __future__ import annotations

import os


def _authorizer(broker):
    if not broker.config["authorizer.class.name"]:
        return None
    from minibroker.security.authorizer import Authorizer

    return Authorizer.from_config(broker.config)  # ACLs loaded before the first request


def _client_quotas(broker):
    from minibroker.services.quotas import ClientQuotas

    quotas = ClientQuotas.from_config(broker.config)
    quotas.load()  # quotas apply from the first request
    return quotas


def _replicas(broker):
    from minibroker.services.replica_manager import ReplicaManager

    return ReplicaManager(broker)


def _fetch_sessions(broker):
    from minibroker.services.fetch_sessions import FetchSessionCache

    return FetchSessionCache(broker.config["max.incremental.fetch.session.cache.slots"])


def _scram_credentials(broker):
    from minibroker.security.scram_credentials import ScramCredentialStore

    return ScramCredentialStore(broker.config.data_dir)


def _sasl_listeners(broker):
    from minibroker.security.sasl.authenticator import SaslListeners

    return SaslListeners(broker.config, broker.scram_credentials)


def _producer_ids(broker):
    from minibroker.coordinator.producer_ids import ProducerIdAllocator

    return ProducerIdAllocator(os.path.abspath(broker.config.data_dir))


def _groups(broker):
    from minibroker.coordinator.group_coordinator import GroupCoordinator

    groups = GroupCoordinator(broker)
    groups.start()  # replays __consumer_offsets in the background when it exists
    broker.on_close(groups.close)
    return groups


def _transactions(broker):
    from minibroker.coordinator.transaction_coordinator import TransactionCoordinator

    transactions = TransactionCoordinator(broker)
    transactions.start()  # replays __transaction_state in the background when it exists
    broker.on_close(transactions.close)
    return transactions


def _share_state(broker):
    from minibroker.coordinator.share_state import ShareStateCoordinator

    # __share_group_state is replayed in the background; callers answer COORDINATOR_LOAD_IN_PROGRESS
    # until share_state.loaded
    share_state = ShareStateCoordinator(broker)
    share_state.start()
    broker.on_close(share_state.close)
    return share_state


def _share_partitions(broker):
    from minibroker.coordinator.share_partition_manager import SharePartitionManager

    ensure(broker, "share_state")  # first: the partitions read their state from it
    # share partitions load from broker.share_state on first use (a ShareFetch), not here
    share_partitions = SharePartitionManager(broker)
    broker.on_close(share_partitions.close)
    return share_partitions


def _share_sessions(broker):
    from minibroker.services.share_sessions import ShareSessionCache

    ensure(broker, "share_partitions")  # first: a session's end releases its member's records there
    sessions = ShareSessionCache(broker, broker.config["group.share.max.share.sessions"])
    broker.on_close(sessions.close_all)
    return sessions


# attribute of the broker -> the function that builds it (each reads the others it needs as attributes)
LAZY_SERVICES = {
    "replicas": _replicas,
    "fetch_sessions": _fetch_sessions,
    "authorizer": _authorizer,
    "client_quotas": _client_quotas,
    "scram_credentials": _scram_credentials,
    "sasl_listeners": _sasl_listeners,
    "producer_ids": _producer_ids,
    "groups": _groups,
    "transactions": _transactions,
    "share_state": _share_state,
    "share_partitions": _share_partitions,
    "share_sessions": _share_sessions,
}

SCRAM_CREDENTIALS_FILE = "minibroker-scram-credentials.json"  # security/scram_credentials.py's
CLIENT_QUOTAS_FILE = "minibroker-client-quotas.json"  # services/quotas.py's

# internal topic -> the service that owns it: built at start when the topic exists, so its state
# (open transactions to time out, groups' offsets and their retention, share partitions' state) is
# replayed as it was before lazy loading
_OWNERS_OF_TOPICS = {
    "__consumer_offsets": "groups",
    "__transaction_state": "transactions",
    "__share_group_state": "share_sessions",
}


def start_services(broker) -> None:
    """Create what every request may need (the authorizer, client quotas once set), then the lazy
    services whose state is on disk or whose listener is configured."""
    # with authorizer.class.name set, ACLs load before the first request; quotas saved before apply
    # from the first accept and answer (else the first AlterClientQuotas builds them)
    ensure(broker, "authorizer")
    if os.path.exists(os.path.join(broker.config.data_dir, CLIENT_QUOTAS_FILE)):
        ensure(broker, "client_quotas")
    protocols = broker.config.security_protocol_map()
    if any(protocols.get(name, "").startswith("SASL_") for name, _, _ in broker.config.listener_endpoints()):
        ensure(broker, "sasl_listeners")  # a bad SASL setting fails start-up, not the first login
    if os.path.exists(os.path.join(broker.config.data_dir, SCRAM_CREDENTIALS_FILE)):
        ensure(broker, "scram_credentials")  # a damaged file stops start-up, naming it
    topics = broker.logs.topics
    ensure(broker, *(service for topic, service in _OWNERS_OF_TOPICS.items() if topic in topics))


class _NoMutationQuota:
    """A CreateTopics, CreatePartitions or DeleteTopics request's controller mutation quota while no
    client quota is set: nothing to take, nothing to add to the answer."""

    def take(self, partitions: int) -> None:
        pass

    def finish(self, header, response):
        return response


_NO_MUTATION_QUOTA = _NoMutationQuota()


def mutation_quota(broker, header, strict_since: int):
    """The controller mutation quota of one request (``ClientQuotas.mutation_quota``), without building
    the client quotas when none is set."""
    quotas = vars(broker).get("client_quotas")
    return _NO_MUTATION_QUOTA if quotas is None else quotas.mutation_quota(header, strict_since)


def ensure(broker, *names: str) -> None:
    """Build the lazy services ``names`` of ``broker`` now, if they are not built yet."""
    for name in names:
        getattr(broker, name)


def loaded_services(broker) -> list[str]:
    """The lazy services this broker has built so far (tests, docs/operations.md's log line)."""
    return [name for name in LAZY_SERVICES if name in vars(broker)]

"""WriteTxnMarkers: v0-v2.

Behaviour: for each marker (producer id, producer epoch, COMMIT or ABORT, coordinator epoch) a
control batch is appended to each listed partition through ``ReplicaManager.write_txn_marker``,
closing the producer's open transaction there (an ABORT also goes to the transaction index), as
Kafka's broker appends a marker from its transaction coordinator. Kafka's own coordinator sends this
to partition leaders; here the coordinator writes its markers in-process, so the callers are admin
tools aborting a hanging transaction (``kafka-transactions.sh abort``, ``minibroker transactions
abort``). A marker into a ``__consumer_offsets`` partition also commits or drops the producer's
pending transactional offsets there, the path the transaction coordinator takes.
Errors, per partition: UNKNOWN_TOPIC_OR_PARTITION 3, UNSUPPORTED_FOR_MESSAGE_FORMAT 43 (a topic kept in
magic 0/1), INVALID_PRODUCER_EPOCH 47 (older than the producer's epoch in that partition),
TRANSACTION_COORDINATOR_FENCED 52 (older than the coordinator epoch of the producer's last marker),
NOT_LEADER_OR_FOLLOWER 6 for ``__consumer_offsets`` while the group coordinator loads (what Kafka
answers for its loading group coordinator), KAFKA_STORAGE_ERROR 56 and the log's other errors.
Authorization (with an authorizer): ALTER or CLUSTER_ACTION on the cluster, else every partition
CLUSTER_AUTHORIZATION_FAILED, as Kafka.
Version notes: v1 is flexible; v2 (KIP-1228) tells the marker's transaction version, which changes
nothing in how a marker is written (the control batch carries the producer epoch it is given).
Gaps: no authorization (Kafka requires ALTER or CLUSTER_ACTION on the cluster and answers
CLUSTER_AUTHORIZATION_FAILED 31 without it).
"""

from __future__ import annotations

from minibroker.coordinator.offsets_store import OFFSETS_TOPIC
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize
from minibroker.services.replica_manager import report_unexpected


def _write(broker, marker, topic: str, partition: int) -> ErrorCode:
    groups = broker.groups
    if topic == OFFSETS_TOPIC and groups is not None and groups.loading:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER  # the marker must find the pending offsets being loaded
    commit = bool(marker.transaction_result)
    try:
        broker.replicas.write_txn_marker(topic, partition, marker.producer_id, marker.producer_epoch,
                                         marker.coordinator_epoch, commit)
    except KafkaError as e:
        return e.code
    except Exception as e:  # noqa: BLE001 - one partition's failure never fails the others
        report_unexpected(topic, partition, e, ErrorCode.UNKNOWN_SERVER_ERROR.name)
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if topic == OFFSETS_TOPIC and groups is not None:
        groups.complete_transactional_offsets(partition, marker.producer_id, commit)
    return ErrorCode.NONE


@handles(27, (0, 2))
def handle_write_txn_markers(broker, header, request):
    allowed = authorize(broker, header, AclOperation.ALTER, ResourceType.CLUSTER, log_denied=False) \
        or authorize(broker, header, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)

    def write(marker, topic: str, partition: int) -> ErrorCode:
        return _write(broker, marker, topic, partition) if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    return Struct(markers=[
        Struct(producer_id=marker.producer_id, topics=[
            Struct(name=t.name, partitions=[
                Struct(partition_index=p, error_code=int(write(marker, t.name, p)))
                for p in t.partition_indexes])
            for t in marker.topics])
        for marker in request.markers])

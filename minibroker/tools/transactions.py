"""``minibroker transactions``: kafka-transactions.sh over the wire.

Actions, with the options and output columns of Kafka's ``TransactionsCommand``:

- ``list [--duration-filter MS]``: ListTransactions to every broker (TransactionalId, Coordinator,
  ProducerId, TransactionState);
- ``describe --transactional-id ID``: DescribeTransactions to the id's coordinator (FindCoordinator);
- ``describe-producers --topic T --partition P [--broker-id N]``: DescribeProducers to the leader
  (or to broker N);
- ``abort --topic T --partition P --start-offset N``: the producer whose open transaction starts at N
  (DescribeProducers), then an ABORT marker through WriteTxnMarkers to the leader; or ``--producer-id
  --producer-epoch --coordinator-epoch`` given outright (a negative coordinator epoch becomes 0, as
  Kafka's tool does). Prints nothing on success, like Kafka's;
- ``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]``: open
  transactions whose last write is older than the maximum transaction timeout (15 minutes by default)
  and that the coordinator will not end: their producer id maps to no transactional id
  (ListTransactions), the id is unknown (DescribeTransactions), or its current transaction does not
  hold the partition.

Everything goes through ``WireClient`` and our own codec, each request at the highest version both
sides speak, to the broker Kafka's admin client would pick, so the tool works against Apache Kafka too.

Exit codes: 0 success, 1 when a broker answered with an error (named as Kafka names it, on stderr) or
could not be reached, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable

from minibroker.errors import ErrorCode
from minibroker.protocol import codec
from minibroker.tools.cluster import TRANSACTION_KEY_TYPE, Cluster, error_text
from minibroker.tools.command import UsageError, run_admin
from minibroker.tools.wire import BrokerConnection, ToolError

CLIENT_ID = "minibroker-transactions"
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
MAX_BATCH_SIZE = 500  # partitions per DescribeProducers, as Kafka's find-hanging batches them

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


def now_ms() -> int:
    return int(time.time() * 1000)


def print_table(headers: list[str], rows: list[list[str]], out) -> None:
    """Kafka's ``ToolsUtils.prettyPrintTable``: each cell padded to its column's width, then a tab."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        print("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True)), file=out)


class TransactionAdmin(Cluster):
    """The requests of kafka-transactions.sh, each sent where Kafka's admin client sends it."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, security=None, deadline=None):
        super().__init__(bootstrap, timeout, security, CLIENT_ID, deadline)

    def transaction_coordinator(self, transactional_id: str) -> tuple[int, BrokerConnection]:
        return self.coordinator(transactional_id, TRANSACTION_KEY_TYPE)

    # -- requests -------------------------------------------------------------------------------

    def list_transactions(self, producer_ids: Iterable[int] = (), duration_ms: int | None = None
                          ) -> list[tuple[int, codec.Struct]]:
        """(broker id, listing) from every broker, as Kafka's ``listTransactions().allByBrokerId()``."""
        body = {"state_filters": [], "producer_id_filters": list(producer_ids),
                "duration_filter": -1 if duration_ms is None else duration_ms}
        out = []
        for broker_id in self.broker_ids():
            r = self.node(broker_id).request(LIST_TRANSACTIONS, body, at_least=int(duration_ms is not None))
            if r.error_code:
                raise ToolError(f"Failed to list transactions: {error_text(r.error_code)}")
            out += [(broker_id, t) for t in r.transaction_states]
        return out

    def describe_transaction(self, transactional_id: str) -> tuple[int, codec.Struct]:
        """(coordinator id, state); the state's error_code is for the caller to judge."""
        node_id, conn = self.transaction_coordinator(transactional_id)
        r = conn.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
        return node_id, r.transaction_states[0]

    def describe_producers(self, partitions: list[tuple[str, int]], broker_id: int | None = None
                           ) -> dict[tuple[str, int], list[codec.Struct]]:
        """Active producers by partition, asked of each partition's leader (or of ``broker_id``)."""
        by_node: dict[int, list[tuple[str, int]]] = {}
        if broker_id is not None:
            by_node[broker_id] = list(partitions)
        else:
            topics = sorted({t for t, _ in partitions})
            leaders = {(t, p): leader for t, p, leader, _ in self.partitions(topics)}
            for tp in partitions:
                if tp not in leaders:
                    raise ToolError(f"{tp[0]}-{tp[1]}: {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name}")
                by_node.setdefault(leaders[tp], []).append(tp)
        out: dict[tuple[str, int], list[codec.Struct]] = {}
        where = "leader" if broker_id is None else f"broker {broker_id}"
        for node_id, tps in by_node.items():
            conn = self.node(node_id)
            for start in range(0, len(tps), MAX_BATCH_SIZE):
                by_topic: dict[str, list[int]] = {}
                for t, p in tps[start:start + MAX_BATCH_SIZE]:
                    by_topic.setdefault(t, []).append(p)
                r = conn.request(DESCRIBE_PRODUCERS, {"topics": [
                    {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
                for topic in r.topics:
                    for p in topic.partitions:
                        if p.error_code:
                            raise ToolError(f"Failed to describe producers for partition {topic.name}-"
                                            f"{p.partition_index} on {where}: "
                                            f"{error_text(p.error_code, p.error_message)}")
                        out[(topic.name, p.partition_index)] = list(p.active_producers)
        return out

    def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
              coordinator_epoch: int) -> int:
        """An ABORT marker for the producer on the partition's leader; returns its error code."""
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
        r = self.node(self.leader(topic, partition)).request(WRITE_TXN_MARKERS, body)
        for marker in r.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if (marker.producer_id, t.name, p.partition_index) == (producer_id, topic, partition):
                        return p.error_code
        raise ToolError(f"WriteTxnMarkers answered no result for producer {producer_id} on "
                        f"{topic}-{partition}")


# -- actions --------------------------------------------------------------------------------------

def _none_if_negative(value: int) -> str:
    return "None" if value < 0 else str(value)


def _list(admin: TransactionAdmin, args, out) -> int:
    rows = [[t.transactional_id, str(broker_id), str(t.producer_id), t.transaction_state]
            for broker_id, t in admin.list_transactions(duration_ms=args.duration_filter)]
    print_table(LIST_HEADERS, rows, out)
    return 0


def _describe(admin: TransactionAdmin, args, out) -> int:
    tid = args.transactional_id
    coordinator_id, d = admin.describe_transaction(tid)
    if d.error_code:
        raise ToolError(f"Failed to describe transaction state of transactional-id `{tid}`: "
                        f"{error_text(d.error_code)}")
    start = d.transaction_start_time_ms
    duration = "None" if start < 0 else str(now_ms() - start)
    partitions = ",".join(f"{t.topic}-{p}" for t in d.topics for p in t.partitions)
    row = [str(coordinator_id), tid, str(d.producer_id), str(d.producer_epoch), d.transaction_state,
           str(d.transaction_timeout_ms), _none_if_negative(start), duration, partitions]
    print_table(DESCRIBE_HEADERS, [row], out)
    return 0


def _describe_producers(admin: TransactionAdmin, args, out) -> int:
    tp = (args.topic, args.partition)
    producers = admin.describe_producers([tp], args.broker_id)[tp]
    rows = [[str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
             str(p.last_timestamp), _none_if_negative(p.current_txn_start_offset)] for p in producers]
    print_table(PRODUCERS_HEADERS, rows, out)
    return 0


def _abort(admin: TransactionAdmin, args, out) -> int:
    tp_text = f"{args.topic}-{args.partition}"
    if args.start_offset is None:
        producer_id, producer_epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = args.coordinator_epoch
    else:
        tp = (args.topic, args.partition)
        found = [p for p in admin.describe_producers([tp])[tp]
                 if p.current_txn_start_offset == args.start_offset]
        if not found:
            raise ToolError(f"Could not find any open transactions starting at offset {args.start_offset} "
                            f"on partition {tp_text}")
        producer_id, producer_epoch = found[0].producer_id, found[0].producer_epoch
        coordinator_epoch = found[0].coordinator_epoch
    # A producer whose first transaction hangs has coordinator epoch -1; 0 is at or below any epoch.
    coordinator_epoch = max(coordinator_epoch, 0)
    code = admin.abort(args.topic, args.partition, producer_id, producer_epoch, coordinator_epoch)
    if code:
        raise ToolError(f"Failed to abort transaction of producer {producer_id} (epoch {producer_epoch}, "
                        f"coordinator epoch {coordinator_epoch}) on partition {tp_text}: {error_text(code)}")
    return 0


def _find_hanging(admin: TransactionAdmin, args, out) -> int:
    max_timeout_ms = args.max_transaction_timeout * 60_000
    if args.topic is not None and args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        partitions = [(t, p) for t, p, _leader, replicas in admin.partitions(None if args.topic is None
                                                                                 else [args.topic])
                      if args.broker_id is None or args.broker_id in replicas]
    now = now_ms()
    producers_by_partition = admin.describe_producers(partitions, args.broker_id)
    candidates = [(tp, p) for tp, producers in sorted(producers_by_partition.items())
                  for p in producers
                  if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms]
    hanging = []
    if candidates:
        producer_ids = {p.producer_id for _, p in candidates}
        tids = {t.producer_id: t.transactional_id for _, t in admin.list_transactions(producer_ids)
                if t.producer_id in producer_ids}
        described = {}
        for tid in set(tids.values()):
            _, d = admin.describe_transaction(tid)
            if d.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                described[tid] = None
            elif d.error_code:
                raise ToolError(f"Failed to describe transaction state of transactional-id `{tid}`: "
                                f"{error_text(d.error_code)}")
            else:
                described[tid] = {(t.topic, p) for t in d.topics for p in t.partitions}
        for tp, p in candidates:
            tid = tids.get(p.producer_id)
            in_transaction = described.get(tid) if tid is not None else None
            # The coordinator still owes a marker to a partition its transaction (or its pending
            # Prepare*) holds; any other open transaction nobody will end.
            if in_transaction is None or tp not in in_transaction:
                hanging.append((tp, p))
    rows = [[tp[0], str(tp[1]), str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
             str(p.current_txn_start_offset), str(p.last_timestamp), str((now - p.last_timestamp) // 60_000)]
            for tp, p in hanging]
    print_table(HANGING_HEADERS, rows, out)
    return 0


def check_usage(args) -> None:
    """Kafka's checks of options that argparse cannot express; before any connection is made."""
    if args.action == "abort":
        if args.start_offset is None and args.producer_id is None:
            raise UsageError("The transaction to abort must be identified either with --start-offset (for "
                             "brokers on 3.0 or above) or with --producer-id, --producer-epoch, and "
                             "--coordinator-epoch (for older brokers)")
        if args.start_offset is None and args.producer_epoch is None:
            raise UsageError("Missing required argument --producer-epoch")
        if args.start_offset is None and args.coordinator_epoch is None:
            raise UsageError("Missing required argument --coordinator-epoch")
    elif args.action == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the "
                             "scope of the search")
        if args.partition is not None and args.topic is None:
            raise UsageError("The --partition argument requires --topic to be provided")


ACTIONS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers, "abort": _abort,
           "find-hanging": _find_hanging}


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    txn = sub.add_parser("transactions", help="list, describe and abort transactions (kafka-transactions.sh)",
                         description="Analyze the transactional state of producers; detect and recover from "
                                     "hanging transactions.")
    actions = txn.add_subparsers(dest="action", required=True, metavar="COMMAND")

    lst = actions.add_parser("list", parents=[common], help="list transactions")
    lst.add_argument("--duration-filter", type=int, metavar="MS",
                     help="only transactions running longer than this many ms (ListTransactions v1+)")

    describe = actions.add_parser("describe", parents=[common],
                                  help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True)

    producers = actions.add_parser("describe-producers", parents=[common],
                                   help="describe the states of active producers for a topic partition")
    producers.add_argument("--broker-id", type=int, help="ask this broker instead of the leader")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)

    abort = actions.add_parser("abort", parents=[common], help="abort a hanging transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)

    hanging = actions.add_parser("find-hanging", parents=[common], help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="maximum transaction timeout in minutes (default 15)")
    hanging.add_argument("--topic", help="topic name to limit the search to (required with --partition)")
    hanging.add_argument("--partition", type=int)
    txn.set_defaults(func=run)


def run(args, out=None) -> int:
    return run_admin("transactions", TransactionAdmin, ACTIONS, args, out, check_usage)

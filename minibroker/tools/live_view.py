"""The live view (issue 33): the broker shown in a browser while it works, at ``/ui`` on ``metrics.port``.

Mounted by ``attach(broker)`` before ``Broker.start()`` when ``ui.enable`` is true (``minibroker serve``
and the test runner, minibroker/testing.py, call it; nothing imports this module otherwise). One
self-contained page (``live_view.html``, package data: inline script and style, no external asset)
and these routes, all GET, all read-only:

- ``/ui``: the page;
- ``/ui/api/overview``: topics and partitions (log start, last stable offset, high watermark, log end,
  size, segments, topic overrides), groups (classic, consumer, share: state, members, assignments,
  committed offsets and lag; for share groups the in-flight records: runs of offsets with their
  state and delivery count), open transactions, connected clients, the groups' recent events (joins,
  syncs, heartbeats with their epochs, leaves, rebalances: ``GroupEventRing``). A coordinator that
  is not built yet is shown as absent: the view never builds one;
- ``/ui/feed[?topic=T][&rows=N]``: the appends as Server-Sent Events: ``hello`` (the broker's start
  time, the row fields ``FEED_FIELDS``, ``CODEC_NAMES``, the window), then, while appends come, one
  write every ``FEED_FLUSH_S`` (``FEED_BUSY_FLUSH_S`` after a write that skipped some): ``appends``, a
  JSON array of rows (one per append) holding the newest ``N`` appends at most (``FEED_WINDOW``
  without ``rows``: the page asks for its own window), and before it ``skipped``, how many appends
  since the last write are not in it (more came than the window holds: the broker encodes no more
  than a page shows, and never waits for a page); a comment every ``FEED_KEEPALIVE_S`` while idle;
- ``/ui/explain/p/<topic>-<partition>/...``: ``minibroker explain``'s page for that partition, served
  by explain's own routes (``ExplainRoutes``): segments, index entries, the binary search of a fetch,
  the byte map of a batch (the feed opens it at the batch's offset), cleaned or dirty segments.

The feed costs the append path one attribute check while no page listens: ``broker.append_feed`` is
None until the first subscriber and again after the last (``AppendFeed``). With subscribers, an
append puts a tuple of references (numbers, the result's own lists of batch facts) into each
subscriber's ring of ``window`` appends; rows and text are made by the subscriber's own task, for the
appends still in the ring when it writes.

Refused (403 with the reason, and logged at start) on a metrics port bound to a non-loopback address
unless ``ui.allow.remote`` is true. With an authorizer, every request needs HTTP basic auth with a SASL
PLAIN or SCRAM user of the broker (``BasicAuth``), and shows only what that user may DESCRIBE
(``Visibility``: topics, groups, transactional ids; the client list needs DESCRIBE on the cluster).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import logging
import os
import time
from importlib import resources
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger("minibroker.ui")

UI_PREFIX = "/ui"
FEED_WINDOW = 200  # rows a feed keeps between two writes unless it asks (?rows=): the page's default
FEED_WINDOW_MAX = 5000  # the most a feed may ask for (the page's largest window)
FEED_KEEPALIVE_S = 10.0  # an idle feed sends a comment this often (finds closed pages)
FEED_RETRY_MS = 1000  # the browser's reconnection delay (EventSource ``retry``)
FEED_FLUSH_S = 0.05  # appends are written to a page at most this often: one write for many
FEED_BUSY_FLUSH_S = 0.25  # after a write that skipped appends, the next waits this long: a page under load
# shows its newest window four times a second, and the broker encodes at most 4 x window rows a second
GROUP_EVENTS = 200  # group events (joins, syncs, heartbeats, ...) kept per group for the timeline
GROUP_EVENT_GROUPS = 1000  # groups with a timeline; the one idle longest is forgotten past this
AUTH_CACHE_S = 60.0  # a verified basic-auth password is trusted this long without checking it again
SHARE_RUNS_SHOWN = 200  # in-flight runs of records listed per share partition
_PAGE = "live_view.html"
_now = time.time  # one global lookup per append, not two
_OPEN_TXN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def attach(broker) -> LiveView:
    """Mount ``/ui`` on the broker's metrics port (``ui.enable``); call before ``broker.start()``."""
    view = LiveView(broker)
    broker.metrics_mounts[UI_PREFIX] = view.handle
    if broker.config["metrics.port"] is None:
        log.warning("ui.enable is set but metrics.port is not: the live view is served on the metrics port; "
                    "set metrics.port (0 picks a free one)")
    elif view.refusal:
        log.warning("the live view is refused: %s", view.refusal)
    elif not _is_loopback(view.host):
        log.warning("the live view is served on %s, a non-loopback address (ui.allow.remote=true): anyone "
                    "who reaches it sees topics, groups and clients", view.host or "all interfaces")
    return view


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "" (every interface) or a name
        return False


# ---------------------------------------------------------------------------------------------
# the append feed


class FeedSubscriber:
    """One open feed: the newest appends for its page, at most ``window`` of them (a ring: an append
    pushes the oldest out), and how many appends it was offered in all (``appended``) and accounted for
    up to its last write (``sent``: shown or counted as skipped). Filled on the event loop by
    ``AppendFeed.publish``, emptied by ``LiveView._feed``."""

    def __init__(self, topic: str | None, window: int = 0):
        self.topic = topic
        self.window = window or FEED_WINDOW
        self.rows: collections.deque = collections.deque(maxlen=self.window)
        self.appended = 0
        self.sent = 0
        self.idle = False  # its writer waits for an append: the next one sets ``wake``
        self.wake = asyncio.Event()

    def take(self) -> tuple[int, list]:
        """The rows gathered since the last call, oldest first, as ``(seq, append)`` pairs (``seq``: the
        append's number in this feed, from 1), and how many appends since then are not among them."""
        rows, appended = self.rows, self.appended
        first_seq = appended - len(rows) + 1
        taken = list(enumerate(rows, first_seq))
        rows.clear()
        skipped = appended - self.sent - len(taken)
        self.sent = appended
        return skipped, taken


class AppendFeed:
    """The appends going to the open pages. Owner of: the subscribers; installs ``publish`` as
    ``broker.append_feed`` while there is at least one (the replica manager calls it after each
    append), and removes it after the last leaves."""

    def __init__(self, broker):
        self.broker = broker
        self.subscribers: tuple[FeedSubscriber, ...] = ()  # a tuple: iterated on every append

    def subscribe(self, topic: str | None = None, window: int = 0) -> FeedSubscriber:
        sub = FeedSubscriber(topic, window)
        self.subscribers += (sub,)
        self.broker.append_feed = self.publish
        return sub

    def unsubscribe(self, sub: FeedSubscriber) -> None:
        self.subscribers = tuple(s for s in self.subscribers if s is not sub)
        if not self.subscribers:
            self.broker.append_feed = None

    def publish(self, topic: str, partition: int, result, produce_version: int, sent_len: int) -> None:
        """An append (``AppendResult``), kept as the few values its row is made of later, by the page's
        writer (``feed_row``). ``result.data`` may be a view of a request buffer, so it is never kept;
        ``result.entries`` and ``result.batches`` are the result's own lists of numbers (NamedTuples).
        Never raises into the append path."""
        try:
            append = (_now(), topic, partition, result.first_offset, result.last_offset, result.record_count,
                      result.entries, result.source_compression, result.target_compression, result.path,
                      sent_len, len(result.data), produce_version, result.batches)
            for sub in self.subscribers:
                if sub.topic is None or sub.topic == topic:
                    sub.rows.append(append)  # a full ring drops its oldest: counted at the write
                    sub.appended += 1
                    if sub.idle:
                        sub.idle = False
                        sub.wake.set()
        except Exception:  # noqa: BLE001 - a view must not fail an append
            log.exception("live view: an append could not be published")


def feed_row(seq: int, append: tuple) -> tuple:
    """A row of ``FEED_FIELDS`` from what ``AppendFeed.publish`` kept of an append."""
    (at, topic, partition, first, last, records, entries, sent_codec, codec, path,
     sent_len, stored_len, produce_version, batches) = append
    batch = batches[0] if batches else None
    return (seq, int(at * 1000), topic, partition, first, last, records,
            entries[0].magic if entries else -1, len(entries),
            sent_codec, codec, path,  # JSON: int, int, str
            sent_len, stored_len, produce_version,
            batch.producer_id if batch else -1, batch.producer_epoch if batch else -1,
            batch.base_sequence if batch else -1, bool(batch and batch.is_transactional),
            bool(batch and batch.is_control))


CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")  # the codec numbers of a feed row, by name
FEED_FIELDS = (  # a feed row's values, in order (``feed_row``); an int prints faster than a float
    "seq", "time_ms", "topic", "partition", "first_offset", "last_offset", "records", "magic", "entries",
    "sent_codec", "codec", "path", "sent_bytes", "stored_bytes", "produce_version",
    "producer_id", "producer_epoch", "base_sequence", "transactional", "control",
)


# ---------------------------------------------------------------------------------------------
# group events (the timeline)


class GroupEventRing:
    """The groups' recent events for the timeline, fed by the group coordinators themselves through
    ``broker.group_events`` (set while the live view is attached, so at any log level): joins, syncs,
    heartbeats (classic: the generation; KIP-848: the member epoch asked and answered, the group and
    target epochs, the member's current and target assignment), leaves, rebalances, stabilisations and
    removals. A bounded ring per group (``GROUP_EVENTS`` each, the oldest dropped) and at most
    ``GROUP_EVENT_GROUPS`` groups (the one idle longest forgotten)."""

    def __init__(self, topic_name=None) -> None:
        self.rings: dict[str, collections.deque] = {}
        self.topic_name = topic_name  # topic id -> name, for KIP-848 assignments

    def record(self, group_id: str, kind: str, member_id: str | None = None, **fields) -> None:
        """Never raises into the coordinator: a broken event is dropped."""
        try:
            ring = self.rings.pop(group_id, None)  # re-inserted last: dict order is recency
            if ring is None:
                if len(self.rings) >= GROUP_EVENT_GROUPS:
                    del self.rings[next(iter(self.rings))]
                ring = collections.deque(maxlen=GROUP_EVENTS)
            self.rings[group_id] = ring
            event = {"time": int(time.time() * 1000), "kind": kind, "member_id": member_id}
            for key, value in fields.items():
                event[key] = self._named(value) if isinstance(value, dict) else value
            ring.append(event)
        except Exception:  # noqa: BLE001 - the timeline must not break a group
            log.exception("live view: a group event could not be recorded")

    def _named(self, assignment: dict) -> dict:
        """A TopicAssignment (topic id -> partitions) with topic names, as JSON."""
        names = self.topic_name
        return {((names(t) if names else None) or (t.hex() if isinstance(t, bytes) else str(t))): sorted(ps)
                for t, ps in assignment.items() if ps}

    def for_group(self, group_id: str) -> list[dict]:
        return list(self.rings.get(group_id, ()))


# ---------------------------------------------------------------------------------------------
# the overview


def overview(broker, group_events: GroupEventRing | None = None, visible: Visibility | None = None) -> dict:
    """Everything the overview tab shows, as JSON; coordinators not built yet are reported absent.
    With ``visible`` (a broker with an authorizer), only what its principal may DESCRIBE."""
    logs = broker.logs
    topics = logs.topics if logs is not None else {}
    by_topic: dict[str, list] = {}
    if logs is not None:
        for plog in logs.logs():
            by_topic.setdefault(plog.topic, []).append(_partition_row(plog))
    if visible is not None:
        topics = {name: info for name, info in topics.items() if visible.topic(name)}
        by_topic = {name: rows for name, rows in by_topic.items() if visible.topic(name)}
    out_topics = []
    for name in sorted(set(topics) | set(by_topic)):
        info = topics.get(name)
        partitions = sorted(by_topic.get(name, []), key=lambda r: r["partition"])
        out_topics.append({
            "name": name, "internal": name.startswith("__"),
            "topic_id": info.id.hex() if info is not None else None,
            "partitions": partitions, "configs": dict(sorted((info.configs if info else {}).items())),
        })
    leo = {(t["name"], p["partition"]): p["log_end_offset"] for t in out_topics for p in t["partitions"]}
    groups = _groups(broker, leo, group_events)
    transactions, clients = _transactions(broker), _clients(broker)
    if visible is not None:
        from minibroker.security.acls import CLUSTER_NAME

        if groups is not None:
            groups = [g for g in groups if visible.may(visible.GROUP, g["group_id"])]
            for g in groups:
                g["offsets"] = [o for o in g["offsets"] if visible.topic(o["topic"])]
        if transactions is not None:
            transactions = [t for t in transactions
                            if visible.may(visible.TRANSACTIONAL_ID, t["transactional_id"])]
        if not visible.may(visible.CLUSTER, CLUSTER_NAME):
            clients = []
    return {
        "broker": {
            "node_id": broker.node_id,
            "cluster_id": _cluster_id(logs),
            "started_ms": int(broker.started_at * 1000),
            "listeners": [f"{e.listener}://{e.host}:{e.port}" for e in broker.bound],
        },
        "now_ms": int(time.time() * 1000),
        "topics": out_topics,
        "groups": groups,
        "transactions": transactions,
        "clients": clients,
    }


def _cluster_id(logs) -> str | None:
    try:
        return logs.cluster_id if logs is not None else None
    except RuntimeError:  # the logs are not loaded yet
        return None


def _partition_row(plog) -> dict:
    table = plog.loaded_producer_state
    first_unstable = table.first_unstable_offset() if table is not None else None
    hw = plog.high_watermark
    lso = hw if first_unstable is None else max(min(first_unstable, hw), plog.log_start_offset)
    return {
        "partition": plog.partition, "log_start_offset": plog.log_start_offset,
        "last_stable_offset": lso, "high_watermark": hw, "log_end_offset": plog.log_end_offset,
        "size_bytes": plog.size_bytes, "segments": len(plog.segments),
    }


def _groups(broker, leo: dict, group_events: GroupEventRing | None) -> list[dict] | None:
    if not broker.loaded("groups"):
        return None
    coordinator = broker.groups
    try:
        listed = coordinator.list_groups()
    except Exception:  # noqa: BLE001 - still loading __consumer_offsets
        return []
    out = []
    for group_id, protocol_type, state, group_type in sorted(listed):
        row = {"group_id": group_id, "type": group_type, "protocol_type": protocol_type, "state": state,
               "members": [], "offsets": [], "epoch": None, "assignment_epoch": None}
        if group_type == "classic":
            _classic_members(coordinator.groups.get(group_id), row)
        elif group_type == "consumer":
            _modern_members(broker, coordinator.consumer.groups.get(group_id), row)
        else:
            _modern_members(broker, coordinator.share.groups.get(group_id), row)
            row["in_flight"] = _share_in_flight(broker, group_id, leo)
        if group_type != "share":
            try:
                offsets = coordinator.fetch_offsets(group_id, None)
            except Exception:  # noqa: BLE001 - the group went away meanwhile
                offsets = {}
            for (topic, partition), value in sorted(offsets.items()):
                if value is None or value.offset < 0:
                    continue
                end = leo.get((topic, partition))
                row["offsets"].append({"topic": topic, "partition": partition, "committed": value.offset,
                                       "log_end_offset": end,
                                       "lag": None if end is None else max(0, end - value.offset)})
        if group_events is not None:
            row["timeline"] = group_events.for_group(group_id)
        out.append(row)
    return out


def _classic_members(group, row: dict) -> None:
    if group is None:
        return
    row["epoch"] = group.generation_id
    for m in group.members.values():
        assignment = None
        if group.protocol_type == "consumer" and m.assignment:
            from minibroker.coordinator.consumer_protocol import ConsumerProtocolError, decode_assignment

            try:
                assignment = {t: sorted(ps) for t, ps in decode_assignment(m.assignment).items()}
            except ConsumerProtocolError:
                assignment = None
        row["members"].append({"member_id": m.member_id, "instance_id": m.group_instance_id,
                               "client_id": m.client_id, "client_host": m.client_host,
                               "assignment": assignment})


def _modern_members(broker, group, row: dict) -> None:
    """A consumer (KIP-848) or share group: epochs, each member's current and target assignment."""
    if group is None:
        return
    row["epoch"] = group.group_epoch
    row["assignment_epoch"] = group.assignment_epoch
    names = broker.logs.topic_name
    target = getattr(group, "target", {})

    def named(assignment) -> dict:
        return {(names(tid) or tid.hex()): sorted(ps) for tid, ps in sorted(assignment.items())}

    for m in group.members.values():
        row["members"].append({
            "member_id": m.member_id, "instance_id": getattr(m, "instance_id", None),
            "client_id": m.client_id, "client_host": m.client_host, "member_epoch": m.member_epoch,
            "state": getattr(m.state, "name", str(m.state)), "assignment": named(m.assigned),
            "target": named(target[m.member_id]) if m.member_id in target else None,
            "pending_revocation": named(getattr(m, "pending_revocation", {})),
        })


def _share_in_flight(broker, group_id: str, leo: dict) -> list[dict] | None:
    """A share group's partitions held by the broker: start and end of the in-flight window and its
    runs of records (offsets, state, delivery count, the member holding ACQUIRED ones, their lock
    deadline), at most ``SHARE_RUNS_SHOWN`` a partition. None while no share fetch has run."""
    if not broker.loaded("share_partitions"):
        return None
    from minibroker.coordinator.share_state import DeliveryState

    out = []
    for topic, partition, sp in broker.share_partitions.cached_partitions(group_id):
        runs = sp.runs()
        out.append({
            "topic": topic, "partition": partition, "start_offset": sp.start_offset,
            "end_offset": sp.end_offset, "log_end_offset": leo.get((topic, partition)),
            "delivery_limit": sp.delivery_limit, "runs_total": len(runs),
            "runs": [{"first": r.first, "last": r.last, "state": DeliveryState(r.state).name,
                      "delivery_count": r.count, "member": r.member, "deadline_ms": r.deadline or None}
                     for r in runs[:SHARE_RUNS_SHOWN]],
        })
    return out


def _transactions(broker) -> list[dict] | None:
    if not broker.loaded("transactions"):
        return None
    out = []
    for txn in list(broker.transactions.transactions.values()):
        state = str(txn.state)
        if state not in _OPEN_TXN_STATES:
            continue
        out.append({"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
                    "producer_epoch": txn.producer_epoch, "state": state, "start_ms": txn.start_ms,
                    "timeout_ms": txn.timeout_ms,
                    "partitions": [f"{t}-{p}" for t, p in sorted(txn.partitions)]})
    return sorted(out, key=lambda t: t["transactional_id"])


def _clients(broker) -> list[dict]:
    out = []
    for conn in list(broker.connections):
        name, version = conn.client_software
        peer = f"{conn.peer[0]}:{conn.peer[1]}" if isinstance(conn.peer, tuple) else str(conn.peer)
        out.append({"peer": peer,
                    "listener": conn.listener, "security_protocol": conn.security_protocol,
                    "principal": str(conn.principal), "client_id": conn.client_id,
                    "software_name": name, "software_version": version})
    return sorted(out, key=lambda c: c["peer"])


# ---------------------------------------------------------------------------------------------
# who may see what (a broker with an authorizer)


class BasicAuth:
    """HTTP basic auth against the broker's SASL users, for a broker with an authorizer: a PLAIN
    password of one of its SASL listeners (their JAAS config), or a SCRAM credential (checked as a
    SCRAM login would: the stored key of the password salted with the credential's salt). The user's
    principal is ``User:<name>``; a successful check is remembered for ``AUTH_CACHE_S`` (PBKDF2 costs
    milliseconds, and the page asks every second). A check runs in a worker thread, one at a time:
    requests with wrong passwords, which are never remembered, must not stall the broker's loop, nor
    take every thread of the loop's default executor (the log's fsyncs run there too)."""

    def __init__(self, broker):
        from minibroker.config.sasl import sasl_listener_settings

        self.broker = broker
        self.plain: dict[str, str] = {}
        for settings in sasl_listener_settings(broker.config, warn=False).values():
            self.plain.update(settings.plain_users)
        self._verified: dict[tuple[str, bytes], float] = {}
        self._checking = asyncio.Semaphore(1)

    async def principal(self, head: bytes):
        """The principal of the request's ``Authorization: Basic`` header; None if absent or wrong."""
        import hashlib

        from minibroker.security.principal import KafkaPrincipal

        credentials = self._credentials(head)
        if credentials is None:
            return None
        user, password = credentials
        key = (user, hashlib.sha256(password.encode()).digest())
        if self._verified.get(key, 0) <= time.monotonic():
            async with self._checking:
                if not await asyncio.to_thread(self._check, user, password):
                    return None
            self._verified[key] = time.monotonic() + AUTH_CACHE_S
        return KafkaPrincipal("User", user)

    @staticmethod
    def _credentials(head: bytes) -> tuple[str, str] | None:
        """(user, password) of the request's ``Authorization: Basic`` header; None if absent or unreadable."""
        import base64
        import binascii

        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"authorization":
                continue
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() != b"basic":
                return None
            try:
                text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
                user, sep, password = text.partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            if not sep or not user:
                return None
            return user, password
        return None

    def _check(self, user: str, password: str) -> bool:
        """The password is the user's (a worker thread: PBKDF2 for each SCRAM mechanism)."""
        import hmac

        expected = self.plain.get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return True
        from minibroker.security.sasl.scram import (
            MECHANISMS,
            credential_from_salted_password,
            salted_password,
        )

        store = self.broker.scram_credentials
        for mechanism in MECHANISMS.values():
            stored = store.get(user, mechanism.name)
            if stored is None:
                continue
            salted = salted_password(mechanism, password, stored.salt, stored.iterations)
            candidate = credential_from_salted_password(mechanism, stored.salt, salted, stored.iterations)
            if hmac.compare_digest(candidate.stored_key, stored.stored_key):
                return True
        return False


class Visibility:
    """What one viewer may see: DESCRIBE on each topic, group, transactional id, and on the cluster for
    the client list (the authorizer's answers are cached by the authorizer)."""

    def __init__(self, authorizer, principal, host: str):
        from minibroker.security.acls import AclOperation, ResourceType

        self._authorize = authorizer.authorize
        self._principal, self._host = principal, host
        self._describe = AclOperation.DESCRIBE
        self.TOPIC, self.GROUP = ResourceType.TOPIC, ResourceType.GROUP
        self.TRANSACTIONAL_ID, self.CLUSTER = ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER

    def may(self, resource_type, name: str) -> bool:
        return self._authorize(self._principal, self._host, self._describe, resource_type, name)

    def topic(self, name: str) -> bool:
        return self.may(self.TOPIC, name)


# ---------------------------------------------------------------------------------------------
# HTTP


class LiveView:
    """The ``/ui`` routes (mounted on the metrics port's server, minibroker/server/metrics_http.py,
    which owns the connections: it closes each one after its handler returns)."""

    def __init__(self, broker):
        self.broker = broker
        self.feed = AppendFeed(broker)
        self.group_events = GroupEventRing(self._topic_name)
        broker.group_events = self.group_events
        broker.on_close(self.close)
        endpoints = broker.config.listener_endpoints()
        self.host = endpoints[0][1] if endpoints else ""  # the metrics port binds the first listener's host
        self.refusal = self._refusal()
        self.auth = BasicAuth(broker) if broker.config["authorizer.class.name"] else None

    def close(self) -> None:
        self.broker.group_events = None
        self.broker.append_feed = None

    def _topic_name(self, topic_id: bytes) -> str | None:
        logs = self.broker.logs
        return logs.topic_name(topic_id) if logs is not None else None

    def _refusal(self) -> str | None:
        config = self.broker.config
        if not _is_loopback(self.host) and not config["ui.allow.remote"]:
            return (f"metrics.port is bound to {self.host or 'every interface'}, not a loopback address; "
                    "set ui.allow.remote=true to serve the live view there")
        return None

    async def handle(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._route(head, reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - state changed under the view (a topic deleted): say so
            log.exception("live view: %r failed", head.split(b"\r\n", 1)[0])
            self._send(writer, 500, "text/plain; charset=utf-8", f"{type(exc).__name__}: {exc}\n".encode())

    async def _route(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(line) != 3:
            return self._send(writer, 400, "text/plain", b"bad request\n")
        method, target = line[0], line[1]
        if method != "GET":
            return self._send(writer, 405, "text/plain", b"GET only: the live view is read-only\n")
        if self.refusal:
            return self._send(writer, 403, "text/plain; charset=utf-8",
                              f"minibroker live view refused: {self.refusal}\n".encode())
        visible = None
        if self.auth is not None:  # an authorizer: who is asking, and DESCRIBE on what is shown
            principal = await self.auth.principal(head)
            if principal is None:
                return self._send(writer, 401, "text/plain; charset=utf-8",
                                  b"the live view of a broker with an authorizer needs the user and "
                                  b"password of a SASL PLAIN or SCRAM user\n",
                                  b'WWW-Authenticate: Basic realm="minibroker", charset="UTF-8"\r\n')
            peer = writer.get_extra_info("peername")
            visible = Visibility(self.broker.authorizer, principal, peer[0] if peer else "")
        parts = urlsplit(target)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if path in ("/ui", "/ui/"):
            return self._send(writer, 200, "text/html; charset=utf-8", page_html().encode())
        if path == "/ui/api/overview":
            view = overview(self.broker, self.group_events, visible)
            body = json.dumps(view, separators=(",", ":")).encode()
            return self._send(writer, 200, "application/json", body)
        if path == "/ui/feed":
            rows = query.get("rows", "")
            if rows and not rows.isdigit():
                return self._send(writer, 400, "text/plain",
                                  b"rows: a number of rows (1 to %d)\n" % FEED_WINDOW_MAX)
            window = min(max(int(rows), 1), FEED_WINDOW_MAX) if rows else FEED_WINDOW
            await self._feed(reader, writer, query.get("topic") or None, visible, window)
            return None
        if path.startswith("/ui/explain/"):
            rest = path[len("/ui/explain"):]
            topic = rest.split("/")[2].rpartition("-")[0] if rest.count("/") >= 2 else ""
            if visible is not None and not visible.topic(topic):
                return self._send(writer, 403, "text/plain", b"DESCRIBE on the topic is not allowed\n")
            status, ctype, body = await asyncio.to_thread(self._explain, rest, parts.query)
            return self._send(writer, status, ctype, body)
        return self._send(writer, 404, "text/plain", b"not found\n")

    @staticmethod
    def _send(writer: asyncio.StreamWriter, status: int, content_type: str, body: bytes,
              headers: bytes = b"") -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                  405: "Method Not Allowed", 500: "Internal Server Error"}.get(status, "")
        writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                     b"Cache-Control: no-store\r\nConnection: close\r\n%s\r\n%s"
                     % (status, reason.encode(), content_type.encode(), len(body), headers, body))

    def _explain(self, rest: str, query: str) -> tuple[int, str, bytes]:
        """explain's routes for one partition (``/p/<topic>-<n>/...``), from the dir holding it."""
        from minibroker.tools.explain import ExplainRoutes

        segments = rest.split("/")
        if len(segments) < 3 or segments[1] != "p" or "-" not in segments[2]:
            return 404, "text/plain", b"not found\n"
        topic, _, number = segments[2].rpartition("-")
        log_dir = self.broker.logs.log_dir_of(topic, int(number)) if number.isdigit() else None
        if log_dir is None:
            return 404, "text/plain", f"no partition {segments[2]} here\n".encode()
        try:
            return ExplainRoutes(os.path.abspath(log_dir)).answer(rest + ("?" + query if query else ""))
        except Exception as exc:  # noqa: BLE001 - a segment removed mid-read (retention): say so
            return 500, "text/plain; charset=utf-8", f"{type(exc).__name__}: {exc}\n".encode()

    async def _feed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    topic: str | None, visible: Visibility | None = None, window: int = 0) -> None:
        """The SSE stream: written by this task only; the broker's appends only fill the ring. Each write
        carries the newest ``window`` appends at most, made into rows and JSON here: a page shows no
        more than its window, so under a high rate most appends cost the broker no encoding at all,
        only a ``skipped`` count."""
        sub = self.feed.subscribe(topic, window)
        closed = asyncio.ensure_future(reader.read(1))  # the page went away (or sent garbage)
        try:
            hello = {"started_ms": int(self.broker.started_at * 1000), "topic": topic, "window": sub.window,
                     "fields": FEED_FIELDS, "codecs": CODEC_NAMES}
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                         b"Connection: close\r\n\r\nretry: %d\n\nevent: hello\ndata: %s\n\n"
                         % (FEED_RETRY_MS, json.dumps(hello).encode()))
            await writer.drain()
            gather = FEED_FLUSH_S
            while not closed.done():
                if sub.appended == sub.sent:
                    sub.idle = True  # the next append wakes this task
                    sub.wake.clear()
                    woken = asyncio.ensure_future(sub.wake.wait())
                    try:
                        await asyncio.wait((woken, closed), timeout=FEED_KEEPALIVE_S,
                                           return_when=asyncio.FIRST_COMPLETED)
                    finally:  # also when the broker stops (this task is cancelled)
                        woken.cancel()
                        sub.idle = False
                    if closed.done():
                        break
                    if sub.appended == sub.sent:
                        writer.write(b": idle\n\n")
                        await writer.drain()
                        continue
                await asyncio.sleep(gather)  # let a burst of appends gather: one write, one json call
                if closed.done():
                    break
                skipped, taken = sub.take()
                gather = FEED_BUSY_FLUSH_S if skipped else FEED_FLUSH_S
                if visible is not None:  # filtered here, not on the append path
                    taken = [(seq, append) for seq, append in taken if visible.topic(append[1])]
                chunks = []
                if skipped:
                    chunks.append(b"event: skipped\ndata: %d\n\n" % skipped)
                if taken:  # none left to this viewer: the skipped count, if any, goes alone
                    rows = [feed_row(seq, append) for seq, append in taken]
                    chunks.append(b"event: appends\nid: %d\ndata: %s\n\n"
                                  % (rows[-1][0], json.dumps(rows, separators=(",", ":")).encode()))
                if not chunks:
                    continue
                writer.write(b"".join(chunks))
                await writer.drain()  # a slow page waits here, its ring turning over: the broker never waits
        except ConnectionError:
            pass
        finally:
            closed.cancel()
            self.feed.unsubscribe(sub)


def page_html() -> str:
    return resources.files("minibroker.tools").joinpath(_PAGE).read_text(encoding="utf-8")

"""The live view's JSON endpoints and its Server-Sent Events feed, without a browser (issue 33).

A thread-mode broker with ``ui.enable=true`` and ``metrics.port=0``, driven by kafka-python; the HTTP side
read with urllib and raw sockets. What the view reports is checked against what the clients got back
(offsets from the producer's record metadata, the group's committed offsets), never against the code
under test. The page itself, in Chromium: tests/test_live_view_browser.py.
"""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from waiting import wait_until

from minibroker.tools.live_view import (
    CODEC_NAMES,
    FEED_FIELDS,
    FEED_WINDOW,
    FEED_WINDOW_MAX,
    GROUP_EVENT_GROUPS,
    GROUP_EVENTS,
    AppendFeed,
    FeedSubscriber,
    GroupEventRing,
)

UI = {"ui.enable": "true", "metrics.port": "0"}
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def overview(runner) -> dict:
    status, body = get(runner.ui_url + "/api/overview")
    assert status == 200, body
    return json.loads(body)


class FeedReader:
    """``GET /ui/feed`` on a raw socket: the response head, then SSE events as (name, data) pairs."""

    def __init__(self, ui_url: str, query: str = "", authorization: str = ""):
        host, port = ui_url.split("//")[1].split("/")[0].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        extra = f"Authorization: {authorization}\r\n" if authorization else ""
        self.sock.sendall(b"GET /ui/feed%s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n%s\r\n"
                          % (query.encode(), extra.encode()))
        self.buf = b""
        self.hello = None
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        self.head, self.buf = self.buf.split(b"\r\n\r\n", 1)

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the feed closed")
        return data

    def next_event(self) -> tuple[str, dict | str]:
        while True:
            while b"\n\n" not in self.buf:
                self.buf += self._recv()
            block, self.buf = self.buf.split(b"\n\n", 1)
            name, data = "message", None
            for line in block.decode().split("\n"):
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
            if data is None:
                continue  # retry: or a keep-alive comment
            return name, (json.loads(data) if data[:1] in "{[" else data)

    def appends(self, count: int) -> list[dict]:
        """At least the next ``count`` appends (all of the events read), each row named with the
        fields and codecs ``hello`` gave."""
        out = []
        while len(out) < count:
            name, data = self.next_event()
            if name == "hello":
                self.hello = data
            elif name == "appends":
                for values in data:
                    row = dict(zip(self.hello["fields"], values, strict=True))
                    row["sent_codec"] = self.hello["codecs"][row["sent_codec"]]
                    row["codec"] = self.hello["codecs"][row["codec"]]
                    out.append(row)
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def ui_broker(minibroker_factory):
    return minibroker_factory(UI)


def producer(runner, **settings):
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=runner.bootstrap_servers, **{"linger_ms": 0, **settings})


# ---------------------------------------------------------------------------------------------
# routes and refusals


def test_off_by_default_nothing_mounted(minibroker_factory):
    runner = minibroker_factory({"metrics.port": "0"})
    assert "/ui" not in runner.broker.metrics_mounts  # (the fixture's fault injection mounts /faults)
    assert runner.ui_url is None
    port = runner.broker.metrics_http.port
    assert get(f"http://127.0.0.1:{port}/ui")[0] == 404


def test_page_is_self_contained_and_read_only(ui_broker):
    status, html = get(ui_broker.ui_url)
    assert status == 200
    assert "<script>" in html and "EventSource" in html
    # no external asset: every src/href is inline, a data: URL or a path of this server
    for attr in ("src=", "href="):
        for piece in html.split(attr)[1:]:
            target = piece[1:].split(piece[0])[0]
            assert not target.startswith(("http:", "https:", "//")), target
    req = urllib.request.Request(ui_broker.ui_url + "/api/overview", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 405
    assert get(ui_broker.ui_url + "/nothing-here")[0] == 404
    assert get(ui_broker.ui_url + "/explain/p/no-such-topic-0/")[0] == 404


def test_refused_on_a_non_loopback_bind_unless_allowed(minibroker_factory):
    refused = minibroker_factory({**UI, "listeners": "PLAINTEXT://0.0.0.0:0"})
    port = refused.broker.metrics_http.port
    status, body = get(f"http://127.0.0.1:{port}/ui")
    assert status == 403 and "ui.allow.remote" in body
    assert "the live view is refused" in refused.log_text()
    allowed = minibroker_factory({**UI, "listeners": "PLAINTEXT://0.0.0.0:0", "ui.allow.remote": "true"})
    assert get(f"http://127.0.0.1:{allowed.broker.metrics_http.port}/ui")[0] == 200
    assert "non-loopback address" in allowed.log_text()


def get_as(url: str, user: str | None, password: str = "") -> tuple[int, str, dict]:
    """GET with HTTP basic auth (none when ``user`` is None): status, body, headers."""
    import base64

    req = urllib.request.Request(url)
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_with_an_authorizer_basic_auth_and_describe_per_resource(minibroker_factory, mechanism):
    from kafka import KafkaProducer

    runner = minibroker_factory({**UI, "authorizer.class.name": STANDARD_AUTHORIZER,
                                 "super.users": "User:admin"},
                                security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism)
    runner.create_topic("lv-secret")
    connected = KafkaProducer(**runner.client_config("kafka-python", user="admin"))  # a client to list
    try:
        connected.send("lv-secret", b"x").get(10)
        _check_basic_auth(runner)
    finally:
        connected.close(5)


def test_basic_auth_checks_passwords_off_the_event_loop(minibroker_factory, monkeypatch):
    """A SCRAM password is checked with PBKDF2 for each mechanism, and wrong ones are never
    remembered: on the broker's loop, an unauthenticated HTTP client sending wrong passwords stalled
    Produce and Fetch. Checked in a worker thread; a wrong password is still refused, a right one
    accepted."""
    import asyncio

    from minibroker.tools.live_view import BasicAuth

    real_check, on_loop = BasicAuth._check, []

    def check(self, user, password):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:  # no loop in this thread
            on_loop.append(False)
        return real_check(self, user, password)

    monkeypatch.setattr(BasicAuth, "_check", check)
    runner = minibroker_factory({**UI, "authorizer.class.name": STANDARD_AUTHORIZER,
                                 "super.users": "User:admin"},
                                security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256")
    url = runner.ui_url + "/api/overview"
    assert get_as(url, "admin", "wrong")[0] == 401
    assert get_as(url, "admin", "wrong")[0] == 401  # a refusal is not remembered: checked again
    assert get_as(url, "admin", "admin-secret")[0] == 200
    assert get_as(url, "admin", "admin-secret")[0] == 200  # remembered: not checked again
    assert on_loop == [False, False, False]


def _check_basic_auth(runner) -> None:
    url = runner.ui_url + "/api/overview"
    status, body, headers = get_as(url, None)
    assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Basic") and "SASL" in body
    assert get_as(url, "admin", "wrong")[0] == 401
    assert get_as(url, "nobody", "admin-secret")[0] == 401
    status, body, _ = get_as(url, "admin", "admin-secret")  # a super user: everything
    assert status == 200
    data = json.loads(body)
    assert "lv-secret" in [t["name"] for t in data["topics"]]
    assert [c["principal"] for c in data["clients"]] == ["User:admin"]
    status, body, _ = get_as(url, "alice", "alice-secret")  # no ACL: DESCRIBE on nothing
    assert status == 200
    data = json.loads(body)
    assert data["topics"] == [] and data["clients"] == []
    assert get_as(runner.ui_url + "/explain/p/lv-secret-0/", "alice", "alice-secret")[0] == 403
    assert get_as(runner.ui_url + "/explain/p/lv-secret-0/", "admin", "admin-secret")[0] == 200
    # an ACL giving alice DESCRIBE on the topic: she sees it (and still no client list)
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePattern,
        ResourceType,
    )

    admin = KafkaAdminClient(**runner.client_config("kafka-python", user="admin"))
    try:
        result = admin.create_acls([ACL("User:alice", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                                        ResourcePattern(ResourceType.TOPIC, "lv-secret"))])
        assert result["failed"] == []
    finally:
        admin.close()
    data = json.loads(get_as(url, "alice", "alice-secret")[1])
    assert [t["name"] for t in data["topics"]] == ["lv-secret"] and data["clients"] == []
    assert get_as(runner.ui_url + "/explain/p/lv-secret-0/", "alice", "alice-secret")[0] == 200
    # her feed: the appends of that topic only
    import base64

    alice = "Basic " + base64.b64encode(b"alice:alice-secret").decode()
    feed = FeedReader(runner.ui_url, authorization=alice)
    try:
        assert b"200 OK" in feed.head
        name, feed.hello = feed.next_event()
        runner.produce("lv-hidden", [b"h"])
        offset = runner.produce("lv-secret", [b"s"])[0]
        (row, *later) = feed.appends(1)
        assert (row["topic"], row["first_offset"], later) == ("lv-secret", offset, [])
    finally:
        feed.close()


# ---------------------------------------------------------------------------------------------
# the overview


def test_overview_shows_partitions_groups_transactions_clients(ui_broker):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    p = producer(ui_broker, compression_type="gzip")
    metas = [p.send("lv-orders", key=b"k", value=b"v%d" % i) for i in range(5)]
    p.flush(10)
    last = max(m.get(10).offset for m in metas)
    data = overview(ui_broker)
    assert data["groups"] is None and data["transactions"] is None  # no coordinator built for the view
    (topic,) = [t for t in data["topics"] if t["name"] == "lv-orders"]
    (part,) = topic["partitions"]
    assert (part["log_start_offset"], part["high_watermark"], part["log_end_offset"]) == (0, last + 1,
                                                                                          last + 1)
    assert part["last_stable_offset"] == last + 1 and part["segments"] == 1 and part["size_bytes"] > 0
    clients = data["clients"]
    assert any(c["software_name"] == "kafka-python" and c["client_id"].startswith("kafka-python-producer")
               and c["principal"] == "User:ANONYMOUS" and c["listener"] == "PLAINTEXT" for c in clients)

    consumer = KafkaConsumer("lv-orders", bootstrap_servers=ui_broker.bootstrap_servers, group_id="lv-group",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        wait_until(lambda: consumer.poll(200), what="records")
        tp = TopicPartition("lv-orders", 0)
        consumer.commit({tp: OffsetAndMetadata(2, "", -1)})
        (group,) = [g for g in overview(ui_broker)["groups"] if g["group_id"] == "lv-group"]
        assert group["type"] == "classic" and group["state"] == "Stable"
        assert [m["assignment"] for m in group["members"]] == [{"lv-orders": [0]}]
        assert group["offsets"] == [{"topic": "lv-orders", "partition": 0, "committed": 2,
                                     "log_end_offset": last + 1, "lag": last + 1 - 2}]
        kinds = [e["kind"] for e in group["timeline"]]
        assert "join" in kinds and "stabilized" in kinds and "sync" in kinds
        consumer.commit({tp: OffsetAndMetadata(last + 1, "", -1)})
        (group,) = [g for g in overview(ui_broker)["groups"] if g["group_id"] == "lv-group"]
        assert group["offsets"][0]["lag"] == 0
    finally:
        consumer.close()

    tx = producer(ui_broker, transactional_id="lv-tx")
    try:
        tx.init_transactions()
        tx.begin_transaction()
        first = tx.send("lv-payments", b"p").get(10).offset
        (txn,) = overview(ui_broker)["transactions"]
        assert (txn["transactional_id"], txn["state"]) == ("lv-tx", "Ongoing")
        assert txn["partitions"] == ["lv-payments-0"]
        (pay,) = [t for t in overview(ui_broker)["topics"] if t["name"] == "lv-payments"]
        assert pay["partitions"][0]["last_stable_offset"] == first  # held back by the open transaction
        tx.commit_transaction()
        assert overview(ui_broker)["transactions"] == []
    finally:
        tx.close(5)
        p.close(5)


def test_consumer_group_members_with_epochs_and_target_assignment(minibroker_factory):
    ck = pytest.importorskip("confluent_kafka")
    runner = minibroker_factory({**UI, "group.consumer.heartbeat.interval.ms": "300"})
    runner.create_topic("lv-848", 2)
    consumer = ck.Consumer({"bootstrap.servers": runner.bootstrap_servers, "group.id": "lv-848-group",
                            "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["lv-848"])
        wait_until(lambda: consumer.poll(0.05) is None and len(consumer.assignment()) == 2,
                 what="an assignment")
        (group,) = [g for g in overview(runner)["groups"] if g["group_id"] == "lv-848-group"]
        assert (group["type"], group["state"]) == ("consumer", "Stable")
        (member,) = group["members"]
        assert member["member_epoch"] == group["epoch"] == group["assignment_epoch"] >= 1
        assert member["assignment"] == member["target"] == {"lv-848": [0, 1]}
        assert member["pending_revocation"] == {} and member["state"] == "STABLE"
        assert any(e["kind"] == "heartbeat" and e["target"] == {"lv-848": [0, 1]} for e in group["timeline"])
    finally:
        consumer.close()


def test_group_event_ring_is_bounded_per_group_and_in_groups():
    ring = GroupEventRing(lambda tid: {b"\x01" * 16: "named"}.get(tid))
    for i in range(GROUP_EVENTS + 5):
        ring.record("g0", "heartbeat", "m", generation=i)
    events = ring.for_group("g0")
    assert len(events) == GROUP_EVENTS and events[0]["generation"] == 5  # the oldest dropped
    ring.record("g0", "heartbeat", "m", current={b"\x01" * 16: {2, 1}, b"\x02" * 16: set()})
    assert ring.for_group("g0")[-1]["current"] == {"named": [1, 2]}  # names, empty topics left out
    for i in range(1, GROUP_EVENT_GROUPS):
        ring.record(f"g{i}", "join", "m")
    ring.record("g0", "leave", "m")  # g0 is the most recent again: g1 is now the one idle longest
    ring.record("late", "join", "m")
    assert len(ring.rings) == GROUP_EVENT_GROUPS
    assert ring.for_group("g1") == [] and ring.for_group("g0")[-1]["kind"] == "leave"


def test_timeline_has_heartbeats_with_epochs_at_log_level_warning(minibroker_factory, monkeypatch):
    """The timeline is fed by the coordinators, not their log: with minibroker.groups at WARNING a
    classic group's heartbeats carry its generation, a KIP-848 group's the member epochs asked and
    answered and the assignments, matching what the clients were given."""
    import logging

    ck = pytest.importorskip("confluent_kafka")
    from kafka import KafkaConsumer

    monkeypatch.setattr(logging.getLogger("minibroker.groups"), "level", logging.WARNING)
    runner = minibroker_factory({**UI, "group.consumer.heartbeat.interval.ms": "300"})
    runner.create_topic("lv-hb", 2)
    classic = KafkaConsumer("lv-hb", bootstrap_servers=runner.bootstrap_servers, group_id="lv-hb-classic",
                            auto_offset_reset="earliest", heartbeat_interval_ms=200)
    modern = ck.Consumer({"bootstrap.servers": runner.bootstrap_servers, "group.id": "lv-hb-848",
                          "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        modern.subscribe(["lv-hb"])

        def groups():
            classic.poll(50)
            modern.poll(0.05)
            return {g["group_id"]: g for g in overview(runner)["groups"] or []}

        def beating(group_id):
            return [e for e in groups().get(group_id, {}).get("timeline", [])
                    if e["kind"] == "heartbeat" and e["error"] == "NONE"]

        wait_until(lambda: len(beating("lv-hb-classic")) >= 2, timeout=20, what="classic heartbeats")
        wait_until(lambda: len(modern.assignment()) == 2 and len(beating("lv-hb-848")) >= 3, timeout=20,
                 what="KIP-848 heartbeats")
        group = groups()["lv-hb-classic"]
        beats = beating("lv-hb-classic")
        assert {e["generation"] for e in beats} == {group["epoch"]} and group["epoch"] >= 1
        assert {e["member_id"] for e in beats} == {m["member_id"] for m in group["members"]}
        assert [e["kind"] for e in group["timeline"]][:1] == ["join"]

        group = groups()["lv-hb-848"]
        (member,) = group["members"]
        beats = [e for e in group["timeline"] if e["kind"] == "heartbeat"]
        assert beats[0]["asked_epoch"] == 0 and beats[0]["member_epoch"] >= 1  # joining: epoch 0 asked
        last = beats[-1]
        assert last["member_id"] == member["member_id"] and last["asked_epoch"] == last["member_epoch"]
        assert last["member_epoch"] == member["member_epoch"] == last["group_epoch"] == group["epoch"]
        assert last["current"] == last["target"] == {"lv-hb": [0, 1]}
        assert {tp.partition for tp in modern.assignment()} == {0, 1}
    finally:
        modern.close()
        classic.close()
    timeline = {g["group_id"]: g["timeline"] for g in overview(runner)["groups"]}
    assert any(e["kind"] == "leave" and e["error"] == "NONE" for e in timeline["lv-hb-848"])
    assert any(e["kind"] == "leave" and e["error"] == "NONE" for e in timeline["lv-hb-classic"])


# ---------------------------------------------------------------------------------------------
# the feed


def test_feed_pushes_each_append_with_what_the_producer_got_back(ui_broker):
    feed = FeedReader(ui_broker.ui_url)
    try:
        assert b"200 OK" in feed.head and b"text/event-stream" in feed.head
        name, feed.hello = feed.next_event()
        assert name == "hello" and feed.hello["window"] == FEED_WINDOW
        assert (tuple(feed.hello["fields"]), tuple(feed.hello["codecs"])) == (FEED_FIELDS, CODEC_NAMES)
        # lingering: the three records go in one batch
        p = producer(ui_broker, compression_type="gzip", enable_idempotence=True, linger_ms=500)
        sent = [p.send("lv-feed", value=b"x" * 100) for _ in range(3)]
        p.flush(10)
        offsets = [m.get(10).offset for m in sent]
        (event, *later) = feed.appends(1)
        assert later == [], later
        assert (event["topic"], event["partition"]) == ("lv-feed", 0)
        assert (event["first_offset"], event["last_offset"], event["records"]) == (offsets[0], offsets[-1], 3)
        assert (event["magic"], event["codec"], event["sent_codec"]) == (2, "gzip", "gzip")
        assert event["path"] == "in-place"
        assert event["producer_id"] >= 0 and event["producer_epoch"] == 0 and event["base_sequence"] == 0
        assert event["sent_bytes"] == event["stored_bytes"] > 0 and not event["transactional"]
        p.close(5)
    finally:
        feed.close()


def test_feed_filters_by_topic_and_forgets_closed_pages(ui_broker):
    feed = FeedReader(ui_broker.ui_url, "?topic=lv-wanted")
    p = producer(ui_broker)
    try:
        p.send("lv-other", b"a").get(10)
        want = p.send("lv-wanted", b"b").get(10).offset
        (event,) = feed.appends(1)
        assert (event["topic"], event["first_offset"]) == ("lv-wanted", want)
        view_feed = ui_broker.broker.append_feed
        assert view_feed is not None
    finally:
        feed.close()
        p.close(5)
    # the server notices the closed socket and removes the subscriber: appends cost nothing again
    wait_until(lambda: ui_broker.broker.append_feed is None, what="the subscriber to be dropped")


def test_feed_shows_a_transaction_and_its_commit_marker(ui_broker):
    feed = FeedReader(ui_broker.ui_url, "?topic=lv-txn")
    tx = producer(ui_broker, transactional_id="lv-feed-tx")
    try:
        tx.init_transactions()
        tx.begin_transaction()
        first = tx.send("lv-txn", b"t").get(10).offset
        (batch, *rows) = feed.appends(1)
        assert (batch["first_offset"], batch["transactional"], batch["control"]) == (first, True, False)
        tx.commit_transaction()
        while not rows:
            rows = feed.appends(1)
        (marker,) = rows
        assert (marker["first_offset"], marker["records"], marker["transactional"], marker["control"]) == (
            first + 1, 1, True, True)
        assert marker["producer_id"] == batch["producer_id"]
        assert marker["producer_epoch"] == batch["producer_epoch"]
    finally:
        tx.close(5)
        feed.close()


def burst(runner, topic: str, count: int) -> list[int]:
    """``count`` appends of one 3-record batch each, in one step of the broker's loop (so all of them
    land between two writes of any feed); returns the first offset each append got."""
    import asyncio

    from minibroker.records import build_records

    batch = bytes(build_records(2, [(i, 0, None, b"burst") for i in range(3)]))

    async def append_all():
        return [runner.broker.replicas.append_records(topic, 0, bytearray(batch), 9).base_offset
                for _ in range(count)]

    return asyncio.run_coroutine_threadsafe(append_all(), runner._loop).result(10)


def test_a_burst_larger_than_the_window_sends_the_newest_rows_and_how_many_were_skipped(ui_broker):
    """The broker keeps a page's window of appends between two writes: 11 appends at once to a feed
    of ``rows=4`` give a ``skipped`` count of 7 and the rows of the newest 4; a burst within the
    window afterwards comes whole."""
    ui_broker.create_topic("lv-burst")
    feed = FeedReader(ui_broker.ui_url, "?rows=4")
    try:
        name, hello = feed.next_event()
        assert (name, hello["window"]) == ("hello", 4)
        offsets = burst(ui_broker, "lv-burst", 11)
        assert feed.next_event() == ("skipped", "7")
        name, rows = feed.next_event()
        assert name == "appends"
        rows = [dict(zip(hello["fields"], values, strict=True)) for values in rows]
        assert [r["first_offset"] for r in rows] == offsets[-4:]
        assert [r["last_offset"] - r["first_offset"] + 1 for r in rows] == [3] * 4
        assert [r["seq"] for r in rows] == [8, 9, 10, 11]  # numbered from the page's first append
        offsets = burst(ui_broker, "lv-burst", 3)
        name, rows = feed.next_event()  # no skipped event: the three fit
        assert name == "appends"
        assert [values[hello["fields"].index("first_offset")] for values in rows] == offsets
    finally:
        feed.close()


def test_feed_window_is_asked_with_rows_and_bounded(ui_broker):
    status, body = get(ui_broker.ui_url + "/feed?rows=many")
    assert status == 400 and "rows" in body
    for asked, window in (("0", 1), ("7", 7), (str(FEED_WINDOW_MAX + 1), FEED_WINDOW_MAX)):
        feed = FeedReader(ui_broker.ui_url, "?rows=" + asked)
        try:
            name, hello = feed.next_event()
            assert (name, hello["window"]) == ("hello", window)
        finally:
            feed.close()


def test_subscriber_ring_keeps_the_newest_and_counts_the_rest():
    sub = FeedSubscriber(None, window=5)
    for i in range(12):
        sub.rows.append((i,))
        sub.appended += 1
    skipped, taken = sub.take()
    assert skipped == 7 and taken == [(8, (7,)), (9, (8,)), (10, (9,)), (11, (10,)), (12, (11,))]
    assert sub.take() == (0, [])
    sub.rows.append((12,))
    sub.appended += 1
    assert sub.take() == (0, [(13, (12,))])


def append_result(first_offset: int):
    """A real ``AppendResult`` of one 2-record batch at ``first_offset``."""
    from minibroker.records import AppendConfig, build_records, validate_and_assign

    batch = bytearray(build_records(2, [(i, 0, None, b"r") for i in range(2)]))
    return validate_and_assign(batch, next_offset=first_offset, now_ms=0, config=AppendConfig(),
                               produce_version=9)


class CollectingWriter:
    """The feed's side of a stream writer: keeps what is written."""

    def __init__(self):
        import asyncio

        self.data = b""
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.data += data
        self.wrote.set()

    async def drain(self) -> None:
        pass


async def test_a_feed_whose_rows_are_all_hidden_still_says_how_many_were_skipped():
    """With an authorizer a viewer's rows are filtered at write time; when none is left but some were
    skipped (more than the window), the feed sends the ``skipped`` event alone (``rows[-1]`` of no
    rows raised once, and the handler wrote an HTTP 500 into the open stream)."""
    import asyncio

    from minibroker.tools.live_view import LiveView

    broker = SimpleNamespace(started_at=0.0, append_feed=None)
    view = SimpleNamespace(broker=broker, feed=AppendFeed(broker))
    reader, writer = asyncio.StreamReader(), CollectingWriter()
    visible = SimpleNamespace(topic=lambda name: name != "lv-hidden")
    task = asyncio.create_task(LiveView._feed(view, reader, writer, None, visible, 2))

    async def written(what: bytes) -> None:
        """Until ``what`` was written or the feed ended."""
        while what not in writer.data and not task.done():
            writer.wrote.clear()
            wrote = asyncio.ensure_future(writer.wrote.wait())
            try:
                await asyncio.wait((wrote, task), return_when=asyncio.FIRST_COMPLETED)
            finally:
                wrote.cancel()

    try:
        await asyncio.wait_for(written(b"event: hello"), 10)
        for offset in range(3):  # one more than the window, none of them this viewer's
            view.feed.publish("lv-hidden", 0, append_result(offset), 9, 80)
        await asyncio.wait_for(written(b"event: skipped"), 10)
        assert not task.done(), task.exception()
        view.feed.publish("lv-shown", 0, append_result(10), 9, 80)
        await asyncio.wait_for(written(b"event: appends"), 10)
        events = writer.data.split(b"\n\n")
        assert b"event: skipped\ndata: 1" in events
        (appends,) = [e for e in events if e.startswith(b"event: appends")]
        head, _, data = appends.partition(b"data: ")
        assert head == b"event: appends\nid: 4\n"
        (row,) = json.loads(data)
        assert (row[2], row[4], row[5], row[6]) == ("lv-shown", 10, 11, 2)  # topic, offsets, records
    finally:
        reader.feed_eof()  # the page went away
        await asyncio.wait_for(task, 10)
    assert broker.append_feed is None


def test_publish_never_raises_into_the_append_path(caplog):
    broker = SimpleNamespace(append_feed=None)
    feed = AppendFeed(broker)
    sub = feed.subscribe()
    assert broker.append_feed == feed.publish
    feed.publish("t", 0, object(), 9, 10)  # not an AppendResult: logged, not raised
    assert not sub.rows and not sub.appended and "could not be published" in caplog.text
    feed.unsubscribe(sub)
    assert broker.append_feed is None


def test_explain_route_serves_the_partition_page(ui_broker):
    p = producer(ui_broker)
    offsets = [p.send("lv-explain", b"v" * 50).get(10).offset for _ in range(4)]
    p.close(5)
    status, body = get(ui_broker.ui_url + f"/explain/p/lv-explain-0/data.json?offset={offsets[2]}")
    assert status == 200
    page = json.loads(body)
    assert page["partition"]["log_end_offset"] == offsets[-1] + 1
    assert [b["base_offset"] for b in page["window"]["batches"]] == offsets
    position = {b["base_offset"]: b["position"] for b in page["window"]["batches"]}[offsets[2]]
    assert (page["lookup"]["offset"], page["lookup"]["position"]) == (offsets[2], position)
    status, html = get(ui_broker.ui_url + "/explain/p/lv-explain-0/")
    assert status == 200 and "minibroker explain" in html


def test_share_group_in_flight_records_with_states_and_delivery_counts(minibroker_factory):
    clients = pytest.importorskip("test_share_groups_clients")  # skipped without a ShareConsumer
    runner = minibroker_factory({**UI, **clients.SHARE_OVERRIDES})
    runner.create_topic("lv-share", 1)
    group = clients._group(runner, "lv-share")
    clients._produce_batches(runner, "lv-share", [b"a", b"b", b"c"])
    consumer = clients._consumer(runner, group)
    try:
        consumer.subscribe(["lv-share"])
        (got,) = clients._poll_until([consumer], lambda got: len(got[0]) == 3, ack=None)
        assert [(offset, count) for _, offset, count in got] == [(0, 1), (1, 1), (2, 1)]
        (row,) = [g for g in overview(runner)["groups"] if g["group_id"] == group]
        assert row["type"] == "share" and [m["assignment"] for m in row["members"]] == [{"lv-share": [0]}]
        (part,) = row["in_flight"]
        assert (part["topic"], part["partition"]) == ("lv-share", 0)
        assert (part["start_offset"], part["end_offset"]) == (0, 3)
        assert [(r["first"], r["last"], r["state"], r["delivery_count"]) for r in part["runs"]] == [
            (0, 2, "ACQUIRED", 1)]
        assert part["runs"][0]["member"] == row["members"][0]["member_id"]
    finally:
        consumer.close()
    # closing released the records the consumer held: available again, and (as Kafka does for records
    # released by a member leaving) their delivery not counted
    (row,) = [g for g in overview(runner)["groups"] if g["group_id"] == group]
    (part,) = row["in_flight"]
    assert [(r["first"], r["last"], r["state"], r["delivery_count"]) for r in part["runs"]] == [
        (0, 2, "AVAILABLE", 0)]


def test_a_broker_stop_closes_open_feeds_quietly(ui_broker, caplog):
    """The feeds open when the broker stops are closed (the page's EventSource then reconnects to the
    next broker), the stop does not wait on them, and nothing is logged at ERROR: Python 3.11's streams
    log a connection handler that ends cancelled as "Exception in callback"."""
    feed = FeedReader(ui_broker.ui_url)
    try:
        assert feed.next_event()[0] == "hello"
        with caplog.at_level(logging.ERROR):
            ui_broker.stop()
        with pytest.raises(ConnectionError):
            while True:
                feed.next_event()  # the rest of what was sent, then the end of the stream
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        feed.close()

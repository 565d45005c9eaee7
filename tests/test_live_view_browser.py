"""The live view's page in a real headless browser (issue 33), beside real kafka-python clients.

Debian's chromium driven by Playwright, as tests/test_explain.py does (its ``browser`` fixture and
``Tab``; the same xdist group, so one Chromium runs at a time). What the page shows is checked against
what the clients got back: the offsets of the producer's record metadata, the committed offsets, the
transaction's life. Screenshots go to ``$MINIBROKER_ARTIFACTS_DIR`` (else the test's tmp dir); one of
them is docs/ui.png.
"""

from __future__ import annotations

import socket

import pytest
from test_explain import Tab, artifact_path, browser  # noqa: F401 - browser is a fixture used here

pytestmark = pytest.mark.xdist_group("explain-browser")  # one worker, one Chromium (the browser fixture)

FEED_DEADLINE_MS = 1000  # issue 33: a batch shows in the feed within 1 s
# How long the test waits for a row: the deadline is judged on the page's own clock, from the broker's
# append to the row's insertion (data-appended-ms, data-shown-ms), not on this process's scheduling,
# which a loaded machine (the full suite beside other work) delays by seconds.
ROW_WAIT_MS = 15000


def assert_shown_in_time(row) -> None:
    appended, shown = int(row.get_attribute("data-appended-ms")), int(row.get_attribute("data-shown-ms"))
    assert shown - appended <= FEED_DEADLINE_MS, f"the row showed {shown - appended} ms after the append"


def row_selector(**data) -> str:
    return "".join(f'[data-{k.replace("_", "-")}="{v}"]' for k, v in data.items())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def page(browser):  # noqa: F811 - the fixture imported above
    tabs: list[Tab] = []

    def open_page(url: str) -> Tab:
        tab = Tab(browser).open(url)
        tabs.append(tab)
        tab.page.locator('#status[data-state="live"]').wait_for(timeout=10_000)
        return tab

    yield open_page
    for tab in tabs:
        tab.close()


def test_feed_lag_and_transactions_as_clients_work(minibroker_factory, page, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    runner = minibroker_factory({"ui.enable": "true", "metrics.port": "0"})
    tab = page(runner.ui_url + "?rows=10")
    p = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, linger_ms=0)
    try:
        # a batch: the row carries the offsets the producer got back
        sent = [p.send("ui-orders", key=b"k%d" % i, value=b"order %d" % i) for i in range(3)]
        p.flush(10)
        offsets = [m.get(10).offset for m in sent]
        row = tab.page.locator("tr.feed-row" + row_selector(topic="ui-orders", first_offset=offsets[0],
                                                            last_offset=offsets[-1]))
        row.wait_for(timeout=ROW_WAIT_MS)
        assert_shown_in_time(row)
        assert row.get_attribute("data-records") == "3"

        # clicking it opens explain's byte map at that batch
        with tab.page.expect_popup() as popup:
            row.click()
        explain = popup.value
        explain.locator(f'.batch[data-base-offset="{offsets[0]}"]').wait_for(timeout=10_000)
        explain.close()

        # a consumer group: its lag for the partition, then 0 once everything is committed
        consumer = KafkaConsumer("ui-orders", bootstrap_servers=runner.bootstrap_servers, group_id="ui-group",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            while not consumer.poll(200):
                pass
            tp = TopicPartition("ui-orders", 0)
            consumer.commit({tp: OffsetAndMetadata(1, "", -1)})
            lag_row = "tr.lag-row" + row_selector(group="ui-group", topic="ui-orders", partition=0)
            tab.page.locator(lag_row + row_selector(lag=offsets[-1])).wait_for(timeout=5000)
            consumer.commit({tp: OffsetAndMetadata(offsets[-1] + 1, "", -1)})
            tab.page.locator(lag_row + row_selector(lag=0)).wait_for(timeout=5000)
            # the group's timeline, drawn from the coordinator's events: its join and sync
            card = '.group[data-group="ui-group"] '
            sync = tab.page.locator(card + "ol.timeline li.event-sync").first
            sync.wait_for(state="attached", timeout=5000)
            assert tab.page.locator(card + "ol.timeline li.event-join").count() >= 1
        finally:
            consumer.close()

        # a transaction: open while it runs, gone after the commit
        tx = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, transactional_id="ui-tx", linger_ms=0)
        try:
            tx.init_transactions()
            tx.begin_transaction()
            first = tx.send("ui-payments", b"pay").get(10).offset
            txn_row = tab.page.locator("tr.txn-row" + row_selector(transactional_id="ui-tx"))
            txn_row.wait_for(timeout=5000)
            feed_row = tab.page.locator("tr.feed-row" + row_selector(topic="ui-payments", first_offset=first,
                                                                     transactional="true"))
            feed_row.wait_for(timeout=ROW_WAIT_MS)
            assert_shown_in_time(feed_row)
            assert feed_row.get_attribute("data-producer-id") == txn_row.get_attribute("data-producer-id")
            tab.page.screenshot(path=artifact_path(tmp_path, "live-view.png"),  # docs/ui.png is one
                                clip={"x": 0, "y": 0, "width": 1400, "height": 640})
            tx.commit_transaction()
            # the coordinator's COMMIT marker, right after the transaction's batch
            tab.page.locator("tr.feed-row" + row_selector(topic="ui-payments", first_offset=first + 1,
                                                          control="true")).wait_for(timeout=5000)
            txn_row.wait_for(state="detached", timeout=5000)
            tab.page.locator("#no-open-txn").wait_for(timeout=5000)
        finally:
            tx.close(5)

        # the window: never more rows than asked for, the newest on top
        for i in range(15):
            p.send("ui-window", b"w%d" % i)
            p.flush(10)
        last = p.send("ui-window", b"last").get(10).offset
        newest = tab.page.locator("tr.feed-row" + row_selector(topic="ui-window", first_offset=last))
        newest.wait_for(timeout=5000)
        assert tab.page.locator("#feed-body tr").count() == 10
        assert tab.page.locator("#feed-body tr").first.get_attribute("data-first-offset") == str(last)

        # paused: appends are held, shown on resume
        tab.page.click("#feed-pause")
        held = p.send("ui-window", b"held").get(10).offset
        held_row = tab.page.locator("tr.feed-row" + row_selector(topic="ui-window", first_offset=held))
        tab.page.wait_for_function("() => document.getElementById('feed-counts').textContent"
                                   ".includes('held')")
        assert held_row.count() == 0
        tab.page.click("#feed-pause")
        held_row.wait_for(timeout=5000)
        assert tab.problems() == []
    finally:
        p.close(5)


def test_a_burst_over_the_window_shows_the_newest_rows_and_the_skipped_count(minibroker_factory, page):
    """25 appends in one step of the broker's loop, to a page keeping 10 rows: the broker sends the
    newest 10 and says it skipped 15; the page shows both."""
    from test_live_view import burst

    runner = minibroker_factory({"ui.enable": "true", "metrics.port": "0"})
    runner.create_topic("ui-burst")
    tab = page(runner.ui_url + "?rows=10")
    offsets = burst(runner, "ui-burst", 25)
    newest = tab.page.locator("tr.feed-row" + row_selector(topic="ui-burst", first_offset=offsets[-1]))
    newest.wait_for(timeout=ROW_WAIT_MS)
    tab.page.wait_for_function("() => document.getElementById('feed-counts').textContent"
                               ".includes('15 skipped by the broker')", timeout=5000)
    shown = [int(tr.get_attribute("data-first-offset")) for tr in tab.page.locator("tr.feed-row").all()]
    assert shown == offsets[-10:][::-1]  # newest first
    assert tab.problems() == []


def test_page_reconnects_after_a_broker_restart(minibroker_factory, page):
    from kafka import KafkaProducer

    runner = minibroker_factory({"ui.enable": "true", "metrics.port": str(free_port())})
    tab = page(runner.ui_url)
    runner.restart()
    tab.page.locator('#status[data-state="live"]').wait_for(timeout=15_000)
    tab.page.locator("tr.marker", has_text="broker restarted").wait_for(timeout=15_000)
    assert tab.page.locator("#restarted").text_content().startswith("restarted at ")
    p = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, linger_ms=0)
    try:
        offset = p.send("ui-after-restart", b"again").get(10).offset
        row = tab.page.locator("tr.feed-row" + row_selector(topic="ui-after-restart", first_offset=offset))
        row.wait_for(timeout=5000)
    finally:
        p.close(5)
    assert not [m for m in tab.problems() if m[0] == "pageerror"]


@pytest.mark.slow
def test_page_under_load_keeps_its_window_and_heap_and_survives_a_restart(minibroker_factory, browser):  # noqa: F811
    """scripts/bench_live_view_soak.py's measurement for 20 s (the benchmark runs it for 10 minutes):
    the feed table never holds more rows than the window, the heap the page keeps (after a forced
    collection) does not grow with the appends shown, and the page is live again after the restart."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        from bench_live_view_soak import TOPIC, soak
    finally:
        sys.path.pop(0)
    runner = minibroker_factory({"ui.enable": "true", "metrics.port": str(free_port())})
    runner.create_topic(TOPIC, 1)
    window = 50
    result = soak(browser, runner.ui_url, runner.bootstrap_servers, runner.restart, duration_s=20,
                  interval_s=4, rows=window, rate=200, log=lambda _line: None)
    samples = result["samples"]
    assert len(samples) >= 4 and samples[-1]["produced"] > 10 * window  # the window was overrun many times
    assert [s["feed_rows"] for s in samples] == [window] * len(samples)
    assert result["restart"] is not None and result["page_errors"] == []
    heaps = [s["heap_used_bytes"] for s in samples]
    assert max(heaps) < 3 * heaps[0], heaps  # generous: a leak per append would pass this many times over


def test_page_starts_a_new_feed_when_the_browser_gives_the_old_one_up(minibroker_factory, page):
    """EventSource retries a dropped connection by itself but closes for good on an answer that is not
    an event stream (a broker stopping or starting can give one). The page then starts a new one: here
    every feed request is answered 503 while the broker restarts, until the route is lifted."""
    from kafka import KafkaProducer

    runner = minibroker_factory({"ui.enable": "true", "metrics.port": str(free_port())})
    tab = page(runner.ui_url)
    refused = []

    def refuse(route):
        refused.append(route.request.url)
        route.fulfill(status=503, body="stopping")

    tab.page.route("**/ui/feed*", refuse)  # the page asks ?rows=N
    runner.restart()  # the open feed drops; every new one is refused
    tab.page.locator('#status[data-state="reconnecting"]').wait_for(timeout=15_000)
    # Refused twice: the browser's own retry (the answer closes the EventSource), then the page's new one
    deadline_ms = 15_000
    waited = 0
    while len(refused) < 2 and waited < deadline_ms:
        tab.page.wait_for_timeout(100)
        waited += 100
    assert len(refused) >= 2, f"feed requests after the restart: {refused}"
    tab.page.unroute("**/ui/feed*", refuse)
    tab.page.locator('#status[data-state="live"]').wait_for(timeout=15_000)
    p = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, linger_ms=0)
    try:
        offset = p.send("ui-new-feed", b"again").get(10).offset
        tab.page.locator("tr.feed-row" + row_selector(topic="ui-new-feed", first_offset=offset)).wait_for(
            timeout=5000)
    finally:
        p.close(5)
    assert not [m for m in tab.problems() if m[0] == "pageerror"]

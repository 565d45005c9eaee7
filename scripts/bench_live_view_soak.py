"""A live-view page left open under produce load (issue 33; a benchmark, not a suite test).

Usage: ``python scripts/bench_live_view_soak.py [--duration 600] [--interval 30] [--rows 200]
[--rate 500] [--out FILE.json]``

Starts a broker (``minibroker serve`` in its own process, ``ui.enable=true`` on a fixed
metrics port so the page can come back after a restart), opens ``/ui?rows=N`` in Debian's Chromium
through Playwright (as tests/test_live_view_browser.py does), produces ``--rate`` records a second
(kafka-python, one record an append, so one feed row each) for ``--duration`` seconds, restarts the
broker once halfway, and every ``--interval`` seconds samples the page through the DevTools protocol:
the JS heap in use after a forced garbage collection (``HeapProfiler.collectGarbage``, then
``Performance.getMetrics``' JSHeapUsedSize: what the page keeps, not what it has yet to collect), the
DOM node count, the JS event listeners and the feed table's rows (restart markers included). Prints the
samples (and writes them with ``--out``), the time the page took to be live again after the restart, and
the heap's last/first ratio. Results: docs/benchmarks.md.

``soak()`` is also run for ~20 s by tests/test_live_view_browser.py (slow), against a thread-mode broker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOPIC = "ui-soak"


class ProduceLoad(threading.Thread):
    """``rate`` records a second to ``TOPIC`` until stopped; failed sends (the broker restarting) are
    counted, not retried."""

    def __init__(self, bootstrap_servers: str, rate: int):
        super().__init__(daemon=True)
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=0, retries=0,
                                      reconnect_backoff_max_ms=500, request_timeout_ms=5000)
        self.rate = rate
        self.sent = self.failed = 0
        self.stopping = threading.Event()

    def _failed(self, _exc) -> None:
        self.failed += 1

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due and not self.stopping.is_set():
                try:
                    self.producer.send(TOPIC, b"soak %d" % self.sent).add_errback(self._failed)
                except Exception:  # noqa: BLE001 - a buffer full while the broker is away
                    self.failed += 1
                self.sent += 1
            time.sleep(0.01)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.producer.close(5)


def sample(page, cdp, started: float) -> dict:
    cdp.send("HeapProfiler.collectGarbage")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {"t_s": round(time.monotonic() - started, 1), "heap_used_bytes": int(metrics["JSHeapUsedSize"]),
            "dom_nodes": int(metrics["Nodes"]), "js_listeners": int(metrics["JSEventListeners"]),
            "feed_rows": page.locator("#feed-body tr").count()}  # markers too: the window counts them


def soak(browser, ui_url: str, bootstrap_servers: str, restart, *, duration_s: float, interval_s: float,
         rows: int, rate: int, log=print) -> dict:
    """Open the page, load the broker for ``duration_s``, call ``restart()`` once halfway, sample every
    ``interval_s`` (and at the end). Returns the samples and the restart's figures."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{ui_url}?rows={rows}")
        page.locator('#status[data-state="live"]').wait_for(timeout=15_000)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        load = ProduceLoad(bootstrap_servers, rate)
        started = time.monotonic()
        load.start()
        samples, restart_info = [], None
        next_sample, restart_at = started + interval_s, started + duration_s / 2
        try:
            while True:
                now = time.monotonic()
                if restart_info is None and now >= restart_at:
                    t0 = time.monotonic()
                    restart()
                    page.locator('#status[data-state="live"]').wait_for(timeout=30_000)
                    # the header's note, not the feed's marker row: 50 rows of appends scroll that out
                    # within a fraction of a second, which a loaded machine's polling can miss
                    page.locator("#restarted:not([hidden])").wait_for(timeout=30_000)
                    restart_info = {"at_s": round(t0 - started, 1),
                                    "live_again_after_s": round(time.monotonic() - t0, 2)}
                    log(f"restarted at {restart_info['at_s']} s, page live again after "
                        f"{restart_info['live_again_after_s']} s")
                if now >= next_sample or now >= started + duration_s:
                    s = sample(page, cdp, started)
                    s["produced"] = load.sent
                    samples.append(s)
                    log(json.dumps(s))
                    next_sample += interval_s
                    if now >= started + duration_s:
                        break
                time.sleep(0.2)
        finally:
            load.stop()
        return {"samples": samples, "restart": restart_info, "rows": rows, "rate": rate,
                "failed_sends": load.failed, "page_errors": errors,
                "heap_last_over_first": round(samples[-1]["heap_used_bytes"] / samples[0]["heap_used_bytes"],
                                              2)}
    finally:
        page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between samples (default 30)")
    ap.add_argument("--rows", type=int, default=200, help="the page's feed window, ?rows= (default 200)")
    ap.add_argument("--rate", type=int, default=500, help="records (appends) a second (default 500)")
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args()

    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import bench  # scripts/bench.py: free_port
    from playwright.sync_api import sync_playwright
    from test_explain import CHROMIUM, CHROMIUM_ARGS  # the suite's browser, launched the same way

    from minibroker.testing import BrokerRunner

    runner = BrokerRunner({"ui.enable": "true", "metrics.port": str(bench.free_port())}, mode="process")
    runner.start()
    try:
        runner.create_topic(TOPIC, 1)
        with sync_playwright() as pw:
            chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                result = soak(chromium, runner.ui_url, runner.bootstrap_servers, runner.restart,
                              duration_s=args.duration, interval_s=args.interval, rows=args.rows,
                              rate=args.rate)
            finally:
                chromium.close()
    finally:
        runner.cleanup()
    result["loadavg"] = os.getloadavg()
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

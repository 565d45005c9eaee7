"""``minibroker explain`` on a big segment (a script, not a test): python scripts/bench_explain.py

Usage: ``python scripts/bench_explain.py [--size-mib 1024] [--repeat 3] [--out FILE.json]``.

Builds, in a temp dir, a 1 GiB segment (one v2 batch of ~1 KiB written over and over with its baseOffset
patched: the v2 CRC does not cover it) with the sparse ``.index`` Kafka's rule gives at
``index.interval.bytes`` 4096 (~210k entries) and a ``.timeindex``, and the same for 1 MiB as the baseline
of the same run. For each: the wall time to build the page (``minibroker explain -o``, in-process, best of
``--repeat``), its size, and in Debian's chromium driven by Playwright the time from navigation to the load
event and to first (contentful) paint, plus the DOM's element count, then the ratios 1 GiB / 1 MiB.

Needs 1.1 GiB of free disk in the temp dir (refuses below 3 GiB) and /usr/bin/chromium with the playwright
package for the browser half (without them only the generation is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from minibroker.records import v2  # noqa: E402
from minibroker.tools import explain  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MIN_FREE = 3 << 30
INTERVAL = 4096
RECORDS = 8
TS = 1_767_225_600_000


def write_segment(directory: str, total_bytes: int) -> dict:
    """``<dir>/big-0/00000000000000000000.{log,index,timeindex}``: one batch repeated; the index as
    ``LogSegment`` writes it (an entry when more than INTERVAL bytes were written since the last)."""
    partition = os.path.join(directory, "big-0")
    os.makedirs(partition, exist_ok=True)
    batch = v2.build_batch([(i, TS, b"key-%d" % i, b"%06d" % i + b"." * 110, ()) for i in range(RECORDS)],
                           partition_leader_epoch=0)
    size = len(batch)
    count = total_bytes // size
    per_chunk = max(1, (4 << 20) // size)
    template = bytearray(batch * per_chunk)
    index = bytearray()
    since_last = 0
    pack = struct.Struct(">q").pack_into
    entry = struct.Struct(">ii").pack
    with open(os.path.join(partition, "00000000000000000000.log"), "wb") as log:
        for first in range(0, count, per_chunk):
            n = min(per_chunk, count - first)
            chunk = template if n == per_chunk else bytearray(batch * n)
            for j in range(n):
                b = first + j
                pack(chunk, j * size, b * RECORDS)
                if since_last > INTERVAL:
                    index += entry(b * RECORDS + RECORDS - 1, b * size)
                    since_last = 0
                since_last += size
            log.write(chunk)
    with open(os.path.join(partition, "00000000000000000000.index"), "wb") as f:
        f.write(index)
    with open(os.path.join(partition, "00000000000000000000.timeindex"), "wb") as f:
        f.write(struct.pack(">qi", TS, RECORDS - 1))  # the timestamps never grow: one entry
    return {"partition": partition, "bytes": count * size, "batches": count, "batch_bytes": size,
            "index_entries": len(index) // 8}


def generate(partition: str, out: str, repeat: int, offset: int | None = None) -> tuple[float, int]:
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        page = explain.build_page(explain.PartitionFiles.from_path(partition), offset=offset)
        html = explain.render_html(page)
        with open(out, "w", encoding="utf-8") as f:
            f.write(html)
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best, os.path.getsize(out)


def render(browser, path: str, repeat: int) -> dict:
    """From navigation start: the load event (the page renders in an inline script that runs before
    it), first paint (the header, painted before that script runs) and the first frame after load
    (the rendered page on screen); best of ``repeat`` fresh pages; and the DOM's size."""
    best: dict | None = None
    for _ in range(repeat):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.add_init_script("addEventListener('load', () => requestAnimationFrame(() => "
                             "setTimeout(() => { window.__frameAfterLoad = performance.now(); })))")
        start = time.perf_counter()
        page.goto("file://" + path, wait_until="load")
        wall = time.perf_counter() - start
        page.wait_for_function("window.__frameAfterLoad !== undefined")
        timing = page.evaluate("""() => {
            const nav = performance.getEntriesByType('navigation')[0];
            const paint = Object.fromEntries(
                performance.getEntriesByType('paint').map(p => [p.name, p.startTime]));
            return {load_ms: nav.loadEventEnd, frame_after_load_ms: window.__frameAfterLoad,
                    dom_content_loaded_ms: nav.domContentLoadedEventEnd,
                    first_paint_ms: paint['first-paint'] ?? null,
                    first_contentful_paint_ms: paint['first-contentful-paint'] ?? null,
                    elements: document.getElementsByTagName('*').length,
                    batch_elements: document.querySelectorAll('.batch').length};
        }""")
        timing["goto_wall_ms"] = round(wall * 1000, 1)
        page.close()
        if best is None or timing["load_ms"] < best["load_ms"]:
            best = timing
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in best.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="the big segment (default 1024 MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--out", metavar="FILE.json", help="also write the figures as JSON")
    parser.add_argument("--dir", help="where to build the segments (default: a temp dir, removed after)")
    args = parser.parse_args(argv)

    where = args.dir or tempfile.gettempdir()
    free = shutil.disk_usage(where).free
    if free < MIN_FREE:
        print(f"bench_explain: only {free / 2**30:.1f} GiB free in {where}; it needs 3 GiB "
              f"(a {args.size_mib} MiB segment and a page)", file=sys.stderr)
        return 1
    root = tempfile.mkdtemp(prefix="bench-explain-", dir=args.dir)
    results: dict = {"interval_bytes": INTERVAL, "page_batches": explain.PAGE_BATCHES, "cases": {}}
    browser = pw = None
    try:
        if os.access(CHROMIUM, os.X_OK):
            try:
                from playwright.sync_api import sync_playwright

                pw = sync_playwright().start()
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                warm = browser.new_page()  # the browser's first page pays for its start-up
                warm.set_content("<p>warm-up</p>")
                warm.close()
            except ImportError:
                print("playwright is not installed: page generation only", file=sys.stderr)
        else:
            print(f"{CHROMIUM} is missing: page generation only", file=sys.stderr)
        for name, size in (("1MiB", 1 << 20), (f"{args.size_mib}MiB", args.size_mib << 20)):
            case_dir = os.path.join(root, name)
            start = time.perf_counter()
            seg = write_segment(case_dir, size)
            seg["build_s"] = round(time.perf_counter() - start, 2)
            out = os.path.join(case_dir, "page.html")
            took, html_bytes = generate(seg["partition"], out, args.repeat)
            case = {**{k: v for k, v in seg.items() if k != "partition"},
                    "generate_ms": round(took * 1000, 1), "html_bytes": html_bytes}
            if browser is not None:
                case.update(render(browser, out, args.repeat))
            results["cases"][name] = case
            print(f"{name:>8}: segment {seg['bytes']:,} B, {seg['batches']:,} batches, "
                  f"{seg['index_entries']:,} index entries (built in {seg['build_s']} s); "
                  f"page generated in {case['generate_ms']} ms, "
                  f"{html_bytes:,} B" + (
                      f"; chromium: load {case['load_ms']} ms, first frame after load "
                      f"{case['frame_after_load_ms']} ms, first paint {case['first_paint_ms']} ms, "
                      f"{case['elements']:,} elements, {case['batch_elements']} batches" if browser else ""))
            if size > 1 << 20:  # the page of an offset three quarters in: index search and header scan
                offset = seg["batches"] * 3 // 4 * RECORDS + 1
                took, at_bytes = generate(seg["partition"], out, args.repeat, offset)
                case["generate_at_offset_ms"] = round(took * 1000, 1)
                print(f"{name:>8}: the page of offset {offset:,} generated in {took * 1000:.1f} ms, "
                      f"{at_bytes:,} B")
            shutil.rmtree(case_dir, ignore_errors=True)
    finally:
        if browser is not None:
            browser.close()
        if pw is not None:
            pw.stop()
        shutil.rmtree(root, ignore_errors=True)
    small, big = results["cases"]["1MiB"], results["cases"][f"{args.size_mib}MiB"]
    compared = ("generate_ms", "html_bytes", "load_ms", "frame_after_load_ms", "first_paint_ms", "elements")
    ratios = {k: round(big[k] / small[k], 2) for k in compared if small.get(k) and big.get(k)}
    results["ratios_big_over_1MiB"] = ratios
    print("ratios (big / 1 MiB): " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``minibroker explain`` (issue 16): the page, opened in a real headless browser.

Debian's chromium driven by Playwright for Python (``executable_path=/usr/bin/chromium``; Playwright's own
browser downloads are never used). Without chromium or playwright the browser tests are skipped with the
reason, except under CI (``CI`` set and not 0/false/no, tests/suite_switches.py), where they fail.

Expected positions, offsets and index entries are read from the files with ``struct`` here, never with the
code under test. Segments come from a real broker (kafka-python producing) or are built byte by byte with the
record layer's builders. A screenshot goes to ``$MINIBROKER_ARTIFACTS_DIR`` (else the test's tmp dir).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.request

import pytest
from suite_switches import is_ci

from minibroker.cli import main
from minibroker.records import legacy, v2
from minibroker.records.codecs import Compression
from minibroker.testing import tied_to_this_process

CHROMIUM = "/usr/bin/chromium"

pytestmark = pytest.mark.xdist_group("explain-browser")  # one worker, one Chromium (the browser fixture)

BATCH_ROWS = "els => els.map(e => [+e.dataset.position, +e.dataset.baseOffset, +e.dataset.lastOffset])"
POSITIONS = "els => els.map(e => +e.dataset.position)"
SLOTS = "els => els.map(e => +e.dataset.slot)"
TS = 1_700_000_000_000
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
V2_CHANGEABLE = set(range(0, 8)) | set(range(12, 16))  # baseOffset, partitionLeaderEpoch


# ---------------------------------------------------------------------------------------------
# the files, read independently


def read_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_log(path) -> list[tuple[int, int, int, int, int]]:
    """(position, size, magic, first offset, last offset) of each entry; v0/v1 wrappers: the first
    offset from the decompressed inner messages (the wrapper holds the last)."""
    data = read_bytes(path)
    out, pos = [], 0
    while len(data) - pos >= 12:
        offset, length = struct.unpack_from(">qi", data, pos)
        size = 12 + length
        if pos + size > len(data):
            break
        magic = data[pos + 16]
        if magic == 2:
            first, last = offset, offset + struct.unpack_from(">i", data, pos + 23)[0]
        else:
            first = last = offset
            msg = legacy.parse_message(data, pos)
            if msg.compression:
                _, inner = legacy.inner_messages(msg)
                first = inner[0].offset if magic == 0 else offset - (inner[-1].offset - inner[0].offset)
        out.append((pos, size, magic, first, last))
        pos += size
    return out


def read_index(path, base: int = 0) -> list[tuple[int, int]]:
    """(absolute offset, position) of the written entries (a preallocated index ends in zeros)."""
    data = read_bytes(path)
    entries = [struct.unpack_from(">ii", data, i) for i in range(0, len(data) - len(data) % 8, 8)]
    while entries and entries[-1] == (0, 0):
        entries.pop()
    return [(base + rel, pos) for rel, pos in entries]


def floor_slot(index: list[tuple[int, int]], offset: int) -> int:
    """The largest entry <= offset (-1: none)."""
    found = -1
    for slot, (o, _) in enumerate(index):
        if o <= offset:
            found = slot
    return found


def fetch_position(batches, offset: int) -> int | None:
    """What a fetch at ``offset`` returns: the first entry whose last offset >= offset."""
    return next((pos for pos, _, _, _, last in batches if last >= offset), None)


def files_digest(directory) -> dict[str, str]:
    return {n: hashlib.sha256(read_bytes(os.path.join(directory, n))).hexdigest()
            for n in sorted(os.listdir(directory)) if os.path.isfile(os.path.join(directory, n))}


def explain(*argv) -> int:
    return main(["explain", *map(str, argv)])


def produce_batches(bootstrap: str, topic: str, rounds: int) -> None:
    """``rounds`` batches of 1-4 records of growing sizes, one flush each (one batch each)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        for i in range(rounds):
            for j in range(1 + i % 4):
                producer.send(topic, key=b"k%d" % i, value=b"v%d-" % j + b"x" * (8 + 5 * i))
            producer.flush(30)
    finally:
        producer.close(5)


# ---------------------------------------------------------------------------------------------
# the browser


def _browser_missing() -> str | None:
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (Debian package chromium; scripts/run-tests.sh installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser():  # the module's tests share one worker (its xdist_group), so one Chromium
    reason = _browser_missing()
    if reason is not None:
        if is_ci():
            pytest.fail(f"{reason}; under CI={os.environ.get('CI')} the explain tests must run")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Tab:
    """A browser page with every console message and page error it produced."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.console: list[tuple[str, str]] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))

    def open(self, url: str) -> Tab:
        self.page.goto(url)
        return self

    def problems(self) -> list[tuple[str, str]]:
        return [(kind, text) for kind, text in self.console if kind in ("error", "warning", "pageerror")]

    def batches(self) -> list[tuple[int, int, int]]:
        return self.page.eval_on_selector_all(".batch", BATCH_ROWS)

    def index_entries(self) -> list[tuple[int, int]]:
        return self.page.eval_on_selector_all(
            ".index-entry", "els => els.map(e => [+e.dataset.offset, +e.dataset.position])")

    def lookup(self, offset: int) -> dict:
        """Type the offset, press the button: what the page highlights (once it says, a served page
        may first fetch the page of another segment)."""
        self.page.evaluate("document.getElementById('lookup-result').replaceChildren()")
        self.page.fill("#offset-input", str(offset))
        self.page.click("#offset-go")
        outcome = self.page.locator(f'#lookup-outcome[data-offset="{offset}"]')
        outcome.wait_for()
        return {
            "targets": self.targets(), "text": outcome.inner_text(),
            "floors": self.page.eval_on_selector_all(".index-entry.fetch-floor", SLOTS),
            "floor_slot": int(outcome.get_attribute("data-floor-slot")),
            "probes": [int(s) for s in (outcome.get_attribute("data-probes") or "").split(",") if s],
            "in_view": self.page.evaluate(
                "() => { const e = document.querySelector('.batch.fetch-target'); if (!e) return null;"
                " const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; }"),
        }

    def targets(self) -> list[int]:
        """Positions of the batches highlighted as what a fetch returns."""
        return self.page.eval_on_selector_all(".batch.fetch-target", POSITIONS)

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def tab(browser):
    opened: list[Tab] = []

    def open_tab(url: str) -> Tab:
        t = Tab(browser).open(url)
        opened.append(t)
        return t

    yield open_tab
    for t in opened:
        t.close()


def binary_search_probes(index: list[tuple[int, int]], offset: int) -> list[int]:
    """The slots a largest-lower-bound search probes, mid = (lo + hi) // 2 as OffsetIndex does."""
    lo, hi, probes = 0, len(index) - 1, []
    while lo <= hi:
        mid = (lo + hi) // 2
        probes.append(mid)
        if index[mid][0] <= offset:
            lo = mid + 1
        else:
            hi = mid - 1
    return probes


def artifact_path(tmp_path, name: str) -> str:
    where = os.environ.get("MINIBROKER_ARTIFACTS_DIR") or str(tmp_path)
    os.makedirs(where, exist_ok=True)
    return os.path.join(where, name)


# ---------------------------------------------------------------------------------------------
# command line


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        explain("-h")
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("PARTITION-DIR|SEGMENT-FILE", "-o", "--output", "--segment", "--offset", "--position",
                 "--append-log", "--replay", "--magic", "--at-offset", "--serve", "--port"):
        assert flag in text, flag
    assert "explain" in subprocess.run([sys.executable, "-m", "minibroker", "-h"], capture_output=True,
                                       text=True, check=True).stdout


def test_a_path_that_is_no_partition_dir_or_segment_exits_1(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "orders").mkdir()
    for path, says in ((tmp_path / "orders", "not a partition directory"),
                       (tmp_path / "notes.txt", "not a segment file"),
                       (tmp_path / "missing-0", "no such file or directory")):
        assert explain(path, "-o", tmp_path / "page.html") == 1
        err = capsys.readouterr().err
        assert says in err and str(path) in err
    assert not (tmp_path / "page.html").exists()


def test_append_log_lines_of_both_formats_parse():
    from minibroker.tools.explain import parse_append_line

    message = ("my-topic-3: offsets 5..9 path=in-place sent_len=4 stored_len=4 sent=00000000 "
               "stored=00000005")
    text = f"2026-11-23 14:10:52,585 DEBUG [minibroker.append.bytes] {message}\n"
    as_json = json.dumps({"ts": 1.0, "level": "DEBUG", "logger": "minibroker.append.bytes",
                          "message": message})
    for line in (text, as_json):
        trace = parse_append_line(line)
        assert (trace.topic, trace.partition, trace.first_offset, trace.last_offset, trace.path) == (
            "my-topic", 3, 5, 9, "in-place")
        assert (trace.sent, trace.stored) == (bytes(4), bytes.fromhex("00000005"))
    other = json.dumps({"logger": "minibroker.append", "message": message})
    assert parse_append_line(other) is None
    assert parse_append_line("2026-11-23 14:10:52,585 INFO [minibroker.broker] ready") is None


# ---------------------------------------------------------------------------------------------
# a v2 segment from a real broker


def test_v2_segment_batches_index_and_fetch_lookup(minibroker_factory, tab, tmp_path):
    broker = minibroker_factory()
    broker.create_topic("explained", 1, {"index.interval.bytes": "150"})
    produce_batches(broker.bootstrap_servers, "explained", 40)
    partition = os.path.join(broker.data_dir, "explained-0")
    batches = read_log(os.path.join(partition, "00000000000000000000.log"))
    index = read_index(os.path.join(partition, "00000000000000000000.index"))
    assert len(batches) >= 30 and len(index) >= 10
    leo = batches[-1][4] + 1

    out = tmp_path / "page.html"
    before = files_digest(partition)
    assert explain(partition, "-o", out) == 0
    assert files_digest(partition) == before, "explain only reads"
    html = out.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the page must load nothing from outside"
    page = tab(out.as_uri())
    assert page.batches() == [[pos, first, last] for pos, _, _, first, last in batches]
    assert page.index_entries() == [list(e) for e in index]
    assert int(page.page.get_attribute("#fact-leo", "data-offset")) == leo
    assert int(page.page.get_attribute("#leo-marker", "data-offset")) == leo

    # an offset inside a multi-record batch after the first index entry: search, then scan
    inside = next(b for b in batches if b[4] - b[3] >= 2 and b[0] > index[0][1] + 300)
    for offset in (inside[3] + 1, 0, index[3][0], batches[-1][4]):
        got = page.lookup(offset)
        assert got["targets"] == [fetch_position(batches, offset)], offset
        assert got["floor_slot"] == floor_slot(index, offset)
        assert got["floors"] == ([] if got["floor_slot"] < 0 else [got["floor_slot"]])
        assert got["probes"] == binary_search_probes(index, offset)
        assert got["in_view"]
    assert "inside it" in page.lookup(inside[3] + 1)["text"]
    at_end = page.lookup(leo)
    assert at_end["targets"] == [] and "log end offset" in at_end["text"]
    page.lookup(inside[3] + 1)
    shot = artifact_path(tmp_path, "explain.png")
    page.page.screenshot(path=shot, full_page=False)
    print(f"screenshot: {shot}")
    assert page.problems() == []


def test_segment_file_argument_and_offset_flag(minibroker_factory, tab, tmp_path):
    broker = minibroker_factory()
    broker.create_topic("seg", 1, {"index.interval.bytes": "100"})
    produce_batches(broker.bootstrap_servers, "seg", 12)
    log = os.path.join(broker.data_dir, "seg-0", "00000000000000000000.log")
    batches = read_log(log)
    target = batches[7][3] + (1 if batches[7][4] > batches[7][3] else 0)
    out = tmp_path / "seg.html"
    assert explain(log.replace(".log", ".index"), "--offset", target, "-o", out) == 0
    page = tab(out.as_uri())
    assert page.targets() == [batches[7][0]]
    assert int(page.page.get_attribute("#lookup-outcome", "data-offset")) == target
    assert page.problems() == []


def test_max_search_probes_is_the_longest_search():
    from minibroker.tools.explain import max_search_probes

    for n in range(0, 130):
        index = [(10 * i, 100 * i) for i in range(n)]
        longest = max((len(binary_search_probes(index, offset)) for offset in range(-1, 10 * n + 1)),
                      default=0)
        assert max_search_probes(n) == longest, n


# words a page must never show: a JavaScript value written as text, or a count of one in the plural
PAGE_TEXT_GLITCH = re.compile(r"\b(null|undefined|NaN)\b|(?<![\d,.])1 (entries|probes|batches|bytes|records|"
                              r"messages|rows|segments)\b")


def test_header_counts_and_reported_size(minibroker_factory, tab, tmp_path, capsys):
    """The header shows only the facts that apply (no "null" for a partition the cleaner never saw),
    counts agree in number ("1 entry", "0 entries"), an index's search takes floor(log2 n) + 1 probes
    (none when it is empty), and "wrote FILE (N bytes)" is the file's size in bytes."""
    broker = minibroker_factory()
    broker.create_topic("one-batch", 1)  # one batch: no index entry (the first batch is never indexed)
    broker.create_topic("two-batches", 1, {"index.interval.bytes": "1"})  # the second batch is indexed
    produce_batches(broker.bootstrap_servers, "one-batch", 1)
    for _ in range(2):
        produce_batches(broker.bootstrap_servers, "two-batches", 1)  # one record: one batch
    for topic, entries, index_text in (
            ("one-batch", 0, ["0 entries of 8 bytes", "need no entry yet"]),
            ("two-batches", 1, ["1 entry of 8 bytes", "need only 1 entry,",
                                "at most 1 probe (⌊log₂ 1⌋ + 1)"])):
        partition = os.path.join(broker.data_dir, f"{topic}-0")
        assert len(read_index(os.path.join(partition, "00000000000000000000.index"))) == entries
        batches = read_log(os.path.join(partition, "00000000000000000000.log"))
        out = tmp_path / f"{topic}.html"
        capsys.readouterr()
        assert explain(partition, "-o", out) == 0
        wrote = re.match(r"wrote (\S+) \((\d+) bytes\): ", capsys.readouterr().out)
        assert wrote and wrote.group(1) == str(out)
        assert int(wrote.group(2)) == os.path.getsize(out)  # the page has non-ASCII text: bytes != characters
        page = tab(out.as_uri())
        facts = page.page.inner_text("#facts")
        lines = [line.strip() for line in facts.splitlines() if line.strip()]
        assert lines[0] == "log start offset 0" and lines[1].startswith("from "), lines
        assert lines[2:4] == [f"high watermark = log end offset {batches[-1][4] + 1}",
                              "single node: the HW follows the last batch's last offset + 1 at once"], lines
        assert lines[4] == "segments 1" and "cleaner checkpoint" not in facts, lines
        text = page.page.inner_text("body")
        assert not PAGE_TEXT_GLITCH.search(text), PAGE_TEXT_GLITCH.search(text)
        for expected in index_text:
            assert expected in text, expected
        assert f"{len(batches)} batch{'' if len(batches) == 1 else 'es'} at positions" in text
        looked_up = page.lookup(batches[-1][3])
        probes = len(binary_search_probes(read_index(os.path.join(partition, "00000000000000000000.index")),
                                          batches[-1][3]))
        assert f": {probes} probe{'' if probes == 1 else 's'}" in page.page.inner_text("#lookup-result")
        assert looked_up["targets"] == [batches[-1][0]]
        assert page.problems() == []


# ---------------------------------------------------------------------------------------------
# v0/v1 entries, built with the record layer's builders


def test_legacy_messages_and_compressed_wrappers(tab, tmp_path):
    partition = tmp_path / "legacy-0"
    partition.mkdir()
    ts = TS
    entries = [
        legacy.build_message_set(1, [(0, ts, b"k0", b"plain zero")]),
        legacy.build_message_set(1, [(1, ts + 1, b"k1", b"plain one")]),
        # v1 compressed: inner offsets 0..2 relative, the wrapper holds the last absolute offset (4)
        legacy.build_message_set(1, [(2, ts + 2, b"a", b"two"), (3, ts + 3, b"b", b"three"),
                                     (4, ts + 4, b"c", b"four")], compression=Compression.GZIP),
        # v0 compressed: inner offsets absolute, the wrapper holds the last (7)
        legacy.build_message_set(0, [(5, -1, b"x", b"five"), (6, -1, b"y", b"six"), (7, -1, b"z", b"seven")],
                                 compression=Compression.GZIP),
        legacy.build_message_set(1, [(8, ts + 8, None, b"eight")]),
    ]
    positions = [sum(len(e) for e in entries[:i]) for i in range(len(entries))]
    (partition / "00000000000000000000.log").write_bytes(b"".join(entries))
    (partition / "00000000000000000000.index").write_bytes(
        struct.pack(">ii", 4, positions[2]) + struct.pack(">ii", 7, positions[3]))
    (partition / "00000000000000000000.timeindex").write_bytes(b"")
    batches = read_log(partition / "00000000000000000000.log")
    assert [(b[3], b[4]) for b in batches] == [(0, 0), (1, 1), (2, 4), (5, 7), (8, 8)]
    assert struct.unpack_from(">q", entries[2])[0] == 4

    out = tmp_path / "legacy.html"
    assert explain(partition, "-o", out) == 0
    page = tab(out.as_uri())
    assert page.batches() == [[pos, first, last] for pos, _, _, first, last in batches]
    inner = page.page.eval_on_selector_all(
        f'.batch[data-position="{positions[2]}"] .inner-message',
        "els => els.map(e => [+e.dataset.storedOffset, +e.dataset.offset])")
    assert inner == [[0, 2], [1, 3], [2, 4]]
    inner_v0 = page.page.eval_on_selector_all(
        f'.batch[data-position="{positions[3]}"] .inner-message',
        "els => els.map(e => [+e.dataset.storedOffset, +e.dataset.offset])")
    assert inner_v0 == [[5, 5], [6, 6], [7, 7]]
    for offset, position in ((3, positions[2]), (2, positions[2]), (6, positions[3]), (1, positions[1]),
                             (8, positions[4])):
        got = page.lookup(offset)
        assert got["targets"] == [position], offset
        assert got["floor_slot"] == floor_slot([(4, positions[2]), (7, positions[3])], offset)
    assert "LAST inner offset" in page.lookup(3)["text"]
    assert page.problems() == []


# ---------------------------------------------------------------------------------------------
# append traces


def _wait_for(path, pattern: str, proc, timeout: float = 20) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, read_bytes(path).decode("utf-8", "replace"))
        if m:
            return m
        assert proc.poll() is None, read_bytes(path).decode("utf-8", "replace")
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not in {path}")


def _changed_ranges(page, index: int) -> list[list[int]]:
    return page.page.eval_on_selector_all(
        f".trace >> nth={index}", "els => [...els[0].querySelectorAll('mark.changed')]"
        ".map(m => [+m.dataset.from, +m.dataset.to])")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_append_trace_from_a_real_broker_debug_log(log_format, tab, tmp_path):
    data_dir, log_path = tmp_path / "data", tmp_path / "broker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "MINIBROKER_"))}
    with open(log_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "minibroker", "serve", "--log-level", "DEBUG", "--log-format", log_format,
             "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data_dir}",
             "--override", "metrics.port=0"], stdout=subprocess.DEVNULL, stderr=err,
            **tied_to_this_process(env))
    try:
        port = int(_wait_for(log_path, r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", proc).group(1))
        from minibroker.tools.topics import TopicAdmin

        with TopicAdmin(f"127.0.0.1:{port}") as admin:
            assert admin.create("traced", 1, 1, {"index.interval.bytes": "100"})[0] == 0
        produce_batches(f"127.0.0.1:{port}", "traced", 3)
        # the append that ends at offset 5 (kafka-python may split a round into two batches under load)
        _wait_for(log_path, r"traced-0: offsets \d+\.\.5 path=", proc)
    finally:
        proc.terminate()
        proc.wait(20)
    partition = data_dir / "traced-0"
    batches = read_log(partition / "00000000000000000000.log")
    out = tmp_path / "traced.html"
    assert explain(partition, "--append-log", log_path, "-o", out) == 0
    page = tab(out.as_uri())
    traces = page.page.eval_on_selector_all(
        ".trace", "els => els.map(e => [e.dataset.source, e.dataset.path, +e.dataset.firstOffset])")
    assert traces == [["append log", "in-place", first] for _, _, _, first, _ in batches]
    for i, (_, _, _, first, _) in enumerate(batches):
        ranges = _changed_ranges(page, i)
        changed = {b for start, end in ranges for b in range(start, end)}
        assert changed <= V2_CHANGEABLE, (first, ranges)  # CRC, attributes and records untouched
        if first > 0:
            assert changed & set(range(0, 8)), "baseOffset was assigned"
    on_disk = page.page.locator(".trace", has_text="The stored bytes are the .log's bytes")
    assert on_disk.count() == len(batches)
    assert page.problems() == []


def test_replay_in_place_converted_and_recompressed(minibroker_factory, tab, tmp_path):
    broker = minibroker_factory()
    broker.create_topic("replayed", 1)
    produce_batches(broker.bootstrap_servers, "replayed", 3)
    partition = os.path.join(broker.data_dir, "replayed-0")
    leo = read_log(os.path.join(partition, "00000000000000000000.log"))[-1][4] + 1
    before = files_digest(partition)
    as_sent = {  # records as a producer puts them in a Produce request
        "v2.bin": v2.build_batch([(0, TS, b"k", b"hello", ()), (1, TS + 1, b"k", b"w", ())],
                                 partition_leader_epoch=-1),
        "v1gz.bin": legacy.build_message_set(1, [(0, TS, b"a", b"one"), (1, TS, b"b", b"two")],
                                             compression=Compression.GZIP),
        "v0gz.bin": legacy.build_message_set(0, [(0, -1, b"a", b"one"), (1, -1, b"b", b"two")],
                                             compression=Compression.GZIP),
    }
    for name, data in as_sent.items():
        (tmp_path / name).write_bytes(data)
    cases = [  # file, --magic, path, bytes that may change
        ("v2.bin", None, "in-place", V2_CHANGEABLE),
        ("v1gz.bin", "1", "in-place", set(range(0, 8))),  # only the wrapper's offset
        ("v2.bin", "1", "converted", None),
        ("v0gz.bin", "0", "recompressed", None),
    ]
    for name, magic, path, changeable in cases:
        out = tmp_path / f"{name}-{magic}.html"
        extra = ["--magic", magic] if magic else []
        assert explain(partition, "--replay", tmp_path / name, *extra, "-o", out) == 0
        page = tab(out.as_uri())
        trace = page.page.locator('.trace[data-source="replay"]')
        assert trace.get_attribute("data-path") == path, name
        assert int(trace.get_attribute("data-first-offset")) == leo
        ranges = _changed_ranges(page, 0)
        if changeable is not None:
            changed = {b for start, end in ranges for b in range(start, end)}
            assert changed and changed <= changeable, (name, ranges)
        if (name, path) == ("v2.bin", "in-place"):
            fields = trace.locator(".changed-fields").get_attribute("data-fields")
            assert fields == "baseOffset,partitionLeaderEpoch"
        assert page.problems() == []
    at = tmp_path / "at.html"
    assert explain(partition, "--replay", tmp_path / "v2.bin", "--at-offset", 1000, "-o", at) == 0
    assert '"first_offset":1000' in at.read_text()
    assert files_digest(partition) == before, "a replay writes nothing"


# ---------------------------------------------------------------------------------------------
# --serve


def test_serve_lists_partitions_and_reloads_after_an_append(minibroker_factory, tab, tmp_path):
    broker = minibroker_factory()
    broker.create_topic("live", 1, {"index.interval.bytes": "100", "segment.bytes": "500"})
    produce_batches(broker.bootstrap_servers, "live", 8)
    partition = os.path.join(broker.data_dir, "live-0")

    def segments() -> list[str]:
        return sorted(n for n in os.listdir(partition) if n.endswith(".log"))

    assert len(segments()) >= 2
    proc = subprocess.Popen(
        [sys.executable, "-m", "minibroker", "explain", "--serve", broker.data_dir, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", line).group(1)
        with urllib.request.urlopen(url + "p/live-0/sizes.json", timeout=5) as answer:
            sizes = json.load(answer)
        assert sizes == [[int(n[:20]), os.path.getsize(os.path.join(partition, n))] for n in segments()]
        page = tab(url)
        page.page.click("a.partition-link >> text=live-0")
        page.page.wait_for_selector(".batch")
        last = read_log(os.path.join(partition, segments()[-1]))  # the page opens on the last segment
        assert page.batches() == [[pos, first, last] for pos, _, _, first, last in last]
        page.page.evaluate("window.beforeReload = true")
        produce_batches(broker.bootstrap_servers, "live", 1)
        page.page.wait_for_function("!window.beforeReload", timeout=15_000)
        page.page.wait_for_selector(".batch")
        last = read_log(os.path.join(partition, segments()[-1]))
        assert page.batches() == [[pos, first, last] for pos, _, _, first, last in last]
        assert int(page.page.get_attribute("#fact-leo", "data-offset")) == last[-1][4] + 1
        first = read_log(os.path.join(partition, segments()[0]))  # another segment: fetched on demand
        got = page.lookup(first[1][4])
        assert got["targets"] == [first[1][0]]
        assert page.page.get_attribute(".segment-link.current", "data-base") == "0"
        assert page.batches() == [[pos, first, last] for pos, _, _, first, last in first]
        assert page.problems() == []
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)  # closes the pipes
    assert "Traceback" not in err, err


# ---------------------------------------------------------------------------------------------
# big segments: bounded pages (speed: scripts/bench_explain.py)


def write_segment(directory, *, total_bytes: int, interval: int, records: int = 8) -> tuple[int, int]:
    """A segment of one v2 batch repeated, baseOffset patched (outside the CRC), with a sparse index
    written by Kafka's rule; returns (batch size, records per batch)."""
    batch = v2.build_batch([(i, TS, None, b"%04d" % i + b"." * 100, ()) for i in range(records)],
                           partition_leader_epoch=0)
    size, count = len(batch), total_bytes // len(batch)
    chunk_batches = 4096
    index = bytearray()
    since_last = 0
    with open(os.path.join(directory, "00000000000000000000.log"), "wb") as log:
        for first in range(0, count, chunk_batches):
            n = min(chunk_batches, count - first)
            chunk = bytearray(batch * n)
            for j in range(n):
                struct.pack_into(">q", chunk, j * size, (first + j) * records)
                if since_last > interval:
                    index += struct.pack(">ii", (first + j) * records + records - 1, (first + j) * size)
                    since_last = 0
                since_last += size
            log.write(chunk)
    with open(os.path.join(directory, "00000000000000000000.index"), "wb") as f:
        f.write(index)
    with open(os.path.join(directory, "00000000000000000000.timeindex"), "wb") as f:
        f.write(struct.pack(">qi", TS, records - 1))
    return size, records


def test_a_64_mib_segment_gives_a_bounded_page(tab, tmp_path):
    from minibroker.tools.explain import PAGE_BATCHES

    partition = tmp_path / "big-0"
    partition.mkdir()
    size, records = write_segment(partition, total_bytes=64 << 20, interval=1024)
    count = (64 << 20) // size
    index = read_index(partition / "00000000000000000000.index")
    assert len(index) > 20_000  # more than the page embeds whole

    out = tmp_path / "big.html"
    assert explain(partition, "-o", out) == 0
    assert out.stat().st_size < 3 << 20
    page = tab(out.as_uri())
    shown = page.batches()
    assert len(shown) == PAGE_BATCHES
    assert shown[:2] == [[0, 0, records - 1], [size, records, 2 * records - 1]]
    assert page.page.evaluate("document.getElementsByTagName('*').length") < 60_000
    middle = 300 * records + 3  # on this page: exact search, though the index is only partly embedded
    got = page.lookup(middle)
    assert got["targets"] == [300 * size]
    assert got["probes"] == binary_search_probes(index, middle)
    far = (count - 10) * records + 1
    assert "--offset" in page.lookup(far)["text"] and page.lookup(far)["targets"] == []
    assert page.problems() == []

    out_far = tmp_path / "far.html"
    assert explain(partition, "--offset", far, "-o", out_far) == 0
    assert out_far.stat().st_size < 3 << 20
    page = tab(out_far.as_uri())
    assert len(page.batches()) <= PAGE_BATCHES
    assert page.targets() == [(count - 10) * size]
    assert int(page.page.get_attribute("#lookup-outcome", "data-floor-slot")) == floor_slot(index, far)
    assert page.problems() == []


def test_a_partial_last_batch_ends_the_page(tab, tmp_path):
    partition = tmp_path / "torn-0"
    partition.mkdir()
    size, records = write_segment(partition, total_bytes=20_000, interval=4096)
    whole = 20_000 // size
    with open(partition / "00000000000000000000.log", "ab") as log:  # a batch still being written
        log.write(read_bytes(partition / "00000000000000000000.log")[: size // 2])
    out = tmp_path / "torn.html"
    assert explain(partition, "-o", out) == 0
    page = tab(out.as_uri())
    assert len(page.batches()) == whole
    assert page.page.get_attribute("#fact-leo", "data-offset") == str(whole * records)
    assert f"{size // 2} more bytes that are not a whole batch" in page.page.inner_text("#tail-marker")
    assert page.problems() == []


def test_pages_tile_the_segment_forwards_and_backwards(tmp_path):
    """The served pager's data: next pages follow each other end to end, previous goes back to the
    same starts, the last page holds the last batches, an offset's page holds its batch."""
    from minibroker.tools.explain import PAGE_BATCHES, ExplainServer

    partition = tmp_path / "paged-0"
    partition.mkdir()
    size, records = write_segment(partition, total_bytes=2 << 20, interval=4096)
    count = (2 << 20) // size
    server = ExplainServer(str(tmp_path))  # the data dir; never started: answer() is what a GET runs

    def get(query: str) -> dict:
        status, ctype, body = server.answer(f"/p/paged-0/data.json?{query}")
        assert (status, ctype) == (200, "application/json"), body
        return json.loads(body)

    starts, position, seen = [], 0, 0
    while position is not None:
        window = get(f"position={position}")["window"]
        assert window["start"] == position and window["batches"][0]["position"] == position
        assert len(window["batches"]) <= PAGE_BATCHES
        if starts:
            assert window["prev_start"] == starts[-1]
        starts.append(position)
        seen += len(window["batches"])
        position = window["next_start"]
    assert seen == count and len(starts) == -(-count // PAGE_BATCHES)
    last_start = get("position=0")["segment"]["last_page_start"]  # "last": the last full page
    assert last_start == (count - PAGE_BATCHES) * size
    last = get(f"position={last_start}")["window"]
    assert len(last["batches"]) == PAGE_BATCHES and last["next_start"] is None
    assert last["prev_start"] == (count - 2 * PAGE_BATCHES) * size
    middle = count // 2 * records + 3
    window = get(f"offset={middle}")["window"]
    assert any(b["base_offset"] <= middle <= b["last_offset"] for b in window["batches"])
    assert server.answer("/p/paged-0/data.json?offset=x")[0] == 400
    assert server.answer("/p/missing-0/")[0] == 404
    server.httpd.server_close()


# ---------------------------------------------------------------------------------------------
# a compacted partition: cleaned segments, offset gaps, header-only batches, delete horizons


def read_v2_headers(path) -> list[dict]:
    """Each v2 batch's header fields the cleaner shapes, with struct (the layout of KIP-98)."""
    data = read_bytes(path)
    out, pos = [], 0
    while len(data) - pos >= 61:
        base, length, _, magic, _, attrs, delta, base_ts, _, pid = struct.unpack_from(
            ">qiibIhiqqq", data, pos)
        assert magic == 2
        count = struct.unpack_from(">i", data, pos + 57)[0]
        out.append({"position": pos, "size": 12 + length, "first": base, "last": base + delta, "count": count,
                    "horizon": base_ts if attrs & 0x40 else None, "producer_id": pid})
        pos += 12 + length
    return out


def read_cleaner_checkpoint(data_dir, topic: str, partition: int = 0) -> int | None:
    """``cleaner-offset-checkpoint``: a version line, a count line, then ``topic partition offset``."""
    try:
        with open(os.path.join(data_dir, "cleaner-offset-checkpoint")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    assert lines[0] == "0"
    for line in lines[2:2 + int(lines[1])]:
        t, p, offset = line.split(" ")
        if (t, int(p)) == (topic, partition):
            return int(offset)
    return None


def expected_gaps(headers: list[dict], base: int, next_base: int | None, checkpoint: int) -> list[list]:
    """[first, last, where, compacted] of every offset no batch holds, in the order the page lists them."""
    gaps = []
    if headers and headers[0]["first"] > base:
        gaps.append([base, headers[0]["first"] - 1, "segment-start"])
    for prev, b in zip(headers, headers[1:], strict=False):
        if b["first"] > prev["last"] + 1:
            gaps.append([prev["last"] + 1, b["first"] - 1, "between"])
    if headers and next_base is not None and next_base > headers[-1]["last"] + 1:
        gaps.append([headers[-1]["last"] + 1, next_base - 1, "segment-end"])
    return [[first, last, where, last < checkpoint] for first, last, where in gaps]


def test_a_cleaned_segment_shows_its_gaps_header_only_batches_and_delete_horizon(minibroker_factory, tab,
                                                                                 tmp_path):
    from kafka import KafkaProducer

    broker = minibroker_factory({"log.cleaner.backoff.ms": "100"})
    topic, segment_ms = "compacted", 1500
    broker.create_topic(topic, 1, {
        "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "600000", "segment.ms": str(segment_ms), "file.delete.delay.ms": "100"})
    partition = os.path.join(broker.data_dir, f"{topic}-0")

    def logs() -> list[str]:
        return sorted(n for n in os.listdir(partition) if re.fullmatch(r"\d{20}\.log", n))

    # an idempotent producer's one batch (offsets 0..2), all of whose keys are overwritten later: the
    # clean keeps it as a header-only batch
    idempotent = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True,
                               linger_ms=100)
    sent = [idempotent.send(topic, key=b"e%d" % i, value=b"first", partition=0) for i in range(3)]
    idempotent.flush()
    assert [f.get(10).offset for f in sent] == [0, 1, 2]
    idempotent.close()
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, batch_size=1, linger_ms=0)
    sent = [plain.send(topic, key=b"e%d" % i, value=b"second", partition=0) for i in range(3)]
    sent += [plain.send(topic, key=b"k%d" % (i % 5), value=b"v%03d" % i, partition=0) for i in range(40)]
    sent.append(plain.send(topic, key=b"k0", value=None, partition=0))  # a tombstone: kept, with a horizon
    plain.flush()
    tombstone = sent[-1].get(10).offset
    plain.close()
    time.sleep(segment_ms / 1000 + 0.2)  # segment.ms passes: the next append rolls, the rest is cleanable
    roll = broker.produce(topic, [b"r"], key=b"roll", partition=0)[0]
    assert int(logs()[-1][:20]) == roll

    deadline = time.monotonic() + 30
    while True:  # until the checkpoint reached the active segment and the files show the clean
        checkpoint = read_cleaner_checkpoint(broker.data_dir, topic)
        names = logs()
        bases = [int(n[:20]) for n in names]
        headers = {int(n[:20]): read_v2_headers(os.path.join(partition, n)) for n in names}
        cleaned = [b for b in bases[:-1] if checkpoint is not None and checkpoint >= bases[-1]]
        if cleaned and any(expected_gaps(headers[b], b, None, checkpoint) for b in cleaned) and all(
                not n.endswith((".cleaned", ".swap", ".deleted")) for n in os.listdir(partition)):
            break
        assert time.monotonic() < deadline, (checkpoint, logs())
        time.sleep(0.1)
    assert checkpoint == roll == bases[-1]
    next_bases = dict(zip(bases, [*bases[1:], None], strict=True))
    all_headers = [h for b in cleaned for h in headers[b]]
    by_producer = [(h["first"], h["last"], h["count"], h["size"])
                   for h in all_headers if h["producer_id"] >= 0]
    assert by_producer[:1] == [(0, 2, 0, 61)], "the idempotent producer's last batch, emptied"
    assert [h["first"] for h in all_headers if h["horizon"] is not None] == [tombstone]

    gap_rows = ("els => els.map(e => [+e.dataset.first, +e.dataset.last, e.dataset.where,"
                " e.dataset.compacted === 'true'])")
    seen_gaps = seen_header_only = seen_horizon = 0
    for base in cleaned:
        out = tmp_path / f"cleaned-{base}.html"
        assert explain(partition, "--segment", base, "-o", out) == 0
        page = tab(out.as_uri())
        want = headers[base]
        assert page.batches() == [[h["position"], h["first"], h["last"]] for h in want]
        assert page.page.get_attribute("#segment-cleaned", "data-checkpoint") == str(checkpoint)
        assert "cleaned" in page.page.inner_text("#segment-cleaned")
        assert page.page.get_attribute("#fact-cleaner-checkpoint", "data-offset") == str(checkpoint)
        assert page.page.get_attribute(f'.segment-link[data-base="{base}"]', "data-cleaned") == "true"
        assert page.page.get_attribute(f'.segment-link[data-base="{roll}"]', "data-cleaned") is None
        gaps = expected_gaps(want, base, next_bases[base], checkpoint)
        assert page.page.eval_on_selector_all(".gap-marker", gap_rows) == gaps
        texts = page.page.eval_on_selector_all(".gap-marker", "els => els.map(e => e.textContent)")
        for (first, last, _, _), text in zip(gaps, texts, strict=True):
            offsets = f"offset {first:,}" if first == last else f"offsets {first:,} … {last:,}"
            assert text.startswith(offsets + " removed by compaction"), text
        for first, last, where, _ in gaps:  # a fetch in a gap gets the batch after it
            if where != "segment-end":
                got = page.lookup(first)
                assert got["targets"] == [next(h["position"] for h in want if h["first"] > last)]
                assert "offset gap" in got["text"]
        for h in want:
            card = page.page.locator(f'.batch[data-position="{h["position"]}"]')
            badge = card.locator(".badge.header-only")
            if h["count"] == 0:
                kind = "producer" if h["producer_id"] >= 0 else "placeholder"
                assert badge.get_attribute("data-kind") == kind
                seen_header_only += 1
            else:
                assert badge.count() == 0
            horizon = card.locator(".badge.horizon")
            if h["horizon"] is not None:
                assert int(horizon.get_attribute("data-horizon")) == h["horizon"]
                when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(h["horizon"] / 1000))
                assert when in horizon.inner_text()
                seen_horizon += 1
            else:
                assert horizon.count() == 0
        seen_gaps += len(gaps)
        if gaps:
            page.page.evaluate("document.querySelector('.gap-marker').scrollIntoView({block: 'center'})")
            page.page.screenshot(path=artifact_path(tmp_path, f"explain-cleaned-{base}.png"))
        assert page.problems() == []
    assert seen_gaps and seen_header_only and seen_horizon == 1

    # the active segment: not cleaned, the checkpoint drawn where the dirty section starts
    out = tmp_path / "active.html"
    assert explain(partition, "-o", out) == 0
    page = tab(out.as_uri())
    assert page.page.locator("#segment-cleaned").count() == 0
    assert page.page.eval_on_selector_all(".gap-marker", gap_rows) == []
    assert page.page.get_attribute("#checkpoint-marker", "data-offset") == str(checkpoint)
    after = "() => document.getElementById('checkpoint-marker').nextElementSibling.dataset.baseOffset"
    assert page.page.evaluate(after) == str(roll)
    assert page.problems() == []

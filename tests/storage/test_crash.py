"""Crash test with a real process: append, kill -9, tear the tail, clobber an index, restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from storage_helpers import v2_batch

from minibroker.records.framing import scan_entries
from minibroker.storage import LogManager

BROKER_CONFIG = {"log.segment.bytes": 20000, "log.index.interval.bytes": 512}

CHILD = textwrap.dedent("""
    import struct, sys
    sys.path[:0] = [{tests!r}, {root!r}]
    from storage_helpers import v2_batch
    from minibroker.storage import LogManager
    manager = LogManager([{data!r}], {config!r}, node_id=1)
    manager.load()
    if "crash" not in manager.topics:
        manager.create_topic("crash", 1)
    log = manager.get_log("crash", 0)
    print("ready", log.log_end_offset, flush=True)
    while True:
        first = log.log_end_offset
        n = 1 + first % 5
        data = v2_batch(first, [first + k for k in range(n)], value_size=60)
        log.append(data, first_offset=first, last_offset=first + n - 1, max_timestamp=first + n - 1,
                   offset_of_max_timestamp=first + n - 1, record_count=n)
        print("ack", first + n, flush=True)  # acknowledged: the append returned
""")


def run_and_kill(data_dir: str, acks_wanted: int) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    code = CHILD.format(tests=here, root=root, data=data_dir, config=BROKER_CONFIG)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    acked = 0
    try:
        assert child.stdout.readline().startswith("ready")
        for _ in range(acks_wanted):
            line = child.stdout.readline()
            assert line.startswith("ack"), line
            acked = int(line.split()[1])
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return acked


@pytest.mark.slow
def test_kill_9_torn_tail_clobbered_index(tmp_path):
    data_dir = str(tmp_path / "data")
    acked = run_and_kill(data_dir, 1500)
    part = os.path.join(data_dir, "crash-0")
    logs = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    assert len(logs) > 3
    # append half a batch to the tail and clobber two indexes (a sealed one and the active one)
    with open(os.path.join(part, logs[-1]), "ab") as f:
        half = v2_batch(10**6, [1, 2, 3], value_size=60)
        f.write(half[: len(half) // 2])
    for name in (logs[1], logs[-1]):
        index = os.path.join(part, name.replace(".log", ".index"))
        # a kill between a roll's new .log and its .index leaves no index: garbage in its place then
        with open(index, "r+b" if os.path.exists(index) else "wb") as f:
            f.seek(0)
            f.write(os.urandom(64))

    manager = LogManager([data_dir], BROKER_CONFIG, node_id=1)
    manager.load()
    log = manager.get_log("crash", 0)
    assert log.log_end_offset >= acked
    offset = 0
    while offset < log.log_end_offset:  # every offset is back, in the batch the child wrote for it
        (entry,) = scan_entries(log.read(offset, 1).region.read())
        assert entry.base_offset <= offset <= entry.last_offset
        assert entry.last_offset - entry.base_offset + 1 == 1 + entry.base_offset % 5
        offset = entry.last_offset + 1
    leo = log.log_end_offset
    log.append(v2_batch(leo, [7]), first_offset=leo, last_offset=leo, max_timestamp=7,
               offset_of_max_timestamp=leo, record_count=1)
    assert log.read(leo, 1).first_offset == leo
    manager.close()

    # a second crash-restart cycle continues where the log ends
    again = run_and_kill(data_dir, 50)
    assert again > leo
    manager = LogManager([data_dir], BROKER_CONFIG, node_id=1)
    manager.load()
    assert manager.get_log("crash", 0).log_end_offset >= again
    manager.close()

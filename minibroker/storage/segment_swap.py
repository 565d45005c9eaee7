"""A segment swap on disk: the file names of its steps and the completion of one cut short.

The log cleaner (minibroker/storage/cleaner.py) replaces segments with Kafka's protocol: the new segment's
files are written as ``<base>.log.cleaned`` (and its indexes), renamed to ``.swap``, the old segments'
files renamed to ``.deleted``, then the ``.swap`` files to their final names. ``PartitionLog.open`` calls
``complete_interrupted_swap`` first, as Kafka's LogLoader does, so a crash at any step leaves either the
old segments or the new one. No state: functions of a directory.
"""

from __future__ import annotations

import logging
import os

from minibroker.records.framing import scan_entries
from minibroker.storage import checkpoints as ckpt
from minibroker.storage.segment import segment_file_name

# The cleaner's logger: these lines were always the cleaner's (docs/storage.md, "Compaction")
log = logging.getLogger("minibroker.storage.cleaner")

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def segment_paths(directory: str, base: int, suffix: str) -> list[str]:
    return [os.path.join(directory, segment_file_name(base, ext + suffix)) for ext in SEGMENT_SUFFIXES]


def rename_segment_files(directory: str, base: int, old_suffix: str, new_suffix: str) -> None:
    pairs = zip(segment_paths(directory, base, old_suffix), segment_paths(directory, base, new_suffix),
                strict=True)
    for src, dst in pairs:
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            pass  # a segment without a .txnindex (most) or without indexes


def remove_files(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def complete_interrupted_swap(name: str, directory: str) -> None:
    """Kafka's LogLoader at start-up: delete ``.deleted`` files; delete ``.swap`` files at or past the
    lowest ``.cleaned`` base (an unfinished operation), then every ``.cleaned`` file; for the
    remaining ``.swap`` segments, delete the old segment files whose base lies in
    ``[min swap base, max swap next offset)`` and rename the ``.swap`` files to their final names."""
    files = os.listdir(directory)
    cleaned_bases = [int(f[:20]) for f in files if f.endswith(".cleaned") and f[:20].isdigit()]
    min_cleaned = min(cleaned_bases, default=None)
    for fname in files:
        path = os.path.join(directory, fname)
        if fname.endswith(".deleted"):
            remove_files([path])
        elif fname.endswith(".swap") and min_cleaned is not None and fname[:20].isdigit() \
                and int(fname[:20]) >= min_cleaned:
            remove_files([path])
    for fname in files:
        if fname.endswith(".cleaned"):
            remove_files([os.path.join(directory, fname)])
    swaps = sorted(f for f in os.listdir(directory) if f.endswith(".log.swap") and f[:20].isdigit())
    if not swaps:
        return
    low, high = None, None
    for fname in swaps:
        base = int(fname[:20])
        next_offset = base
        size = os.path.getsize(os.path.join(directory, fname))
        with open(os.path.join(directory, fname), "rb") as f:
            data = f.read()
        for info in scan_entries(data, 0, size):
            next_offset = info.last_offset + 1
        low = base if low is None else min(low, base)
        high = next_offset if high is None else max(high, next_offset)
        log.info("%s: found %s from an interrupted swap; completing it", name, fname)
    for fname in os.listdir(directory):
        stem, ext = fname[:20], fname[20:]
        if stem.isdigit() and ext in SEGMENT_SUFFIXES and low <= int(stem) < max(high, low + 1):
            log.info("%s: deleting %s, replaced by a cleaned segment", name, fname)
            remove_files([os.path.join(directory, fname)])
    for fname in os.listdir(directory):
        if fname.endswith(".swap"):
            os.rename(os.path.join(directory, fname), os.path.join(directory, fname[: -len(".swap")]))
    ckpt.fsync_dir(directory)

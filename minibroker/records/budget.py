"""How much validation may do where it runs: the budget ``validate_and_assign`` charges between
windows of records, and the two ways it stops early. Its own module, without the codecs, so the
Produce handler can catch ``ValidationDeferred`` without loading the validator at start-up.

The budget is counted in work, not time: time would count what the event loop spends waiting for
the GIL (the worker thread holds it while it walks records), and deferring more because the worker
is busy would make it busier. A unit is about a nanosecond of work on the machine these figures
were measured on (docs/records.md): a decompressed byte costs 1 (gzip: 3), a record walked 700 in
Python and 20 by the C accelerator (issue 29: 13-15 ns measured, the rest for the call around each
window), a record decoded and written again by a rebuild 3,000 more.
"""

from __future__ import annotations

BYTE_WORK = {1: 3}  # codec id -> units a decompressed byte costs; 1 when not listed
RECORD_WORK = 700  # a record walked (or scanned, or decoded) in Python
ACCELERATED_WALK_WORK = 20  # a record walked by the C accelerator (accelerator.walk_records)
REBUILD_WORK = 3000  # a record decoded and encoded again by a rebuild, on top


class ValidationDeferred(Exception):
    """``validate_and_assign`` spent its ``work_budget`` before it was done: the input is untouched;
    validate it again without a budget, away from the event loop (``ReplicaManager``)."""


class ValidationCancelled(Exception):
    """The ``cancel`` event of ``validate_and_assign`` was set: nobody wants the answer any more."""


class Work:
    """A compressed batch's records are checked window by window (at most a decompressed piece, or
    ``v2.WINDOW_RECORDS`` records); after each the validator charges what it did: past ``budget``
    units (None: no limit), ``ValidationDeferred``; ``cancel`` (a ``threading.Event``) set,
    ``ValidationCancelled``."""

    __slots__ = ("left", "cancel")

    def __init__(self, budget: int | None, cancel=None):
        self.left = budget
        self.cancel = cancel

    def charge(self, units: int) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise ValidationCancelled()
        if self.left is not None:
            self.left -= units
            if self.left < 0:
                raise ValidationDeferred()

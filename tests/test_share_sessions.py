"""The share session cache (minibroker/services/share_sessions.py) on its own: epochs, the session limit, and
what a closed session or a dropped connection releases. The wire behaviour is in
test_share_groups_clients.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError
from minibroker.services.share_sessions import ShareSessionCache, next_epoch


class _Releases:
    def __init__(self, fail: bool = False):
        self.released: list[tuple[str, str]] = []
        self.fail = fail

    def release_member(self, group_id, member_id):
        self.released.append((group_id, member_id))
        if self.fail:
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE)


def _cache(limit: int = 10, fail: bool = False) -> tuple[ShareSessionCache, _Releases]:
    releases = _Releases(fail)
    return ShareSessionCache(SimpleNamespace(share_partitions=releases), limit), releases


def _code(call) -> E:
    with pytest.raises(KafkaError) as e:
        call()
    return e.value.code


@given(st.integers(min_value=0, max_value=0x7FFFFFFF))
def test_epochs_count_up_and_wrap_to_one(epoch):
    nxt = next_epoch(epoch)
    assert nxt == (1 if epoch == 0x7FFFFFFF else epoch + 1)
    assert nxt >= 1
    assert next_epoch(-1) == -1


def test_each_request_must_carry_the_next_epoch():
    cache, _ = _cache()
    assert _code(lambda: cache.next_request("g", "m", 1)) == E.SHARE_SESSION_NOT_FOUND
    session = cache.open("g", "m", [(b"t" * 16, 0)], connection=None)
    assert session.epoch == 1
    assert _code(lambda: cache.next_request("g", "m", 0)) == E.INVALID_SHARE_SESSION_EPOCH
    assert _code(lambda: cache.next_request("g", "m", 2)) == E.INVALID_SHARE_SESSION_EPOCH
    assert cache.next_request("g", "m", 1) is session and session.epoch == 2
    assert _code(lambda: cache.next_request("g", "m", 1)) == E.INVALID_SHARE_SESSION_EPOCH
    session.epoch = 0x7FFFFFFF
    cache.next_request("g", "m", 0x7FFFFFFF)
    assert session.epoch == 1
    assert cache.open("g", "m", [], connection=None).epoch == 1  # reopening starts over
    assert cache.get("g", "m") is not session


def test_partitions_are_added_and_forgotten_in_order():
    cache, _ = _cache()
    session = cache.open("g", "m", [(b"a" * 16, 1), (b"a" * 16, 0)], connection=None)
    session.add([(b"b" * 16, 0), (b"a" * 16, 1)])
    session.forget([(b"a" * 16, 0), (b"c" * 16, 9)])
    assert list(session.partitions) == [(b"a" * 16, 1), (b"b" * 16, 0)]


def test_the_session_limit_counts_replacements_as_free():
    cache, _ = _cache(limit=2)
    cache.open("g", "a", [], connection=None)
    cache.open("g", "b", [], connection=None)
    assert _code(lambda: cache.open("g", "c", [], connection=None)) == E.SHARE_SESSION_LIMIT_REACHED
    cache.open("g", "a", [], connection=None)  # replaces a's own
    cache.close("g", "b")
    cache.open("g", "c", [], connection=None)
    assert len(cache) == 2


def test_closing_releases_the_member_and_a_dropped_connection_its_sessions_only():
    cache, releases = _cache()
    first, second = object(), object()
    cache.open("g", "a", [], connection=first)
    cache.open("g", "b", [], connection=first)
    cache.open("h", "c", [], connection=second)
    cache.open("g", "b", [], connection=second)  # b reopened its session on another connection
    assert cache.close("h", "nobody") is None and releases.released == []
    cache.connection_closed(first)
    assert releases.released == [("g", "a")]
    assert cache.get("g", "a") is None and cache.get("g", "b") is not None
    cache.close("g", "b")
    assert releases.released == [("g", "a"), ("g", "b")]
    cache.connection_closed(second)  # b's session is gone already; c's goes now
    assert releases.released == [("g", "a"), ("g", "b"), ("h", "c")]
    assert len(cache) == 0
    cache.connection_closed(second)  # twice: nothing left
    assert len(releases.released) == 3


def test_a_failed_release_still_ends_the_session():
    cache, releases = _cache(fail=True)
    cache.open("g", "a", [], connection=None)
    cache.close("g", "a")
    assert releases.released == [("g", "a")] and cache.get("g", "a") is None

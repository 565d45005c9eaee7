import uuid

from minibroker.protocol.uuids import uuid4_bytes, uuid4_text


def test_random_uuids_are_version_4_and_distinct():
    seen = {uuid4_bytes() for _ in range(1000)}
    assert len(seen) == 1000
    for raw in list(seen)[:50]:
        u = uuid.UUID(bytes=raw)
        assert u.version == 4 and u.variant == uuid.RFC_4122
    text = uuid4_text()
    assert str(uuid.UUID(text)) == text

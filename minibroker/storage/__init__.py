"""Storage engine: segmented partition logs in Apache Kafka's on-disk layout (see docs/storage.md)."""

import importlib

# name -> the module that defines it; imported on first access (PEP 562), so that a broker's start-up
# (which needs only the log manager) does not load the segment code before a partition exists
_EXPORTS = {
    "CorruptIndexError": "index", "OffsetIndex": "index", "TimeIndex": "index",
    "TOPICS_FILE": "log_manager", "LogManager": "log_manager", "TopicInfo": "log_manager",
    "FetchSlice": "partition_log", "PartitionLog": "partition_log",
    "LogSegment": "segment", "SegmentFile": "segment",
    "effective_topic_config": "topic_config",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "CorruptIndexError", "FetchSlice", "LogManager", "LogSegment", "OffsetIndex", "PartitionLog",
    "SegmentFile", "TimeIndex", "TopicInfo", "TOPICS_FILE", "effective_topic_config",
]

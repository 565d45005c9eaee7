"""Storage engine: segmented partition logs in Apache Kafka's on-disk layout (see docs/storage.md)."""

from minibroker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from minibroker.storage.log_manager import TOPICS_FILE, LogManager, TopicInfo
from minibroker.storage.partition_log import FetchSlice, PartitionLog
from minibroker.storage.segment import LogSegment, SegmentFile
from minibroker.storage.topic_config import effective_topic_config

__all__ = [
    "CorruptIndexError", "FetchSlice", "LogManager", "LogSegment", "OffsetIndex", "PartitionLog",
    "SegmentFile", "TimeIndex", "TopicInfo", "TOPICS_FILE", "effective_topic_config",
]

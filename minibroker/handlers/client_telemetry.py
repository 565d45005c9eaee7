"""GetTelemetrySubscriptions: v0, and PushTelemetry: v0 (KIP-714 client metrics).

Kafka with no metrics plugin (no metrics reporter implementing ClientTelemetry) leaves both APIs out of
ApiVersions, so clients never start telemetry; minibroker has no plugin and does the same: both are
registered unadvertised, answered when a client sends them anyway, as Kafka's ClientMetricsManager
answers when no client-metrics subscription exists.

GetTelemetrySubscriptions: a zero client instance id gets a new one; the subscription is empty (no
requested metrics, so a client pushes nothing), with Kafka's defaults: push interval 300000 ms,
accepted compression zstd, lz4, gzip, snappy, delta temporality, ``telemetry.max.bytes``. The
subscription id is Kafka's: CRC-32C of the (empty) metric set and push interval, XOR the instance id's
hash. A second request from the same instance within the push interval of its last request is
THROTTLING_QUOTA_EXCEEDED.
PushTelemetry: a zero or reserved instance id is INVALID_REQUEST; then, for the instance: a push after
one flagged terminating is INVALID_REQUEST; a push sooner than the interval after the last push (a push
right after a GetTelemetrySubscriptions is fine; a terminating push always is) is
THROTTLING_QUOTA_EXCEEDED; a subscription id not the instance's is UNKNOWN_SUBSCRIPTION_ID; an unknown
compression type UNSUPPORTED_COMPRESSION_TYPE; metrics over ``telemetry.max.bytes``
TELEMETRY_TOO_LARGE; else accepted, and the metrics are dropped (there is no plugin to export to).
Instances are kept per broker, at most 16384, least recently used dropped first (Kafka's cache size);
Kafka also expires them after three push intervals, minibroker only by that bound.
Authorization: none, as Kafka (any authenticated client may push its own metrics).
"""

from __future__ import annotations

import os
import struct
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID

PUSH_INTERVAL_MS = 300000  # Kafka's ClientMetricsConfigs.DEFAULT_INTERVAL_MS
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]  # zstd, lz4, gzip, snappy: Kafka's order
COMPRESSION_TYPES = range(5)  # none, gzip, snappy, lz4, zstd
RESERVED_IDS = (ZERO_UUID, bytes(15) + b"\x01")  # Kafka's Uuid.RESERVED: zero and the metadata topic id
INSTANCE_LIMIT = 16384


@dataclass
class ClientInstance:
    subscription_id: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    terminating: bool = False


_instances: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # broker -> OrderedDict[id, instance]


def _java_uuid_hash(uuid: bytes) -> int:
    msb, lsb = struct.unpack(">qq", uuid)
    xor = msb ^ lsb
    return ((xor >> 32) ^ xor) & 0xFFFFFFFF


def subscription_id(instance_id: bytes) -> int:
    """Kafka's: CRC-32C of the metric set's text ("[]": none) and the push interval, XOR the id's hash,
    as a signed int32."""
    from crc32c import crc32c  # deferred, as elsewhere: not needed to start

    value = crc32c(f"[]{PUSH_INTERVAL_MS}".encode()) ^ _java_uuid_hash(instance_id)
    return value - (1 << 32) if value >= 1 << 31 else value


def _instance(broker, instance_id: bytes) -> ClientInstance:
    instances = _instances.setdefault(broker, OrderedDict())
    instance = instances.get(instance_id)
    if instance is None:
        instance = instances[instance_id] = ClientInstance(subscription_id(instance_id))
        if len(instances) > INSTANCE_LIMIT:
            instances.popitem(last=False)
    else:
        instances.move_to_end(instance_id)
    return instance


def _new_instance_id(broker) -> bytes:
    known = _instances.get(broker, {})
    while True:
        candidate = os.urandom(16)
        if candidate not in RESERVED_IDS and candidate not in known:
            return candidate


def _error(code: ErrorCode) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), client_instance_id=ZERO_UUID, subscription_id=0,
                  accepted_compression_types=[], push_interval_ms=0, telemetry_max_bytes=0,
                  delta_temporality=False, requested_metrics=[])


@handles(71, (0, 0), advertised=False)
def handle_get_telemetry_subscriptions(broker, header, request):
    now_ms = int(time.time() * 1000)
    instance_id = request.client_instance_id
    if instance_id == ZERO_UUID:
        instance_id = _new_instance_id(broker)
    instance = _instance(broker, instance_id)
    if now_ms - max(instance.last_get_ms, instance.last_push_ms) < PUSH_INTERVAL_MS:
        return _error(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    instance.last_get_ms = now_ms
    return Struct(throttle_time_ms=0, error_code=0, client_instance_id=instance_id,
                  subscription_id=instance.subscription_id,
                  accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
                  push_interval_ms=PUSH_INTERVAL_MS,
                  telemetry_max_bytes=broker.config["telemetry.max.bytes"], delta_temporality=True,
                  requested_metrics=[])


def _push_error(request, instance: ClientInstance, now_ms: int, max_bytes: int) -> ErrorCode | None:
    if instance.terminating:
        return ErrorCode.INVALID_REQUEST
    # right after a GetTelemetrySubscriptions, or a push interval after the last push
    may_push = (instance.last_get_ms > instance.last_push_ms
                or now_ms - instance.last_push_ms >= PUSH_INTERVAL_MS)
    if may_push:
        instance.last_push_ms = now_ms
    elif not request.terminating:
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED
    if request.subscription_id != instance.subscription_id:
        return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    if request.compression_type not in COMPRESSION_TYPES:
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if request.metrics is not None and len(request.metrics) > max_bytes:
        return ErrorCode.TELEMETRY_TOO_LARGE
    return None


@handles(72, (0, 0), advertised=False)
def handle_push_telemetry(broker, header, request):
    instance_id = request.client_instance_id
    if instance_id is None or instance_id in RESERVED_IDS:
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST))
    instance = _instance(broker, instance_id)
    try:
        code = _push_error(request, instance, int(time.time() * 1000), broker.config["telemetry.max.bytes"])
    finally:
        instance.terminating = request.terminating
    return Struct(throttle_time_ms=0, error_code=int(code or 0))

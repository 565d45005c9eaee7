"""Client quotas, as Kafka's ClientQuotaManager, ClientRequestQuotaManager and ConnectionQuotas keep them.

Owner: ``ClientQuotas`` (``broker.client_quotas``, created and loaded by minibroker/services/__init__.py:
at start-up when quotas were saved before, else by the first AlterClientQuotas or DescribeClientQuotas;
until then nothing imports this module and every check reads "no quota"; event loop only). It holds the
quota configs per entity, persisted whole in ``minibroker-client-quotas.json`` at the log dir root
(Kafka keeps them in its metadata log), and one ``ClientRateQuota`` per enforced key with the windowed
rate sensors that measure each client against it.
``ConnectionRateQuotas`` (the SocketServer's, built by minibroker/server/sockets.py once a rate or a quota
is set) measures connection creation per address and broker-wide against these configs.

Entities (AlterClientQuotas / DescribeClientQuotas): ``user``, ``client-id``, both together, each named or
the default (name null in the protocol, ``<default>`` in kafka-configs.sh); or ``ip`` alone (named or
default) for ``connection_creation_rate``. The user is the principal's name (``User:ANONYMOUS`` counts as
user ``ANONYMOUS``, as Kafka's quota callback takes ``principal.getName``), the client id the request
header's. The most specific configured entity wins, in Kafka's order::

    /users/<user>/clients/<client-id>     /users/<default>/clients/<client-id>   /clients/<client-id>
    /users/<user>/clients/<default>       /users/<default>/clients/<default>     /clients/<default>
    /users/<user>                         /users/<default>

(read down each column, columns left to right). A user level applies only when the user name is
non-empty, a client-id level only when the client id is; clients matched through a user-only entity share
one sensor per user, through a client-id-only entity one per client id, otherwise one per (user, client).

``controller_mutation_rate`` (KIP-599) is measured as Kafka's ControllerMutationQuotaManager does, with a
token bucket per client: ``rate x controller.quota.window.num x controller.quota.window.size.seconds``
partitions at most, refilled at ``rate`` per second; CreateTopics, CreatePartitions and DeleteTopics take
one token per partition created or deleted (``MutationQuota``). A topic is refused with
THROTTLING_QUOTA_EXCEEDED while the bucket is below zero (it may take the bucket below zero itself), for
the request versions that know that error (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+);
older versions are never refused. Either way the response carries the time until the bucket is back at
zero, and the connection is muted for it.

Measurement of the other keys is Kafka's ``Rate``: ``quota.window.num`` samples of
``quota.window.size.seconds`` each (plus one overlapping), the rate over the time since the oldest
sample but never less than ``num - 1`` whole windows; a value above the bound throttles for
``(rate - bound) / bound * window`` milliseconds (QuotaUtils.throttleTime), capped at one window for
request and connection rates.
"""

from __future__ import annotations

import logging
import math
import socket
import time

from minibroker.config.listeners import address_key
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.quotas")

QUOTAS_FILE = "minibroker-client-quotas.json"

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# key -> Kafka's config type, which decides the values accepted (integral ones refuse fractions)
CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long", REQUEST_PERCENTAGE: "double",
               CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS = {CONNECTION_CREATION_RATE: "int"}
_TYPE_MAX = {"int": 2**31 - 1, "long": 2**63 - 1}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
WRITE_TXN_MARKERS = 27  # a cluster action: exempt from the request quota, as Kafka exempts them
SENSOR_SWEEP_MIN = 1024  # sensors idle for a whole quota window are dropped once this many exist

# An entity is a tuple of (type, name) pairs sorted by type; name None is the default entity.
Entity = tuple


def entity_of(pairs) -> Entity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


class _Sample:
    __slots__ = ("start", "last", "value")

    def __init__(self, now: float):
        self.start = self.last = now
        self.value = 0.0

    def reset(self, now: float) -> None:
        self.start = self.last = now
        self.value = 0.0


class Rate:
    """Kafka's ``Rate`` over a windowed sum (SampledStat): ``num`` samples of ``window_ms`` each plus one
    that may overlap the start of the monitored span. Times are milliseconds of ``time.monotonic``."""

    __slots__ = ("num", "window_ms", "samples", "current")

    def __init__(self, num: int, window_ms: float):
        self.num = num
        self.window_ms = window_ms
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, value: float, now: float) -> None:
        samples = self.samples
        if not samples:
            samples.append(_Sample(now))
        sample = samples[self.current]
        if now - sample.start >= self.window_ms:
            self.current = (self.current + 1) % (self.num + 1)
            if self.current >= len(samples):
                sample = _Sample(now)
                samples.append(sample)
            else:
                sample = samples[self.current]
                sample.reset(now)
        sample.value += value
        sample.last = now

    def window_size(self, now: float) -> float:
        """The span the rate is taken over: since the oldest live sample, at least ``num - 1`` windows."""
        expire = self.num * self.window_ms
        samples = self.samples
        for sample in samples:
            if now - sample.last >= expire:  # no event within the monitored span: obsolete
                sample.reset(now)
        if not samples:
            samples.append(_Sample(now))
        elapsed = now - min(s.start for s in samples)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now: float) -> float:
        """Per second."""
        size = self.window_size(now)
        return sum(s.value for s in self.samples) * 1000.0 / size

    def idle(self, now: float) -> bool:
        """Nothing recorded within the monitored span: a fresh sensor would measure the same."""
        return all(now - s.last >= self.num * self.window_ms for s in self.samples)


class Sensors:
    """A ``Rate`` per key (client tags, an address), made on first use; once ``SENSOR_SWEEP_MIN`` exist,
    those idle for a whole window are dropped before the next one is made (Kafka expires idle sensors)."""

    def __init__(self, num_samples: int, window_ms: float):
        self.num_samples = num_samples
        self.window_ms = window_ms
        self.rates: dict = {}
        self._sweep_at = SENSOR_SWEEP_MIN

    def __len__(self) -> int:
        return len(self.rates)

    def clear(self) -> None:
        self.rates.clear()

    def get(self, key, now: float) -> Rate:
        rate = self.rates.get(key)
        if rate is None:
            if len(self.rates) >= self._sweep_at:
                self.rates = {k: r for k, r in self.rates.items() if not r.idle(now)}
                self._sweep_at = max(SENSOR_SWEEP_MIN, 2 * len(self.rates))
            rate = self.rates[key] = Rate(self.num_samples, self.window_ms)
        return rate


def throttle_ms(rate: Rate, bound: float, now: float, cap: float | None = None) -> int:
    """0 within ``bound``; else the delay that brings the rate back to it, assuming nothing more is
    recorded (QuotaUtils.throttleTime), at most ``cap``."""
    value = rate.measure(now)
    if value <= bound:
        return 0
    # a bound of 0 (max.connection.creation.rate=0) throttles every event for as long as allowed
    delay = (value - bound) / bound * rate.window_size(now) if bound > 0 else math.inf
    if cap is not None:
        delay = min(delay, cap)
    return int(math.floor(min(delay, 2**31 - 1) + 0.5))


def now_ms() -> float:
    return time.monotonic() * 1000.0


class _Default:
    """The default entity name (null on the wire), distinct from every real name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT = _Default()


class ClientRateQuota:
    """One quota key (producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate)
    for every user/client-id: the configured limits and a ``Rate`` per metric tags (Kafka's per-client
    sensors). ``enabled`` is False while no entity sets this key: callers check it first, so an
    unconfigured broker pays one attribute test."""

    def __init__(self, key: str, num_samples: int, window_ms: float, max_throttle_ms: float | None = None):
        self.key = key
        self.num_samples = num_samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        # (user part, client part) -> limit; a part is a name, DEFAULT, or None when the entity lacks it
        self.limits: dict[tuple, float] = {}
        self.sensors = Sensors(num_samples, window_ms)  # by (user, client id) tags
        self.enabled = False
        self.throttled = 0  # responses throttled for this key (for tests and debugging)

    def set_limits(self, limits: dict[tuple, float]) -> None:
        self.limits = limits
        self.enabled = bool(limits)
        if not limits:
            self.sensors.clear()

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(sensor tags, limit) of the most specific entity configured for this client, or None."""
        limits = self.limits
        if user:
            if client_id:
                for key in ((user, client_id), (user, DEFAULT)):
                    if key in limits:
                        return (user, client_id), limits[key]
            if (user, None) in limits:
                return (user, ""), limits[(user, None)]
            if client_id:
                for key in ((DEFAULT, client_id), (DEFAULT, DEFAULT)):
                    if key in limits:
                        return (user, client_id), limits[key]
            if (DEFAULT, None) in limits:
                return (user, ""), limits[(DEFAULT, None)]
        if client_id:
            for key in ((None, client_id), (None, DEFAULT)):
                if key in limits:
                    return ("", client_id), limits[key]
        return None

    def record(self, user: str, client_id: str, value: float, now: float | None = None) -> int:
        """Record ``value`` for this client; the throttle time in ms (0 within its quota or without one)."""
        found = self.resolve(user, client_id)
        if found is None:
            return 0
        tags, limit = found
        if now is None:
            now = now_ms()
        sensor = self.sensors.get(tags, now)
        sensor.record(value, now)
        delay = throttle_ms(sensor, limit, now, self.max_throttle_ms)
        if delay:
            self.throttled += 1
            log.debug("%s quota %s of user %r client %r exceeded: throttled %d ms", self.key, limit, user,
                      client_id, delay)
        return delay

    def unrecord(self, user: str, client_id: str, value: float, now: float | None = None) -> None:
        """Take back a recorded value (a throttled fetch answers no records, so its bytes do not count)."""
        found = self.resolve(user, client_id)
        if found is not None:
            now = now_ms() if now is None else now
            self.sensors.get(found[0], now).record(-value, now)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may take without a certain throttle (Kafka caps a fetch's max bytes at it)."""
        found = self.resolve(user, client_id)
        if found is None:
            return None
        return found[1] * (self.num_samples - 1) * self.window_ms / 1000.0


def client_of(header) -> tuple[str, str]:
    """(user, client id) of a request as the quotas see it: the principal's name and the header's id."""
    principal = header.principal
    return (principal.name if principal is not None else ""), (header.client_id or "")


def _resolve_ip(name: str) -> str | None:
    """An ip entity's address (a host name resolves to its first address, as Java's getByName), None if
    it does not resolve. Blocking for a host name: AlterClientQuotas is rare and names are usually IPs."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return address_key(socket.inet_ntop(family, socket.inet_pton(family, name)))
        except OSError:
            continue
    try:
        return address_key(socket.getaddrinfo(name.encode() if name.isascii() else name, None,
                                              type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError):
        return None


class TokenBucket:
    """Kafka's ``TokenBucket`` measurable: up to ``burst`` tokens, refilled at ``rate`` per second, taken by
    each recorded value (the bucket may go below zero). Created full. Times in ms of ``time.monotonic``."""

    __slots__ = ("rate", "burst", "tokens", "last_ms")

    def __init__(self, rate: float, burst: float, now: float):
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.last_ms = now

    def refill(self, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + self.rate * max(0.0, now - self.last_ms) / 1000.0)
        self.last_ms = now
        return self.tokens


class ControllerMutationRateQuota(ClientRateQuota):
    """controller_mutation_rate: the configured limits (resolved as the other keys') and a token bucket per
    client, whose burst is ``limit x burst_seconds`` (Kafka's samples x window)."""

    def __init__(self, num_samples: int, window_seconds: int):
        super().__init__(CONTROLLER_MUTATION_RATE, num_samples, window_seconds * 1000.0)
        self.burst_seconds = num_samples * window_seconds
        self.buckets: dict[tuple, TokenBucket] = {}

    def set_limits(self, limits: dict[tuple, float]) -> None:
        """New limits (every reload of the quota configs, whichever key changed). As Kafka keeps a
        sensor's state and changes its bound: a bucket whose tags still resolve keeps its tokens,
        with its rate and burst changed if its limit did; one whose quota went is dropped."""
        super().set_limits(limits)
        now = now_ms()
        kept: dict[tuple, TokenBucket] = {}
        for tags, bucket in self.buckets.items():
            found = self.resolve(*tags)
            if found is None or found[0] != tags:  # no quota, or these clients now match other tags
                continue
            limit = found[1]
            if limit != bucket.rate:
                bucket.refill(now)  # the time so far at the old rate
                bucket.rate, bucket.burst = limit, limit * self.burst_seconds
                bucket.tokens = min(bucket.tokens, bucket.burst)
            kept[tags] = bucket
        self.buckets = kept

    def bucket(self, tags: tuple, limit: float, now: float) -> TokenBucket:
        bucket = self.buckets.get(tags)
        if bucket is None:
            if len(self.buckets) >= SENSOR_SWEEP_MIN:  # a full bucket is what a new one would be
                self.buckets = {k: b for k, b in self.buckets.items() if b.refill(now) < b.burst}
            bucket = self.buckets[tags] = TokenBucket(limit, limit * self.burst_seconds, now)
        return bucket


class MutationQuota:
    """One CreateTopics / CreatePartitions / DeleteTopics request's controller mutation quota (Kafka's
    Strict- and PermissiveControllerMutationQuota): ``take(partitions)`` before each topic's change."""

    __slots__ = ("quota", "found", "strict", "throttle_ms", "_recorded_ms")

    def __init__(self, quota: ControllerMutationRateQuota, header, strict: bool):
        self.quota = quota
        self.found = quota.resolve(*client_of(header)) if quota.enabled else None
        self.strict = strict
        self.throttle_ms = 0
        self._recorded_ms = 0.0

    def take(self, partitions: int) -> None:
        """Take ``partitions`` tokens; a strict quota whose bucket is already below zero refuses the change
        instead (KafkaError THROTTLING_QUOTA_EXCEEDED), leaving the bucket as it is."""
        if self.found is None:
            return
        tags, limit = self.found
        now = now_ms()
        bucket = self.quota.bucket(tags, limit, now)
        tokens = bucket.refill(now)
        if self.strict and tokens < 0:
            self._throttle(tokens, limit, now)
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
        bucket.tokens = tokens - partitions
        if not self.strict and bucket.tokens < 0:
            self._throttle(bucket.tokens, limit, now)

    def _throttle(self, tokens: float, limit: float, now: float) -> None:
        self.throttle_ms = round(-tokens / limit * 1000) if limit > 0 else 2**31 - 1
        self._recorded_ms = now
        self.quota.throttled += 1

    def finish(self, header, response):
        """The response with the throttle time left (less the time since it was measured); the connection
        is muted for it."""
        if self.throttle_ms:
            delay = max(0, int(self.throttle_ms - (now_ms() - self._recorded_ms)))
            if delay:
                set_throttle_time(response, delay)
                _mute(header, delay)
        return response


class ClientQuotas:
    """The broker's client quota configs and their enforcement (see the module docstring)."""

    def __init__(self, data_dir: str, num_samples: int = 11, window_seconds: int = 1,
                 mutation_samples: int = 11, mutation_window_seconds: int = 1):
        self.data_dir = data_dir
        self.num_samples = num_samples
        self.window_ms = window_seconds * 1000.0
        self.entities: dict[Entity, dict[str, float]] = {}
        self.produce = ClientRateQuota(PRODUCER_BYTE_RATE, num_samples, self.window_ms)
        self.fetch = ClientRateQuota(CONSUMER_BYTE_RATE, num_samples, self.window_ms)
        # request time is capped at one window, as ClientRequestQuotaManager caps it
        self.request = ClientRateQuota(REQUEST_PERCENTAGE, num_samples, self.window_ms, self.window_ms)
        self.controller_mutation = ControllerMutationRateQuota(mutation_samples, mutation_window_seconds)
        self._by_key = {q.key: q for q in (self.produce, self.fetch, self.request, self.controller_mutation)}
        self.ip_limits: dict[str, float] = {}  # address -> connection_creation_rate
        self.ip_default: float | None = None

    @classmethod
    def from_config(cls, config) -> ClientQuotas:
        import os

        return cls(os.path.abspath(config.data_dir), config["quota.window.num"],
                   config["quota.window.size.seconds"], config["controller.quota.window.num"],
                   config["controller.quota.window.size.seconds"])

    # -- persistence ---------------------------------------------------------------------------

    def load(self) -> None:
        from minibroker.storage.metadata_file import load_metadata

        saved = load_metadata(self.data_dir, QUOTAS_FILE, {"entities": []})
        entities: dict[Entity, dict[str, float]] = {}
        try:
            for item in saved.get("entities", []):
                entity = entity_of((t, n) for t, n in item["entity"])
                values = {str(k): float(v) for k, v in item["quotas"].items()}
                if values:
                    entities[entity] = values
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            log.warning("ignoring malformed %s: %s", QUOTAS_FILE, e)
            entities = {}
        self.entities = entities
        self._apply()
        if entities:
            log.info("client quotas loaded for %d entities", len(entities))

    def _save(self, entities: dict[Entity, dict[str, float]]) -> None:
        from minibroker.storage.metadata_file import save_metadata

        save_metadata(self.data_dir, QUOTAS_FILE, {"entities": [
            {"entity": [list(p) for p in entity], "quotas": values} for entity, values in entities.items()]})

    def _apply(self) -> None:
        """Rebuild the enforcement tables from ``entities``."""
        per_key: dict[str, dict[tuple, float]] = {k: {} for k in self._by_key}
        ip_limits: dict[str, float] = {}
        ip_default = None
        for entity, values in self.entities.items():
            names = dict(entity)
            if IP in names:
                rate = values.get(CONNECTION_CREATION_RATE)
                if rate is None:
                    continue
                if names[IP] is None:
                    ip_default = rate
                else:
                    address = _resolve_ip(names[IP])
                    if address is None:
                        log.warning("client quota for ip %s: the name does not resolve; ignored", names[IP])
                    else:
                        ip_limits[address] = rate
                continue
            parts = tuple(None if t not in names else DEFAULT if names[t] is None else names[t]
                          for t in (USER, CLIENT_ID))
            for key, value in values.items():
                if key in per_key:
                    per_key[key][parts] = value
        for key, limits in per_key.items():
            self._by_key[key].set_limits(limits)
        self.ip_limits, self.ip_default = ip_limits, ip_default

    # -- DescribeClientQuotas ------------------------------------------------------------------

    def describe(self, components, strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """Entities matching the filter (ClientQuotasImage.describe); KafkaError for a bad filter."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for c in components:
            etype = c.entity_type
            if not etype:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type")
            if etype in exact or etype in specified:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Entity type {etype} appears more than once in the filter")
            if etype not in (USER, CLIENT_ID, IP):
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "An exact match needs a match string")
                exact[etype] = c.match
            elif c.match_type == MATCH_DEFAULT:
                if c.match is not None:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "A default match takes no match string")
                exact[etype] = None
            elif c.match_type == MATCH_SPECIFIED:
                if c.match is not None:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "An any-name match takes no match string")
                specified.add(etype)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
        wanted = exact.keys() | specified
        if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "An ip filter component cannot be combined with user or client-id ones")
        out = []
        for entity, values in self.entities.items():
            names = dict(entity)
            if strict and len(names) != len(wanted):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in specified):
                continue
            out.append((entity, dict(values)))
        return out

    # -- AlterClientQuotas ---------------------------------------------------------------------

    def alter(self, entries, validate_only: bool) -> list[tuple[int, str | None]]:
        """Apply AlterClientQuotas entries (all valid ones together, then one save), as Kafka's
        ClientQuotaControlManager judges them; (error code, message) per entry in request order."""
        new = {e: dict(v) for e, v in self.entities.items()}
        results: list[tuple[int, str | None]] = []
        seen: set[Entity] = set()
        changed = False
        for entry in entries:
            try:
                entity = self._validate_entity(entry.entity)
                if entity in seen:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     f"Entity {_describe_entity(entity)} appears more than once; ignored")
                seen.add(entity)
                updates = self._validate_ops(entity, entry.ops)
            except KafkaError as e:
                results.append((int(e.code), e.message))
                continue
            values = new.setdefault(entity, {})
            for key, value in updates.items():
                if value is None:
                    changed |= values.pop(key, None) is not None
                elif values.get(key) != value:
                    values[key] = value
                    changed = True
            if not values:
                del new[entity]
            results.append((0, None))
        if validate_only or not changed:
            return results
        try:
            self._save(new)
        except OSError as e:
            log.error("cannot save client quotas in %s: %s", self.data_dir, e)
            message = f"Client quotas could not be saved: {e.strerror or e}"
            return [(int(ErrorCode.UNKNOWN_SERVER_ERROR), message) if code == 0 else (code, msg)
                    for code, msg in results]
        self.entities = new
        self._apply()
        return results

    @staticmethod
    def _validate_entity(entity_data) -> Entity:
        if not entity_data:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
        names: dict[str, str | None] = {}
        for item in entity_data:
            etype, name = item.entity_type, item.entity_name
            if etype in names:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Entity type {etype} appears twice in one entity")
            if etype not in (USER, CLIENT_ID, IP):
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {etype}")
            if name is not None and not name:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Empty {etype} not supported")
            names[etype] = name
        if IP in names:
            if len(names) > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination: an ip "
                                 "entity cannot be combined with user or client-id")
            if names[IP] is not None and _resolve_ip(names[IP]) is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{names[IP]} is not a valid IP or resolvable host")
        return entity_of(names.items())

    @staticmethod
    def _validate_ops(entity: Entity, ops) -> dict[str, float | None]:
        valid = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
        updates: dict[str, float | None] = {}
        for op in ops:
            key = op.key
            if key in updates:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Duplicate quota key {key}: not updating entity {_describe_entity(entity)}")
            if op.remove:
                updates[key] = None  # removing a key that is not set (or not valid here) changes nothing
                continue
            kind = valid.get(key)
            if kind is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
            value = op.value
            if not value > 0.0:  # NaN too
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
            if kind != "double":
                if value > _TYPE_MAX[kind]:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     f"Proposed value for {key} is too large for {kind.upper()}")
                if abs(math.fmod(value, 1.0)) > 1e-6:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value")
            updates[key] = float(value)
        return updates

    # -- enforcement --------------------------------------------------------------------------

    def charge_produce(self, header, nbytes: int) -> int:
        """producer_byte_rate: record a Produce request's bytes; over the quota, mute the connection for
        the throttle time, which is returned for the response (the records are appended all the same)."""
        user, client_id = client_of(header)
        delay = self.produce.record(user, client_id, nbytes)
        if delay:
            _mute(header, delay)
        return delay

    def fetch_byte_cap(self, header) -> int | None:
        """The most one Fetch may read for this client without a certain throttle, None without a quota."""
        user, client_id = client_of(header)
        cap = self.fetch.max_value_in_window(user, client_id)
        return None if cap is None else max(int(cap), 1)

    def charge_fetch(self, header, nbytes: int) -> int:
        """consumer_byte_rate: record a Fetch response's bytes; over the quota, take them back (the response
        goes out without records, as Kafka's throttled fetch does), mute the connection and return the
        throttle time."""
        user, client_id = client_of(header)
        now = now_ms()
        delay = self.fetch.record(user, client_id, nbytes, now)
        if delay:
            self.fetch.unrecord(user, client_id, nbytes, now)
            _mute(header, delay)
        return delay

    def mutation_quota(self, header, strict_since: int) -> MutationQuota:
        """The controller mutation quota of one request: strict from version ``strict_since`` on."""
        return MutationQuota(self.controller_mutation, header, header.api_version >= strict_since)

    def charge_request_time(self, conn, header, response, seconds: float) -> None:
        """request_percentage: ``seconds`` of the event loop spent on this request, as a percentage of one
        second (the loop is the broker's one request thread); over the quota, the response carries the
        throttle time (the larger of it and any set already) and the connection is muted for it."""
        if header.api_key == WRITE_TXN_MARKERS:
            return
        user, client_id = client_of(header)
        delay = self.request.record(user, client_id, seconds * 100.0)
        if delay:
            set_throttle_time(response, delay)
            conn.throttle(delay)


def _mute(header, delay_ms: int) -> None:
    conn = getattr(header, "connection", None)
    if conn is not None:
        conn.throttle(delay_ms)


def set_throttle_time(response, delay_ms: int) -> None:
    """Put ``delay_ms`` in a response's throttle_time_ms unless a larger value is there already."""
    if isinstance(response, dict):
        response["throttle_time_ms"] = max(response.get("throttle_time_ms") or 0, delay_ms)
    else:
        response.throttle_time_ms = max(getattr(response, "throttle_time_ms", 0) or 0, delay_ms)


def _describe_entity(entity: Entity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


class ConnectionRateQuotas:
    """Connection creation rates as Kafka's ConnectionQuotas measures them: ``max.connection.creation.rate``
    for the whole broker (over it, the acceptor waits the throttle time before taking the connection) and
    ``connection_creation_rate`` per client address (over it, the connection is held unanswered for the
    throttle time and then closed). Owned by the SocketServer; event loop only."""

    def __init__(self, quotas: ClientQuotas, config):
        self.quotas = quotas
        self.config = config
        self.num_samples = quotas.num_samples
        self.window_ms = quotas.window_ms
        self.broker_rate = Rate(self.num_samples, self.window_ms)
        self.per_address = Sensors(self.num_samples, self.window_ms)
        self.listener_rates: dict[str, Rate] = {}
        self.broker_throttles = self.address_throttles = 0  # connections delayed / refused (tests, debugging)

    def broker_delay_ms(self, listener: str | None = None, now: float | None = None) -> int:
        """Record one new connection broker-wide and on ``listener``; the delay before accepting it (0
        within both rates). A listener's rate is its
        ``listener.name.<listener>.max.connection.creation.rate``, else the broker-wide one, which also
        bounds all listeners together (Kafka's ConnectionQuotas)."""
        now = now_ms() if now is None else now
        delay = 0
        limit = self.config["max.connection.creation.rate"]
        if limit < 2**31 - 1:
            self.broker_rate.record(1.0, now)
            delay = throttle_ms(self.broker_rate, limit, now, self.window_ms)
        if listener is not None:
            listener_limit = self.config.for_listener(listener, "max.connection.creation.rate")
            if listener_limit < 2**31 - 1:
                rate = self.listener_rates.get(listener)
                if rate is None:
                    rate = self.listener_rates[listener] = Rate(self.num_samples, self.window_ms)
                rate.record(1.0, now)
                delay = max(delay, throttle_ms(rate, listener_limit, now, self.window_ms))
        if delay:
            self.broker_throttles += 1
        return delay

    def address_limit(self, address: str) -> float | None:
        quotas = self.quotas
        limit = quotas.ip_limits.get(address)
        return quotas.ip_default if limit is None else limit

    def address_delay_ms(self, address: str, now: float | None = None) -> int:
        """Record a connection from ``address``; over its rate, take it back (here and broker-wide: the
        connection is refused) and return how long to hold it before closing."""
        quotas = self.quotas
        if not quotas.ip_limits and quotas.ip_default is None:
            return 0
        now = now_ms() if now is None else now
        limit = self.address_limit(address)
        if limit is None:
            return 0
        rate = self.per_address.get(address, now)
        rate.record(1.0, now)
        delay = throttle_ms(rate, limit, now, self.window_ms)
        if delay:
            self.address_throttles += 1
            rate.record(-1.0, now)
            if self.config["max.connection.creation.rate"] < 2**31 - 1:
                self.broker_rate.record(-1.0, now)
        return delay

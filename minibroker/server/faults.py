"""Faults on demand (issue 32): rules that make the broker misbehave exactly as a test asks.

Loaded only with ``fault.injection.enable=true`` (``Broker.start`` imports this module then; a
broker without it never does, and its connections pay one attribute check per request). A rule
matches requests by API key, version range, topic, partition, group id, transactional id and client
id, within a count, a probability and a time window, and acts on the first request it matches (rules
are tried in the order they were added; the first that matches acts):

- ``error``: answer with a Kafka error code; per partition for the APIs of ``PARTITIONED`` (only the
  matching partitions fail, the others are handled as usual), else the response's top-level
  ``error_code``. ``after_handling``: the request is handled for real first (a Produce is written),
  then its answer carries the error (a Produce answered REQUEST_TIMED_OUT after the write);
  ``bump_leader_epoch`` also starts a new leader epoch on each matched partition, at its log end
  offset, as a leader election would (``PartitionLog.start_leader_epoch``: Metadata shows it, the
  batches appended from then on carry it, ``leader-epoch-checkpoint`` keeps it, so it survives a
  restart, and OffsetForLeaderEpoch answers from it);
- ``offline``: the matched partitions have no leader while the rule lives: Metadata answers them
  LEADER_NOT_AVAILABLE with no leader, the partitioned APIs NOT_LEADER_OR_FOLLOWER (or ``error``);
- ``drop``: close the connection ``before`` handling or ``after`` (handled, never answered);
- ``stop_reading``: the request is never answered and nothing more is read from the connection;
- ``throttle``: answered as usual with ``throttle_time_ms`` and the connection muted for it, as a
  client quota does (KIP-219);
- before any of these (or alone): ``delay_ms`` (plus up to ``jitter_ms``) or ``hold`` until released.
  A delayed or held request is handled after the wait, from its own copy of the frame.

Single node, honestly: no leader ever moves, so a client told NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR
finds this node again and retries here, as it would after a real move. Owner of: the rules and the held
requests (a bumped leader epoch belongs to the partition's log); used from the event loop only
(``BrokerRunner`` and the HTTP API call in on it).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import random
from dataclasses import dataclass, field

from minibroker.config import ConfigError
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol import codec
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID, in_range

log = logging.getLogger("minibroker.faults")

ACTIONS = ("error", "offline", "drop", "stop_reading", "throttle", "none")
NEVER_BY_DEFAULT = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate: only when named


class RuleError(ValueError):
    """A rule that cannot be applied (the HTTP API answers 400 with its message)."""


@dataclass(frozen=True)
class PartitionPath:
    """Where an API's topics and partitions are, in its request and its response (versions as the
    schema names them), and the error field of a partition's answer."""

    req_topics: str
    req_name: str
    req_partitions: str
    req_index: str | None  # None: the request's partitions are plain int32s
    resp_topics: str
    resp_name: str
    resp_partitions: str
    resp_index: str
    error_field: str = "error_code"


_TOPICS = PartitionPath("topics", "name", "partitions", "partition_index",
                        "topics", "name", "partitions", "partition_index")
PARTITIONED: dict[int, PartitionPath] = {
    0: PartitionPath("topic_data", "name", "partition_data", "index",
                     "responses", "name", "partition_responses", "index"),  # Produce
    1: PartitionPath("topics", "topic", "partitions", "partition",
                     "responses", "topic", "partitions", "partition_index"),  # Fetch
    2: _TOPICS,  # ListOffsets
    8: _TOPICS,  # OffsetCommit
    9: PartitionPath("topics", "name", "partition_indexes", None,
                     "topics", "name", "partitions", "partition_index"),  # OffsetFetch v0-v7
    21: _TOPICS,  # DeleteRecords
    23: PartitionPath("topics", "topic", "partitions", "partition",
                      "topics", "topic", "partitions", "partition"),  # OffsetForLeaderEpoch
    24: PartitionPath("v3_and_below_topics", "name", "partitions", None, "results_by_topic_v3_and_below",
                      "name", "results_by_partition", "partition_index",
                      "partition_error_code"),  # AddPartitionsToTxn v0-v3
    28: _TOPICS,  # TxnOffsetCommit
}
PARTITIONED_UP_TO = {9: 7, 24: 3}  # later versions of these nest their topics under groups/transactions
# The coordinator's own errors are whole-request answers, even where partitions could carry them.
COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                ErrorCode.COORDINATOR_NOT_AVAILABLE})


def api_key_of(value) -> int:
    """An API key from its number or its name (``"Produce"``, ``"produce"``, ``"OffsetCommit"``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value in codec.API_NAMES:
            return value
    elif isinstance(value, str):
        if value.strip().lstrip("-").isdigit():
            return api_key_of(int(value))
        wanted = value.replace("_", "").replace("-", "").lower()
        for key, name in codec.API_NAMES.items():
            if name.lower() == wanted:
                return key
    raise RuleError(f"unknown API {value!r} (a name such as Produce, or a number)")


def error_code_of(value) -> ErrorCode:
    try:
        if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
            return ErrorCode[value.strip().upper()]
        return ErrorCode(int(value))
    except (KeyError, ValueError, TypeError):
        raise RuleError(f"unknown error code {value!r} (a name such as NOT_LEADER_OR_FOLLOWER, or a number)"
                        ) from None


def has_top_level_error(api_key: int, version: int) -> bool:
    fields = codec.RESPONSES[api_key].fields
    return any(f.name == "error_code" and in_range(version, f.versions) for f in fields)


def _partitioned(api_key: int, version: int) -> PartitionPath | None:
    path = PARTITIONED.get(api_key)
    if path is None or version > PARTITIONED_UP_TO.get(api_key, version):
        return None
    return path


_RULE_KEYS = {"api", "versions", "topic", "partition", "group", "transactional_id", "client_id", "count",
              "probability", "starts_after_ms", "lasts_ms", "action", "error", "after_handling",
              "bump_leader_epoch", "delay_ms", "jitter_ms", "hold", "drop", "throttle_ms"}


@dataclass(eq=False)
class FaultRule:
    """One rule; ``matched`` counts the requests it acted on."""

    id: int
    apis: frozenset[int] | None = None
    versions: tuple[int, int] | None = None
    topic: str | None = None
    partition: int | None = None
    group: str | None = None
    transactional_id: str | None = None
    client_id: str | None = None
    count: int | None = None
    probability: float = 1.0
    starts_after_ms: int = 0
    lasts_ms: int | None = None
    action: str = "none"
    error: ErrorCode | None = None
    after_handling: bool = False
    bump_leader_epoch: bool = False
    delay_ms: int = 0
    jitter_ms: int = 0
    hold: bool = False
    drop: str = "before"
    throttle_ms: int = 0
    matched: int = 0
    created: float = 0.0  # event-loop time
    held: list = field(default_factory=list)  # futures of the requests it holds

    def live(self, now: float) -> bool:
        if self.count is not None and self.matched >= self.count:
            return False
        age_ms = (now - self.created) * 1000
        if age_ms < self.starts_after_ms:
            return False
        return self.lasts_ms is None or age_ms < self.starts_after_ms + self.lasts_ms

    def to_json(self) -> dict:
        out = {"id": self.id, "matched": self.matched, "held": len(self.held), "action": self.action}
        if self.apis is not None:
            out["api"] = sorted(codec.API_NAMES[k] for k in self.apis)
        for name in ("versions", "topic", "partition", "group", "transactional_id", "client_id", "count",
                     "lasts_ms"):
            if getattr(self, name) is not None:
                value = getattr(self, name)
                out[name] = list(value) if isinstance(value, tuple) else value
        for name in ("starts_after_ms", "delay_ms", "jitter_ms", "throttle_ms"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        for name in ("after_handling", "bump_leader_epoch", "hold"):
            if getattr(self, name):
                out[name] = True
        if self.probability != 1.0:
            out["probability"] = self.probability
        if self.error is not None:
            out["error"] = self.error.name
        if self.action == "drop":
            out["drop"] = self.drop
        return out


def _int(spec: dict, name: str, low: int = 0) -> int | None:
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RuleError(f"{name} must be an integer")
    try:
        number = int(value)
    except ValueError:
        raise RuleError(f"{name} must be an integer, not {value!r}") from None
    if number < low:
        raise RuleError(f"{name} must be at least {low}")
    return number


def _text(spec: dict, name: str) -> str | None:
    value = spec.get(name)
    if value is not None and not isinstance(value, str):
        raise RuleError(f"{name} must be a string")
    return value


def parse_rule(spec: dict, rule_id: int = 0) -> FaultRule:
    """A rule from its JSON form (the fixture's keywords, the HTTP body, the CLI's flags); RuleError
    says what is wrong. The action may be left out when the keys say it (``error`` -> error, ``drop``
    -> drop, ``throttle_ms`` -> throttle, ``delay_ms``/``hold`` alone -> none)."""
    if not isinstance(spec, dict):
        raise RuleError("a rule is a JSON object")
    unknown = set(spec) - _RULE_KEYS
    if unknown:
        raise RuleError(f"unknown rule keys: {', '.join(sorted(unknown))}")
    rule = FaultRule(id=rule_id)
    apis = spec.get("api")
    if apis is not None:
        apis = apis if isinstance(apis, list) else [apis]
        if not apis:
            raise RuleError("api names no API")
        rule.apis = frozenset(api_key_of(a) for a in apis)
    versions = spec.get("versions")
    if versions is not None:
        if isinstance(versions, int) and not isinstance(versions, bool):
            versions = [versions, versions]
        if (not isinstance(versions, list | tuple) or len(versions) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in versions)
                or versions[0] > versions[1]):
            raise RuleError("versions is [min, max] (inclusive) or one version")
        rule.versions = (versions[0], versions[1])
    for name in ("topic", "group", "transactional_id", "client_id"):
        setattr(rule, name, _text(spec, name))
    rule.partition = _int(spec, "partition")
    rule.count = _int(spec, "count", 1)
    rule.starts_after_ms = _int(spec, "starts_after_ms") or 0
    rule.lasts_ms = _int(spec, "lasts_ms")
    probability = spec.get("probability", 1.0)
    if isinstance(probability, bool) or not isinstance(probability, int | float) or not 0 < probability <= 1:
        raise RuleError("probability must be a number in (0, 1]")
    rule.probability = float(probability)
    rule.delay_ms = _int(spec, "delay_ms") or 0
    rule.jitter_ms = _int(spec, "jitter_ms") or 0
    rule.throttle_ms = _int(spec, "throttle_ms") or 0
    for name in ("after_handling", "bump_leader_epoch", "hold"):
        value = spec.get(name, False)
        if not isinstance(value, bool):
            raise RuleError(f"{name} is true or false")
        setattr(rule, name, value)
    if spec.get("error") is not None:
        rule.error = error_code_of(spec["error"])
    drop = spec.get("drop")
    if drop is not None:
        if drop is True:
            drop = "before"
        if drop not in ("before", "after"):
            raise RuleError("drop is 'before' or 'after' (handling)")
        rule.drop = drop
    action = spec.get("action")
    if action is None:
        action = ("drop" if drop is not None else "throttle" if rule.throttle_ms else
                  "error" if rule.error is not None else "none")
    if action not in ACTIONS:
        raise RuleError(f"action must be one of {', '.join(ACTIONS)}")
    rule.action = action
    _check(rule)
    return rule


def _check(rule: FaultRule) -> None:
    if rule.action == "error":
        if rule.error is None:
            raise RuleError("an error rule needs error (a Kafka error name or code)")
        for key in rule.apis or ():
            fields = codec.RESPONSES[key].fields
            if key not in PARTITIONED and not any(f.name == "error_code" for f in fields):
                raise RuleError(f"{codec.API_NAMES[key]} has no error code to answer with")
    elif rule.error is not None and rule.action != "offline":
        raise RuleError(f"error goes with the error or offline action, not {rule.action}")
    if rule.action == "offline":
        if rule.topic is None:
            raise RuleError("an offline rule needs a topic (and optionally a partition)")
        if rule.apis is not None:
            raise RuleError("an offline rule applies to every API that names the partition: no api")
    if rule.action == "throttle" and rule.throttle_ms <= 0:
        raise RuleError("a throttle rule needs throttle_ms")
    if rule.action == "none" and not (rule.delay_ms or rule.hold):
        raise RuleError("a rule needs an action: error, offline, drop, stop_reading, throttle, delay_ms "
                        "or hold")
    if rule.after_handling and rule.action != "error":
        raise RuleError("after_handling goes with an error rule")
    if rule.bump_leader_epoch and (rule.action != "error" or rule.topic is None):
        raise RuleError("bump_leader_epoch goes with an error rule that names a topic")
    if rule.hold and rule.delay_ms:
        raise RuleError("hold or delay_ms, not both")


# -- what a request names ----------------------------------------------------------------------------


def request_partitions(api_key: int, version: int, request, topic_name) -> list[tuple]:
    """(topic, partition) pairs a request names (partition None where it names whole topics);
    ``topic_name(topic_id)`` resolves topic ids."""
    path = _partitioned(api_key, version)
    out: list[tuple[str | None, int | None]] = []
    if path is not None:
        for topic in getattr(request, path.req_topics, None) or ():
            name = _topic_of(topic, path.req_name, topic_name)
            for p in getattr(topic, path.req_partitions) or ():
                out.append((name, p if path.req_index is None else getattr(p, path.req_index)))
    elif api_key in (3, 75):  # Metadata, DescribeTopicPartitions
        out = [(_topic_of(t, "name", topic_name), None) for t in request.topics or ()]
    return out


def asks_every_topic(api_key: int, version: int, request) -> bool:
    """A Metadata request for every topic (null topics; v0: an empty list) or a DescribeTopicPartitions
    naming none, which is the same question."""
    if api_key == 3:
        return request.topics is None or (version == 0 and not request.topics)
    return api_key == 75 and not request.topics


def _topic_of(topic, name_field: str, topic_name) -> str | None:
    name = getattr(topic, name_field, None)
    if not name:  # a version that names topics by id ("" or None here)
        topic_id = getattr(topic, "topic_id", ZERO_UUID)
        if topic_id != ZERO_UUID:
            name = topic_name(topic_id)
    return name


def group_ids(api_key: int, request) -> list[str]:
    if api_key == 10:  # FindCoordinator: key_type 0 is a group
        return _coordinator_keys(request, 0)
    if api_key == 9 and getattr(request, "groups", None):
        return [g.group_id for g in request.groups]
    if api_key == 15:
        return list(request.groups or ())
    if api_key == 42:
        return list(request.groups_names or ())
    group = getattr(request, "group_id", None)
    return [] if group is None else [group]


def transactional_ids(api_key: int, request) -> list[str]:
    if api_key == 10:
        return _coordinator_keys(request, 1)
    if api_key == 24:
        if request.transactions:
            return [t.transactional_id for t in request.transactions]
        return [request.v3_and_below_transactional_id]
    txn = getattr(request, "transactional_id", None)
    return [] if txn is None else [txn]


def _coordinator_keys(request, key_type: int) -> list[str]:
    if getattr(request, "key_type", 0) != key_type:
        return []
    return list(request.coordinator_keys or ()) or ([request.key] if request.key else [])


# -- answers -------------------------------------------------------------------------------------------


def error_answer(api_key: int, version: int, request, code: int):
    """The answer to ``request`` failing with ``code``: per partition where the API has partitions
    (but for the coordinator's own errors), else top-level."""
    path = _partitioned(api_key, version)
    if path is not None and int(code) not in COORDINATOR_ERRORS:
        return _partition_errors(path, request, code)
    if api_key == 10 and version >= 4:  # FindCoordinator: one answer per key
        return Struct(throttle_time_ms=0, coordinators=[
            Struct(key=k, node_id=-1, host="", port=-1, error_code=int(code), error_message=None)
            for k in request.coordinator_keys])
    if api_key == 9 and version >= 8:
        return Struct(throttle_time_ms=0, groups=[Struct(group_id=g.group_id, topics=[], error_code=int(code))
                                                  for g in request.groups])
    if api_key == 24 and version >= 4:
        return Struct(throttle_time_ms=0, error_code=int(code), results_by_transaction=[])
    if has_top_level_error(api_key, version):
        return Struct(throttle_time_ms=0, error_code=int(code))
    if path is not None:
        return _partition_errors(path, request, code)
    return None


def _partition_errors(path: PartitionPath, request, code: int) -> Struct:
    topics = []
    for topic in getattr(request, path.req_topics) or ():
        name = getattr(topic, path.req_name, None)
        entry = Struct(**{path.resp_name: name, path.resp_partitions: []})
        if getattr(topic, "topic_id", None) is not None:
            entry.topic_id = topic.topic_id
        for p in getattr(topic, path.req_partitions) or ():
            index = p if path.req_index is None else getattr(p, path.req_index)
            getattr(entry, path.resp_partitions).append(
                Struct(**{path.resp_index: index, path.error_field: int(code)}))
        topics.append(entry)
    return Struct(throttle_time_ms=0, error_code=0, **{path.resp_topics: topics})


def set_errors(api_key: int, version: int, response, code: int, wanted, topic_name) -> None:
    """Put ``code`` into a real answer: on the partitions ``wanted(topic, partition)`` accepts, else
    top-level (after_handling); ``topic_name(topic_id)`` names topics the answer gives by id."""
    path = _partitioned(api_key, version)
    if path is not None and int(code) not in COORDINATOR_ERRORS:
        for topic in getattr(response, path.resp_topics, None) or ():
            name = _topic_of(topic, path.resp_name, topic_name)
            for p in getattr(topic, path.resp_partitions) or ():
                if wanted(name, getattr(p, path.resp_index)):
                    setattr(p, path.error_field, int(code))
        return
    if api_key in (3, 75):
        for t in response.topics or ():
            if wanted(t.name, None):
                t.error_code = int(code)
                t.partitions = []
        return
    if api_key == 10 and version >= 4:
        for c in response.coordinators:
            c.error_code = int(code)
        return
    if api_key == 9 and version >= 8:
        for g in response.groups:
            g.error_code = int(code)
        return
    response.error_code = int(code)


def merge_answers(path: PartitionPath, response, extra: Struct) -> None:
    """Add the topics of ``extra`` (partitions answered with an error) to ``response``."""
    def key(t):
        topic_id = getattr(t, "topic_id", None)
        return getattr(t, path.resp_name, None) if topic_id in (None, ZERO_UUID) else topic_id

    mine = {key(t): t for t in getattr(response, path.resp_topics)}
    for topic in getattr(extra, path.resp_topics):
        have = mine.get(key(topic))
        if have is None:
            getattr(response, path.resp_topics).append(topic)
        else:
            getattr(have, path.resp_partitions).extend(getattr(topic, path.resp_partitions))


def split_request(path: PartitionPath, request, taken, topic_name) -> Struct:
    """Take the partitions ``taken(topic, partition)`` accepts out of ``request`` (in place); return
    them as a request of their own. ``topic_name(topic_id)`` names topics given by id."""
    out_topics = []
    kept_topics = []
    for topic in getattr(request, path.req_topics) or ():
        name = _topic_of(topic, path.req_name, topic_name)
        mine, rest = [], []
        for p in getattr(topic, path.req_partitions) or ():
            index = p if path.req_index is None else getattr(p, path.req_index)
            (mine if taken(name, index) else rest).append(p)
        if mine:
            copy = Struct(**vars(topic))
            setattr(copy, path.req_partitions, mine)
            out_topics.append(copy)
        if rest:
            setattr(topic, path.req_partitions, rest)
            kept_topics.append(topic)
    setattr(request, path.req_topics, kept_topics)
    return Struct(**{path.req_topics: out_topics})


# -- the engine ----------------------------------------------------------------------------------------


def loopback_only(hosts) -> bool:
    """Whether every host is a loopback address or name (an empty host binds every interface)."""
    for host in hosts:
        if host in ("localhost",):
            continue
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return False
        except ValueError:
            return False
    return True


class FaultInjector:
    """The broker's rules (``broker.faults``); ``engaged`` is what a connection checks per request."""

    def __init__(self, broker):
        self.broker = broker
        self.rules: list[FaultRule] = []
        self.engaged = False
        self._ids = itertools.count(1)
        self._random = random.Random()

    # -- rules ------------------------------------------------------------------------------------

    def add(self, spec: dict) -> FaultRule:
        rule = parse_rule(spec, next(self._ids))
        rule.created = asyncio.get_running_loop().time()
        self.rules.append(rule)
        self._update()
        log.info("fault rule %d added: %s", rule.id, rule.to_json())
        return rule

    def get(self, rule_id: int) -> FaultRule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    def remove(self, rule_id: int) -> bool:
        rule = self.get(rule_id)
        if rule is None:
            return False
        self.rules.remove(rule)
        _release_held(rule)  # a removed rule holds nothing back
        self._update()
        log.info("fault rule %d removed after %d matches", rule_id, rule.matched)
        return True

    def clear(self) -> int:
        count = len(self.rules)
        for rule in list(self.rules):
            self.remove(rule.id)
        return count

    def release(self, rule_id: int | None = None) -> int:
        """Let the requests a rule holds (every rule's with None) go on; returns how many."""
        return sum(_release_held(rule) for rule in self.rules if rule_id is None or rule.id == rule_id)

    def _update(self) -> None:
        self.engaged = bool(self.rules)

    # -- the request path ---------------------------------------------------------------------------

    def _topic_name(self, topic_id) -> str | None:
        return self.broker.logs.topic_name(topic_id)

    def _first_match(self, header, request, names) -> FaultRule | None:
        api_key, version = header.api_key, header.api_version
        now = asyncio.get_running_loop().time()
        for rule in self.rules:
            if not rule.live(now):
                continue
            if rule.apis is None:
                if api_key in NEVER_BY_DEFAULT:
                    continue
            elif api_key not in rule.apis:
                continue
            if rule.versions is not None and not rule.versions[0] <= version <= rule.versions[1]:
                continue
            if rule.client_id is not None and header.client_id != rule.client_id:
                continue
            if rule.group is not None and rule.group not in group_ids(api_key, request):
                continue
            if rule.transactional_id is not None and rule.transactional_id not in transactional_ids(api_key,
                                                                                                    request):
                continue
            if rule.topic is not None and not any(self._names(rule, t, p) for t, p in names):
                continue
            if rule.action in ("error", "offline") and not self._can_answer(rule, api_key, version):
                continue
            if rule.probability < 1.0 and self._random.random() >= rule.probability:
                continue
            return rule
        return None

    @staticmethod
    def _names(rule: FaultRule, topic, partition) -> bool:
        return (rule.topic is None or topic == rule.topic) and (
            rule.partition is None or partition is None or partition == rule.partition)

    @staticmethod
    def _can_answer(rule: FaultRule, api_key: int, version: int) -> bool:
        if rule.action == "offline":
            return api_key in (3, 75) or _partitioned(api_key, version) is not None
        if rule.apis is None and rule.topic is not None:  # a partition's fault: the APIs that name it
            return _partitioned(api_key, version) is not None
        return (_partitioned(api_key, version) is not None or has_top_level_error(api_key, version)
                or api_key in (3, 9, 10, 24, 75))

    def handler_for(self, conn, header, request, fn, frame, body_pos):
        """What the connection calls in place of the handler ``fn`` for this request: ``fn`` itself
        when no rule matches."""
        api_key, version = header.api_key, header.api_version
        names = request_partitions(api_key, version, request, self._topic_name)
        if not names and asks_every_topic(api_key, version, request):  # a rule's topic is among them
            names = [(name, None) for name in self.broker.logs.topics]
        if api_key == 1 and getattr(request, "session_epoch", 0) > 0:
            names = names + self._fetch_session_partitions(request.session_id)
        rule = self._first_match(header, request, names)
        if rule is None:
            return fn
        rule.matched += 1
        log.debug("fault rule %d acts on %s v%d from %s", rule.id, codec.API_NAMES[api_key], version,
                  conn.peer)
        act = self._action(rule, conn, fn, names)
        if not (rule.delay_ms or rule.jitter_ms or rule.hold):
            return act
        if api_key == 0:  # record bytes are views of the read buffer, reused once this returns: a copy
            request = codec.decode(codec.REQUESTS[0].name, version, bytes(frame), body_pos, exact=False)
        return self._later(rule, act, request)

    def _later(self, rule: FaultRule, act, request):
        # held from the moment it matched: a release that follows a seen match always finds it
        waiter = asyncio.get_running_loop().create_future() if rule.hold else None
        if waiter is not None:
            rule.held.append(waiter)

        async def waited(broker, header, _request):
            if waiter is not None:
                await waiter
            else:
                await asyncio.sleep((rule.delay_ms + self._random.uniform(0, rule.jitter_ms)) / 1000)
            result = act(broker, header, request)
            return await result if asyncio.iscoroutine(result) else result

        return waited

    def _action(self, rule: FaultRule, conn, fn, names):
        action = rule.action
        if action == "none":
            return fn
        if action == "drop":
            return self._dropping(rule, conn, fn)
        if action == "stop_reading":
            def stalled(broker, header, request):
                conn.stall()

            return stalled
        if action == "throttle":
            return _then(fn, lambda header, response: self._throttled(conn, rule, response))
        code = rule.error if rule.error is not None else ErrorCode.NOT_LEADER_OR_FOLLOWER
        if rule.bump_leader_epoch:
            for topic, partition in names:
                if topic is not None and partition is not None and self._names(rule, topic, partition):
                    self._bump_leader_epoch(rule, topic, partition)
        if action == "offline":
            return self._erring(rule, conn, fn, code)
        if rule.after_handling:
            def after(header, response):
                if response is not None:
                    set_errors(header.api_key, header.api_version, response, code,
                               lambda t, p: self._names(rule, t, p), self._topic_name)
                return response

            return _then(fn, after)
        return self._erring(rule, conn, fn, code)

    def _dropping(self, rule: FaultRule, conn, fn):
        if rule.drop == "before":
            def dropped(broker, header, request):
                conn.close(abort=True)

            return dropped

        def dropped_after(header, response):
            conn.close(abort=True)

        return _then(fn, dropped_after)

    @staticmethod
    def _throttled(conn, rule: FaultRule, response):
        if response is not None:
            response.throttle_time_ms = max(getattr(response, "throttle_time_ms", 0) or 0, rule.throttle_ms)
        conn.throttle(rule.throttle_ms)
        return response

    def _erring(self, rule: FaultRule, conn, fn, code: int):
        def erring(broker, header, request):
            api_key, version = header.api_key, header.api_version
            if api_key == 3 or api_key == 75:  # Metadata: answered, then the rule's topics carry it
                if rule.action == "offline":
                    return _then(fn, lambda h, r: self._offline_metadata(r, rule))(broker, header, request)
                return _then(fn, lambda h, r: _topic_errors(r, rule.topic, code))(broker, header, request)
            if api_key == 0 and request.acks == 0:  # never answered: Kafka closes the connection
                conn.close(abort=True)
                return None
            path = _partitioned(api_key, version)
            if path is None or int(code) in COORDINATOR_ERRORS:
                return error_answer(api_key, version, request, code)
            if api_key == 1:
                request.max_wait_ms = 0  # a partition in error makes the answer ready at once, as in Kafka
                return _then(fn, lambda h, response: self._failed_fetch(response, rule, code))(
                    broker, header, request)

            def taken(t, p):
                return self._names(rule, t, p)

            failed = split_request(path, request, taken, self._topic_name)
            errors = _partition_errors(path, failed, code)
            if not getattr(request, path.req_topics):
                return errors
            return _then(fn, lambda h, response: (merge_answers(path, response, errors), response)[1])(
                broker, header, request)

        return erring

    def _fetch_session_partitions(self, session_id: int) -> list[tuple[str, int]]:
        """The partitions of an incremental fetch's session: the request names only those that changed."""
        session = self.broker.fetch_sessions.get(session_id)
        return [] if session is None else list(session.partitions)

    def _failed_fetch(self, response, rule: FaultRule, code: int):
        """A Fetch answer, its request handled whole (the session keeps the rule's partitions, as Kafka's
        keeps a partition in error), with the rule's partitions answered ``code`` as Kafka answers a
        partition in error; an incremental answer gets them even where it left them out as unchanged."""
        if response is None or response.error_code or (response.throttle_time_ms and not response.responses):
            return response  # a session error, or a throttled answer: no partitions to carry it
        topics, answered = {}, set()
        for topic in response.responses:
            name = _topic_of(topic, "topic", self._topic_name)
            topics[name] = topic
            for i, p in enumerate(topic.partitions):
                answered.add((name, p.partition_index))
                if self._names(rule, name, p.partition_index):
                    topic.partitions[i] = _failed_fetch_partition(p.partition_index, code)
        session = self.broker.fetch_sessions.get(response.session_id) if response.session_id else None
        for (name, index), sp in (session.partitions.items() if session is not None else ()):
            if not self._names(rule, name, index):
                continue
            # what the client heard is an error: the next answer carries the partition again
            sp.high_watermark = sp.log_start_offset = -1
            if (name, index) not in answered:
                topic = topics.get(name)
                if topic is None:
                    topic = topics[name] = Struct(topic=name, topic_id=sp.topic_id, partitions=[])
                    response.responses.append(topic)
                topic.partitions.append(_failed_fetch_partition(index, code))
        return response

    # -- leader epochs and offline partitions ---------------------------------------------------------

    def _bump_leader_epoch(self, rule: FaultRule, topic: str, partition: int) -> None:
        """A leader election on one node: the partition's log starts its next leader epoch (persisted)."""
        try:
            epoch = self.broker.replicas.get_log(topic, partition).start_leader_epoch()
        except KafkaError as e:  # not here, or its dir failed: nothing to elect
            log.warning("fault rule %d: no leader epoch bump for %s-%d: %s", rule.id, topic, partition, e)
            return
        log.info("fault rule %d: %s-%d is at leader epoch %d", rule.id, topic, partition, epoch)

    @staticmethod
    def _offline_metadata(response, rule: FaultRule):
        for topic in response.topics or ():
            if topic.name != rule.topic:
                continue
            for p in topic.partitions or ():
                if rule.partition is None or p.partition_index == rule.partition:
                    p.error_code = int(ErrorCode.LEADER_NOT_AVAILABLE)
                    p.leader_id = -1
                    p.isr_nodes = []
                    p.offline_replicas = list(p.replica_nodes or ())
        return response


def _failed_fetch_partition(index: int, code: int) -> Struct:
    """A Fetch answer's partition in error, as Kafka's ``FetchResponse.partitionResponse`` makes it."""
    return Struct(partition_index=index, error_code=int(code), high_watermark=-1, last_stable_offset=-1,
                  log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")


def _release_held(rule: FaultRule) -> int:
    """Let the requests ``rule`` holds go on; returns how many."""
    released = 0
    for waiter in rule.held:
        if not waiter.done():
            waiter.set_result(None)
            released += 1
    rule.held.clear()
    return released


def _topic_errors(response, topic: str | None, code: int):
    """A Metadata (or DescribeTopicPartitions) answer whose topics (``topic``, or all) carry ``code``."""
    for t in response.topics or ():
        if topic is None or t.name == topic:
            t.error_code = int(code)
            t.partitions = []
    return response


def _then(fn, after):
    """``fn`` (a handler) whose answer goes through ``after(header, response)``, sync or async alike."""
    def handled(broker, header, request):
        result = fn(broker, header, request)
        if asyncio.iscoroutine(result):
            async def finished():
                return after(header, await result)

            return finished()
        return after(header, result)

    return handled


def enable(broker) -> FaultInjector:
    """``broker.faults`` for ``fault.injection.enable=true``. Refused (ConfigError) when a listener, and so
    the metrics port that shares its host, is reachable beyond loopback, unless
    ``fault.injection.allow.remote=true``, which logs a warning instead."""
    config = broker.config
    hosts = [host for _, host, _ in config.listener_endpoints()]
    if not loopback_only(hosts):
        if not config["fault.injection.allow.remote"]:
            raise ConfigError(
                "fault.injection.enable=true with a listener beyond loopback (" + ", ".join(h or "0.0.0.0"
                                                                                           for h in hosts)
                + "): anyone who reaches it could break this broker; set fault.injection.allow.remote=true "
                "to allow it")
        log.warning("fault injection is enabled on a broker reachable beyond loopback (%s): anyone who "
                    "reaches its metrics port can make it fail requests", ", ".join(h or "0.0.0.0"
                                                                                  for h in hosts))
    else:
        log.info("fault injection is enabled (fault.injection.enable=true)")
    return FaultInjector(broker)

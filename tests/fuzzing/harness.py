"""Send hostile exchanges to a running broker and judge what comes back: the fuzzer's oracle.

Per exchange (``Client.run``): the bytes are read the way the broker reads them (``predict``: size
prefixes, header, the codec's decode) to know, frame by frame, whether the broker must answer, may
stay silent (Produce acks=0), may legitimately wait (a Fetch long poll longer than
``WAIT_CUTOFF_MS``, JoinGroup and SyncGroup waiting for other members), or must close the connection
(a size outside 1..socket.request.max.bytes, an undecodable header or body, an unserved key or
version). A clean stream gets an ApiVersions probe appended in the same write. Then every answer
must arrive in order, with its correlation id, and decode with our codec; the outcome is

- ``answered``: the probe was answered (the connection is kept for the next exchange);
- ``closed``: the broker closed the connection (expected, or done by a handler);
- ``incomplete``: the stream ended inside a frame, every answer before it came; we close;
- ``waited``: a request that may wait was still waiting at the cutoff; we close;
- ``skipped``: the exchange would delete or age out the oracle's data (``Protection``), not sent;
- failures: ``hang`` (no answer and no close within the hang timeout, for a request that may not
  wait), ``bad_response`` (a wrong correlation id, an answer our codec cannot decode, or an answer
  where the broker had to close).

Per check (``Oracle.check``, every N exchanges and at the end): a fresh connection's ApiVersions
answers within a deadline; the broker's log holds no traceback and no ERROR record (other than the
``expected_errors`` patterns); the records produced before fuzzing read back byte for byte.
"""

from __future__ import annotations

import logging
import os
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from minibroker.errors import ProtocolViolation
from minibroker.handlers.registry import HANDLERS
from minibroker.protocol import codec
from minibroker.records import Compression, build_records
from minibroker.tools.wire import WireClient

from fuzzing.corpus import Names

WAIT_CUTOFF_MS = 1000  # a Fetch whose max_wait_ms is above this may legitimately wait past the cutoff
WAITING_APIS = {11: "JoinGroup", 14: "SyncGroup"}  # wait for other members, up to timeouts a frame sets
PROBE_CORRELATION = 0x7E000000

# Oracle topics: produced before fuzzing, read back after. Mutated frames may append to them (a
# mutated Produce can be valid), never delete or age them out (see Protection).
ORACLE_TOPICS = {"fzo-plain": 2, "fzo-codecs": 4}
CORPUS_TOPICS = {"fz-a": 3, "fz-b": 1}
GROUP = "fz-group"  # the group the generated requests name; a static member is kept in it
STATIC_MEMBER = "fz-static"


def _subscription(topics: list[str]) -> bytes:
    """A consumer protocol subscription (v0) of ``topics`` (with no topics: an empty assignment)."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return bytes(out + struct.pack(">i", -1))


# Broker-level configs a mutated AlterConfigs may not touch: they delete or compact stored records,
# or shut the fuzzer out (connection limits).
PROTECTED_BROKER_CONFIG = re.compile(
    r"retention|cleanup|segment|cleaner|compact|delete|roll|index|local|connection"
)


# ------------------------------------------------------------------------------------------ prediction


@dataclass(slots=True)
class FramePlan:
    kind: str  # answer | silent | wait | close
    api_key: int = -1
    version: int = -1
    correlation: int = 0
    wait_s: float = 0.0
    why: str = ""

    @property
    def decode_version(self) -> int:
        handler = HANDLERS.get(self.api_key)
        if self.api_key == 18 and handler and not handler.min_version <= self.version <= handler.max_version:
            return 0  # the unsupported-version answer is a v0 body
        return self.version


@dataclass(slots=True)
class Plan:
    frames: list[FramePlan]
    ending: str  # clean | close | incomplete
    skip: str | None = None


class Protection:
    """The oracle topics' data must survive: frames that would delete or age it are not sent.

    Not sent: DeleteTopics naming an oracle topic (by name or id), DeleteRecords on one,
    AlterConfigs / IncrementalAlterConfigs on one, on broker configs matching
    ``PROTECTED_BROKER_CONFIG``, or on BROKER_LOGGER (log levels: it could silence the log oracle).
    """

    def __init__(self, topics, topic_ids=()):
        self.topics = set(topics)
        self.topic_ids = set(topic_ids)

    def violation(self, api_key: int, body) -> str | None:
        if api_key == 20:
            names = set(body.topic_names or []) | {t.name for t in body.topics or [] if t.name}
            ids = {bytes(t.topic_id) for t in body.topics or []}
            if names & self.topics or ids & self.topic_ids:
                return "DeleteTopics of an oracle topic"
        elif api_key == 21:
            if {t.name for t in body.topics or []} & self.topics:
                return "DeleteRecords of an oracle topic"
        elif api_key in (33, 44):
            for r in body.resources or []:
                if r.resource_type == 2 and r.resource_name in self.topics:
                    return "AlterConfigs of an oracle topic"
                if r.resource_type == 8:
                    return "AlterConfigs of broker loggers"
                if r.resource_type == 4 and any(
                    PROTECTED_BROKER_CONFIG.search(c.name or "") for c in r.configs or []
                ):
                    return "AlterConfigs of a broker config that deletes data or limits connections"
        return None


def plan_frame(frame: bytes, protection: Protection | None) -> tuple[FramePlan, str | None]:
    try:
        header, pos = codec.decode_request_header(frame)
    except ProtocolViolation as e:
        return FramePlan("close", why=f"bad header: {e}"), None
    except Exception as e:  # noqa: BLE001 - the broker would fail the same way: its log will say
        return FramePlan("close", why=f"header decode raised {e!r}"), None
    plan = FramePlan("answer", header.api_key, header.api_version, header.correlation_id)
    handler = HANDLERS.get(header.api_key)
    if handler is None:
        plan.kind, plan.why = "close", f"unserved key {header.api_key}"
        return plan, None
    if not handler.min_version <= header.api_version <= handler.max_version:
        if header.api_key == 18:
            return plan, None
        plan.kind, plan.why = "close", f"unserved version {header.api_version}"
        return plan, None
    try:
        body = codec.decode(codec.REQUESTS[header.api_key].name, header.api_version, frame, pos, exact=False)
    except ProtocolViolation as e:
        plan.kind, plan.why = "close", f"undecodable: {e}"
        return plan, None
    except Exception as e:  # noqa: BLE001
        plan.kind, plan.why = "close", f"decode raised {e!r}"
        return plan, None
    skip = protection.violation(header.api_key, body) if protection else None
    if header.api_key == 0 and body.acks == 0:
        plan.kind = "silent"
    elif header.api_key == 1:
        plan.wait_s = max(0, body.max_wait_ms) / 1000
        if body.max_wait_ms > WAIT_CUTOFF_MS:
            plan.kind, plan.why = "wait", f"Fetch max_wait_ms={body.max_wait_ms}"
    elif header.api_key in WAITING_APIS:
        plan.kind, plan.why = "wait", WAITING_APIS[header.api_key]
    return plan, skip


def predict(stream: bytes, max_request_size: int, protection: Protection | None = None) -> Plan:
    """What the broker must do with ``stream``, frame by frame."""
    frames: list[FramePlan] = []
    pos = 0
    skip = None
    while len(stream) - pos >= 4:
        size = struct.unpack_from(">i", stream, pos)[0]
        if not 0 < size <= max_request_size:
            frames.append(FramePlan("close", why=f"size {size}"))
            return Plan(frames, "close", skip)
        if pos + 4 + size > len(stream):
            return Plan(frames, "incomplete", skip)
        plan, why = plan_frame(stream[pos + 4 : pos + 4 + size], protection)
        skip = skip or why
        frames.append(plan)
        if plan.kind == "close":
            return Plan(frames, "close", skip)
        pos += 4 + size
    return Plan(frames, "incomplete" if pos < len(stream) else "clean", skip)


# ------------------------------------------------------------------------------------------- exchanges


FAILURES = ("hang", "bad_response")


@dataclass(slots=True)
class Outcome:
    kind: str
    detail: str = ""
    answers: int = 0
    local_port: int = 0

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


class _Closed(Exception):
    pass


class _Timeout(Exception):
    pass


class Client:
    """One connection at a time to the broker; runs exchanges on it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        hang_timeout: float = 10.0,
        wait_cutoff: float = 0.5,
        max_request_size: int = 104857600,
        protection: Protection | None = None,
    ):
        self.host, self.port = host, port
        self.hang_timeout = hang_timeout
        self.wait_cutoff = wait_cutoff
        self.max_request_size = max_request_size
        self.protection = protection
        self.sock: socket.socket | None = None
        self._probe = 0
        self._buf = b""

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self._buf = b""

    def _connect(self) -> None:
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.hang_timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._buf = b""

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except TimeoutError:
                raise _Timeout from None
            except OSError as e:  # reset by the broker
                raise _Closed(str(e)) from None
            if not chunk:
                raise _Closed("eof")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _send(self, chunks: list[bytes], deadline: float) -> None:
        """Write the chunks (one send each, as far as the socket takes them), reading answers while
        the socket is full: a broker that stops reading until its answers are read must not
        deadlock with us. A broker that closes early (a refused size) ends the writing; what was
        sent is judged by the reading that follows."""
        sock = self.sock
        sock.setblocking(False)
        ready = select.poll()  # not select(): a long-lived worker's descriptors can pass 1024
        ready.register(sock, select.POLLIN | select.POLLOUT)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    events = dict(ready.poll(remaining * 1000))
                    readable, writable = events.get(sock.fileno(), 0) & ~select.POLLOUT, \
                        events.get(sock.fileno(), 0) & select.POLLOUT
                    if readable:
                        data = sock.recv(1 << 20)
                        if not data:
                            return
                        self._buf += data
                    if writable:
                        try:
                            view = view[sock.send(view) :]
                        except BlockingIOError:
                            pass
        except OSError:
            return
        finally:
            sock.setblocking(True)

    def _response(self, deadline: float) -> bytes:
        size = struct.unpack(">i", self._read(4, deadline))[0]
        if size < 4:
            raise ValueError(f"response size {size}")
        return self._read(size, deadline)

    def run(self, data: bytes | list[bytes]) -> Outcome:
        chunks = [data] if isinstance(data, bytes) else list(data)
        plan = predict(b"".join(chunks), self.max_request_size, self.protection)
        if plan.skip:
            return Outcome("skipped", plan.skip)
        expected = [p for p in plan.frames if p.kind in ("answer", "wait")]
        if plan.ending == "clean":
            self._probe = (self._probe + 1) % 0xFFFF
            probe = FramePlan("answer", 18, 0, PROBE_CORRELATION + self._probe, why="probe")
            expected.append(probe)
            chunks[-1] = chunks[-1] + codec.encode_request(18, 0, probe.correlation, {}, "fuzz-probe")
        try:
            self._connect()
        except OSError as e:
            return Outcome("hang", f"cannot connect: {e}")
        port = self.sock.getsockname()[1]
        answers = 0
        self._send(chunks, time.monotonic() + self.hang_timeout)
        waiting = False
        try:
            for p in expected:
                waiting = waiting or p.kind == "wait"
                if p.kind == "wait":
                    deadline = time.monotonic() + self.wait_cutoff
                else:
                    deadline = time.monotonic() + self.hang_timeout + p.wait_s
                try:
                    frame = self._response(deadline)
                except _Timeout:
                    self.close()
                    if waiting:
                        return Outcome("waited", p.why or "a request that may wait", answers, port)
                    return Outcome(
                        "hang",
                        f"no answer to key {p.api_key} v{p.version} "
                        f"corr {p.correlation} in {self.hang_timeout} s",
                        answers,
                        port,
                    )
                problem = check_response(p, frame)
                if problem:
                    self.close()
                    return Outcome("bad_response", problem, answers, port)
                answers += 1
            if plan.ending == "close":
                try:
                    extra = self._response(time.monotonic() + self.hang_timeout)
                except _Timeout:
                    self.close()
                    if waiting:
                        return Outcome("waited", "before an expected close", answers, port)
                    return Outcome(
                        "hang", f"neither closed nor answered after {plan.frames[-1].why}", answers, port
                    )
                self.close()
                return Outcome(
                    "bad_response",
                    f"answered ({len(extra)} bytes) where it had to close: {plan.frames[-1].why}",
                    answers,
                    port,
                )
        except _Closed:
            self.close()
            return Outcome(
                "closed", plan.frames[-1].why if plan.ending == "close" else "by a handler", answers, port
            )
        except (ValueError, struct.error) as e:
            self.close()
            return Outcome("bad_response", str(e), answers, port)
        if plan.ending == "incomplete":
            self.close()
            return Outcome("incomplete", "", answers, port)
        return Outcome("answered", "", answers, port)


def check_response(p: FramePlan, frame: bytes) -> str | None:
    try:
        correlation, _ = codec.decode_response(p.api_key, p.decode_version, frame)
    except Exception as e:  # noqa: BLE001 - any failure to decode is the finding
        got = struct.unpack_from(">i", frame)[0] if len(frame) >= 4 else None
        return f"answer to key {p.api_key} v{p.version} (corr {got}) does not decode: {e!r}"
    if correlation != p.correlation:
        return f"correlation {correlation} where {p.correlation} was due (key {p.api_key} v{p.version})"
    return None


# ---------------------------------------------------------------------------------------------- logs


TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\)|^\S+ \S+ (ERROR|CRITICAL) ", re.M)


class ThreadLogWatch(logging.Handler):
    """An in-process broker's log: WARNING and up (and anything with a traceback) from every logger
    the broker's code or asyncio writes to, plus exceptions in threads."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()
        self._old_hook = None

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            if len(self.records) < 10000:
                self.records.append(record)

    def install(self) -> ThreadLogWatch:
        for name in ("minibroker", "asyncio"):
            logging.getLogger(name).addHandler(self)
        self._old_hook = threading.excepthook

        def hook(args):
            record = logging.LogRecord(
                "thread",
                logging.CRITICAL,
                "",
                0,
                "exception in thread %s",
                (args.thread.name if args.thread else "?",),
                (args.exc_type, args.exc_value, args.exc_traceback),
            )
            self.emit(record)
            self._old_hook(args)

        threading.excepthook = hook
        return self

    def uninstall(self) -> None:
        for name in ("minibroker", "asyncio"):
            logging.getLogger(name).removeHandler(self)
        if self._old_hook is not None:
            threading.excepthook = self._old_hook

    def take(self) -> list[str]:
        """Problem lines since the last call: a traceback or ERROR and up."""
        with self._lock:
            records, self.records = self.records, []
        out = []
        for r in records:
            if r.levelno >= logging.ERROR or r.exc_info:
                text = logging.Formatter("%(levelname)s [%(name)s] %(message)s").format(r)
                out.append(text)
        return out


class FileLogWatch:
    """A subprocess broker's log file, read from where the last call stopped."""

    def __init__(self, path: str):
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0

    def take(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        cut = data.rfind(b"\n") + 1  # whole lines only: the rest comes next time
        self.offset += cut
        text = data[:cut].decode("utf-8", "replace")
        out = []
        lines = text.splitlines()
        i = 0
        while i < len(lines):
            if TRACEBACK_RE.search(lines[i]):
                block = [lines[i]]
                i += 1
                while i < len(lines) and not re.match(r"^\d{4}-\d\d-\d\d ", lines[i]):
                    block.append(lines[i])
                    i += 1
                out.append("\n".join(block))
            else:
                i += 1
        return out


# --------------------------------------------------------------------------------------------- oracle


@dataclass
class KnownData:
    topic: str
    partition: int
    end_offset: int
    records: bytes


@dataclass
class Oracle:
    """Known data and the checks: a fresh ApiVersions answers, no traceback, the data unchanged."""

    host: str
    port: int
    logs: ThreadLogWatch | FileLogWatch
    expected_errors: list[re.Pattern] = field(default_factory=list)
    known: list[KnownData] = field(default_factory=list)
    topic_ids: dict[str, bytes] = field(default_factory=dict)
    deadline: float = 10.0

    group: str = GROUP
    groups_used: int = 0
    member: tuple[str, int] | None = None

    def setup(self) -> None:
        """Create the corpus and oracle topics, produce the known data and record its bytes."""
        with WireClient(self.host, self.port, timeout=self.deadline, client_id="fuzz-oracle") as client:
            self.ensure_topics(client)
            ts = int(time.time() * 1000)  # recent: retention (7 days by default) must not take it
            for topic, partitions in ORACLE_TOPICS.items():
                for p in range(partitions):
                    batches = []
                    for b in range(3):
                        codec_ = Compression.NONE if topic == "fzo-plain" else Compression(1 + (p + b) % 4)
                        rows = [
                            (
                                i,
                                ts + 10 * b + i,
                                b"key-%d" % i,
                                b"%s-%d-%d-%d" % (topic.encode(), p, b, i),
                                [("h", b"%d" % b)],
                            )
                            for i in range(3)
                        ]
                        batches.append((9, build_records(2, rows, compression=codec_)))
                    if topic == "fzo-codecs" and p == 0:  # a v1 message set, through Produce v2
                        batches.append(
                            (
                                2,
                                build_records(
                                    1,
                                    [(0, ts, b"k", b"legacy-v1"), (1, ts, None, b"x")],
                                    compression=Compression.GZIP,
                                ),
                            )
                        )
                    for version, records in batches:
                        r = client.request(
                            0,
                            version,
                            {
                                "transactional_id": None,
                                "acks": -1,
                                "timeout_ms": 5000,
                                "topic_data": [
                                    {"name": topic, "partition_data": [{"index": p, "records": records}]}
                                ],
                            },
                        )
                        code = r.responses[0].partition_responses[0].error_code
                        if code:
                            raise RuntimeError(f"oracle produce to {topic}-{p} failed: error {code}")
            for topic, partitions in ORACLE_TOPICS.items():
                for p in range(partitions):
                    end, records = self._fetch(client, topic, p)
                    if not records:
                        raise RuntimeError(f"oracle data of {topic}-{p} does not read back")
                    self.known.append(KnownData(topic, p, end, records))
            self.topic_ids.update(self._topic_ids(client))
        self.join_group()

    def ensure_topics(self, client: WireClient, *, empty_corpus_topics: bool = False) -> None:
        """Create the corpus and oracle topics if they are missing; ``empty_corpus_topics``: also
        delete the corpus topics' records (mutated Produce requests fill them, and a long run would
        slow down answering Fetch requests for them)."""
        topics = {**CORPUS_TOPICS, **ORACLE_TOPICS}
        client.request(
            19,
            4,
            {
                "topics": [
                    {
                        "name": t,
                        "num_partitions": n,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                    for t, n in topics.items()
                ],
                "timeout_ms": 5000,
                "validate_only": False,
            },
        )
        if empty_corpus_topics:
            meta = client.request(
                3, 12, {"topics": [{"name": t} for t in CORPUS_TOPICS], "allow_auto_topic_creation": False}
            )
            client.request(
                21,
                2,
                {
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [
                                {"partition_index": p.partition_index, "offset": -1} for p in t.partitions
                            ],
                        }
                        for t in meta.topics
                        if not t.error_code
                    ],
                    "timeout_ms": 5000,
                },
            )

    def _topic_ids(self, client: WireClient) -> dict[str, bytes]:
        r = client.request(
            3,
            12,
            {
                "topics": [{"name": t} for t in {**CORPUS_TOPICS, **ORACLE_TOPICS}],
                "allow_auto_topic_creation": False,
            },
        )
        return {t.name: bytes(t.topic_id) for t in r.topics if not t.error_code}

    def _fetch(self, client: WireClient, topic: str, partition: int, max_bytes: int = 1 << 20):
        r = client.request(
            1,
            11,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": partition,
                                "fetch_offset": 0,
                                "log_start_offset": -1,
                                "partition_max_bytes": max_bytes,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        part = r.responses[0].partitions[0]
        if part.error_code:
            raise RuntimeError(f"fetch {topic}-{partition}: error {part.error_code}")
        if part.log_start_offset not in (0, -1):
            raise RuntimeError(f"fetch {topic}-{partition}: log start offset {part.log_start_offset}")
        return part.high_watermark, bytes(part.records or b"")

    def names(self) -> Names:
        return Names(
            dict(CORPUS_TOPICS),
            {t: i for t, i in self.topic_ids.items() if t in CORPUS_TOPICS},
            group=self.group,
            member_id=self.member[0] if self.member else "",
            generation=self.member[1] if self.member else -1,
            instance_id=STATIC_MEMBER,
            produce_also=dict(ORACLE_TOPICS),
        )

    def join_group(self) -> None:
        """Make ``self.group`` have a live static member (``self.member``: its id and generation), so
        that generated group requests name a real member and generation. A group that mutated
        requests left waiting (a rebalance that waits for members that never come back, up to a
        rebalance timeout a frame may have set to days) is given up for a fresh one."""
        for _ in range(3):
            self.member = self._join(self.group)
            if self.member:
                return
            self.groups_used += 1
            self.group = f"{GROUP}-{self.groups_used}"

    def _join(self, group: str) -> tuple[str, int] | None:
        join = {
            "group_id": group,
            "session_timeout_ms": 60000,
            "rebalance_timeout_ms": 3000,
            "member_id": "",
            "group_instance_id": STATIC_MEMBER,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": _subscription(list(CORPUS_TOPICS))}],
            "reason": None,
        }
        try:
            with WireClient(self.host, self.port, timeout=5, client_id="fuzz-member") as client:
                r = client.request(11, 7, join)
                if r.error_code:
                    return None
                assignment = _subscription([]) if r.leader != r.member_id else b""
                sync = client.request(
                    14,
                    5,
                    {
                        "group_id": group,
                        "generation_id": r.generation_id,
                        "member_id": r.member_id,
                        "group_instance_id": STATIC_MEMBER,
                        "protocol_type": "consumer",
                        "protocol_name": "range",
                        "assignments": [{"member_id": r.member_id, "assignment": assignment}]
                        if assignment
                        else [],
                    },
                )
                if sync.error_code:
                    return None
                return r.member_id, r.generation_id
        except (OSError, ProtocolViolation, struct.error):
            return None

    def protection(self) -> Protection:
        return Protection(ORACLE_TOPICS, [i for t, i in self.topic_ids.items() if t in ORACLE_TOPICS])

    def check(self, *, data: bool = True, tidy: bool = False) -> list[str]:
        """Problems found now: unresponsive broker, tracebacks/ERRORs logged, known data changed.
        ``tidy``: then create the topics a run needs if they were deleted, and empty the corpus topics."""
        problems = []
        started = time.monotonic()
        try:
            with WireClient(self.host, self.port, timeout=self.deadline, client_id="fuzz-check") as client:
                answer = client.request(18, 0, {})
                if answer.error_code or not answer.api_keys:
                    problems.append(f"ApiVersions answered error {answer.error_code}")
                if data:
                    for k in self.known:
                        try:
                            end, records = self._fetch(
                                client, k.topic, k.partition, len(k.records) + (1 << 16)
                            )
                        except RuntimeError as e:
                            problems.append(f"data change: {e}")
                            continue
                        if end < k.end_offset:
                            problems.append(
                                f"data change: {k.topic}-{k.partition} ends at {end} < {k.end_offset}"
                            )
                        if records[: len(k.records)] != k.records:
                            at = next(
                                (
                                    i
                                    for i, (a, b) in enumerate(zip(records, k.records, strict=False))
                                    if a != b
                                ),
                                min(len(records), len(k.records)),
                            )
                            problems.append(
                                f"data change: {k.topic}-{k.partition} bytes differ from byte {at} "
                                f"(read {len(records)}, known {len(k.records)})"
                            )
                if tidy:  # the topics a run needs are there again, the corpus topics small
                    self.ensure_topics(client, empty_corpus_topics=True)
            if tidy:  # and the group has its member (seeds made from names() after this use it)
                self.join_group()
        except (OSError, ProtocolViolation, struct.error) as e:
            problems.append(
                f"unresponsive: a fresh connection's ApiVersions failed after "
                f"{time.monotonic() - started:.1f} s: {e!r}"
            )
        for line in self.logs.take():
            if not any(p.search(line) for p in self.expected_errors):
                problems.append("logged: " + line)
        return problems


def seed_frames(oracle: Oracle, corpus_path: str | None, seed: int = 0, variants: int = 2):
    """The seeds of a run: our codec's frames for every served key and version (filled with the names
    ``oracle`` set up) and, when ``corpus_path`` exists, the captured client frames."""
    from fuzzing.corpus import codec_frames, load_client_frames

    seeds = codec_frames(oracle.names(), seed, variants)
    if corpus_path and os.path.exists(corpus_path):
        seeds += load_client_frames(corpus_path, oracle.topic_ids)
    return seeds

"""ACL authorization (issue 19): the authorizer's matching rules against a brute-force reference, the ACL
APIs through kafka-python's and confluent-kafka's admin clients, and every client getting its
authorization error, at once, from a broker with ``authorizer.class.name`` set.

The broker under test has a PLAINTEXT listener, where clients are ``User:ANONYMOUS`` and the ACLs for
that principal decide, and a SASL_PLAINTEXT listener where ``admin`` (a super user) creates the ACLs.
"""

from __future__ import annotations

import itertools
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.security.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclStore,
    PatternType,
    PermissionType,
    ResourceType,
)
from minibroker.security.authorizer import Authorizer
from minibroker.security.principal import KafkaPrincipal
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

# kafka-python leaks the socket of a closed client, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
L, P = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation
ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS, INIT_PRODUCER_ID, METADATA, DESCRIBE_CLUSTER = 30, 29, 31, 22, 3, 60


def acl(rtype, name, pattern, principal, op, permission=ALLOW, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, str(principal), host, op, permission)


def authorizer(*acls, super_users=(), allow_if_no_acl=False) -> Authorizer:
    store = AclStore("/nonexistent")
    store._acls.update(acls)  # no file: the unit tests never save
    return Authorizer(store, super_users, allow_if_no_acl)


# -- the matching rules ---------------------------------------------------------------------------------

def test_deny_wins_over_allow_from_any_pattern():
    a = authorizer(acl(T, "orders", L, ALICE, Op.READ), acl(T, "ord", P, ALICE, Op.READ, DENY))
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, T, "orders")
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, T, "ordinary")
    b = authorizer(acl(T, "*", L, KafkaPrincipal("User", "*"), Op.ALL),
                   acl(T, "orders", L, ALICE, Op.WRITE, DENY))
    assert b.authorize(ALICE, "h", Op.READ, T, "orders")
    assert not b.authorize(ALICE, "h", Op.WRITE, T, "orders")
    assert b.authorize(BOB, "h", Op.WRITE, T, "orders")


def test_prefixed_literal_and_wildcard_patterns():
    a = authorizer(acl(T, "app-", P, ALICE, Op.WRITE), acl(T, "logs", L, ALICE, Op.WRITE),
                   acl(G, "*", L, ALICE, Op.READ))
    assert a.authorize(ALICE, "h", Op.WRITE, T, "app-1")
    assert a.authorize(ALICE, "h", Op.WRITE, T, "app-")
    assert not a.authorize(ALICE, "h", Op.WRITE, T, "app")
    assert a.authorize(ALICE, "h", Op.WRITE, T, "logs")
    assert not a.authorize(ALICE, "h", Op.WRITE, T, "logs2")  # a literal is not a prefix
    assert a.authorize(ALICE, "h", Op.READ, G, "any-group")
    assert not a.authorize(ALICE, "h", Op.READ, T, "any-topic")  # the wildcard was for groups


def test_implied_operations_come_from_allow_acls_only():
    a = authorizer(acl(T, "t", L, ALICE, Op.READ), acl(T, "t", L, ALICE, Op.ALTER_CONFIGS),
                   acl(T, "u", L, ALICE, Op.ALL), acl(T, "v", L, ALICE, Op.WRITE, DENY))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "t")  # READ implies DESCRIBE
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T, "t")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not a.authorize(ALICE, "h", Op.WRITE, T, "t")
    assert all(a.authorize(ALICE, "h", op, T, "u") for op in (Op.READ, Op.WRITE, Op.DELETE, Op.DESCRIBE))
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, T, "v")  # DENY WRITE denies no DESCRIBE, none allows it
    assert a.authorized_operations(ALICE, "h", T, "t") == (1 << Op.READ) | (1 << Op.DESCRIBE) | (
        1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)


def test_host_principal_and_super_users():
    a = authorizer(acl(T, "t", L, ALICE, Op.READ, host="10.0.0.1"),
                   acl(T, "t", L, ALICE, Op.READ, host="0:0:0:0:0:0:0:1"), super_users=["User:root"])
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, T, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, T, "t")
    assert a.authorize(ALICE, "::1", Op.READ, T, "t")
    assert not a.authorize(KafkaPrincipal("Group", "alice"), "10.0.0.1", Op.READ, T, "t")  # type matters
    assert a.authorize(KafkaPrincipal("User", "root"), "any", Op.ALTER, C, "kafka-cluster")


def test_allow_everyone_if_no_acl_found_applies_to_resources_without_acls():
    a = authorizer(acl(T, "owned", L, BOB, Op.READ), allow_if_no_acl=True)
    assert a.authorize(ALICE, "h", Op.READ, T, "free")
    assert not a.authorize(ALICE, "h", Op.READ, T, "owned")  # an ACL applies, none for alice
    assert not authorizer().authorize(ALICE, "h", Op.READ, T, "free")  # the default is deny


def test_authorize_by_resource_type_as_kafka():
    assert authorizer(acl(T, "a", L, ALICE, Op.WRITE)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not authorizer(acl(T, "a", L, ALICE, Op.WRITE), acl(T, "a", L, ALICE, Op.WRITE, DENY)) \
        .authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not authorizer(acl(T, "abc", P, ALICE, Op.WRITE), acl(T, "ab", P, ALICE, Op.WRITE, DENY)) \
        .authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert authorizer(acl(T, "ab", P, ALICE, Op.WRITE), acl(T, "abc", P, ALICE, Op.WRITE, DENY)) \
        .authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not authorizer(acl(T, "a", L, ALICE, Op.READ)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)


def test_filters_match_as_kafka():
    literal, prefixed, wildcard = acl(T, "orders", L, ALICE, Op.READ), acl(T, "ord", P, ALICE, Op.READ), \
        acl(T, "*", L, BOB, Op.WRITE)

    def f(name, pattern, **kw):
        fields = dict(resource_type=ResourceType.ANY, resource_name=name, pattern_type=pattern,
                      principal=None, host=None, operation=Op.ANY, permission=PermissionType.ANY)
        return AclFilter(**{**fields, **kw})

    everything = [literal, prefixed, wildcard]
    assert [a for a in everything if f("orders", PatternType.MATCH).matches(a)] == everything
    assert [a for a in everything if f("orders", PatternType.ANY).matches(a)] == [literal]
    assert [a for a in everything if f("ord", P).matches(a)] == [prefixed]
    assert [a for a in everything if f(None, L).matches(a)] == [literal, wildcard]
    assert [a for a in everything if f(None, PatternType.ANY, principal="User:bob").matches(a)] == [wildcard]
    reads = [literal, prefixed]
    assert [a for a in everything if f(None, PatternType.ANY, operation=Op.READ).matches(a)] == reads


# A brute-force reference: Kafka's rules read off StandardAuthorizerData, one ACL at a time, no index.
def _reference(acls, super_users, allow_if_no_acl, principal, host, op, rtype, name) -> bool:
    if principal in super_users:
        return True
    applies = [a for a in acls if a.resource_type == rtype and (
        (a.pattern_type == L and a.resource_name in (name, "*")) or
        (a.pattern_type == P and name.startswith(a.resource_name)))]
    if not applies:
        return allow_if_no_acl
    implied = {Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}}
    verdicts = set()
    for a in applies:
        if KafkaPrincipal.parse(a.principal) not in (principal, KafkaPrincipal("User", "*")):
            continue
        if a.host not in ("*", host):
            continue
        ok_ops = implied.get(op, {op}) if a.permission == ALLOW else {op}
        if a.operation == Op.ALL or a.operation in ok_ops:
            verdicts.add(a.permission)
    return DENY not in verdicts and ALLOW in verdicts


_names = st.sampled_from(["", "a", "ab", "abc", "abd", "b", "*", "ba"])
_principals = st.sampled_from([ALICE, BOB, KafkaPrincipal("User", "*"), KafkaPrincipal("Group", "alice")])
_hosts = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
_ops = st.sampled_from([op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)])
_acls = st.builds(lambda rtype, name, pattern, principal, host, op, permission: AclBinding(
    rtype, name or "x", pattern, str(principal), host, op, permission),
    st.sampled_from([T, G]), _names, st.sampled_from([L, P]), _principals, _hosts, _ops,
    st.sampled_from([ALLOW, DENY]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_acls, max_size=12), st.booleans(), st.booleans(), st.sampled_from([ALICE, BOB]),
       st.sampled_from(["10.0.0.1", "10.0.0.2"]), _ops, st.sampled_from([T, G]), _names.filter(bool))
def test_authorizer_agrees_with_a_brute_force_reference(acls, alice_is_super, allow_if_no_acl, principal,
                                                        host, op, rtype, name):
    super_users = {ALICE} if alice_is_super else set()
    a = authorizer(*acls, super_users=[str(p) for p in super_users], allow_if_no_acl=allow_if_no_acl)
    expected = _reference(set(acls), super_users, allow_if_no_acl, principal, host, op, rtype, name)
    assert a.authorize(principal, host, op, rtype, name) == expected
    assert a.authorize(principal, host, op, rtype, name) == expected  # the cached answer too


def test_an_unknown_authorizer_class_stops_start_up():
    with pytest.raises(Exception, match="minibroker cannot load authorizer class com.example.MyAuthorizer"):
        BrokerRunner({"authorizer.class.name": "com.example.MyAuthorizer"}).start()


# -- a broker with the authorizer on ----------------------------------------------------------------------

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
_ids = itertools.count()


class AclBroker:
    """The broker of these tests: PLAINTEXT for User:ANONYMOUS, SASL_PLAINTEXT for the super user admin."""

    def __init__(self, runner: BrokerRunner):
        self.runner = runner
        endpoints = {e.listener: e.port for e in runner.broker.bound}
        self.plain = f"127.0.0.1:{endpoints['PLAINTEXT']}"
        self.sasl = f"127.0.0.1:{endpoints['SASL_PLAINTEXT']}"
        self.port = endpoints["PLAINTEXT"]

    def admin_kafka_python(self):
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.sasl, security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username="admin",
                                sasl_plain_password="admin-secret")

    def admin_confluent(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.sasl, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                            "sasl.password": "admin-secret"})

    def allow(self, rtype: str, name: str, *operations: str, pattern: str = "LITERAL",
              principal: str = "User:ANONYMOUS") -> None:
        from confluent_kafka.admin import AclBinding as Binding
        from confluent_kafka.admin import AclOperation as COp
        from confluent_kafka.admin import AclPermissionType, ResourcePatternType
        from confluent_kafka.admin import ResourceType as CType

        ctype = CType["BROKER" if rtype == "CLUSTER" else rtype]  # confluent-kafka's name for it
        bindings = [Binding(ctype, name, ResourcePatternType[pattern], principal, "*", COp[op],
                            AclPermissionType.ALLOW) for op in operations]
        admin = self.admin_confluent()  # kept until the futures are done: a dropped client cancels them
        for future in admin.create_acls(bindings).values():
            assert future.result(10) is None

    def topic(self) -> str:
        name = f"acl-{next(_ids)}"
        self.runner.create_topic(name)  # the runner's admin client: PLAINTEXT, ANONYMOUS
        return name


@pytest.fixture(scope="module")
def acl_broker():
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                 "sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                 "authorizer.class.name": STANDARD, "super.users": "User:admin",
                 "auto.create.topics.enable": "false"}
    runner = BrokerRunner(overrides)
    runner.start()
    broker = AclBroker(runner)
    broker.allow("CLUSTER", "kafka-cluster", "CREATE", "DESCRIBE")  # ANONYMOUS creates topics in the tests
    yield broker
    runner.cleanup()


def test_producers_get_topic_authorization_failed_at_once(acl_broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    allowed, refused = acl_broker.topic(), acl_broker.topic()
    acl_broker.allow("TOPIC", allowed, "WRITE")
    producer = KafkaProducer(bootstrap_servers=acl_broker.plain, max_block_ms=10000)
    try:
        assert producer.send(allowed, b"ok").get(10).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(refused, b"no").get(10)  # a retry loop would time out instead
    finally:
        producer.close(timeout=5)

    import confluent_kafka

    errors = []
    p = confluent_kafka.Producer({"bootstrap.servers": acl_broker.plain, "message.timeout.ms": 10000})
    p.produce(refused, b"no", on_delivery=lambda err, msg: errors.append(err))
    p.produce(allowed, b"ok", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0
    codes = sorted(e.code() if e else 0 for e in errors)
    assert codes == [0, confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]


async def test_aiokafka_producer_gets_topic_authorization_failed(acl_broker):
    import aiokafka
    from aiokafka.errors import TopicAuthorizationFailedError

    allowed, refused = acl_broker.topic(), acl_broker.topic()
    acl_broker.allow("TOPIC", allowed, "WRITE")
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=acl_broker.plain, request_timeout_ms=10000)
    await producer.start()
    try:
        assert (await producer.send_and_wait(allowed, b"ok")).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(refused, b"no")
    finally:
        await producer.stop()


def test_consumer_without_group_read_gets_group_authorization_failed(acl_broker):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    topic = acl_broker.topic()
    acl_broker.allow("TOPIC", topic, "READ")
    consumer = KafkaConsumer(topic, bootstrap_servers=acl_broker.plain, group_id=f"g-{topic}",
                             consumer_timeout_ms=10000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.poll(timeout_ms=10000)
    finally:
        consumer.close()

    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": acl_broker.plain, "group.id": f"g2-{topic}"})
    c.subscribe([topic])
    try:
        codes = set()
        for _ in range(20):
            msg = c.poll(0.5)
            if msg is not None and msg.error():
                codes.add(msg.error().code())
                break
        assert codes == {confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED}
    finally:
        c.close()


def test_fetch_without_read_gets_topic_authorization_failed(acl_broker):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    topic = acl_broker.topic()
    acl_broker.allow("TOPIC", topic, "DESCRIBE")  # Metadata and ListOffsets pass, Fetch does not
    consumer = KafkaConsumer(bootstrap_servers=acl_broker.plain, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def test_unauthorized_topics_are_hidden_from_metadata(acl_broker):
    visible, hidden = acl_broker.topic(), acl_broker.topic()
    acl_broker.allow("TOPIC", visible, "READ")
    with WireClient("127.0.0.1", acl_broker.port) as wire:
        r = wire.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": True})
        names = {t.name for t in r.topics}
        assert visible in names and hidden not in names
        ops = {t.name: t.topic_authorized_operations for t in r.topics}
        assert ops[visible] == (1 << Op.READ) | (1 << Op.DESCRIBE)
        r = wire.request(METADATA, 12, {"topics": [{"name": hidden, "topic_id": bytes(16)},
                                                   {"name": "no-such-topic", "topic_id": bytes(16)}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": True})
        # existing or not: not disclosed
        assert [(t.error_code, t.topic_id, t.topic_authorized_operations) for t in r.topics] == [
            (29, bytes(16), -2147483648)] * 2
        r = wire.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": True})
        assert r.cluster_authorized_operations == (1 << Op.CREATE) | (1 << Op.DESCRIBE)
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=acl_broker.plain)
    try:
        topics = consumer.topics()
        assert visible in topics and hidden not in topics
    finally:
        consumer.close()


def test_acl_apis_through_kafka_python_admin(acl_broker):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError

    admin = acl_broker.admin_kafka_python()
    try:
        prefix = f"kp-{next(_ids)}-"
        acls = [ACL("User:carol", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED)),
                ACL("User:carol", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                    ResourcePattern(ResourceType.TOPIC, prefix + "x", ACLResourcePatternType.LITERAL))]
        result = admin.create_acls(acls)
        assert (len(result["succeeded"]), result["failed"]) == (2, [])

        def described(pattern_filter):
            found, error = admin.describe_acls(ACLFilter("User:carol", None, ACLOperation.ANY,
                                                         ACLPermissionType.ANY, pattern_filter))
            assert error.errno == 0
            return sorted((a.resource_pattern.resource_name, a.operation.name) for a in found)

        match = ResourcePatternFilter(ResourceType.TOPIC, prefix + "x", ACLResourcePatternType.MATCH)
        assert described(match) == [(prefix, "READ"), (prefix + "x", "WRITE")]
        assert described(ResourcePatternFilter(ResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED)) \
            == [(prefix, "READ")]
        assert described(ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.LITERAL)) \
            == [(prefix + "x", "WRITE")]
        deleted = admin.delete_acls([ACLFilter("User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                               ResourcePatternFilter(ResourceType.TOPIC, None,
                                                                     ACLResourcePatternType.ANY))])
        assert sorted(a.operation.name for a in deleted[0][1]) == ["READ", "WRITE"]
        assert described(ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY)) == []
    finally:
        admin.close()

    from kafka.admin import KafkaAdminClient

    anonymous = KafkaAdminClient(bootstrap_servers=acl_broker.plain)
    try:  # ANONYMOUS may not ALTER the cluster
        result = anonymous.create_acls([ACL("User:x", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                                            ResourcePattern(ResourceType.TOPIC, "t"))])
        assert result == {"succeeded": [], "failed": [ClusterAuthorizationFailedError]}
    finally:
        anonymous.close()


def test_acl_apis_through_confluent_admin(acl_broker):
    import confluent_kafka
    from confluent_kafka.admin import (
        AclBinding as Binding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclPermissionType,
        ResourcePatternType,
    )
    from confluent_kafka.admin import AclOperation as COp
    from confluent_kafka.admin import ResourceType as CType

    admin = acl_broker.admin_confluent()
    group = f"cg-{next(_ids)}"
    good = Binding(CType.GROUP, group, ResourcePatternType.LITERAL, "User:dave", "*", COp.READ,
                   AclPermissionType.ALLOW)
    bad = Binding(CType.BROKER, "other", ResourcePatternType.LITERAL, "User:dave", "*", COp.ALTER,
                  AclPermissionType.ALLOW)
    results = admin.create_acls([good, bad])
    assert results[good].result(10) is None
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        results[bad].result(10)
    assert exc.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in exc.value.args[0].str()
    match = AclBindingFilter(CType.GROUP, group + "-suffix", ResourcePatternType.MATCH, None, None, COp.ANY,
                             AclPermissionType.ANY)
    assert admin.describe_acls(match).result(10) == []  # a literal does not match a longer name
    exact = AclBindingFilter(CType.GROUP, group, ResourcePatternType.ANY, "User:dave", None, COp.ANY,
                             AclPermissionType.ANY)
    assert admin.describe_acls(exact).result(10) == [good]
    assert admin.delete_acls([exact])[exact].result(10) == [good]
    assert admin.describe_acls(exact).result(10) == []


def test_wire_validation_and_authorization_errors(acl_broker):
    def creation(**kw):
        return {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
                "host": "*", "operation": 3, "permission_type": 3, **kw}

    any_filter = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    with WireClient("127.0.0.1", acl_broker.port) as wire:  # ANONYMOUS: DESCRIBE and CREATE on the cluster
        r = wire.request(CREATE_ACLS, 3, {"creations": [creation()]})
        assert [x.error_code for x in r.results] == [31]
        r = wire.request(DESCRIBE_ACLS, 3, any_filter)
        assert r.error_code == 0  # DESCRIBE on the cluster allows it
        r = wire.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tx-nobody", "producer_id": -1,
                                               "transaction_timeout_ms": 60000, "producer_epoch": -1})
        assert (r.error_code, r.producer_id) == (53, -1)


def test_creations_and_filters_are_validated_as_kafka(minibroker_factory):
    broker = minibroker_factory({"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"})

    def creation(**kw):
        return {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
                "host": "*", "operation": 3, "permission_type": 3, **kw}

    any_filter = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    with WireClient(broker.host, broker.port) as wire:  # no ACL on the cluster: everyone may ALTER it
        r = wire.request(CREATE_ACLS, 3, {"creations": [
            creation(resource_name=""), creation(resource_type=1), creation(resource_pattern_type=2),
            creation(operation=1), creation(permission_type=1), creation(principal="nobody"),
            creation(resource_type=4, resource_name="cluster"), creation(resource_type=99), creation()]})
        assert [(x.error_code, x.error_message) for x in r.results] == [
            (42, "Invalid empty resource name"), (42, "Invalid resourceType ANY"),
            (42, "Invalid patternType MATCH"), (42, "Invalid operation ANY"),
            (42, "Invalid permissionType ANY"),
            (42, "Invalid principal 'nobody': expected PrincipalType:name"),
            (42, "The only valid name for the CLUSTER resource is kafka-cluster"),
            (42, "Invalid resourceType UNKNOWN"), (0, None)]
        r = wire.request(DESCRIBE_ACLS, 0, {**any_filter, "pattern_type_filter": 3})
        assert [(x.resource_name, len(x.acls)) for x in r.resources] == [("t", 1)]
        r = wire.request(DELETE_ACLS, 3, {"filters": [{**any_filter, "pattern_type_filter": 99},
                                                      {**any_filter, "permission_type": 99}, any_filter]})
        assert [(x.error_code, x.error_message, len(x.matching_acls)) for x in r.filter_results] == [
            (42, "Unknown patternFilter.", 0), (42, "Unknown entryFilter.", 0), (0, None, 1)]


def test_a_request_kafka_cannot_parse_closes_the_connection(acl_broker):
    with WireClient("127.0.0.1", acl_broker.port) as wire:
        with pytest.raises((ConnectionError, OSError, EOFError, socket.timeout)):
            wire.request(DELETE_ACLS, 0, {"filters": [{
                "resource_type_filter": 0, "resource_name_filter": None, "principal_filter": None,
                "host_filter": None, "operation": 1, "permission_type": 1}]})


def test_acls_survive_a_restart_and_need_an_authorizer(minibroker_factory, minibroker):
    broker = minibroker_factory({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                 "allow.everyone.if.no.acl.found": "true"})
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import SecurityDisabledError

    binding = ACL("User:erin", "10.1.1.1", ACLOperation.DELETE, ACLPermissionType.DENY,
                  ResourcePattern(ResourceType.GROUP, "erin-", ACLResourcePatternType.PREFIXED))
    everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        assert admin.create_acls([binding])["failed"] == []
    finally:
        admin.close()
    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        found, _ = admin.describe_acls(everything)
        assert [(a.principal, a.host, a.operation, a.permission_type) for a in found] == [
            ("User:erin", "10.1.1.1", ACLOperation.DELETE, ACLPermissionType.DENY)]
    finally:
        admin.close()
    # no authorizer (the session broker): SECURITY_DISABLED, as Kafka answers
    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers)
    try:
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(everything)
    finally:
        admin.close()


def test_a_failed_acl_save_changes_nothing(tmp_path, monkeypatch):
    # fault path: minibroker-acls.json cannot be written: create and delete raise OSError, nothing changes
    import minibroker.storage.metadata_file as metadata_file

    seen = []
    store = AclStore(str(tmp_path), on_change=seen.append)
    first = acl(T, "orders", L, ALICE, Op.READ)
    store.create([first])

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metadata_file, "save_metadata", full_disk)
    with pytest.raises(OSError):
        store.create([acl(T, "payments", L, BOB, Op.WRITE)])
    with pytest.raises(OSError):
        store.delete([AclFilter(T, "orders", L, None, None, Op.ANY, PermissionType.ANY)])
    assert store.acls == frozenset({first}) and len(seen) == 1

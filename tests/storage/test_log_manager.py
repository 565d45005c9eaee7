"""LogManager: topics with ids, partition counts and configs surviving restarts; Kafka's files."""

from __future__ import annotations

import base64
import json
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from storage_helpers import append_v2

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import TOPICS_FILE, LogManager
from minibroker.storage.log_manager import LogDirConflictError, is_legal_topic_name


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data")


def open_manager(data_dir, node_id=1, **broker):
    m = LogManager([data_dir], broker or {"log.segment.bytes": 4000}, node_id=node_id)
    m.load()
    return m


def test_meta_properties_and_cluster_id(data_dir):
    m = open_manager(data_dir, node_id=7)
    cluster_id = m.cluster_id
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id) and not cluster_id.startswith("-")
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    with open(os.path.join(data_dir, "meta.properties")) as f:
        props = dict(line.split("=", 1) for line in f.read().splitlines() if line and line[0] != "#")
    assert props == {"cluster.id": cluster_id, "node.id": "7", "version": "1"}
    m.close()
    assert open_manager(data_dir, node_id=7).cluster_id == cluster_id
    with pytest.raises(LogDirConflictError, match="belongs to node 7"):  # start-up refused, naming the dir
        open_manager(data_dir, node_id=8)


def test_topics_survive_restart_with_ids_partitions_configs(data_dir):
    m = open_manager(data_dir)
    info = m.create_topic("orders", 3, {"retention.ms": "1000", "cleanup.policy": "compact"})
    m.create_topic("__consumer_offsets", 2, {"cleanup.policy": "compact"}, topic_id=b"\x01" * 16)
    for p in range(3):
        append_v2(m.get_log("orders", p), [p])
    m.add_partitions("orders", 5)
    m.close()
    m = open_manager(data_dir)
    assert m.topics["orders"] == info._replace(partitions=5)
    assert m.topics["__consumer_offsets"].id == b"\x01" * 16
    assert m.effective_config("orders")["retention.ms"] == 1000
    assert m.effective_config("orders")["segment.bytes"] == 4000  # broker default synonym
    assert m.get_log("orders", 4).log_end_offset == 0
    assert m.get_log("orders", 2).log_end_offset == 1
    assert m.get_log("orders", 0).topic_id == info.id
    assert m.topic_name(info.id) == "orders"
    with open(os.path.join(data_dir, "orders-1", "partition.metadata")) as f:
        text = f.read()
    assert text == "version: 0\ntopic_id: " + base64.urlsafe_b64encode(info.id).decode().rstrip("=") + "\n"
    with open(os.path.join(data_dir, "orders-1", "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n1\n0 0\n"
    with open(os.path.join(data_dir, TOPICS_FILE)) as f:
        assert json.load(f)["topics"]["orders"]["partitions"] == 5
    m.close()


def test_a_new_log_dir_writes_no_empty_files_and_an_emptied_one_is_rewritten(data_dir):
    checkpoints = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
    m = open_manager(data_dir)
    m.close()
    m = open_manager(data_dir)  # a missing file reads as empty: nothing to write, nothing to fsync
    assert not any(os.path.exists(os.path.join(data_dir, f)) for f in (TOPICS_FILE, *checkpoints))
    m.create_topic("t", 1, {})
    append_v2(m.get_log("t", 0), [0])
    m.write_checkpoints()
    with open(os.path.join(data_dir, checkpoints[0])) as f:
        assert f.read().startswith("0\n1\nt 0 ")
    m.delete_topic("t")
    m.write_checkpoints()
    m.close()
    with open(os.path.join(data_dir, TOPICS_FILE)) as f:  # once there, the files follow every change
        assert json.load(f)["topics"] == {}
    with open(os.path.join(data_dir, checkpoints[0])) as f:
        assert f.read() == "0\n0\n"


@given(st.text(alphabet=st.sampled_from("aZ09._-/\n é+"), max_size=300)
       | st.sampled_from([".", "..", "x" * 249, "x" * 250]))
def test_legal_topic_names_are_kafkas(name):
    """Kafka's rule (Topic.validate): 1-249 of [a-zA-Z0-9._-], never "." or ".."."""
    kafka = re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name) is not None and name not in (".", "..")
    assert is_legal_topic_name(name) == kafka


def test_topic_errors(data_dir):
    m = open_manager(data_dir)
    m.create_topic("a", 1)
    for name, partitions, code in [("a", 1, ErrorCode.TOPIC_ALREADY_EXISTS),
                                   ("bad/name", 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
                                   ("..", 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
                                   ("a\n", 1, ErrorCode.INVALID_TOPIC_EXCEPTION),  # a regex's $ took it
                                   ("x" * 250, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
                                   ("", 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
                                   ("b", 0, ErrorCode.INVALID_PARTITIONS)]:
        with pytest.raises(KafkaError) as exc:
            m.create_topic(name, partitions)
        assert exc.value.code == code
    with pytest.raises(KafkaError) as exc:
        m.create_topic("c", 1, {"segment.bytes": "lots"})
    assert exc.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as exc:
        m.get_log("a", 1)
    assert exc.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaError) as exc:
        m.add_partitions("a", 1)
    assert exc.value.code == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KafkaError):
        m.delete_topic("nope")
    m.close()


def test_delete_topic_removes_files_and_wakes_listeners(data_dir):
    m = open_manager(data_dir)
    m.create_topic("gone", 2)
    log = m.get_log("gone", 0)
    append_v2(log, [1])
    woken = []
    log.add_append_listener(lambda lg: woken.append(lg.deleted))
    region = log.read(0, 100).region  # a region in flight keeps its descriptor
    m.delete_topic("gone")
    assert woken == [True]
    assert not any(name.startswith("gone-") for name in os.listdir(data_dir))
    assert len(region.read()) == region.size
    assert "gone" not in m.topics
    m.close()
    m = open_manager(data_dir)
    assert "gone" not in m.topics
    m.create_topic("gone", 1)  # the name can be reused
    assert m.get_log("gone", 0).log_end_offset == 0
    m.close()


def test_alter_configs_apply_live_and_persist(data_dir):
    m = open_manager(data_dir)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    for _ in range(5):
        append_v2(log, [1], value_size=100)
    assert len(log.segments) == 1
    m.alter_topic_configs("t", {"segment.bytes": "300"})
    for _ in range(5):
        append_v2(log, [1], value_size=100)
    assert len(log.segments) > 2
    assert log.config["segment.bytes"] == 300
    m.close()
    m = open_manager(data_dir)
    assert m.topics["t"].configs == {"segment.bytes": "300"}
    assert m.get_log("t", 0).config["segment.bytes"] == 300
    m.close()


def test_topics_adopted_from_directories_when_the_topics_file_is_lost(data_dir):
    m = open_manager(data_dir)
    info = m.create_topic("kept", 2)
    append_v2(m.get_log("kept", 1), [5])
    m.close()
    os.unlink(os.path.join(data_dir, TOPICS_FILE))
    m = open_manager(data_dir)
    assert m.topics["kept"].id == info.id and m.topics["kept"].partitions == 2
    assert m.get_log("kept", 1).log_end_offset == 1
    m.close()


def test_several_log_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    m = LogManager(dirs, {}, node_id=1)
    m.load()
    m.create_topic("spread", 4)
    where = {d: [n for n in os.listdir(d) if n.startswith("spread-")] for d in dirs}
    assert all(len(v) == 2 for v in where.values())
    m.close()
    m = LogManager(dirs, {}, node_id=1)
    m.load()
    assert m.had_clean_shutdown and m.topics["spread"].partitions == 4
    m.close()


def test_load_reports_progress_per_partition(tmp_path):
    from minibroker.storage import LogManager

    lm = LogManager([str(tmp_path)], {}, 1)
    lm.load()
    lm.create_topic("p", 3, {})
    lm.close()
    seen = []
    lm = LogManager([str(tmp_path)], {}, 1)
    lm.load(progress=lambda done, total, detail: seen.append((done, total, detail)))
    lm.close()
    assert [(d, t) for d, t, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert sorted(detail for _, _, detail in seen) == ["p-0", "p-1", "p-2"]

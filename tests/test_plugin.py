"""The pytest plugin as a new user meets it: an installed entry point, no conftest, real pytest runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

USER_TEST = textwrap.dedent("""
    from kafka import KafkaConsumer, KafkaProducer

    def test_round_trip(minibroker):
        minibroker.create_topic("greetings")
        producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers)
        producer.send("greetings", b"hi").get(timeout=10)
        producer.close()
        consumer = KafkaConsumer("greetings", bootstrap_servers=minibroker.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        assert [m.value for m in consumer][:1] == [b"hi"]
        consumer.close()
""")


def run_pytest(tmp_path, source: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_user.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


@pytest.mark.slow
def test_a_new_users_test_file_passes_with_nothing_else(tmp_path):
    result = run_pytest(tmp_path, USER_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_process_mode_and_overrides(tmp_path):
    source = textwrap.dedent("""
        def test_config(minibroker):
            assert minibroker.mode == "process" and minibroker.process is not None
            assert minibroker.overrides["num.partitions"] == "3"
            minibroker.produce("t", [b"x"])
            from kafka import KafkaConsumer
            c = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers)
            assert c.partitions_for_topic("t") == {0, 1, 2}
            c.close()
            minibroker.restart()
            assert [r.value for r in minibroker.consume("t", 1, partition=None)] == [b"x"]
    """)
    result = run_pytest(
        tmp_path, source, "--minibroker-mode=process", "--minibroker-override", "num.partitions=3"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_broker_log_is_attached_to_a_failing_test(tmp_path):
    source = textwrap.dedent("""
        def test_fails(minibroker):
            minibroker.create_topic("seen-in-log")
            assert False, "on purpose"
    """)
    result = run_pytest(tmp_path, source)
    assert result.returncode == 1
    assert "minibroker log" in result.stdout and "minibroker ready" in result.stdout

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
        assert next(consumer).value == b"hi"
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


# -- what registering the plugin costs --------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Beside the README's example: after the broker started, which of minibroker's modules pytest's
# assertion rewriting loaded (it sets their __loader__), and the fixture's own setup time, as JSON.
COST_PROBE = textwrap.dedent("""

    def test_plugin_cost(minibroker):
        import json, os, sys
        rewritten = sorted(name for name, module in list(sys.modules.items())
                           if name.split(".")[0] == "minibroker"
                           and type(getattr(module, "__loader__", None)).__name__ == "AssertionRewritingHook")
        loaded = sorted(name for name in sys.modules if name.startswith("minibroker."))
        with open(os.environ["PLUGIN_COST_OUT"], "w") as f:
            json.dump({"start_seconds": minibroker.start_seconds, "rewritten": rewritten,
                       "loaded": loaded, "kafka": "kafka" in sys.modules}, f)
""")


def readme_fixture_example() -> str:
    """The python block of the README's "In tests" section, as a new user copies it."""
    import re

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        section = f.read().split("### In tests", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_fresh_project(tmp_path, *, kafka_python: bool) -> tuple[subprocess.CompletedProcess, dict]:
    """pytest in a subprocess on a new project (the README's example, nothing else: no conftest, no
    ini file), with the plugin registered by its installed entry point; without kafka-python importable
    when ``kafka_python`` is False."""
    import json

    project = tmp_path / "project"
    project.mkdir()
    (project / "test_first.py").write_text(readme_fixture_example() + COST_PROBE)
    path = [ROOT]
    if not kafka_python:  # found first on the path: `import kafka` fails as on a machine without it
        blocker = tmp_path / "no-kafka" / "kafka"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ImportError('kafka-python is not installed here')\n")
        path.insert(0, str(blocker.parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join(path), PLUGIN_COST_OUT=str(tmp_path / "cost.json"),
               PYTHONDONTWRITEBYTECODE="")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             "-W", "error::DeprecationWarning", str(project)],
                            cwd=project, capture_output=True, text=True, timeout=180, env=env)
    cost = json.loads((tmp_path / "cost.json").read_text()) if (tmp_path / "cost.json").exists() else {}
    return result, cost


@pytest.mark.parametrize("kafka_python", [True, False], ids=["with-kafka-python", "without"])
def test_a_new_project_runs_the_readme_example_with_the_broker_unrewritten(tmp_path, kafka_python):
    result, cost = run_fresh_project(tmp_path, kafka_python=kafka_python)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert "minibroker.server.broker" in cost["loaded"]  # the broker did start in this process
    # the two modules imported to register the plugin, before its pytest_addoption can take the mark
    # off, may go through the rewriting hook (whether they do depends on how the package is installed);
    # none of the broker's does
    assert set(cost["rewritten"]) <= {"minibroker", "minibroker.pytest_plugin"}
    assert cost["kafka"] is False  # neither the plugin nor the helpers imported kafka-python
    assert isinstance(cost["start_seconds"], float) and cost["start_seconds"] > 0


def test_unmark_for_rewrite_takes_only_the_package_off():
    from minibroker.pytest_plugin import unmark_for_rewrite

    class Hook:
        _must_rewrite = {"minibroker", "other"}
        _marked_for_rewrite_cache = {"minibroker.server": True, "minibroker": True, "minibrokerx": True,
                                     "other.a": True}

    class Manager:
        rewrite_hook = Hook()

    assert unmark_for_rewrite(Manager(), "minibroker") is True
    assert Hook._must_rewrite == {"other"}
    assert set(Hook._marked_for_rewrite_cache) == {"minibrokerx", "other.a"}
    assert unmark_for_rewrite(Manager(), "minibroker") is False  # nothing left to take off
    assert unmark_for_rewrite(object(), "minibroker") is False  # --assert=plain: no hook

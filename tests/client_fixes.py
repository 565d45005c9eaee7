"""Fixes of known client bugs that this suite applies to the clients it drives, each with its cause.

Two today, shared with kafka-python's own suite (scripts/client_suite_kafka_python.py, where they live
and are explained):

- a ``KafkaConsumer(topic)`` whose bootstrap Metadata request was built before its subscription loses
  the update the subscription asked for, and sits without partitions for metadata.max.age.ms. It made
  our own read_committed checks (tests/test_transactions.py's ``_read_committed``) see nothing once in
  many loaded runs;
- a group join that completes while no ``poll()`` awaits it is dropped when the rejoin came from the
  leader's own metadata check: the member stops heartbeating, is expired, and never rejoins
  (tests/test_groups_clients.py's ``test_mixed_group`` failed CI on it)."""

from __future__ import annotations

import importlib.util
import os
import sys

RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "client_suite_kafka_python.py")


def kafka_python_suite_runner():
    """scripts/client_suite_kafka_python.py as a module (it is a script, not part of the package)."""
    name = "client_suite_kafka_python_for_tests"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, RUNNER)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def apply_client_fixes() -> None:
    try:
        import kafka  # noqa: F401
    except ImportError:  # kafka-python is a test extra; without it the tests that need it skip
        return
    kafka_python_suite_runner().apply_client_fixes()

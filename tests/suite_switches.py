"""Switches that leave heavy suites out of a contributor's local run, never out of CI (issue 15).

``MINIBROKER_SKIP_CONTAINER=1``: tests/test_container.py (podman, runc and debootstrap installed by
apt-get, podman-compose by pip, three images built). ``MINIBROKER_SKIP_SPARK=1``: tests/test_spark.py
(a JRE and pyspark; scripts/run-tests.sh then installs neither). Under ``CI`` set to anything but
empty, ``0``, ``false`` or ``no`` (CI runs with ``CI=true``) both are ignored, and the report header says
so. scripts/run-tests.sh applies the same rule to its installs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SWITCHES = {
    "MINIBROKER_SKIP_CONTAINER": "the container tests (podman installs, image builds)",
    "MINIBROKER_SKIP_SPARK": "the Spark tests (a JRE, pyspark)",
}


def is_ci(env: Mapping[str, str] = os.environ) -> bool:
    return env.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def switch_set(name: str, env: Mapping[str, str] = os.environ) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes")


def skip_reason(name: str, env: Mapping[str, str] = os.environ) -> str | None:
    """Why to skip the suite switch ``name`` guards, or None to run it (always None under CI)."""
    if name not in SWITCHES:
        raise KeyError(name)
    if not switch_set(name, env) or is_ci(env):
        return None
    return f"{name}={env[name]}: {SWITCHES[name]} left out of this local run (CI always runs them)"


def report_lines(env: Mapping[str, str] = os.environ) -> list[str]:
    """What the switches do in this run, for pytest's header."""
    lines = []
    for name in SWITCHES:
        if switch_set(name, env):
            if is_ci(env):
                lines.append(f"{name}={env[name]} ignored: CI={env['CI']} runs {SWITCHES[name]}")
            else:
                lines.append(skip_reason(name, env))
    return lines

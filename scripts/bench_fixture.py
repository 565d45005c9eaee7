#!/usr/bin/env python3
"""The pytest fixture as a new project meets it: how long its first test's broker takes to be ready.

    python scripts/bench_fixture.py            # a fresh venv: pip install CHECKOUT pytest kafka-python==2.0.2
    python scripts/bench_fixture.py --no-venv  # this Python, with whatever it has installed

A new project (the README's fixture example and nothing else: no conftest, no ini file) runs under pytest
``--runs`` times in a subprocess; each run's ``minibroker.start_seconds`` (the fixture's whole setup:
importing the broker, its temporary directory, starting it; thread mode) is read back from the test, and
the pytest process's wall time is measured around it. The baseline, in the same interpreter and run: the
same ``BrokerRunner`` started by a plain Python script (no pytest, no plugin), so the ratio says what
registering the plugin adds. Goal (issue 28): the fixture's broker ready in at most 50 ms.

Prints a markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """

def test_fixture_timing(minibroker):
    import json, os
    with open(os.environ["BENCH_FIXTURE_OUT"], "w") as f:
        json.dump({"start_seconds": minibroker.start_seconds}, f)
"""

BASELINE = """
import json, sys, time
began = time.perf_counter()
from minibroker.testing import BrokerRunner
runner = BrokerRunner().start()
took = time.perf_counter() - began
runner.cleanup()
print(json.dumps({"start_seconds": took}))
"""


def readme_example() -> str:
    import re

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        section = f.read().split("### In tests", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def make_venv(where: str) -> str:
    venv.create(where, with_pip=True)
    python = os.path.join(where, "bin", "python")
    subprocess.run([python, "-m", "pip", "install", "-q", ROOT, "pytest", "kafka-python==2.0.2"], check=True)
    return python


def run_project(python: str, project: str, runs: int) -> tuple[list[float], list[float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    out = os.path.join(project, "out.json")
    env["BENCH_FIXTURE_OUT"] = out
    starts, walls = [], []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", project], cwd=project,
                              env=env, capture_output=True, text=True)
        walls.append(time.perf_counter() - began)
        if done.returncode != 0:
            sys.exit(f"pytest failed:\n{done.stdout}\n{done.stderr}")
        with open(out) as f:
            starts.append(json.load(f)["start_seconds"])
    return starts, walls


def baseline(python: str, runs: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}
    return [json.loads(subprocess.run([python, "-c", BASELINE], capture_output=True, text=True, check=True,
                                      env=env).stdout)["start_seconds"] for _ in range(runs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-venv", action="store_true", help="use this Python and its packages")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fixture-") as tmp:
        python = sys.executable if args.no_venv else make_venv(os.path.join(tmp, "venv"))
        ask = "import importlib.metadata as m; print(m.version('pytest'), m.version('kafka-python'))"
        versions = subprocess.run([python, "-c", ask], capture_output=True, text=True).stdout.split()
        project = os.path.join(tmp, "project")
        os.mkdir(project)
        with open(os.path.join(project, "test_first.py"), "w") as f:
            f.write(readme_example() + PROBE)
        base = baseline(python, args.runs)
        starts, walls = run_project(python, project, args.runs)

    def ms(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f})"

    print(f"## Fixture start-up ({time.strftime('%Y-%m-%d')}, {platform.python_version()}, "
          f"{'this Python' if args.no_venv else 'fresh venv'}: pytest {versions[0]}, "
          f"kafka-python {versions[1] if len(versions) > 1 else '-'})\n")
    print(f"| figure | median of {args.runs} |")
    print("|---|---|")
    print(f"| first test's broker ready (fixture `start_seconds`, thread mode) | {ms(starts)} |")
    print(f"| baseline: the same `BrokerRunner().start()` in a plain script | {ms(base)} |")
    print(f"| ratio fixture / baseline | {statistics.median(starts) / statistics.median(base):.2f} |")
    print(f"| whole `pytest` run of the README example (wall, process start to exit) | {ms(walls)} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite.
# This is the README's test command and what .ci/run runs. pytest's exit code is ours:
# 5 (no tests collected) fails like any other non-zero code.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
need_apt=()
command -v kcat >/dev/null || need_apt+=(kcat)                     # a client we did not write
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)  # Spark's JVM (tests/test_spark.py)
# podman, runc and debootstrap for tests/test_container.py come from scripts/container.sh setup,
# which that test runs itself (and skips, with the reason, where podman cannot be installed).
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test,spark]'
exec python3 -m pytest "$@"

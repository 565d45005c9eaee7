#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite.
# This is the README's test command and what .ci/run runs. pytest's exit code is ours:
# 5 (no tests collected) fails like any other non-zero code. Before pytest, kafka-python's own
# integration suite runs against minibroker and is compared with its expectation file
# (scripts/client_suite_kafka_python.py, docs/testing.md); the run fails if either fails.
# MINIBROKER_CLIENT_SUITES=0 leaves that suite out (for a quick local run of a few tests).
#
# What it changes on the machine (the README says it too): apt-get installs kcat and a JRE for Spark
# when missing; pip turns minibroker into an editable install of this checkout with the test and
# spark extras; tests/test_container.py installs podman, runc and debootstrap (apt-get) and
# podman-compose (pip) and builds three images (scripts/container.sh setup, build).
# A contributor's local run can leave out the heavy suites:
#   MINIBROKER_SKIP_CONTAINER=1  tests/test_container.py, its installs and image builds;
#   MINIBROKER_SKIP_SPARK=1      tests/test_spark.py, the JRE and the spark extra (pip installs .[test]).
# Under CI (CI set, and not 0/false/no) both are ignored: CI always runs those suites. The tests read
# the same switches with the same rule (tests/suite_switches.py).
set -euo pipefail
cd "$(dirname "$0")/.."

ci_value="${CI:-}"
case "${ci_value,,}" in ""|0|false|no) in_ci=0 ;; *) in_ci=1 ;; esac
skipping() {  # skipping NAME: the switch NAME is set and honoured (a local run)
    local value="${!1:-}"
    case "${value,,}" in 1|true|yes) ;; *) return 1 ;; esac
    if [ "$in_ci" = 1 ]; then
        echo "CI=$ci_value: $1=$value ignored, those tests run" >&2
        return 1
    fi
    echo "$1=$value: those tests, and what only they need, are left out of this run" >&2
}
spark=1
if skipping MINIBROKER_SKIP_SPARK; then spark=0; fi
skipping MINIBROKER_SKIP_CONTAINER || true  # tests/test_container.py reads it; this only reports it

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
need_apt=()
command -v kcat >/dev/null || need_apt+=(kcat)  # a client we did not write
[ -x /usr/bin/chromium ] || need_apt+=(chromium)  # the browser Playwright drives (tests/test_explain.py)
if [ "$spark" = 1 ]; then
    command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)  # Spark's JVM (tests/test_spark.py)
fi
# podman, runc and debootstrap for tests/test_container.py come from scripts/container.sh setup,
# which that test runs itself (and skips, with the reason, where podman cannot be installed).
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

extras="test,spark"
if [ "$spark" = 0 ]; then extras="test"; fi
python3 -m pip install -q --disable-pip-version-check -e ".[$extras]"
# What the tests keep for a person to look at (the explain page's screenshot): test-artifacts/
# (the tests create it).
export MINIBROKER_ARTIFACTS_DIR="${MINIBROKER_ARTIFACTS_DIR:-$PWD/test-artifacts}"
# The client suite runs first so that pytest's summary is the run's closing line.
suites=0
if [ "${MINIBROKER_CLIENT_SUITES:-1}" != 0 ]; then
    python3 scripts/client_suite_kafka_python.py || suites=$?
else
    echo "MINIBROKER_CLIENT_SUITES=0: kafka-python's integration suite not run"
fi
status=0
python3 -m pytest "$@" || status=$?
if [ "$status" -ne 0 ]; then exit "$status"; fi
exit "$suites"

#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run the whole suite.
# This is the README's test command and what .ci/run runs. pytest's exit code is ours:
# 5 (no tests collected) fails like any other non-zero code. While pytest runs, two client suites run
# in the background against brokers of their own, each compared with its expectation file and
# writing its own log (docs/testing.md): kafka-python's integration suite
# (scripts/client_suite_kafka_python.py) and confluent-kafka-python's share-consumer tests
# (scripts/client_suite_confluent_share.py). After pytest each suite's result is reported, with its
# log's tail when it failed; the run fails if pytest or either suite fails. The share-consumer suite's
# source is confluent-kafka-python's repository (its sdist ships no tests): where it cannot be had
# (no access to GitHub, nothing cached, no MINIBROKER_CONFLUENT_SUITE_SOURCE) that suite reports
# NOT RUN and does not fail the run. MINIBROKER_CLIENT_SUITES=0 leaves both suites out (for a quick
# local run of a few tests).
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
# The client suites mostly wait on sockets and timers: they run beside pytest, each into its own log
# (only bash builtins here: tests/test_suite_switches.py runs this script with a bare PATH).
suite_names=(kafka-python confluent-share)
suite_scripts=(scripts/client_suite_kafka_python.py scripts/client_suite_confluent_share.py)
suite_pids=()
suite_logs=()
if [ "${MINIBROKER_CLIENT_SUITES:-1}" != 0 ]; then
    for i in "${!suite_names[@]}"; do
        suite_logs[i]="${TMPDIR:-/tmp}/minibroker-suite-${suite_names[i]}-$$.log"
        python3 "${suite_scripts[i]}" >"${suite_logs[i]}" 2>&1 &
        suite_pids[i]=$!
        echo "client suite ${suite_names[i]}: running in the background, log ${suite_logs[i]}"
    done
else
    echo "MINIBROKER_CLIENT_SUITES=0: the client suites (kafka-python, confluent-share) not run"
fi
# Interrupted (Ctrl-C reaches only pytest: background jobs of a script ignore SIGINT): stop the suites
# too; each stops its broker and its pytest on SIGTERM.
trap 'kill -TERM "${suite_pids[@]}" 2>/dev/null; exit 130' INT TERM
status=0
summary="${TMPDIR:-/tmp}/minibroker-pytest-summary-$$"
# pytest's output passes through unchanged; its last non-empty line (the summary) is kept to close
# the run with, after the suites' reports.
python3 -m pytest "$@" | {
    last=""
    while IFS= read -r line || [ -n "$line" ]; do
        printf '%s\n' "$line"
        if [ -n "$line" ]; then last=$line; fi
    done
    printf '%s\n' "$last" >"$summary"
} || status=$?  # pipefail: pytest's exit code
suites=0
for i in "${!suite_pids[@]}"; do
    code=0
    wait "${suite_pids[i]}" || code=$?
    lines=()
    mapfile -t lines <"${suite_logs[i]}"
    if [ "$code" = 0 ]; then
        echo "client suite ${suite_names[i]}: passed (${lines[*]: -1})"
        rm -f "${suite_logs[i]}" 2>/dev/null || true
    elif [ "${suite_names[i]}" = confluent-share ] && [ "$code" = 3 ]; then
        echo "client suite ${suite_names[i]}: NOT RUN, not counted as a failure (log ${suite_logs[i]}):"
        printf '    %s\n' "${lines[@]}"
    else
        echo "client suite ${suite_names[i]}: FAILED (exit $code); the end of its log ${suite_logs[i]}:"
        first=$((${#lines[@]} > 60 ? ${#lines[@]} - 60 : 0))
        printf '    %s\n' "${lines[@]:first}"
        if [ "$suites" = 0 ]; then suites=$code; fi
    fi
done
if [ ${#suite_pids[@]} -gt 0 ] && [ -s "$summary" ]; then
    mapfile -t lines <"$summary"
    printf '%s\n' "${lines[0]}"  # pytest's summary again, as the run's closing line
fi
rm -f "$summary" 2>/dev/null || true  # rm may be missing from PATH (tests/test_suite_switches.py)
if [ "$status" -ne 0 ]; then exit "$status"; fi
exit "$suites"

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
# local run of a few tests). Ctrl-C, SIGTERM or SIGHUP stops pytest, the suites and every broker they
# started within a few seconds, and the script exits 130, 143 or 129 (see "Stopping a run" below).
#
# What it changes on the machine (the README says it too): apt-get installs kcat, gcc and a JRE (Spark and
# keytool) when missing; pip turns minibroker into an editable install of this checkout with the test and
# spark extras (compiling the record layer's C accelerator in place); tests/test_container.py installs podman, runc and debootstrap (apt-get) and
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
    # Spark's JVM (tests/test_spark.py); its keytool makes the JKS stores of tests/test_tls_jks.py
    command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
fi
# the record layer's C accelerator is compiled at the editable install (a missing one fails CI)
command -v cc >/dev/null || need_apt+=(gcc libc6-dev)
# podman, runc and debootstrap for tests/test_container.py come from scripts/container.sh setup,
# which that test runs itself (and skips, with the reason, where podman cannot be installed).
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Bytecode caches make each of pytest's parallel workers and each broker subprocess start fast: without
# them every process compiles the package again and pytest rewrites the asserts of every test module
# (8 s of CPU a process here). Some environments set PYTHONDONTWRITEBYTECODE; this run writes the
# caches (__pycache__/ is git-ignored).
unset PYTHONDONTWRITEBYTECODE
extras="test,spark"
if [ "$spark" = 0 ]; then extras="test"; fi
python3 -m pip install -q --disable-pip-version-check -e ".[$extras]"
# The record layer's C accelerator (docs/records.md): the editable install compiles it in place where
# a C compiler and Python's headers are, and the record tests then run on it and on pure Python. CI
# machines have both, so there a missing accelerator fails the run; elsewhere the run says it is
# pure Python.
if ! python3 -c 'import importlib.util, sys
from minibroker.records import accelerator
print("record layer:", accelerator.describe())
sys.exit(importlib.util.find_spec("minibroker.records._accelerator") is None)'; then
    if [ "$in_ci" = 1 ]; then
        echo "CI: the record layer's C accelerator did not build (see pip's warnings above)" >&2
        exit 1
    fi
    echo "the C accelerator is not built: the record tests run on pure Python only" >&2
fi
# What the tests keep for a person to look at (the explain page's screenshot): test-artifacts/
# (the tests create it).
export MINIBROKER_ARTIFACTS_DIR="${MINIBROKER_ARTIFACTS_DIR:-$PWD/test-artifacts}"
# The client suites mostly wait on sockets and timers: they run beside pytest, each into its own log.
# Only bash builtins from here on (tests/test_suite_switches.py runs this script with a bare PATH).
suite_names=(kafka-python confluent-share)
suite_scripts=(scripts/client_suite_kafka_python.py scripts/client_suite_confluent_share.py)
suite_pids=()
suite_logs=()
summary="${TMPDIR:-/tmp}/minibroker-pytest-summary-$$"
# Stopping a run (docs/testing.md, "Stopping a run"): pytest and each client suite run as background
# jobs, each in a process group of its own (set -m), which also holds the pytest workers, brokers and
# inner pytest runs they start; their stdin is /dev/null (a job outside the terminal's foreground group
# that read the terminal would be stopped). Ctrl-C's SIGINT reaches this script alone (the jobs are not
# in the terminal's foreground group); SIGINT, SIGTERM or SIGHUP runs stop_run at once (this script
# waits with the `wait` builtin, which a trapped signal interrupts, where a foreground pipeline would
# hold the trap until pytest ended): SIGTERM to every group (pytest tears its fixtures down, each suite
# stops its broker and its pytest), up to stop_grace_s seconds for them to end, SIGKILL to the groups
# left, exit 128 + the signal's number. Besides, a test's broker stops by itself once its parent is
# gone (MINIBROKER_PARENT_PIPE_FD: minibroker/testing.py, tied_to_this_process).
groups=()  # the process group ids of the jobs
stop_grace_s=5
stop_run() {  # stop_run SIGNAL_NUMBER
    local code=$((128 + $1)) pg tick i
    local alive=()
    trap '' INT TERM HUP
    disown -a  # no job notices; the loop below waits for the groups instead
    echo "run-tests.sh: signal $1: stopping pytest and the client suites (SIGTERM to their process groups," \
         "SIGKILL after ${stop_grace_s} s)" >&2
    for pg in "${groups[@]}"; do kill -TERM -- "-$pg" 2>/dev/null || true; done
    exec {tick}<> <(:)  # a pipe nobody writes to: `read -t` on it is a sleep builtin
    for ((i = 0; i < stop_grace_s * 10; i++)); do
        alive=()
        for pg in "${groups[@]}"; do
            if kill -0 -- "-$pg" 2>/dev/null; then alive+=("$pg"); fi
        done
        if [ ${#alive[@]} = 0 ]; then break; fi
        read -r -t 0.1 -u "$tick" || true
    done
    for pg in "${alive[@]}"; do
        echo "run-tests.sh: process group $pg still running after ${stop_grace_s} s: SIGKILL" >&2
        kill -KILL -- "-$pg" 2>/dev/null || true
    done
    for i in "${!suite_logs[@]}"; do
        echo "client suite ${suite_names[i]}: stopped; its log ${suite_logs[i]}"
    done
    rm -f "$summary" 2>/dev/null || true
    exit "$code"
}
trap 'stop_run 2' INT
trap 'stop_run 15' TERM
trap 'stop_run 1' HUP
set -m  # from here to `set +m`: each background job in a process group of its own
if [ "${MINIBROKER_CLIENT_SUITES:-1}" != 0 ]; then
    for i in "${!suite_names[@]}"; do
        suite_logs[i]="${TMPDIR:-/tmp}/minibroker-suite-${suite_names[i]}-$$.log"
        python3 "${suite_scripts[i]}" </dev/null >"${suite_logs[i]}" 2>&1 &
        suite_pids[i]=$!
        groups+=("$!")
        echo "client suite ${suite_names[i]}: running in the background, log ${suite_logs[i]}"
    done
else
    echo "MINIBROKER_CLIENT_SUITES=0: the client suites (kafka-python, confluent-share) not run"
fi
# pytest's output passes through unchanged; its last non-empty line (the summary) is kept to close
# the run with, after the suites' reports. The reader ignores SIGINT and SIGTERM: stopped, pytest
# still prints its interrupted summary through it, and it ends when pytest does. The job is a
# subshell (its pid is the group's id) whose exit code is pytest's (pipefail; the reader exits 0).
(
    python3 -m pytest "$@" </dev/null | {
        trap '' INT TERM HUP
        last=""
        while IFS= read -r line || [ -n "$line" ]; do
            printf '%s\n' "$line"
            if [ -n "$line" ]; then last=$line; fi
        done
        printf '%s\n' "$last" >"$summary"
    }
) &
pytest_job=$!
groups+=("$pytest_job")
set +m
status=0
wait "$pytest_job" || status=$?  # pytest's exit code
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

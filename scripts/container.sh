#!/usr/bin/env bash
# Podman machinery for minibroker's container image and compose example, on machines without a Docker
# engine or Docker Hub (docs/container.md, "Podman on machines without Docker"). The Dockerfile and
# compose.yaml stay standard; everything podman-specific lives here. Used by tests/test_container.py,
# tests/test_cli_rough_edges.py and by humans.
#
#   scripts/container.sh setup                 install podman/runc/debootstrap/podman-compose, write the
#                                              containers.conf, build the base image once (cached)
#   scripts/container.sh base [--force]        the debootstrapped base image tagged python:3.11-slim
#   scripts/container.sh build                 host wheels -> dist/, then build minibroker:latest and the
#                                              compose app image minibroker-compose-app:latest
#   scripts/container.sh run NAME [HOSTPORT]   start the broker detached, port 9092 published on HOSTPORT
#                                              (default 9092), advertised as 127.0.0.1:HOSTPORT
#   scripts/container.sh wait-healthy NAME [SECONDS]   poll `podman healthcheck run` (no systemd here)
#   scripts/container.sh stop NAME             podman stop, prints the seconds it took; then removes it
#                                              with any anonymous volume (rm -v): no volume left over
#   scripts/container.sh compose-example [PROJECT] [FILE]   broker up (after FILE's one-shot `setup`
#                                              service, if any), wait healthy, run the app, down -v;
#                                              FILE: compose.yaml, or examples/compose-sasl-ssl/compose.yaml
#   scripts/container.sh compose ARGS...       podman-compose with the containers.conf, on the compose file
#                                              of the current directory (or -f); `up --wait` waits for the
#                                              healthchecks, `down -v` removes anonymous volumes too
#   scripts/container.sh podman ARGS...        podman with the containers.conf
#   scripts/container.sh env                   print `export CONTAINERS_CONF=...` (eval it in a shell)
#
# Exit code 77 from `setup` means podman cannot be installed here (not root, apt-get failed): callers skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${MINIBROKER_CONTAINER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/minibroker-container}"
CONF="$CACHE_DIR/containers.conf"
IMAGE="${MINIBROKER_IMAGE:-minibroker:latest}"
APP_IMAGE="${MINIBROKER_APP_IMAGE:-minibroker-compose-app:latest}"
BASE_LOCAL="localhost/debian-python:bookworm"
BASE_TAG="docker.io/library/python:3.11-slim"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"

log() { printf '[container.sh] %s\n' "$*" >&2; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { local ms=$(( $(now_ms) - $1 )); printf '%d.%03d' $(( ms / 1000 )) $(( ms % 1000 )); }  # since $1 (ms)
die() { log "$*"; exit 1; }
# Without systemd podman complains about healthcheck timers on every run/rm; drop those lines only.
# (stderr goes through a file, not a pipe: conmon keeps podman's stderr open after `run -d` returns.)
quiet_noise() { grep -v -e 'unable to get systemd connection' -e 'failed to connect to syslog' \
    -e 'input device is not a TTY' >&2 || true; }
denoise() {
    local tmp rc=0
    tmp="$(mktemp)"
    "$@" 2>"$tmp" || rc=$?
    quiet_noise <"$tmp"
    rm -f "$tmp"
    return $rc
}

sudo_cmd() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"
    else return 1
    fi
}

# -- setup -------------------------------------------------------------------------------------------

ensure_packages() {
    local need=()
    command -v podman >/dev/null || need+=(podman)
    command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need+=(runc)
    command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
    if [ ${#need[@]} -gt 0 ]; then
        log "installing ${need[*]} (apt-get)"
        command -v apt-get >/dev/null || { log "no apt-get: cannot install ${need[*]}"; exit 77; }
        export DEBIAN_FRONTEND=noninteractive
        if ! { sudo_cmd apt-get update -qq && sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null; }; then
            log "cannot install ${need[*]} (not root, or apt-get failed)"
            exit 77
        fi
    fi
    command -v podman >/dev/null || { log "podman still missing after apt-get"; exit 77; }
    if ! command -v podman-compose >/dev/null; then
        log "installing podman-compose (pip)"
        "$PYTHON" -m pip install -q --disable-pip-version-check "podman-compose>=1.1" \
            || die "pip install podman-compose failed"
    fi
}

write_conf() {
    # The sandbox cannot raise RLIMIT_NOFILE/NPROC: keep the containers' limits at or below the current
    # hard limits. crun refuses the hybrid cgroup layout, runc accepts it.
    local hn hu
    hn="$(ulimit -Hn)"; hu="$(ulimit -Hu)"
    [ "$hn" = unlimited ] && hn=1048576
    [ "$hu" = unlimited ] && hu=32768
    [ "$hn" -gt 1048576 ] && hn=1048576
    [ "$hu" -gt 32768 ] && hu=32768
    mkdir -p "$CACHE_DIR"
    cat >"$CONF.tmp" <<EOF
# written by minibroker scripts/container.sh
[containers]
default_ulimits = ["nofile=$hn:$hn", "nproc=$hu:$hu"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    mv "$CONF.tmp" "$CONF"
    export CONTAINERS_CONF="$CONF"
}

use_conf() {
    [ -f "$CONF" ] || write_conf
    export CONTAINERS_CONF="$CONF"
}

build_base() {
    local force="${1:-}"
    use_conf
    if [ "$force" != --force ] && podman image exists "$BASE_TAG"; then
        return 0
    fi
    command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || ensure_packages
    local rootfs t0
    t0=$(date +%s)
    rootfs="$(mktemp -d /var/tmp/minibroker-rootfs.XXXXXX)"
    log "debootstrapping the base image (Debian bookworm + python3, about a minute, cached afterwards)"
    if ! PATH="$PATH:/usr/sbin:/sbin" debootstrap --variant=minbase \
            --include=python3,python3-venv,python3-pip,ca-certificates \
            bookworm "$rootfs" "$DEBIAN_MIRROR" >"$CACHE_DIR/debootstrap.log" 2>&1; then
        tail -20 "$CACHE_DIR/debootstrap.log" >&2
        rm -rf "$rootfs"
        die "debootstrap failed (log: $CACHE_DIR/debootstrap.log)"
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/* 2>/dev/null || true
    tar -C "$rootfs" -c . | podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'LABEL org.minibroker.base=debootstrap-bookworm' \
        --change 'CMD ["python3"]' - "$BASE_LOCAL" >/dev/null 2>&1
    rm -rf "$rootfs"
    podman tag "$BASE_LOCAL" "$BASE_TAG"
    log "base image $BASE_TAG ready in $(( $(date +%s) - t0 )) s"
}

cmd_setup() {
    ensure_packages
    write_conf
    build_base
}

# -- build -------------------------------------------------------------------------------------------

host_wheels() {
    # Wheels built on the host (which trusts the intercepting proxy's CA) make the image build offline:
    # the Dockerfile installs them with --no-index. Drop our own old wheels so a stale build never wins.
    mkdir -p "$ROOT/dist"
    rm -f "$ROOT"/dist/minibroker-*.whl
    log "building wheels into dist/ (pip wheel)"
    (cd "$ROOT" && "$PYTHON" -m pip wheel -q --disable-pip-version-check '.[tls]' "kafka-python>=3.0,<4" -w dist \
        2> >(grep -v "Location 'file:" >&2)) || die "pip wheel failed"
}

context_hash() {
    # What an image is built from: the base image, the Dockerfile(s) and the files the context admits.
    # An image whose label matches is up to date and is not rebuilt (MINIBROKER_REBUILD=1 forces it).
    {
        podman image inspect -f '{{.Id}}' "$BASE_TAG"
        cd "$ROOT"
        local p existing=()
        for p in "$@"; do [ -e "$p" ] && existing+=("$p"); done
        find "${existing[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' 2>/dev/null | LC_ALL=C sort \
            | while read -r f; do sha256sum "$f"; done
    } | sha256sum | cut -c1-16
}

image_current() {  # IMAGE HASH
    [ "${MINIBROKER_REBUILD:-0}" = 0 ] && podman image exists "$1" \
        && [ "$(podman image inspect -f '{{index .Labels "org.minibroker.context-hash"}}' "$1" 2>/dev/null)" = "$2" ]
}

cmd_build() {
    use_conf
    build_base
    local h_broker h_app t0
    h_broker="$(context_hash Dockerfile .dockerignore pyproject.toml README.md minibroker)"
    h_app="$(context_hash examples/compose/Dockerfile examples/compose/app.py)"
    if image_current "$IMAGE" "$h_broker" && image_current "$APP_IMAGE" "$h_app"; then
        log "$IMAGE and $APP_IMAGE are up to date"
        return 0
    fi
    host_wheels
    # --format docker keeps the HEALTHCHECK (the OCI image format has no place for it).
    if ! image_current "$IMAGE" "$h_broker"; then
        t0=$(now_ms)
        podman build -q --format docker --build-arg WHEELHOUSE=dist \
            --label "org.minibroker.context-hash=$h_broker" -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" >/dev/null
        log "built $IMAGE in $(secs "$t0") s"
    fi
    if ! image_current "$APP_IMAGE" "$h_app"; then
        t0=$(now_ms)
        podman build -q --format docker --build-arg WHEELHOUSE=dist \
            --label "org.minibroker.context-hash=$h_app" -t "$APP_IMAGE" \
            -f "$ROOT/examples/compose/Dockerfile" "$ROOT" >/dev/null
        log "built $APP_IMAGE in $(secs "$t0") s"
    fi
    # Each build leaves its untagged build stage behind; drop the dangling ones so disk use stays flat.
    podman image prune -f --filter dangling=true >/dev/null 2>&1 || true
}

# -- run ---------------------------------------------------------------------------------------------

cmd_run() {
    local name="${1:?usage: run NAME [HOSTPORT]}" port="${2:-9092}"
    use_conf
    # -v: also the anonymous volumes of a previous run (MINIBROKER_IMAGE may name an image with a VOLUME)
    podman rm -f -v -t 0 "$name" >/dev/null 2>&1 || true
    denoise podman run -d --name "$name" -p "127.0.0.1:$port:9092" \
        -e "KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:$port" "$IMAGE"
}

cmd_wait_healthy() {
    local name="${1:?usage: wait-healthy NAME [SECONDS]}" timeout="${2:-60}"
    use_conf
    local deadline=$(( $(date +%s) + timeout ))
    while :; do
        # exit 0: healthy (podman 4.3 prints nothing, newer ones print "healthy"); 1: unhealthy/starting
        if podman healthcheck run "$name" >/dev/null 2>&1; then return 0; fi
        if [ "$(podman inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != true ]; then
            podman logs "$name" >&2 || true
            die "$name is not running"
        fi
        [ "$(date +%s)" -lt "$deadline" ] || { podman logs "$name" >&2 || true; die "$name not healthy after ${timeout}s"; }
        sleep 0.2
    done
}

cmd_stop() {
    local name="${1:?usage: stop NAME}"
    use_conf
    local t0
    t0=$(now_ms)
    denoise podman stop -t 10 "$name" >/dev/null
    secs "$t0"; echo
    podman rm -f -v "$name" >/dev/null 2>&1 || true  # -v: its anonymous volumes too, or some are left per cycle
}

# -- compose -----------------------------------------------------------------------------------------

# podman-compose's global options that take a value (its subcommand is the first word that is neither
# an option nor such a value)
compose_option_takes_value() {
    case "$1" in
        -f|--file|-p|--project-name|--env-file|--profile|--podman-path|--in-pod|--pod-args|--parallel) return 0 ;;
        --podman-*-args|--podman-args) return 0 ;;
        *) return 1 ;;
    esac
}

cmd_compose() {
    # The caller's compose file, from the caller's directory, as `docker compose` works: nothing here
    # changes directory (only `build` works in the checkout). Two things podman-compose does not do:
    #   up --wait [--wait-timeout S]: it ignores --wait with podman < 4.6, and podman updates health only
    #     when `podman healthcheck run` is called (no systemd here), so --wait would never see "healthy":
    #     this runs `up -d`, then polls the healthcheck of each of the project's containers that has one;
    #   down -v: it removes the project's named volumes but not its containers' anonymous ones (`podman
    #     rm` without -v): this passes -v on to podman rm.
    use_conf
    local globals=() rest=() sub="" arg
    while [ $# -gt 0 ]; do
        arg="$1"; shift
        if [ -z "$sub" ]; then
            if [[ "$arg" == -* ]]; then
                globals+=("$arg")
                if compose_option_takes_value "$arg" && [ $# -gt 0 ]; then globals+=("$1"); shift; fi
            else
                sub="$arg"
            fi
        else
            rest+=("$arg")
        fi
    done
    [ -n "$sub" ] || exec podman-compose "${globals[@]}"
    case "$sub" in
        up) compose_up "${globals[@]}" -- "${rest[@]}" ;;
        down)
            local a
            for a in "${rest[@]}"; do
                if [ "$a" = -v ] || [ "$a" = --volumes ]; then globals+=("--podman-rm-args=-v"); break; fi
            done
            podman-compose "${globals[@]}" down "${rest[@]}" ;;
        *) podman-compose "${globals[@]}" "$sub" "${rest[@]}" ;;
    esac
}

compose_up() {  # GLOBALS... -- UP-ARGS...
    local globals=() up=() wait=0 timeout=120 detached=0
    while [ "$1" != -- ]; do globals+=("$1"); shift; done
    shift
    while [ $# -gt 0 ]; do
        case "$1" in
            --wait) wait=1 ;;
            --wait-timeout) timeout="${2:?--wait-timeout needs seconds}"; shift ;;
            --wait-timeout=*) timeout="${1#--wait-timeout=}" ;;
            -d|--detach) detached=1; up+=("$1") ;;
            *) up+=("$1") ;;
        esac
        shift
    done
    if [ $wait = 0 ]; then
        podman-compose "${globals[@]}" up "${up[@]}"
        return
    fi
    [ $detached = 1 ] || up=(-d "${up[@]}")  # --wait implies detached, as with docker compose
    podman-compose "${globals[@]}" up "${up[@]}" || return
    local deadline=$(( $(date +%s) + timeout )) id waiting
    while :; do
        waiting=()
        for id in $(podman-compose "${globals[@]}" ps -q 2>/dev/null); do
            [ -n "$(podman inspect -f '{{if .Config.Healthcheck}}yes{{end}}' "$id" 2>/dev/null)" ] || continue
            podman healthcheck run "$id" >/dev/null 2>&1 && continue
            if [ "$(podman inspect -f '{{.State.Running}}' "$id" 2>/dev/null)" != true ]; then
                podman logs --tail 40 "$id" >&2 || true
                die "container $id exited before it was healthy"
            fi
            waiting+=("$id")
        done
        [ ${#waiting[@]} -gt 0 ] || return 0
        if [ "$(date +%s)" -ge "$deadline" ]; then
            die "not healthy after ${timeout}s: $(podman inspect -f '{{.Name}}' "${waiting[@]}" | tr '\n' ' ')"
        fi
        sleep 0.2
    done
}

# What a project left behind, for a step that failed: its containers, its podman events since SINCE (unix
# seconds) and each of its volumes with what it holds.
show_project_state() {  # PROJECT SINCE
    local project="$1" since="$2" v mp fmt='{{.Time}} {{.Type}} {{.Status}} {{.Name}}'
    fmt+='{{if eq .Status "died"}} exit {{.ContainerExitCode}}{{end}}'
    log "containers of project $project:"
    podman ps -a --filter "label=io.podman.compose.project=$project" \
        --format '{{.ID}} {{.Names}} {{.Status}}' >&2 || true
    log "its podman events since $(date -u -d "@$since" +%H:%M:%S) UTC:"
    podman events --stream=false --since "$since" --format "$fmt" 2>/dev/null \
        | grep -F -e " $project" -e "_$project" >&2 || true
    for v in $(podman volume ls -q --filter "label=io.podman.compose.project=$project" 2>/dev/null); do
        mp="$(podman volume inspect -f '{{.Mountpoint}}' "$v" 2>/dev/null)" || continue
        log "volume $v ($mp):"
        ls -ln "$mp" >&2 2>/dev/null || podman unshare ls -ln "$mp" >&2 || true
    done
}

cmd_compose_example() {
    # podman-compose ignores `depends_on: condition: service_healthy` (and service_completed_successfully):
    # run the file's one-shot `setup` service if it has one, start the broker, poll its healthcheck
    # ourselves, then run the app service and return its exit code.
    local project="${1:-minibroker-example}" file="${2:-$ROOT/compose.yaml}"
    use_conf
    local pc=(podman-compose -p "$project" -f "$file")
    local rc=0 setup_out="" services since
    since="$(date +%s)"
    cmd_build  # a no-op when both images match their inputs
    (cd "$ROOT" && "${pc[@]}" down -v -t 2 >/dev/null 2>&1) || true
    # The list is read whole, then searched. `config --services | grep -q setup` under pipefail skipped the
    # setup service now and then: podman-compose writes one name per write when PYTHONUNBUFFERED is set,
    # grep -q exits at "setup", the next write fails (BrokenPipeError, exit 1), and the pipeline's status
    # said "no setup service"; the broker then started on empty volumes.
    services="$(cd "$ROOT" && "${pc[@]}" config --services)" \
        || die "podman-compose config --services failed on $file"
    if [[ $'\n'"$services"$'\n' == *$'\n'setup$'\n'* ]]; then
        compose_run_setup "$project" "$since" "${pc[@]}"
    fi
    (cd "$ROOT" && denoise "${pc[@]}" up -d --no-build --no-deps minibroker >/dev/null) \
        || die "compose up minibroker failed"
    local cid
    cid="$(podman ps -q --filter "label=io.podman.compose.project=$project" \
        --filter "label=com.docker.compose.service=minibroker")"
    cid="${cid%%$'\n'*}"  # the first (only) one: `| head -1` could break podman's pipe, as above
    if [ -z "$cid" ]; then  # it exited at once: say how, with its log, instead of only that it is gone
        log "no running minibroker container in project $project"
        cid="$(podman ps -aq --filter "label=io.podman.compose.project=$project" \
            --filter "label=com.docker.compose.service=minibroker")"
        cid="${cid%%$'\n'*}"
        if [ -n "$cid" ]; then
            podman inspect -f 'exit code {{.State.ExitCode}}, error {{.State.Error}}' "$cid" >&2 || true
            podman logs --tail 60 "$cid" >&2 || true
        fi
        [ -z "$setup_out" ] || log "the setup service had printed: $setup_out"
        show_project_state "$project" "$since"
        (cd "$ROOT" && "${pc[@]}" down -v -t 5 >/dev/null 2>&1) || true
        die "no minibroker container running in project $project"
    fi
    # in a subshell: its `die` must not skip the `down -v` below (a broker that died after the check above
    # left its container, pod and volumes behind)
    (cmd_wait_healthy "$cid" 60) || rc=$?
    [ $rc = 0 ] || [ -z "$setup_out" ] || log "the setup service had printed: $setup_out"
    if [ $rc = 0 ]; then
        (cd "$ROOT" && denoise "${pc[@]}" run --rm --no-deps -T app) || rc=$?
    fi
    (cd "$ROOT" && "${pc[@]}" down -v -t 5 >/dev/null 2>&1) || true  # -v: the file's named volumes too
    return $rc
}

# Run the compose file's one-shot `setup` service and make sure it ran: its container, named here and
# removed afterwards (not `run --rm`, so that its state can be read), must have exited 0 (the SASL_SSL
# example's command runs under `sh -e`: 0 means it ran to its end). Sets setup_out (its output). Dies, with
# the project's state, otherwise.
compose_run_setup() {  # PROJECT SINCE PODMAN-COMPOSE...
    local project="$1" since="$2"
    shift 2
    local name="${project}_setup_once" run_rc=0 state
    setup_out="$(cd "$ROOT" && denoise "$@" run --name "$name" -T setup 2>&1)" || run_rc=$?
    state="$(podman inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$name" 2>/dev/null)" \
        || state="none was made"
    if [ "$run_rc" = 0 ] && [ "$state" = "exited 0" ]; then
        podman rm -v "$name" >/dev/null 2>&1 || true
        return 0
    fi
    log "the setup service did not complete: podman-compose run exited $run_rc, its container: $state"
    log "it printed: ${setup_out:-nothing}"
    show_project_state "$project" "$since"
    podman rm -f -v "$name" >/dev/null 2>&1 || true
    (cd "$ROOT" && "$@" down -v -t 5 >/dev/null 2>&1) || true
    die "setup service failed"
}

# -- main --------------------------------------------------------------------------------------------

cmd="${1:-help}"; shift || true
case "$cmd" in
    setup) cmd_setup ;;
    base) ensure_packages; write_conf; build_base "${1:-}" ;;
    build) cmd_build ;;
    run) cmd_run "$@" ;;
    wait-healthy) cmd_wait_healthy "$@" ;;
    stop) cmd_stop "$@" ;;
    compose) cmd_compose "$@" ;;
    compose-example) cmd_compose_example "$@" ;;
    podman) use_conf; exec podman "$@" ;;
    env) use_conf; printf 'export CONTAINERS_CONF=%q\n' "$CONF" ;;
    help|-h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command: $cmd (try: $0 help)" ;;
esac

# minibroker: a single-node Kafka-compatible broker, as a container for tests and compose files.
#
# With a Docker engine (and Docker Hub for python:3.11-slim):
#   docker build -t minibroker .
#   docker run --rm -p 9092:9092 minibroker          # clients use localhost:9092
#
# Without one (the project's build machines: no Docker daemon, no Docker Hub), podman builds and runs
# this same file; scripts/container.sh sets podman up and builds the base image locally:
#   scripts/container.sh setup && scripts/container.sh build     # -> minibroker:latest
#   scripts/container.sh run mb 9092; scripts/container.sh stop mb
# or by hand: podman build --format docker -t minibroker . && podman run --rm -p 9092:9092 minibroker
# (--format docker keeps the HEALTHCHECK). Compose: podman-compose (docs/container.md).
#
# Two ways to install the package (docs/container.md, "Building the image"):
#   * default: the build stage builds minibroker (its C accelerator with a gcc it installs) and its
#     dependencies from source / PyPI (needs network);
#   * --build-arg WHEELHOUSE=dist: install only from wheels already in dist/ (`pip wheel '.[tls]' -w dist`
#     on the host, whose compiler builds the accelerator into minibroker's wheel), with no index at all -
#     offline-friendly, and what scripts/container.sh does with podman.
# Either way the runtime stage gets a ready virtualenv and no build tools. The image installs the `tls`
# extra (cryptography): PKCS12 key stores and `minibroker certs` work in it, as the compose example needs.

FROM python:3.11-slim AS build
ARG WHEELHOUSE=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
COPY . /src
# Without a wheelhouse: gcc for the record layer's C accelerator (the image's Python has its headers).
# Only this stage has it: the runtime stage copies the virtualenv, the compiled module in it. The
# build says which record layer the image runs.
RUN set -eu; \
    python3 -m venv /opt/minibroker; \
    if [ -n "$WHEELHOUSE" ]; then \
        /opt/minibroker/bin/pip install --no-index --find-links "/src/$WHEELHOUSE" 'minibroker[tls]'; \
    else \
        apt-get update -qq; \
        apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; \
        /opt/minibroker/bin/pip install '/src[tls]'; \
    fi; \
    /opt/minibroker/bin/python -c "from minibroker.records import accelerator as a; print('record layer:', a.describe())"; \
    /opt/minibroker/bin/pip uninstall -q -y pip setuptools; \
    /opt/minibroker/bin/minibroker --help >/dev/null

FROM python:3.11-slim
LABEL org.opencontainers.image.title="minibroker" \
      org.opencontainers.image.description="A single-node Kafka-compatible broker for tests and local work" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --gid 1000 minibroker \
 && useradd --uid 1000 --gid 1000 --no-create-home --home-dir /var/lib/minibroker \
        --shell /usr/sbin/nologin minibroker \
 && mkdir -p /var/lib/minibroker \
 && chown 1000:1000 /var/lib/minibroker

COPY --from=build /opt/minibroker /opt/minibroker

# KAFKA_* variables map to broker properties as in the apache/kafka image (docs/configuration.md):
# bind every interface inside the container, advertise localhost:9092 (right for `-p 9092:9092`;
# compose files set KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://<service name>:9092), keep data in /var/lib/minibroker.
ENV PATH=/opt/minibroker/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KAFKA_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092 \
    KAFKA_LOG_DIRS=/var/lib/minibroker

# No VOLUME: a declared one gives every container an anonymous volume, which `podman-compose down -v` and
# `docker compose down` (without -v) leave behind, one per run. The data lives in the container and goes
# with it; mount a named volume or a host directory at /var/lib/minibroker to keep it (docs/container.md).
USER 1000:1000
WORKDIR /var/lib/minibroker
EXPOSE 9092

# Speaks the Kafka protocol: healthy once the broker answers ApiVersions on its listener.
HEALTHCHECK --interval=2s --timeout=5s --start-period=30s --retries=3 \
    CMD minibroker healthcheck --quiet --bootstrap-server 127.0.0.1:9092 || exit 1

# The broker is PID 1 and handles SIGTERM itself: it closes the listener, flushes and exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["minibroker", "serve"]
CMD []

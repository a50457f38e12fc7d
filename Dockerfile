# syntax=docker/dockerfile:1
# purgatory-proxy container image.
#
#   docker build -t purgatory-proxy .
#   docker run --rm -p 9092-9095:9092-9095 -p 9464:9464 \
#     -e PURGATORY_PROXY_UPSTREAM__BOOTSTRAP='["kafka-1:9092"]' purgatory-proxy
#
# Stages: "build" installs the project into a virtualenv (pip, compilers' leftovers and the
# source tree stay there); "examples" is the one-shot client docker-compose.yml runs; "runtime"
# (the last stage, so the default target) is the slim image with only the virtualenv, a default
# config file and an unprivileged user.
#
# Pinned dependencies: the build stage installs the runtime dependencies (pyproject's
# [project] dependencies, no extras: the embedded test broker is not in the image) and the build
# backend only from constraints/image.txt, every one at an exact version with its sha256 hashes
# (pip --require-hashes), then the project itself with no dependency resolution and no index, and
# `pip check` fails the build if the lock misses a dependency. Two builds get the same versions.
# Regenerate the lock after changing pyproject's dependencies (pip-tools in a throwaway venv, not
# a project dependency; tests/deploy/test_dockerfile.py checks the lock against pyproject.toml):
#
#   python3.11 -m venv /tmp/pip-tools && /tmp/pip-tools/bin/pip install pip-tools
#   /tmp/pip-tools/bin/pip-compile --allow-unsafe --generate-hashes --all-build-deps
#     --strip-extras --no-emit-index-url --no-emit-find-links
#     --index-url https://pypi.org/simple --output-file constraints/image.txt pyproject.toml
#
# (one command, as the lock's header repeats it; add --upgrade to move every pin to the newest
# release). The base image is a tag, not a digest (its Python patch release and pip move): for
# bit-for-bit builds pass --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>.
#
# Configuration: the default file /etc/purgatory-proxy/config.toml (deploy/docker/config.toml)
# listens on 0.0.0.0:9092, gives per-broker listeners ports 9093+ and serves /metrics, /healthz
# and /readyz on 9464. Mount your own file over it (or elsewhere and pass --config), and/or set
# PURGATORY_PROXY_<SECTION>__<KEY> variables, which win over the file; flags win over both.
# The upstream cluster has no default: set [upstream] bootstrap, the variable above or
# --upstream (the embedded test broker is not in the image).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/purgatory-proxy
WORKDIR /src
# The lock first: its layer (the dependencies) stays cached while only the sources change.
COPY constraints/image.txt ./constraints/image.txt
RUN /opt/purgatory-proxy/bin/pip install --require-hashes --no-deps -r constraints/image.txt
COPY pyproject.toml README.md ./
COPY wire ./wire
COPY proxy ./proxy
RUN /opt/purgatory-proxy/bin/pip install --no-deps --no-build-isolation --no-index . \
 && /opt/purgatory-proxy/bin/pip check \
 && /opt/purgatory-proxy/bin/purgatory-proxy run --help > /dev/null

# One-shot example client for docker-compose.yml (target "examples"); not part of the runtime.
FROM ${PYTHON_IMAGE} AS examples
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
RUN pip install "aiokafka>=0.11" "kafka-python>=3.0" "confluent-kafka>=2.4"
COPY examples /examples
USER 10001:10001
ENTRYPOINT ["python"]
CMD ["/examples/aiokafka_example.py", "--bootstrap", "proxy:9092"]

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="purgatory-proxy" \
      org.opencontainers.image.description="Kafka-compatible sidecar proxy with its own purgatory and one KIP-72 bytes limit"
# A fixed numeric uid/gid so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
# Not named "proxy": Debian's base-passwd already has a user and group of that name (uid 13).
RUN groupadd --system --gid 10001 purgatory \
 && useradd --system --uid 10001 --gid purgatory --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin purgatory
COPY --from=build /opt/purgatory-proxy /opt/purgatory-proxy
COPY deploy/docker/config.toml /etc/purgatory-proxy/config.toml
ENV PATH=/opt/purgatory-proxy/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HEALTHCHECK_URL=http://127.0.0.1:9464/healthz
USER 10001:10001
# Bootstrap, three per-broker listeners (first_broker_port = 9093; more brokers take 9096...,
# publish them too), metrics/health.
EXPOSE 9092 9093 9094 9095 9464
# Slim images have no curl: a Python one-liner. Only meaningful while [metrics] listen is set;
# if you turn metrics off, run with --no-healthcheck (or point HEALTHCHECK_URL elsewhere).
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=2).status == 200 else 1)"]
ENTRYPOINT ["purgatory-proxy"]
CMD ["run", "--config", "/etc/purgatory-proxy/config.toml"]

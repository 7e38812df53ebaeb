# Carico: one image, one entry point (`carico`) for every component — agent, aggregator, extender,
# certs, repack. Two stages: the builder makes wheels of Carico and its dependencies and installs
# them into a venv; the runtime is Debian's python3 plus that venv, run by UID 10001.
# On machines without a container engine, deploy/image/build.sh builds the same image
# (`make image`); keep the two in step.

# BASE is replaceable so the Dockerfile can be checked offline against a local stand-in
# (deploy/image/check-dockerfile.sh).
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Debian's python3 (not a python base image) so the venv's interpreter path is identical in both
# stages and in the debootstrap build.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY carico ./carico
COPY carico_app ./carico_app
COPY agent ./agent
COPY aggregator ./aggregator
COPY scheduler_ext ./scheduler_ext
COPY repack ./repack
COPY protos ./protos
RUN python3 -m venv /opt/carico \
    && /opt/carico/bin/pip wheel --no-cache-dir --wheel-dir /wheels . \
    && /opt/carico/bin/pip install --no-cache-dir --no-index --find-links /wheels carico \
    && /opt/carico/bin/python -m pip uninstall --yes pip setuptools \
    && find /opt/carico/lib -path "*/site-packages/*" -type d \( -name tests -o -name test \) \
       -prune -exec rm -rf {} + \
    && /opt/carico/bin/carico --version

FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/* \
    && groupadd --gid 10001 carico \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin carico
COPY --from=builder /opt/carico /opt/carico
ENV PATH=/opt/carico/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8
LABEL org.opencontainers.image.title="carico" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
ENTRYPOINT ["/opt/carico/bin/carico"]
CMD ["--help"]

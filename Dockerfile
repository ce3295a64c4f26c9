# ql-bridge as a container image, to run beside the official whyour/qinglong image (see compose.yaml).
#
#   docker build -t ql-bridge:0.1.0 .
#   docker run --rm ql-bridge:0.1.0 --help       # any ql-bridge command line; the default is `serve`
#
# Base: CPython 3.11 on Debian bookworm, slim. The Debian release is part of the tag so that the zone
# database stays in the image (the bridge reads 2.x's zone, Asia/Shanghai, through zoneinfo); the build
# checks it. For byte-for-byte rebuilds pin the digest as well (python:3.11-slim-bookworm@sha256:...).
# The dependencies are resolved from pyproject.toml's ranges at build time: there is no lock file.

FROM python:3.11-slim-bookworm AS build

# Only what the package needs to install (.dockerignore keeps everything else out of the context).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY legacy_adapters ./legacy_adapters
COPY projections ./projections
COPY migrations ./migrations

# A regular (not editable) install into a virtual environment of its own, copied whole into the final
# stage: no sources, build tools or pip caches follow it there.
RUN python -m venv /opt/ql-bridge \
    && /opt/ql-bridge/bin/pip install --no-cache-dir --disable-pip-version-check /src

FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="ql-bridge" \
      org.opencontainers.image.description="Sidecar in front of a QingLong 2.x panel: forwards its callbacks and records them in the 3.0 run model"

# A fixed numeric uid, so that volume ownership and runAsNonRoot checks do not depend on /etc/passwd.
RUN groupadd --system --gid 10001 ql-bridge \
    && useradd --system --uid 10001 --gid ql-bridge --home-dir /var/lib/ql-bridge --no-create-home \
       --shell /usr/sbin/nologin ql-bridge \
    && install -d -o ql-bridge -g ql-bridge -m 0750 /var/lib/ql-bridge

COPY --from=build /opt/ql-bridge /opt/ql-bridge
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/ql-bridge-entrypoint

# BRIDGE_LISTEN and BRIDGE_LEGACY_URL default to the recommended layout (README, "The two layouts", layout 1;
# docs/seam.md): the bridge on 2.x's public port 5700, 2.x's backend moved to 5701. The code's own defaults
# would point the bridge at itself here.
ENV PATH=/opt/ql-bridge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    BRIDGE_DATA_DIR=/var/lib/ql-bridge \
    BRIDGE_LISTEN=0.0.0.0:5700 \
    BRIDGE_LEGACY_URL=http://127.0.0.1:5701

# Fail the build, not the first start: the console script runs, the migrations are in the installed
# package, and the zone database answers.
RUN ql-bridge --help > /dev/null \
    && BRIDGE_DATA_DIR=/tmp/ql-bridge-check ql-bridge db upgrade > /dev/null \
    && rm -rf /tmp/ql-bridge-check \
    && python -c "import zoneinfo; zoneinfo.ZoneInfo('Asia/Shanghai')"

# The bridge store (SQLite, WAL) lives here: mount a named volume on it.
VOLUME ["/var/lib/ql-bridge"]
WORKDIR /var/lib/ql-bridge
USER 10001:10001
EXPOSE 5700
STOPSIGNAL SIGTERM

# Liveness only (/livez): the process answers. Readiness (/readyz, /healthz) also fails while 2.x is down,
# and a health check on it would have the container restarted for something a restart cannot fix. The
# probe reads the listen address as `serve` does (Settings, from BRIDGE_LISTEN) and ignores any
# HTTP(S)_PROXY in the environment (2.x's own check runs curl with --noproxy '*' for the same reason). Any
# failure, a non-2xx answer included, exits 1.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request as r; from bridge.config import Settings; \
s = Settings.from_env(); \
h = {'': '127.0.0.1', '0.0.0.0': '127.0.0.1', '::': '::1'}.get(s.listen_host, s.listen_host); \
h = '[' + h + ']' if ':' in h else h; \
r.build_opener(r.ProxyHandler({})).open(f'http://{h}:{s.listen_port}/livez', timeout=2)"]

ENTRYPOINT ["/usr/local/bin/ql-bridge-entrypoint"]
CMD ["serve"]

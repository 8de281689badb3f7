# Image of fusecache: the fusecache CLI (FUSE file system), prefetchd and the CSI
# plugin (fusecache-csi). Build from the repository root:
#   docker build -t fusecache/fusecache-csi:0.1.0 .
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc pkg-config libfuse3-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.cfg README.md ./
COPY fusecache ./fusecache
COPY prefetchd ./prefetchd
COPY csi ./csi
RUN python -m venv /opt/fusecache \
 && /opt/fusecache/bin/pip install --no-cache-dir .

FROM python:3.11-slim-bookworm
# fuse3 brings fusermount3 (fusecache umount uses it) and libfuse3 for pyfuse3.
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/fusecache /opt/fusecache
ENV PATH=/opt/fusecache/bin:$PATH \
    PYTHONUNBUFFERED=1
# The node plugin runs as root (privileged) for mount(2); the controller overrides
# the user in its pod's securityContext.
ENTRYPOINT ["fusecache-csi"]
CMD ["--help"]

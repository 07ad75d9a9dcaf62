# Trainyard server image (docs/operator.md#container).
#
#   docker build -t trainyard --build-arg VERSION=$(git describe --always) .
#   docker run -d -p 7070:7070 -v trainyard-data:/var/lib/trainyard trainyard
#   docker exec <container> cat /var/lib/trainyard/admin-token
#
# The server runs as an unprivileged user, so it cannot run jobs as
# per-project users: isolation is off and every job runs as that user, with
# the container as the boundary (docs/security.md). Give each team its own
# container, or use the kubernetes or slurm executor for untrusted jobs.

# ---- build: a static binary (the SQLite store is pure Go, no cgo) ----
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/ ./cmd/trainyard ./cmd/trainyard-shim

# ---- run: Debian slim, for the python3 that jobs and the SDK use ----
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates python3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/trainyard trainyard \
 && install -d -o trainyard -g trainyard -m 0711 /var/lib/trainyard
COPY --from=build /out/trainyard /out/trainyard-shim /usr/local/bin/
# The Python SDK where the system python3 finds it (jobs do not inherit the
# server's environment, so PYTHONPATH would not reach them).
COPY sdk/python/trainyard /usr/lib/python3/dist-packages/trainyard
COPY sdk/python/trainyard_sdk.py /usr/lib/python3/dist-packages/
USER 10001:10001
VOLUME /var/lib/trainyard
EXPOSE 7070
# /readyz answers 200 once the store is reachable (docs/api.md).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7070/readyz', timeout=4)"]
ENTRYPOINT ["/usr/local/bin/trainyard"]
CMD ["server", "--listen", "0.0.0.0:7070", "--data", "/var/lib/trainyard"]

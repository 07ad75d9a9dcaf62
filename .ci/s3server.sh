#!/usr/bin/env bash
# Starts a local S3-compatible server for the tests of internal/blob/s3 and
# prints the line that points them at it:
#
#   eval "$(bash .ci/s3server.sh)"          # exports TRAINYARD_TEST_S3
#   bash .ci/s3server.sh /path/to/env-file   # writes the export line there
#
# The server is versitygw (Apache-2.0) with its posix backend, built from the
# Go module proxy into $(go env GOPATH)/bin on first use. It listens on
# 127.0.0.1:${TRAINYARD_S3_PORT:-9310} and keeps its data, keys, pid and log
# in ${TRAINYARD_S3_STATE:-${TMPDIR:-/tmp}/trainyard-s3server}. A second run
# reuses the binary and, when the server still answers, the server itself.
# Stop it with: kill "$(cat "$STATE/pid")".
set -euo pipefail

version=v1.8.0
port="${TRAINYARD_S3_PORT:-9310}"
state="${TRAINYARD_S3_STATE:-${TMPDIR:-/tmp}/trainyard-s3server}"
bin="$(go env GOPATH)/bin/versitygw"
stamp="$(go env GOPATH)/bin/.versitygw-version"
log() { echo "s3server: $*" >&2; }

answers() { curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/health" 2>/dev/null; }

emit() {
  local line="export TRAINYARD_TEST_S3=http://$(cat "$state/access"):$(cat "$state/secret")@127.0.0.1:$port/trainyard-test?create=true"
  if [ $# -gt 0 ]; then
    umask 077
    echo "$line" >"$1"
    log "wrote TRAINYARD_TEST_S3 to $1"
  else
    echo "$line"
  fi
}

mkdir -p "$state"
chmod 700 "$state"

if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null && answers; then
  log "reusing the server already running (pid $(cat "$state/pid")) on 127.0.0.1:$port"
  emit "$@"
  exit 0
fi

if [ ! -x "$bin" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$version" ]; then
  log "building versitygw $version (takes a few minutes the first time)"
  GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$version" >&2
  echo "$version" >"$stamp"
fi

if answers; then
  log "port $port on 127.0.0.1 is taken by another process; set TRAINYARD_S3_PORT to a free port"
  exit 1
fi

# Fresh data and credentials for each start.
rm -rf "$state/data" "$state/iam"
mkdir -p "$state/data" "$state/iam"
[ -s "$state/access" ] || head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/access"
[ -s "$state/secret" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/secret"
chmod 600 "$state/access" "$state/secret"

# Keys go through the environment, not the command line (ps shows that).
ROOT_ACCESS_KEY="$(cat "$state/access")" ROOT_SECRET_KEY="$(cat "$state/secret")" \
  nohup "$bin" --port "127.0.0.1:$port" --quiet --health /health --iam-dir "$state/iam" \
  posix "$state/data" >"$state/log" 2>&1 </dev/null &
echo $! >"$state/pid"

# Wait (at most 30 s) until it answers.
for _ in $(seq 1 150); do
  if answers; then
    log "versitygw $version ready on 127.0.0.1:$port (pid $(cat "$state/pid"), log $state/log)"
    emit "$@"
    exit 0
  fi
  if ! kill -0 "$(cat "$state/pid")" 2>/dev/null; then
    break
  fi
  sleep 0.2
done
log "versitygw did not answer on 127.0.0.1:$port within 30 s; its log ($state/log) ends with:"
tail -n 20 "$state/log" >&2 || true
kill "$(cat "$state/pid")" 2>/dev/null || true
exit 1

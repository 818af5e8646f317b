#!/usr/bin/env bash
# `make test`: lint while the local broker starts, then the whole suite in parallel processes, then the
# broker stops (only if this script started it). KAFKA_BOOTSTRAP_SERVERS set: that cluster, nothing started.
#
#   bash dev/suite.sh [PYTEST_ARGS...]      (PYTEST_WORKERS: processes, default 4)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
workers="${PYTEST_WORKERS:-4}"

started=0
broker_out="$(mktemp)"
cleanup() {
  if [[ $started == 1 ]]; then bash deploy/kafka/kafka.sh down >/dev/null 2>&1 || true; fi
  rm -f "$broker_out"
}
trap cleanup EXIT
if [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
  # A broker already running on these ports is used and left running.
  bash deploy/kafka/kafka.sh status >/dev/null 2>&1 || started=1
  bash deploy/kafka/kafka.sh up >"$broker_out" &
  broker=$!
fi

.venv/bin/ruff check processor schemas topics tests bench src dev
.venv/bin/mypy

if [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
  wait "$broker" || { echo "suite: the local Kafka broker did not start (bash deploy/kafka/kafka.sh logs)" >&2; exit 1; }
  export "$(grep '^KAFKA_BOOTSTRAP_SERVERS=' "$broker_out")"
fi
"$PY" -m pytest -n "$workers" "$@"

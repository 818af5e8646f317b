#!/usr/bin/env bash
# `make test`: the local broker starts while lint runs beside the tests, which run in parallel processes;
# the broker stops at the end (only if this script started it). KAFKA_BOOTSTRAP_SERVERS set: that
# cluster, nothing started. Fails when lint or any test fails.
#
#   bash dev/suite.sh [PYTEST_ARGS...]      (PYTEST_WORKERS: processes, default 6)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
workers="${PYTEST_WORKERS:-6}"

started=0
broker_out="$(mktemp)"
lint_out="$(mktemp)"
lint=""
cleanup() {
  [[ -n "$lint" ]] && kill "$lint" 2>/dev/null
  if [[ $started == 1 ]]; then bash deploy/kafka/kafka.sh down >/dev/null 2>&1 || true; fi
  rm -f "$broker_out" "$lint_out"
}
trap cleanup EXIT
if [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
  # A broker already running on these ports is used and left running.
  bash deploy/kafka/kafka.sh status >/dev/null 2>&1 || started=1
  bash deploy/kafka/kafka.sh up >"$broker_out" &
  broker=$!
fi
# Lint needs no broker and the tests need no lint: they overlap (its output is shown when it ends).
{ .venv/bin/ruff check processor schemas topics tests bench src dev && .venv/bin/ruff format --check --quiet . && .venv/bin/mypy; } >"$lint_out" 2>&1 &
lint=$!

if [[ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
  wait "$broker" || { echo "suite: the local Kafka broker did not start (bash deploy/kafka/kafka.sh logs)" >&2; exit 1; }
  export "$(grep '^KAFKA_BOOTSTRAP_SERVERS=' "$broker_out")"
fi
status=0
"$PY" -m pytest -n "$workers" "$@" || status=$?
lint_status=0
wait "$lint" || lint_status=$?
lint=""
cat "$lint_out"
if [[ $lint_status != 0 ]]; then echo "suite: lint failed (above)" >&2; fi
if [[ $status != 0 ]]; then exit "$status"; fi
exit "$lint_status"

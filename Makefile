# recurrence — every install step lives here so a fresh clone (and CI) needs nothing by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
OUT    := out/example

.PHONY: help venv run test test-fast lint schemas bench bench-kafka kafka-up kafka-down clean

help:
	@echo "make run        replay examples/rfc-minimum.jsonl embedded (no broker) and print statistics"
	@echo "make test       install everything, run lint + the whole suite (starts/stops a local Kafka)"
	@echo "make test-fast  the suite without the Kafka tests"
	@echo "make lint       ruff + mypy --strict"
	@echo "make schemas    regenerate schemas/json/*.json from the models"
	@echo "make bench      throughput and memory benchmark of the embedded runner"
	@echo "make bench-kafka  one worker end to end: entries/s and recovery after kill -9 (real broker)"
	@echo "make kafka-up / kafka-down   a single-node KRaft broker on 127.0.0.1"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	@rm -rf $(OUT) && mkdir -p $(OUT)
	@$(VENV)/bin/recurrence replay examples/rfc-minimum.jsonl --state $(OUT)/state --out $(OUT)/ledger.jsonl
	@echo "ledger: $(OUT)/ledger.jsonl ($$(wc -l < $(OUT)/ledger.jsonl) records)"
	@$(VENV)/bin/recurrence stats --state $(OUT)/state
	@echo "why was the RFC's recurrence counted?"
	@$(VENV)/bin/recurrence explain "$$($(PY) -c 'import json,sys; print(next(r["observation_id"] for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "recurred"))' $(OUT)/ledger.jsonl)" --state $(OUT)/state

lint: $(STAMP)
	$(VENV)/bin/ruff check processor schemas topics tests bench recurrence
	$(VENV)/bin/mypy

test: $(STAMP) lint
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m "not kafka"

schemas: $(STAMP)
	$(PY) -m recurrence.schemas.export

bench: $(STAMP)
	$(PY) bench/replay_bench.py

bench-kafka: $(STAMP)
	$(PY) bench/kafka_bench.py

kafka-up:
	@bash deploy/kafka/kafka.sh up

kafka-down:
	@bash deploy/kafka/kafka.sh down

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache

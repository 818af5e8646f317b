# recurrence — every install step lives here so a fresh clone (and CI) needs nothing by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
OUT    := out/example
# The tests start the CLI a few hundred times: each start reads cached bytecode instead of compiling
# ~70 modules again (~70 ms), and pytest keeps its rewritten test modules (__pycache__ is ignored by git).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help venv run test test-cluster test-fast lint schemas bench bench-kafka kafka-up kafka-down tools browser clean releases fixture

help:
	@echo "make run        replay examples/rfc-minimum.jsonl embedded (no broker) and print statistics"
	@echo "make test       install everything, run lint + the whole suite (starts/stops a local Kafka)"
	@echo "make test-cluster  the secured-broker and three-node tests (tests/cluster; .ci/run runs them too)"
	@echo "make test-fast  the suite without the Kafka, browser and wheel tests (2 processes)"
	@echo "make lint       ruff check + ruff format --check + mypy --strict"
	@echo "make schemas    regenerate schemas/json/*.json from the models"
	@echo "make bench      embedded replay vs its validation limit, the 1M cost curve (tables into docs/performance.md)"
	@echo "make bench-kafka  worker vs embedded (both guarantees), 2 workers vs 1, then recovery after kill -9 (real broker)"
	@echo "make kafka-up / kafka-down   a single-node KRaft broker on 127.0.0.1 (kafka.sh up cluster|secure: the others)"
	@echo "make tools      promtool and kubeconform into .cache/bin, Debian's chromium (tests that need them skip without)"
	@echo "make releases   the previous release, built from git into .cache/releases (the rolling-upgrade test's old worker)"
	@echo "make fixture RELEASE=REF   the upgrade fixture of a release (tests/fixtures/upgrade; docs/upgrading.md)"

$(STAMP): pyproject.toml dev/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@# Up to 1.0.0 the distribution was named recurrence: a venv from then holds its stale editable install.
	@$(PY) -m pip uninstall -q -y recurrence >/dev/null 2>&1 || true
	@$(PY) -m pip install -q -e '.[test]'
	@# The tests' and benchmarks' shared kit (dev/devkit): in the venv, never in the product's wheel.
	@$(PY) -m pip install -q -e dev
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	@rm -rf $(OUT) && mkdir -p $(OUT)
	@$(VENV)/bin/recurrence replay examples/rfc-minimum.jsonl --state $(OUT)/state --out $(OUT)/ledger.jsonl
	@echo "ledger: $(OUT)/ledger.jsonl ($$(wc -l < $(OUT)/ledger.jsonl) records)"
	@$(VENV)/bin/recurrence stats --state $(OUT)/state
	@echo "why was the RFC's recurrence counted?"
	@$(VENV)/bin/recurrence explain "$$($(PY) -c 'import json,sys; print(next(r["observation_id"] for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "recurred"))' $(OUT)/ledger.jsonl)" --state $(OUT)/state
	@echo "the same on a page: $(VENV)/bin/recurrence serve --state $(OUT)/state (it prints the page's URL)"
	@echo "recurrence is in $(VENV)/bin: 'source $(VENV)/bin/activate' puts it on PATH for the README's commands"

lint: $(STAMP)
	$(VENV)/bin/ruff check processor schemas topics tests bench src dev
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/mypy

# Lint beside every test, in PYTEST_WORKERS processes (6), once the broker has started (dev/suite.sh).
test: $(STAMP) tools releases
	@bash dev/suite.sh -m "not cluster"

# The brokers a platform team runs (kafka.sh up secure / up cluster, started and stopped by the tests):
# least-privilege principals, every diagnosis, broker and worker crashes, a rolling restart.
test-cluster: $(STAMP)
	$(PY) -m pytest -m cluster tests/cluster

# The inner loop: what needs no broker, no browser and no wheel build (make test runs those too).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not kafka and not cluster and not browser and not wheel" -n 2

schemas: $(STAMP)
	$(PY) -m recurrence_ledger.schemas.export

bench: $(STAMP)
	@$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/replay_bench.py

bench-kafka: $(STAMP)
	$(PY) bench/kafka_bench.py --compare --entries 50000
	$(PY) bench/kafka_bench.py

# Checkers the Kafka tests run when present: promtool (`promtool check metrics` on a live
# worker) from Debian's prometheus package, only the binary extracted (the package would
# install a service), and kubeconform (the k8s example) from the Go module proxy. Best
# effort: without apt or Go the tests that need them skip with a reason.
TOOLS          := .cache/bin
KUBECONFORM_V  := v0.7.0

K8S_SCHEMAS    := .cache/k8s-schemas
K8S_VERSION    := v1.33.0

tools: $(TOOLS)/promtool $(TOOLS)/kubeconform $(K8S_SCHEMAS)/$(K8S_VERSION)-local-strict browser

# The page's browser tests drive Debian's headless Chromium through its chromedriver
# (Selenium is pointed at them; nothing downloads a browser). Installed with apt as root;
# elsewhere those tests skip and say so.
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      chromium chromium-driver >/dev/null 2>&1; } ; } || \
	  echo "make tools: chromium unavailable (needs apt as root); the browser tests will skip"

# kubeconform fetches schemas from the web by default; these come from PyPI's
# kubernetes-validate wheel instead, so the check runs offline.
$(K8S_SCHEMAS)/$(K8S_VERSION)-local-strict: | $(STAMP)
	@$(PY) -m pip download -q --no-deps kubernetes-validate==1.37.0 -d .cache/k8s-wheel >/dev/null 2>&1 && \
	  $(PY) deploy/k8s/fetch_schemas.py .cache/k8s-wheel/kubernetes_validate-1.37.0-py3-none-any.whl \
	  $(K8S_SCHEMAS) $(K8S_VERSION) \
	  || echo "make tools: Kubernetes schemas unavailable; the k8s test will skip"

$(TOOLS)/promtool:
	@mkdir -p $(TOOLS) .cache/promtool
	@cd .cache/promtool && { apt-get download prometheus >/dev/null 2>&1 || \
	  { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } && \
	  rm -rf x && dpkg-deb -x prometheus_*.deb x && cp x/usr/bin/promtool ../bin/promtool && rm -rf x prometheus_*.deb \
	  || echo "make tools: promtool unavailable (no apt/dpkg?); the promtool test will skip"

$(TOOLS)/kubeconform:
	@mkdir -p $(TOOLS)
	@command -v go >/dev/null 2>&1 && GOBIN=$(abspath $(TOOLS)) GOFLAGS=-mod=mod \
	  go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_V) \
	  || echo "make tools: kubeconform unavailable (no Go toolchain?); the k8s test will skip"

# Earlier releases built from this clone's git history (dev/devkit/releases.py): a few seconds each,
# kept in .cache/releases by commit. A shallow clone has no history: the upgrade test then skips.
releases: $(STAMP)
	@$(PY) -m devkit.releases || echo "make releases: unavailable; the rolling-upgrade test will skip"

# The state and ledger an earlier release writes over the fixture journal, for tests/embedded/test_upgrade_fixtures.py.
fixture: $(STAMP)
	@test -n "$(RELEASE)" || { echo "usage: make fixture RELEASE=<git ref of the release>"; exit 2; }
	@$(PY) -m devkit.fixtures "$(RELEASE)"

kafka-up:
	@bash deploy/kafka/kafka.sh up

kafka-down:
	@bash deploy/kafka/kafka.sh down

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache

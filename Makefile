# Two entry points that work on a fresh machine (Python 3.11, Java 17, Maven):
#   make demo   — local Kafka + simulated cluster + agents + worker, live attribution table
#   make test   — lint, types and the whole test suite on the real local Kafka
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: demo test lint typecheck unit integration clean kube-binaries dashboard manifests

$(BIN)/gpuattr: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

demo: $(BIN)/gpuattr
	$(BIN)/gpuattr demo $(ARGS)

# check-jsonschema pins a newer click than faust-streaming accepts: it gets a venv of its own
TOOLS  := .venv-tools/bin
$(TOOLS)/check-jsonschema:
	$(PYTHON) -m venv .venv-tools
	$(TOOLS)/pip install --quiet check-jsonschema==0.39.0

lint: $(BIN)/gpuattr $(TOOLS)/check-jsonschema
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(TOOLS)/check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml

typecheck: $(BIN)/gpuattr
	$(BIN)/mypy
	$(BIN)/mypy deploy/grafana/dashboard.py deploy/helm/render_kustomize.py

# the Grafana dashboard is code: regenerate its committed JSON and the chart's copy (tests fail
# when either is stale)
dashboard: $(BIN)/gpuattr
	$(BIN)/python deploy/grafana/dashboard.py --write

# the kustomize base is rendered from the Helm chart's defaults (tests fail when it is stale)
manifests: kube-binaries
	$(BIN)/python deploy/helm/render_kustomize.py

# the real-API-server tier's binaries: built once from the Go module proxy (minutes), then cached
kube-binaries: $(BIN)/gpuattr
	$(BIN)/gpuattr kube --build

test: lint typecheck kube-binaries
	$(BIN)/pytest $(ARGS)

unit: $(BIN)/gpuattr
	$(BIN)/pytest tests/unit $(ARGS)

clean:
	rm -rf $(VENV) .venv-tools .gpuattr .pytest_cache .mypy_cache .ruff_cache

# Two entry points that work on a fresh machine (Python 3.11, Java 17, Maven):
#   make demo   — local Kafka + simulated cluster + agents + worker, live attribution table
#   make test   — lint, types and the whole test suite on the real local Kafka
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: demo test lint typecheck unit integration clean

$(BIN)/gpuattr: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

demo: $(BIN)/gpuattr
	$(BIN)/gpuattr demo $(ARGS)

lint: $(BIN)/gpuattr
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/gpuattr
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest $(ARGS)

unit: $(BIN)/gpuattr
	$(BIN)/pytest tests/unit $(ARGS)

clean:
	rm -rf $(VENV) .gpuattr .pytest_cache .mypy_cache .ruff_cache

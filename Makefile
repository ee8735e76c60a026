# gpufleet: `make run` and `make test` are the two commands; both set everything up first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint fmt bench clean setup image

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	bash scripts/install-system-deps.sh
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	mkdir -p out
	$(BIN)/gpufleet simulate --scenario default --report out/report.html --json out/summary.json

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format src tests
	$(BIN)/ruff check --fix src tests

# The container image from Debian packages only (mmdebstrap base, cached in ~/.cache/gpufleet-image): IMAGE=...
image:
	bash scripts/image.sh build

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache

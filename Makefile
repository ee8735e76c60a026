# gpufleet: `make run` and `make test` are the two commands; both set everything up first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-unit test-integration test-e2e test-deploy lint fmt bench clean setup image native

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	bash scripts/install-system-deps.sh
	touch $(STAMP)

# The simulator's hot path compiled with mypyc beside its sources (src/gpufleet/_native.py says what and when it is
# used): rebuilt when a compiled source changed, else nothing to do. GPUFLEET_NATIVE_BUILD=0 skips it.
native: $(STAMP)
	$(BIN)/python scripts/build_native.py

setup: $(STAMP) native

run: $(STAMP) native
	mkdir -p out
	$(BIN)/gpufleet simulate --scenario default --report out/report.html --json out/summary.json

# Every lane runs on one worker more than the machine has cores (pytest-xdist; many tests wait on a server, a
# subprocess or a lock, so a third worker on 2 cores took the first lane from ~800 s to ~600 s, session 44;
# TEST_WORKERS=0 runs in this process, e.g. to debug). Tests go to
# the workers file by file, in collection order (deploy's image build starts first, the many small unit files
# fill in at the end), except that the files sharing one real kube-apiserver or moto server stay on one worker
# (tests/conftest.py: pytest_xdist_make_scheduler).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# With the native build in use, the tests marked source_only (they patch or subclass the source's internals) run
# after the others, in one more pytest run on the pure-Python modules (tests/conftest.py deselects them above).
SOURCE_LANE = if $(BIN)/python scripts/build_native.py --status | grep -q '^used'; then \
	GPUFLEET_NATIVE=0 $(PYTEST) -m source_only $(1); fi

# Lanes: unit (pure, seconds), integration (HTTP on SQLite + PostgreSQL, real servers on loopback: the API,
# kube-apiserver, moto), e2e (the CLI and the browser as a user runs them), deploy (below). `make test` runs all
# four in one pytest run (and the source-only tests in a second).
test: $(STAMP) native
	$(PYTEST)
	$(call SOURCE_LANE,tests/unit)

test-unit: $(STAMP) native
	$(PYTEST) tests/unit
	$(call SOURCE_LANE,tests/unit)

test-integration: $(STAMP) native
	$(PYTEST) tests/integration

test-e2e: $(STAMP) native
	$(PYTEST) tests/e2e

# deploy: the container image (podman), the manifests on a real API server, several API processes on PostgreSQL.
test-deploy: $(STAMP) native
	$(PYTEST) tests/deploy

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_unique_names.py src

fmt: $(STAMP)
	$(BIN)/ruff format src tests scripts
	$(BIN)/ruff check --fix src tests scripts

# The container image from Debian packages only (mmdebstrap base, cached in ~/.cache/gpufleet-image): IMAGE=...
image:
	bash scripts/image.sh build

clean:
	test ! -x $(BIN)/python || $(BIN)/python scripts/build_native.py --clean
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache

# Two commands set everything up on a fresh machine:
#   make demo   create .venv, install jaxfeed, run the main job
#   make test   create .venv if needed, install the dev extras, run the whole test suite
# The newest Python 3 here that the newest JAX supports (3.13 or 3.12: jax 0.12, flax 0.12.12),
# else 3.11 (jax 0.10.2, flax 0.12.8); constraints.txt pins each by python_version.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	$$p -c "" >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q -c constraints.txt

.PHONY: demo test test-min test-latest lint format bench bench-check install clean docs docs-browser docs-serve

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q --upgrade "pip>=24"

$(VENV)/.installed: $(PY) pyproject.toml constraints.txt
	$(PIP) -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) -e ".[dev]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed-dev
	$(PIP) -e ".[dev,bench]"
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed-dev
	$(PIP) -e ".[dev,docs]"
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	@echo "python: $$($(PY) --version) in $(VENV) (chosen from $(PYTHON); PYTHON=... to choose)"
	$(VENV)/bin/jaxfeed train

# Tests run in a random order (pytest-randomly), a new one each run: they must pass in any order.
# The order's seed is printed; `make test SEED=1234` runs that order again.
ifndef SEED
SEED := $(shell date +%s)
endif
# Three pytest workers on the two cores: many tests wait (signals, a lost process's heartbeat,
# subprocesses, servers) and a third worker uses the core a waiting one leaves (seed 15 on
# 2026-12-08: 583 s of pytest with three, 648 s with two); two where less than 12 GB of memory is
# free (a worker holds up to ~2.5 GB by the end)
WORKERS ?= $(shell awk '/^MemAvailable/ {print ($$2 > 12000000) ? 3 : 2}' /proc/meminfo 2>/dev/null || echo 2)

# compileall writes jaxfeed's bytecode once: where PYTHONDONTWRITEBYTECODE is set, each process
# the suite starts (a command run, a loader worker) compiled the modules it imports (0.3 CPU s).
test: $(VENV)/.installed-dev
	@echo "python: $$($(PY) --version) in $(VENV) (chosen from $(PYTHON); PYTHON=... to choose)"
	$(PY) -m ruff check src tests benchmarks tools conftest.py
	$(PY) -m ruff format --check src tests benchmarks tools conftest.py
	@echo "test order: random, seed $(SEED) (make test SEED=$(SEED) repeats it)"
	$(PY) -m compileall -q src/jaxfeed > /dev/null
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 -p randomly --randomly-seed=$(SEED)

# The fast tier (-m "not slow") on the declared floors and on the newest releases, each in a venv
# of its own: test-min installs constraints-min.txt (pyproject's floors, pinned exactly) on Python
# 3.11, the oldest the package supports; test-latest installs with no constraints at all, on the
# newest Python here. Both print the versions they resolved. FAST=... changes the selection.
MIN_PYTHON ?= python3.11
FAST ?= -m "not slow"
# test-latest: the newest Python here, including pyenv's installed versions that are not on PATH
# (the newest jax needs 3.12 or later; make test stays on PYTHON, where torch's CPU build is at
# hand for the parity tests against transformers).
LATEST_PYTHON ?= $(shell for p in python3.14 python3.13 python3.12 \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV) $(PYTHON); do \
	$$p -c "" >/dev/null 2>&1 && { echo $$p; break; }; done)

.venv-min/.installed-dev: pyproject.toml constraints-min.txt
	rm -rf .venv-min
	$(MIN_PYTHON) -m venv .venv-min
	.venv-min/bin/python -m pip install --disable-pip-version-check -q --upgrade "pip>=24"
	.venv-min/bin/python -m pip install --disable-pip-version-check -q -c constraints-min.txt -e ".[dev]"
	touch $@

.venv-latest/.installed-dev: pyproject.toml
	rm -rf .venv-latest
	$(LATEST_PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --disable-pip-version-check -q --upgrade "pip>=24"
	.venv-latest/bin/python -m pip install --disable-pip-version-check -q --upgrade -e ".[dev]"
	touch $@

RESOLVED := jax|jaxlib|flax|numpy|pyarrow|optax|orbax-checkpoint|matplotlib|pillow|datasets

test-min: .venv-min/.installed-dev
	@echo "python: $$(.venv-min/bin/python --version) in .venv-min (floors: constraints-min.txt)"
	@.venv-min/bin/python -m pip list --format=freeze | grep -iE "^($(RESOLVED))==" | tr '\n' ' '; echo
	.venv-min/bin/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=20 -p no:randomly $(FAST)

test-latest: .venv-latest/.installed-dev
	@echo "python: $$(.venv-latest/bin/python --version) in .venv-latest (no constraints)"
	@.venv-latest/bin/python -m pip list --format=freeze | grep -iE "^($(RESOLVED))==" | tr '\n' ' '; echo
	.venv-latest/bin/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=20 -p no:randomly $(FAST)

lint: $(VENV)/.installed-dev
	$(PY) -m ruff check src tests benchmarks tools conftest.py

format: $(VENV)/.installed-dev
	$(PY) -m ruff format src tests benchmarks tools conftest.py
	$(PY) -m ruff check --fix src tests benchmarks tools conftest.py

bench: $(VENV)/.installed-bench
	$(PY) benchmarks/formatting.py

# The quick benchmarks as ratios to peers measured in the same run, failing when one falls more
# than 20% below benchmarks/baseline.json (ARGS=--update records a new baseline, on purpose).
bench-check: $(VENV)/.installed-bench
	$(PY) -m jaxfeed.bench.check $(ARGS)

# The accelerator tier (tests/accelerator, marked `accelerator`; skipped by make test) on this
# machine's TPU or GPU, in one process: one program holds a TPU at a time, and the tests' helper
# processes run with JAX_PLATFORMS=cpu. ACCEL_PY=python3 runs it with a Python set up otherwise (a
# TPU machine: tools/tpu/run_accelerator_tests.sh). JAXFEED_ACCELERATOR_TESTS_ON_CPU=1 runs the
# tier on CPU (while writing its tests): make test-accelerator-cpu.
.PHONY: test-accelerator test-accelerator-cpu
ACCEL_PYTEST = -m pytest -q -m accelerator -p no:xdist -p no:randomly --durations=15 tests/accelerator
ifdef ACCEL_PY
test-accelerator:
	JAXFEED_TEST_ACCELERATOR=1 $(ACCEL_PY) $(ACCEL_PYTEST) $(ARGS)
else
test-accelerator: $(VENV)/.installed-dev
	JAXFEED_TEST_ACCELERATOR=1 $(PY) $(ACCEL_PYTEST) $(ARGS)
endif

test-accelerator-cpu: $(VENV)/.installed-dev
	JAXFEED_ACCELERATOR_TESTS_ON_CPU=1 $(PY) $(ACCEL_PYTEST) $(ARGS)

# Mutation testing (not part of make test): each bug of tools/mutation/mutations.py, applied to a
# copy of the tree, must make its targeted tests fail. ARGS="-k loader" runs a subset.
.PHONY: mutation
mutation: $(VENV)/.installed-dev
	$(PY) tools/mutation/run.py $(ARGS)

# The documentation site, built in strict mode (a warning, a broken link or a failing notebook
# fails it) into site/, then opened in headless Chromium (tests/docs/test_docs_site.py: screenshots in
# site/_screenshots/). The notebooks execute during the build (a minute or two).
docs: $(VENV)/.installed-docs docs-browser
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean
	JAXFEED_DOCS_SITE=site $(PY) -m pytest -q -p no:randomly -p no:cacheprovider tests/docs/test_docs_site.py

# Chromium for the browser check: Debian's package, installed where this runs as root with apt
# (CI); elsewhere the check is skipped when no chromium is found.
docs-browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "note: could not install chromium; the browser check will be skipped"; \
	else echo "note: no chromium (apt-get install chromium); the browser check will be skipped"; fi

# The same site served over HTTP with live reload (http://127.0.0.1:8000; PORT=... to change it).
# The built site/ also works opened from disk: site/index.html.
PORT ?= 8000
docs-serve: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:$(PORT)

clean:
	rm -rf $(VENV) .venv-min .venv-latest .pytest_cache .ruff_cache build site src/*.egg-info

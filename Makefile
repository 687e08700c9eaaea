# Two entry points, each self-contained on a fresh machine with Python >= 3.11 and make:
#   make demo   -- installs the package in .venv and runs the demo on the embedded real data
#   make test   -- installs the test extras in .venv and runs the test suite (incl. doctests, notebooks)
#   make docs   -- installs the docs extras in .venv and builds the documentation into docs/_build/html
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

# Small dense linear algebra: one BLAS thread avoids thread-pool stalls (see README).
export OPENBLAS_NUM_THREADS ?= 1
# XLA:CPU's multithreaded Eigen pool can wedge on vmapped loop graphs (see README).
export XLA_FLAGS ?= --xla_cpu_multi_thread_eigen=false

.PHONY: demo test bench docs notebooks clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.stamp-base: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[test,notebooks,optuna]'
	touch $@

$(VENV)/.stamp-docs: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[docs,optuna]'
	touch $@

$(VENV)/.stamp-bench: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[test,notebooks,optuna,bench]'
	touch $@

# The demo keeps its compiled programs in JAX's persistent compilation cache inside the venv:
# a second `make demo` skips compilation.
demo: $(VENV)/.stamp-base
	JAX_COMPILATION_CACHE_DIR=$(abspath $(VENV))/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
	JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 $(BIN)/python -m jaxstop.demo

# Two worker processes (pytest-xdist), one test file each at a time: the suite is compile-bound and
# single-threaded per process, so two cores halve its time. The 25 slowest tests are listed at the end.
test: $(VENV)/.stamp-test
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=25

bench: $(VENV)/.stamp-bench
	$(BIN)/python benchmarks/bench_gp.py

# Warnings are errors; --keep-going reports all of them before failing.
docs: $(VENV)/.stamp-docs
	$(BIN)/python -m sphinx -b html -W --keep-going -q docs docs/_build/html

# Re-executes the notebooks and saves them with their figures (commit the result).
notebooks: $(VENV)/.stamp-test
	$(BIN)/python notebooks/execute.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build

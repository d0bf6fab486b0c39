# Two commands for a newcomer:  `make demo`  and  `make test`.
# Both create .venv from a Python >= 3.12 found on PATH (see scripts/find-python.sh), install
# pymc_ibp with its extras, and run. A second run reuses the environment.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.pymc_ibp-installed
OUT     ?= demo_output
PYTEST_ARGS ?=
# the tests run on two processes (pytest-xdist, work stealing: the long statistical tests do not
# queue behind each other); PYTEST_WORKERS=0 runs them in this process, e.g. to debug one
PYTEST_WORKERS ?= 2
PYTEST  := $(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal

.PHONY: demo test test-slow test-all lint bench bench-quick bench-long docs clean venv

venv: $(STAMP)

# numba's on-disk cache (cache=True) is keyed on each function's own file: a kernel that calls a
# function of another module keeps the stale machine code when only that module changes. Any
# change to the package's sources therefore clears the package's numba cache before a run.
NUMBA_STAMP := $(VENV)/.pymc_ibp-numba-sources
$(NUMBA_STAMP): $(shell find pymc_ibp -name '*.py') | $(STAMP)
	@find pymc_ibp -name '*.nbi' -delete -o -name '*.nbc' -delete
	@touch $@

$(STAMP): pyproject.toml scripts/find-python.sh
	@PYBIN=$$(scripts/find-python.sh) || exit 1; \
	  if [ ! -x $(PY) ]; then echo "creating $(VENV) with $$PYBIN"; "$$PYBIN" -m venv $(VENV) || exit 1; fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[plots,test]"
	@touch $(STAMP)

demo: $(STAMP) $(NUMBA_STAMP)
	$(PY) examples/block_images.py --out $(OUT)

test: $(STAMP) $(NUMBA_STAMP)
	$(PYTEST) $(PYTEST_ARGS)

# ruff (configured in pyproject.toml: line length 100, pycodestyle, pyflakes, isort, pyupgrade, bugbear)
lint: $(STAMP)
	$(PY) -m ruff check pymc_ibp tests benchmarks examples

test-slow: $(STAMP) $(NUMBA_STAMP)
	$(PYTEST) -m slow $(PYTEST_ARGS)

test-all: $(STAMP) $(NUMBA_STAMP)
	$(PYTEST) -m "slow or not slow" $(PYTEST_ARGS)

bench: $(STAMP) $(NUMBA_STAMP)
	$(PY) -m benchmarks.run_all

bench-quick: $(STAMP) $(NUMBA_STAMP)
	$(PY) -m benchmarks.run_all --quick

# about an hour: long chains of PyMC's default sampler for the ESS/s comparison
bench-long: $(STAMP) $(NUMBA_STAMP)
	$(PY) -m benchmarks.run_all --only mixing_long

# docs: installs the docs extra once (re-installed when pyproject.toml changes), then builds the
# HTML offline with warnings as errors (see docs/README.md)
docs: $(STAMP)
	@if [ ! -f $(VENV)/.pymc_ibp-docs-installed ] || [ pyproject.toml -nt $(VENV)/.pymc_ibp-docs-installed ]; then \
	  echo "installing the docs extra into $(VENV)"; \
	  $(PY) -m pip install --quiet -e ".[docs]" && touch $(VENV)/.pymc_ibp-docs-installed || exit 1; \
	fi
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache

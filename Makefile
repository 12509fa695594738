# The README's two commands: `make demo` and `make test`. Every target installs what it needs
# into .venv from the checkout (pinned by requirements.lock), so they work on a fresh machine;
# test-newest alone uses .venv312 (Python 3.12, unpinned).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS := dev,bench,test,atari,llm

# test-newest: the same extras on Python 3.12, unpinned (the newest releases pip resolves), in
# .venv312. `python3.12` on PATH may be a pyenv shim that fails unless 3.12 is activated, so
# PYTHON312 is the first of these that runs Python 3.12 (override: make test-newest PYTHON312=...).
PYTHON312 ?= $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python),\
  $(if $(shell $(p) -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && echo ok),$(p))))
VENV312  := .venv312
PY312    := $(VENV312)/bin/python
STAMP312 := $(VENV312)/.installed
# The versions test-newest prints before its tests.
NEWEST_PINS := jax|jaxlib|flax|optax|numpy|envpool|ale-py|orbax-checkpoint|chex|transformers
# test-tunix: Google's Tunix (the tunix extra) on the same Python 3.12, in its own .venv-tunix:
# google-tunix needs transformers 5, which the llm extra and requirements.lock exclude.
VENVTUNIX  := .venv-tunix
PYTUNIX    := $(VENVTUNIX)/bin/python
STAMPTUNIX := $(VENVTUNIX)/.installed
TUNIX_PINS := google-tunix|jax|jaxlib|flax|optax|transformers

.PHONY: demo test test-newest test-tunix test-slow bench lint docs lock clean

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "hyperx needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements.lock -e ".[$(EXTRAS)]"
	touch $(STAMP)

$(STAMP312): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "test-newest needs Python 3.12: make test-newest PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv $(VENV312)
	$(PY312) -m pip install --quiet --upgrade pip
	$(PY312) -m pip install --quiet --upgrade --upgrade-strategy eager -e ".[$(EXTRAS)]"
	touch $(STAMP312)

$(STAMPTUNIX): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "test-tunix needs Python 3.12: make test-tunix PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv $(VENVTUNIX)
	$(PYTUNIX) -m pip install --quiet --upgrade pip
	$(PYTUNIX) -m pip install --quiet -e ".[tunix,dev]"
	touch $(STAMPTUNIX)

demo: $(STAMP)
	$(VENV)/bin/hyperx demo

# Two workers (pytest-xdist): the suite is mostly XLA compiles, which use one core each.
# tests/conftest.py shares one compilation cache per run among the workers and asks XLA:CPU
# for unoptimised machine code in this default suite (about a quarter less time).
test: $(STAMP)
	$(PY) -m pytest -n 2 --durations=15 -q

# The newest releases on Python 3.12, over the subset in tests/newest_subset.txt (it exercises every
# module of hyperx/; about 8 minutes on 2 cores, the install included).
test-newest: $(STAMP312)
	$(PY312) -m pip freeze | grep -i -E '^($(NEWEST_PINS))=='
	$(PY312) -m pytest -n 2 --durations=15 -q $$(grep -v -E '^\s*(#|$$)' tests/newest_subset.txt)

# hyperx.llm.tunix against Tunix's own loss functions and learner (tests/llm/test_tunix.py, its
# slow end-to-end test included): 2 min 17 s on 2 cores from an empty .venv-tunix with pip's cache
# warm (the tests 65 s); a fresh machine also downloads Tunix's dependency set.
test-tunix: $(STAMPTUNIX)
	$(PYTUNIX) -m pip freeze | grep -i -E '^($(TUNIX_PINS))=='
	$(PYTUNIX) -m pytest -n 1 --durations=10 -q -m "slow or not slow" tests/llm/test_tunix.py

test-slow: $(STAMP)
	$(PY) -m pytest -n 2 -m slow --durations=15 -q

# The speed benchmarks (a few minutes, run them alone); the quality studies
# (bandit_ensemble_size, bandit_neural, deepsea_scaling) take longer: see each script's --help.
bench: $(STAMP)
	$(PY) benchmarks/linear_core.py
	$(PY) benchmarks/llm_corrections.py
	$(PY) benchmarks/bandit_throughput.py
	$(PY) benchmarks/deepsea_throughput.py

lint: $(STAMP)
	$(VENV)/bin/ruff check hyperx tests benchmarks

lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -v '^hyperx-rl' > requirements.lock

clean:
	rm -rf $(VENV) $(VENV312) $(VENVTUNIX) .pytest_cache

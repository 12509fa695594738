# The README's two commands: `make demo` and `make test`. Every target installs what it needs
# into .venv from the checkout (pinned by requirements.lock), so they work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS := dev,bench,test,atari,llm

.PHONY: demo test test-slow bench lint docs lock clean

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "hyperx needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements.lock -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hyperx demo

# Two workers (pytest-xdist): the suite is mostly XLA compiles, which use one core each.
test: $(STAMP)
	$(PY) -m pytest -n 2 --durations=15 -q

test-slow: $(STAMP)
	$(PY) -m pytest -m slow --durations=15 -q

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
	rm -rf $(VENV) .pytest_cache

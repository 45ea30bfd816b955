# fleet_marl — the two commands of the README, and a few helpers.
# Every target sets up .venv itself if it is missing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: train test install clean estimate

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch is pinned to the CPU wheel these machines provide; an unpinned torch pulls GBs of CUDA packages.
	$(PY) -m pip install "torch==2.13.0"
	$(PY) -m pip install -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

## make train: the main job (until the RLlib trainer lands: a kernel sweep over the catalog)
train: $(STAMP)
	$(VENV)/bin/fleet-marl train

## make test: the whole test suite
test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis

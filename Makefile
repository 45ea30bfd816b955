# fleet_marl — the two commands of the README, and a few helpers.
# Every target sets up .venv itself if it is missing.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: train test test-fast lint bench install clean baselines docs demo wheel-smoke docker-lock browser

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no python3.11 or python3 on PATH; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || { echo "error: $(PYTHON) is older than Python 3.11; run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch is pinned to the CPU wheel these machines provide; an unpinned torch pulls GBs of CUDA packages.
	$(PY) -m pip install "torch==2.13.0"
	# the core plus the extras make train and make test use (pyproject.toml, docs/install.md):
	# rllib: fleet-marl train and compare (Ray, torch, matplotlib); torchrl: fleet_marl.torchrl and train --engine torchrl; plot: rgb_array frames, demo --gif, sweep's plot;
	# bench: the reference env of fleet-marl bench; openenv: fleet-marl serve and fleet_marl.openenv (its tests skip without it);
	# test: pytest, hypothesis and build (the sdist and wheel of .ci/wheel_smoke);
	# sb3, pufferlib, benchmarl: the outside-client adapters and their matrix (tests/test_client_matrix.py); llm: TRL's GRPOTrainer against fleet-marl serve (tests/test_trl_grpo.py)
	$(PY) -m pip install -e ".[test,rllib,torchrl,bench,openenv,plot,sb3,pufferlib,benchmarl,llm]" "torch==2.13.0"
	# pufferlib-core pins torch==2.9.0 and benchmarl torchrl<0.12: both go in without their dependencies (the extras above hold what they use)
	$(PY) -m pip install --no-deps "pufferlib-core==3.0.23" "benchmarl==1.5.2"
	# Debian's chromium and chromium-driver for the viewer's browser test (make browser; without root or sudo -n the test names what to install)
	-@$(MAKE) --no-print-directory browser
	@touch $(STAMP)

install: $(STAMP)

## make train: the main job. PPO tenants on easy with TorchRL (700 iterations, the same run every time: 5.8 min of training here, then seconds of grading), graded against the reference policies
train: $(STAMP)
	$(VENV)/bin/fleet-marl train --overwrite

## make test: the whole test suite
test: $(STAMP)
	$(PY) -m pytest -q

## make browser: Debian's chromium and chromium-driver for tests/test_viewer_browser.py (Selenium drives them; no browser download), with apt-get when missing (root or sudo -n); make install runs it
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; } || \
	  { echo "error: the viewer's browser test needs chromium and chromium-driver: apt-get install chromium chromium-driver (docs/viewer.md)"; exit 1; }

## make test-fast: the core's tests and the doctests, without the tests marked slow (the adapters, the training studies, the server run for real, the longest cases), on two pytest-xdist workers; about 2 minutes on 2 cores, CI still runs make test
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2

## make lint: ruff (lint and format check) over fleet_marl, tests and experiments, and mypy over fleet_marl, zero findings (.ci/run runs it before the tests; .pre-commit-config.yaml runs the same on commit)
lint: $(STAMP)
	$(VENV)/bin/ruff check fleet_marl tests experiments
	$(VENV)/bin/ruff format --check fleet_marl tests experiments
	$(VENV)/bin/mypy

## make baselines: every reference policy and the open-loop baseline on every task, 10 seeds (100 on tiny); saves docs/data/baselines.json and publishes README.md and docs/ from the data
baselines: $(STAMP)
	$(VENV)/bin/fleet-marl baselines --seed 0

## make docs: every generated block of README.md and docs/ (tables, learned rows, study reports) from the data in docs/data/
docs: $(STAMP)
	$(VENV)/bin/fleet-marl docs

## make demo: one rendered episode of easy with precision_expert
demo: $(STAMP)
	$(VENV)/bin/fleet-marl demo --every 10

## make bench: fleet-marl bench (env steps, batched kernel, overheads, memory, reference env)
bench: $(STAMP)
	$(VENV)/bin/fleet-marl bench

## make wheel-smoke: build the sdist and the wheel, install the wheel with no extras in a fresh venv and run the core from outside the checkout (CI runs it after make test)
wheel-smoke: $(STAMP)
	.ci/wheel_smoke

## make docker-lock: re-pin docker/requirements.txt (the core and the [openenv] extra, resolved in a fresh venv) for the Dockerfile
docker-lock:
	rm -rf build/docker-lock && $(PYTHON) -m venv build/docker-lock
	build/docker-lock/bin/pip install -q ".[openenv]" setuptools wheel
	{ sed -n '1,3p' docker/requirements.txt; build/docker-lock/bin/pip freeze --all --exclude fleet-marl --exclude pip; } > build/docker-lock.txt && mv build/docker-lock.txt docker/requirements.txt

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis

# muster: the two commands of the quick start are `make demo` and `make test`.
# The venv's interpreter: the system's own Python (Debian's /usr/bin/python3) where it is 3.11
# or newer and can make a venv, else python3 from PATH; `make PY=...` chooses another. Debian
# builds its Python with profile-guided optimisation and LTO: each command starts 0.4-0.7 ms
# sooner than on a plain source build such as pyenv's (README, Benchmarks).
SYSTEM_PY := /usr/bin/python3
ifeq ($(origin PY),undefined)
PY := $(shell $(SYSTEM_PY) -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' \
	>/dev/null 2>&1 && echo $(SYSTEM_PY) || echo python3)
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAUNCHERS := $(VENV)/.launchers
TORCHX := $(VENV)/torchx
STATE ?= $(CURDIR)/.muster-demo
PYTEST_ARGS ?=
# Real Slurm for `make bench`'s side-by-side table, where the workplace has its anchor
# (setup.sh starts it); empty: muster next to the stored Slurm figures.
SLURM_ANCHOR ?= $(wildcard $(CURDIR)/../shared/tools/slurm-anchor)

.PHONY: install test test-unit test-fast demo down bench lint dist clean

install: $(STAMP) $(LAUNCHERS) $(TORCHX)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, as the CPU build on this machine's disk: lightning-fabric (a client the e2e
	# tests drive) would otherwise pull a CUDA build of several GB.
	$(BIN)/pip install --quiet torch==2.13.0
	# The runtime install is lean (`pip install muster-wlm`); the tests and the demo take the extras.
	$(BIN)/pip install --quiet -e '.[test,plot,pg,clients,e2e]'
	# Commands read .pyc files even where writing bytecode is turned off: compile once here.
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

# The Slurm commands start without site processing: launchers that name where muster is
# imported from replace pip's console scripts (src/muster/cli/launchers.py; -I: whatever
# PYTHONPATH says, the launchers name this checkout's install).
$(LAUNCHERS): $(STAMP) src/muster/cli/launchers.py src/muster/cli/client.c
	$(BIN)/python -I -m muster.cli.launchers $(BIN)
	touch $(LAUNCHERS)

# torchx, a client the e2e tests drive (tests/e2e/test_torchx.py), pins urllib3 below 1.27
# while the test tools need urllib3 2: it gets a directory of its own, put in front of the
# venv's packages only for the torchx commands that test runs.
$(TORCHX)/.installed: $(STAMP)
	$(BIN)/pip install --quiet --no-warn-conflicts --target $(TORCHX) torchx==0.7.0
	touch $@

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -m 'not e2e' $(PYTEST_ARGS)

demo: install
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/muster demo --state-dir $(STATE)

down: install
	$(BIN)/muster down --state-dir $(STATE)

bench: install
	$(BIN)/python -m compileall -q src
	SLURM_ANCHOR=$(SLURM_ANCHOR) PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python benchmarks/run.py

lint: install
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy

# The wheel and the sdist of this commit, versioned from git (docs/decisions/0002-versions.md);
# the wheel carries the systemd units (share/muster/systemd).
dist: install
	rm -rf dist
	$(BIN)/python -c 'import sys; from hatchling.build import build_sdist; build_sdist("dist")'
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	ls dist

clean:
	-$(BIN)/muster down --state-dir $(STATE) 2>/dev/null
	rm -rf $(VENV) $(STATE) build dist

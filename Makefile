# Two commands for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ./var

.PHONY: run test bench install clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[images]'
	touch $@

$(VENV)/.test-installed: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[images,test]'
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/contentnode serve --data-dir $(DATA_DIR)

test: $(VENV)/.test-installed
	$(PY) -m pytest -q tests

bench: $(VENV)/.test-installed
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info

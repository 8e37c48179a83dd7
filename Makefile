# Squall — every target sets itself up: a fresh machine needs only `make run` or `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SF ?= 1
DATA ?= data/sf$(SF)
WORKERS ?=

.PHONY: run test bench venv data lint fmt clean

$(VENV)/.stamp: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pandas]'
	touch $@

venv: $(VENV)/.stamp

data: venv
	test -f $(DATA)/lineitem.parquet || $(VENV)/bin/squall gen-tpch --sf $(SF) --out $(DATA)

run: data
	$(PY) -m squall.demo --data $(DATA) $(if $(WORKERS),--workers $(WORKERS),)

test: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -q

bench: data
	$(PY) benchmarks/tpch.py --sf $(SF) --data $(DATA) $(if $(WORKERS),--workers $(WORKERS),)

lint: venv
	$(VENV)/bin/ruff check .

fmt: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# Squall — every target sets itself up: a fresh machine needs only `make run` or `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SF ?= 1
DATA ?= data/sf$(SF)
WORKERS ?=
ARCH ?= arm64
CONTEXT ?=
CDK_ARGS ?=
CDK := cd infra/cdk && JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 npx --yes aws-cdk@2
CHECKOV_VENV := build/checkov-venv

.PHONY: run test check-arch bench bench-peers bench-lake bench-write bench-service bench-tpcds bench-scale venv data lint fmt clean layer stage synth deploy bootstrap checkov-venv

# `make run` needs only the engine: .stamp installs the core dependencies. Everything else (test tools,
# pandas, the CDK and Powertools) goes on top in .stamp-dev, for test/lint/fmt and the deploy targets.
$(VENV)/.stamp: pyproject.toml
	$(PY) -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)  # new, or half-made
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp
	$(PY) -m pip install -q -e '.[test,pandas,infra,aws]'
	touch $@

venv: $(VENV)/.stamp

venv-dev: $(VENV)/.stamp-dev

data: venv
	test -f $(DATA)/lineitem.parquet || $(VENV)/bin/squall gen-tpch --sf $(SF) --out $(DATA)

run: data
	$(PY) -m squall.demo --data $(DATA) $(if $(WORKERS),--workers $(WORKERS),)

test: venv-dev checkov-venv native browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MAKE) --no-print-directory check-arch
	$(VENV)/bin/pytest -q --durations=30

# layering (import-linter, .importlinter: the top-level layers and the driver's stages), no import cycle
# between modules or between packages, mypy on the library — all on the package tree as Python sees it
# (tools/srcview.py mirrors pyproject's package-dir mapping) — and no function over 80 lines in the driver
# or the service
check-arch: venv
	$(PY) tools/srcview.py build/srcview >/dev/null
	cd build/srcview && PYTHONPATH=. ../../$(VENV)/bin/lint-imports --config ../../.importlinter --no-cache
	$(PY) tools/check_cycles.py build/srcview
	cd build/srcview && ../../$(VENV)/bin/mypy -p squall --config-file ../../pyproject.toml
	$(PY) tools/check_function_length.py

bench: data
	$(PY) benchmarks/tpch.py --sf $(SF) --data $(DATA) $(if $(WORKERS),--workers $(WORKERS),)

# TPC-H on Squall and the engines a user would pick instead (DuckDB, Polars, DataFusion, Sail, chDB), every
# answer checked against DuckDB; the peers extra goes into the venv on first use. WORKERS=1,2 gives a column each.
$(VENV)/.stamp-peers: $(VENV)/.stamp
	$(PY) -m pip install -q -e '.[peers]'
	touch $@

bench-peers: data $(VENV)/.stamp-peers
	$(PY) benchmarks/peers.py --sf $(SF) --data $(DATA) $(if $(WORKERS),--workers $(WORKERS),)

# lake scans (benchmarks/lake.py, LAKE_SF=0.1): small files, Iceberg and Delta vs DuckDB, deltalake and Polars (installed here)
bench-lake: venv
	$(PY) -m pip install -q -e '.[lake]' 'polars>=2.1'
	$(PY) benchmarks/lake.py --sf $(or $(LAKE_SF),0.1) $(if $(WORKERS),--workers $(WORKERS),)

# writes (benchmarks/write.py): COPY of all of lineitem (plain and partitioned by year) and of nation at SF$(SF),
# Squall at W=1,2 (WORKERS=1,2,4 for others) vs DuckDB's COPY, outputs read back and checked, driver/worker peak RSS
bench-write: data
	$(PY) benchmarks/write.py --data $(DATA) $(if $(WORKERS),--workers $(WORKERS),) $(if $(REPEAT),--repeat $(REPEAT),)

# the shared service (benchmarks/service.py): squall serve --data $(DATA) --workers $(or $(WORKERS),2) under many
# clients — short-query latency alone and behind two long queries, throughput of 8 and 16 clients against DuckDB,
# /healthz during a 100k-element IN list, cancel latency, resets/429/5xx counted; every answer checked
bench-service: data venv-dev
	$(PY) benchmarks/service.py --data $(DATA) --workers $(or $(WORKERS),2) $(if $(REPEAT),--repeat $(REPEAT),)

# TPC-DS: data/tpcds-sf$(SF) is generated on first use (its own venv build/tpcds-venv, from PyPI)
bench-tpcds: venv
	$(PY) benchmarks/tpcds.py --sf $(SF) --workers $(if $(WORKERS),$(WORKERS),3)

# the scale model (issue 15): validated against real lambda-local + moto runs here (SF0.1), then the TPC-H
# sweep SF100/1000/10000 x W=16..4096 (tables and charts in benchmarks/scale-out/)
$(VENV)/.stamp-bench: $(VENV)/.stamp-dev
	$(PY) -m pip install -q -e '.[bench]'
	touch $@

bench-scale: $(VENV)/.stamp-bench
	test -f data/sf0.1/lineitem.parquet || $(VENV)/bin/squall gen-tpch --sf 0.1 --out data/sf0.1
	test -f data/sf1/lineitem.parquet || $(VENV)/bin/squall gen-tpch --sf 1 --out data/sf1
	$(PY) benchmarks/scale_validate.py --workers 4,8,16 --queries 1,3,6,12 --sf 0.1 --data data \
		--json benchmarks/scale-out/validation-runs.json | tee benchmarks/scale-out/validation.txt
	$(PY) benchmarks/scale.py --data data

lint: venv-dev
	$(VENV)/bin/ruff check .

fmt: venv-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# --- deploy into your own AWS account (infra/README.md) ---------------------------------------------
# checkov pins old boto3/networkx/packaging: it gets its own venv, used by tests/infra via subprocess.
$(CHECKOV_VENV)/.stamp:
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q --disable-pip-version-check 'checkov==3.3.30'
	touch $@

checkov-venv: $(CHECKOV_VENV)/.stamp

layer: venv-dev
	$(PY) infra/layer/build_layer.py $(foreach a,$(ARCH),--arch $(a))

build/layer-%.zip: pyproject.toml infra/layer/build_layer.py | venv-dev
	$(PY) infra/layer/build_layer.py --arch $*

stage: venv-dev
	$(PY) infra/cdk/squall_infra/staging.py build/function-code

synth: venv-dev
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 $(PY) infra/cdk/app.py -c architecture=$(ARCH) \
		$(if $(wildcard build/layer-$(ARCH).zip build/layer-$(ARCH)),,-c layerPath=placeholder) $(CONTEXT)

bootstrap: venv-dev
	$(CDK) bootstrap $(CDK_ARGS)

deploy: venv-dev build/layer-$(ARCH).zip
	$(CDK) deploy -c architecture=$(ARCH) $(CONTEXT) $(CDK_ARGS)

.PHONY: browser
# --- web console test: Debian's chromium + chromedriver (selenium drives them; no browser is downloaded) ---
# `browser` apt-installs them when missing (root); otherwise it says what to install and the test skips.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "browser: chromium and chromedriver are missing; as root: apt-get install chromium chromium-driver" \
		"(tests/service/test_console.py skips without them)"; fi

# --- fabric exchange: native libfabric core (rdma-backend/) -----------------------------------------
# `native` apt-installs libfabric-dev when missing (root), then builds squall_fabric._native into the
# venv; without root/apt it prints what to install and the fabric tests skip.
.PHONY: native bench-fabric
native: venv-dev
	$(PY) rdma-backend/build_ffi.py --apt

# all-to-all throughput vs mpi4py Alltoallv (Open MPI over libfabric tcp) and a memcpy bound;
# installs openmpi-bin, libopenmpi-dev (apt) and mpi4py (pip) on first use
bench-fabric: native
	$(PY) benchmarks/exchange_fabric.py --setup $(if $(WORKERS),--ranks $(WORKERS),)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

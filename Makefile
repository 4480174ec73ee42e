VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA ?= ./.data

.PHONY: run cluster test lint bench clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m deploy.run_local --store $(DATA)

# two masters and two slaves on loopback (DEPLOY=deploy/2m-2s-sync for SYNC_MASTER)
DEPLOY ?= deploy/2m-2s-async
cluster: $(STAMP)
	$(PY) -m deploy.run_cluster $(DEPLOY)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check protocol namesrv broker client tests deploy
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m deploy.bench_all

clean:
	rm -rf $(VENV) $(DATA)

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
	$(VENV)/bin/mqbench producer -n 127.0.0.1:9876 -t BenchTopic -s 1024 -b 32 -c 200000
	$(VENV)/bin/mqbench transaction -n 127.0.0.1:9876 -t BenchTxTopic -s 1024 -c 20000
	$(VENV)/bin/mqbench consumer -n 127.0.0.1:9876 -t BenchTopic -c 200000
	$(VENV)/bin/mqbench spark -n 127.0.0.1:9876 -t BenchTopic

clean:
	rm -rf $(VENV) $(DATA)

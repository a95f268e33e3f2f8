# Fresh machine: `make run` (install + fetch models/clips + run the sample config)
#                `make test` (install + run the test suite)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ORT    ?= cpu

.PHONY: run test install fetch bench bench-cluster gpu-check docs clean

# Python keeps the modules it compiles (in the venv, and in the tree's ignored __pycache__):
# where the environment says PYTHONDONTWRITEBYTECODE, every process would compile numpy,
# onnxruntime, Ray... from source again (twice the start-up of each command and of each
# process a test starts).
unexport PYTHONDONTWRITEBYTECODE

# uv installs the same packages from the same registry several times faster than pip (it
# fetches and unpacks in parallel, and leaves byte-compiling to Python, which compiles what
# a run imports when it first imports it); where uv cannot be had, pip does it.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	( $(PY) -m pip install -q uv && $(VENV)/bin/uv pip install -q --python $(PY) -e ".[$(ORT),test,cluster]" ) || \
	( $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q --no-compile -e ".[$(ORT),test,cluster]" )
	touch $(STAMP)

install: $(STAMP)

fetch: $(STAMP)
	$(PY) -m pipeline models fetch

# The sample config's own models and clips only: a first run fetches nothing it does not use.
run: $(STAMP)
	$(PY) -m pipeline models fetch --config configs/cameras.yaml
	$(PY) -m pipeline run --config configs/cameras.yaml --output out --report out/report.json

# In parallel (on 2 cores most tests wait on clocks, sockets and subprocesses; a worker out
# of work takes some of another's); then the Ray cluster tests beside each other only (each
# cluster in network and PID namespaces of its own, mostly waiting on paced cameras and
# timeouts); then alone the tests timed against the wall clock (beside the others, even at
# a priority the others yield to, they and the others' live cameras lost frames).
test: fetch
	$(PY) -m pytest -q -n 3 --dist worksteal -m "not serial and not cluster"; parallel=$$?; \
	$(PY) -m pytest -q -n 3 -m cluster tests/cluster; cluster=$$?; \
	$(PY) -m pytest -q -m serial; serial=$$?; \
	exit $$(( parallel || cluster || serial ))

bench: fetch
	$(PY) -m pipeline bench --config configs/bench.yaml --frames 150 --live --load-sweep --out bench

# The cluster layer's cost (Ray in a private network namespace: it binds every interface).
bench-cluster: fetch
	unshare -n sh -c 'ip link set lo up; $(PY) scripts/cluster_bench.py configs/bench.yaml'

# Uses the venv when present, else the machine's python3 (a GPU image brings its own
# onnxruntime-gpu; installing it here would overwrite the CPU wheel).
gpu-check:
	@if [ -x $(PY) ]; then $(PY) scripts/gpu_check.py; else $(PYTHON) scripts/gpu_check.py; fi

# The option tables of docs/reference.md, regenerated from pipeline/config (a test checks they are current).
docs: $(STAMP)
	$(PY) -m pipeline.config.reference --write

clean:
	rm -rf out .pytest_cache

# The two commands a newcomer needs: `make run` (the whole job on the embedded data) and
# `make test` (setup + the whole suite). Everything installs into .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
BYTECODE := $(VENV)/.bytecode
UV_VERSION ?= 0.13.9
UV := $(VENV)/bin/uv
UV_SOURCES = $(shell $(PYTHON) .ci/pip_sources.py)
# A hung Ray test must not hold CI forever: per-test and whole-suite limits.
PYTEST_TIMEOUT ?= 900
SUITE_TIMEOUT ?= 3600

.PHONY: setup test test-e2e test-bench test-cluster test-learning test-fast lint format bench gpu-suite lock config-doc run stop clean

setup: $(STAMP) $(BYTECODE)

# uv installs the same lock as pip would, in seconds rather than minutes. It does not read pip's
# configuration: .ci/pip_sources.py passes it pip's find-links and indexes (where a local folder holds
# torch's CPU wheel), and every index may serve any pinned version (the lock pins all of them).
# Unlike pip, uv writes no bytecode unless asked (--compile-bytecode: what that install installed;
# ~50 s of the setup on 2 vCPUs), or every process compiles what it imports, every time where
# PYTHONDONTWRITEBYTECODE is set (as on the build VMs): a Ray worker importing torch, Ray Train and
# transformers took ~9 s instead of ~4, and a run starts dozens of them.
$(STAMP): requirements.txt requirements-dev.txt requirements-dev-nodeps.txt requirements-data.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV) pip install --quiet --python $(PY) --compile-bytecode --index-strategy unsafe-best-match \
		$(UV_SOURCES) -r requirements-dev.txt -c constraints.txt
	$(UV) pip install --quiet --python $(PY) --compile-bytecode --no-deps $(UV_SOURCES) -r requirements-data.txt
	$(UV) pip install --quiet --python $(PY) --compile-bytecode --no-deps $(UV_SOURCES) -r requirements-dev-nodeps.txt
	$(UV) pip install --quiet --python $(PY) --no-deps --no-build-isolation -e .
	touch $(BYTECODE) $@

# A venv installed before its setup compiled bytecode (or installed by hand) is compiled once here:
# compileall checks every module and writes only what is missing or stale (~15 s on 2 vCPUs when all
# is there). A package file written for a newer Python (torch's testing/_internal/py312_intrinsics.py)
# fails to compile here, as it would on import: not an error of the setup.
$(BYTECODE): | $(STAMP)
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
	touch $@

# One process by default. PYTEST_PARALLEL="-n 2 --dist loadgroup" runs two pytest-xdist processes:
# one runs the Ray tests (and whatever starts Ray) in order, sharing one Ray session, the other the
# tests that start none, a module at a time (tests/conftest.py's groups). On a 2-core machine that
# was slower (1,021 s against ~950 s: the two sides' torch threads fight for the cores and the Ray
# tests' waits stretch), so it is for machines with more cores.
PYTEST_PARALLEL ?=

test: setup lint
	timeout -k 30 $(SUITE_TIMEOUT) $(PY) -m pytest $(PYTEST_PARALLEL) --timeout=$(PYTEST_TIMEOUT) \
		--timeout-method=thread $(PYTEST_ARGS)

# The local autoscaling cluster (tests/cluster/autoscaling.py, shaped like cluster/aws.yaml): the DAG
# from zero worker nodes, a node lost in the data stage and in elastic pretraining, the idle
# scale-down after the launcher config's idle timeout. About 7 minutes on a 2-vCPU VM; .ci/run runs it after `test`.
test-cluster: setup
	timeout -k 30 $(SUITE_TIMEOUT) $(PY) -m pytest --cluster -m cluster --timeout=$(PYTEST_TIMEOUT) \
		--timeout-method=thread tests/cluster $(PYTEST_ARGS)

# The recipes' learning evidence (tests marked learning): configs/learning-tiny.yaml's 3,000
# pretraining steps leave the masked-LM plateau, its encoder fine-tunes BBC News better than a random
# start and learns the question-answering demo; a LAMB recipe stays on the plateau and is warned
# about. Minutes of training whatever the code does, so not in `make test`; .ci/run runs it after.
test-learning: setup
	timeout -k 30 $(SUITE_TIMEOUT) $(PY) -m pytest --learning -m learning --timeout=$(PYTEST_TIMEOUT) \
		--timeout-method=thread tests/pipelines $(PYTEST_ARGS)

# The end-to-end checks (tests marked e2e): the whole job submitted to a real `ray start --head`
# cluster with its run_dir on S3 (a failing stage, a second submission, a forced stage, a command
# joining the head), two FSDP workers killed and resumed on one, a search killed after its first
# trial and resumed, serving (several models, embeddings, under load). ~14 minutes on a 2-vCPU VM
# (docs/BENCHMARKS.md#the-test-suites-time); .ci/run runs it after `test`, which stays within its budget.
test-e2e: setup
	timeout -k 30 $(SUITE_TIMEOUT) $(PY) -m pytest --e2e -m e2e --timeout=$(PYTEST_TIMEOUT) \
		--timeout-method=thread tests/pipelines $(PYTEST_ARGS)

# The benchmark scripts' smoke runs (tests/bench/: each bench runs both sides on a tiny size and
# they agree; the figures are the scripts' own, in docs/BENCHMARKS.md). 3-4 minutes on a 2-vCPU VM;
# .ci/run runs it after `test-e2e`.
test-bench: setup
	timeout -k 30 $(SUITE_TIMEOUT) $(PY) -m pytest --bench -m bench --timeout=$(PYTEST_TIMEOUT) \
		--timeout-method=thread tests/bench $(PYTEST_ARGS)

# Pure tests only: no Ray session, nothing slow (under a minute).
test-fast: setup lint
	$(PY) -m pytest -m "not ray and not slow" $(PYTEST_ARGS)

# ruff, configured in pyproject.toml: lint and formatting, checked (`make format` applies them).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(PY) bench/model_step.py
	$(PY) bench/pretrain_throughput.py --device cpu --configs base-128,base-512,large-512 --batch-size 8,2,1

# On a CUDA machine: the gpu tests, a short bf16 + compile + FSDP2 pretraining with a resume, ours vs
# transformers per model size, the loader, a profile (bench/gpu_suite.py; GPU_ARGS e.g. --data DIR).
gpu-suite: setup
	$(PY) bench/gpu_suite.py --out gpu-suite-out $(GPU_ARGS)

# Re-resolve the full lock from the top-level pins.
lock:
	$(PYTHON) -m venv /tmp/albert-lock-venv
	/tmp/albert-lock-venv/bin/pip install --quiet --dry-run --ignore-installed --report /tmp/albert-lock.json -r requirements-dev.txt
	$(PYTHON) .ci/write_lock.py /tmp/albert-lock.json constraints.txt

# docs/config.md, the config reference, from the config's own field docs
# (tests/pipelines/test_config_reference.py fails while it is stale).
config-doc: setup
	$(PY) -m pipelines.config.reference > docs/config.md

# The whole job (`albert-ray run` = pipelines/full_run.py, configs/default.yaml) submitted to this
# checkout's local Ray head, started if none is running; RUN_ARGS passes its arguments, e.g.
# RUN_ARGS="--force pretrain".
run: setup
	$(VENV)/bin/albert-ray local run --config configs/default.yaml $(RUN_ARGS)

# Stop this checkout's local Ray head (started by `make run`), and only it.
stop: setup
	$(VENV)/bin/albert-ray local stop

clean:
	rm -rf $(VENV) .pytest_cache

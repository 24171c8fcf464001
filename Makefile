# Quick start: `make demo` (set up, then train the demo) and `make test` (set up, then run pytest).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q
DEMO_DATA ?= data/demo

# TORCH picks the torch/torchvision build: pypi (PyPI's default; on Linux x86_64 the CUDA 13 build,
# driver >= 580) or one of PyTorch's indexes: cu126 and cu128 (CUDA 12, driver >= 525.60.13),
# cu130 (CUDA 13, driver >= 580.65.06), cpu (no GPU). `make -n setup TORCH=cu126` shows the commands.
TORCH ?= pypi
TORCH_BUILDS := pypi cu126 cu128 cu130 cpu
ifeq ($(filter $(TORCH),$(TORCH_BUILDS)),)
$(error TORCH=$(TORCH) is not a build: choose one of $(TORCH_BUILDS))
endif
TORCH_INDEX := https://download.pytorch.org/whl/$(TORCH)
# EXTRAS: optional parts from pyproject.toml, comma-separated (mpi, slurm, dali-cu12, dali-cu13, report)
EXTRAS ?=
STAMP := $(VENV)/.installed-$(TORCH)
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: setup setup-dev test-system-deps region-decoder demo test test-long test-fast test-compat test-images lint bench bench-cluster report clean

# The user's install: the engine and launchers; no MPI implementation, no DALI (see requirements.txt).
setup: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml setup.py hpc_imagenet/imagenet/data/decode/_jpeg_region.c
	$(PYTHON) -m venv $(VENV)
ifneq ($(TORCH),pypi)
	$(PIP) torch torchvision -c constraints.txt --index-url $(TORCH_INDEX)
endif
	$(PIP) -r requirements.txt -c constraints.txt
	$(PIP) --no-deps --no-build-isolation -e .
ifneq ($(EXTRAS),)
	$(PIP) --no-build-isolation -e '.[$(EXTRAS)]' -c constraints.txt
endif
	touch $@

# The test environment: every optional part (requirements-dev.txt) plus the system's Open MPI.
setup-dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(PIP) -r requirements-dev.txt -c constraints.txt
	touch $@

# Debian/Ubuntu as root: every system package the tests use, installed before pytest starts so that no
# test installs anything (SLURM, munge, MariaDB for the local clusters; Open MPI for the MPI launcher
# tests; Fashion-MNIST's photographs for the time-to-accuracy tests; a compiler and libjpeg's headers
# for the C decoder). The lists: hpc_imagenet/slurm/localcluster/packages.py. Elsewhere it says what is missing.
test-system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  $(PYTHON) -m hpc_imagenet.slurm.localcluster.system_packages install; \
	else $(PYTHON) -m hpc_imagenet.slurm.localcluster.system_packages missing; fi

$(DEMO_DATA)/train:
	$(PY) -m hpc_imagenet.imagenet.data.demo $(DEMO_DATA) --classes 10 --train-per-class 64 --val-per-class 20

demo: setup $(DEMO_DATA)/train
	$(VENV)/bin/torchrun --standalone --nproc_per_node=2 imagenet/imagenet_ddp.py \
	  -a resnet18 --image-size 64 -b 32 --epochs 15 --desired-acc 0.9 --workers 1 \
	  --seed 0 --log-dir runs/demo $(DEMO_DATA)

# the system packages first: the C decoder in setup builds only where libjpeg's headers are there.
# three pytest-xdist workers: two run the cluster tier (two xdist groups, a SLURM cluster each) while
# the third runs the CPU-bound tiers in the time the cluster tests wait on SLURM
test: test-system-deps setup-dev region-decoder
	$(PY) -m pytest -n 3 --dist loadgroup -m "not long"

# the long end-to-end scenarios make test leaves out (tests/conftest.py's LONG_MODULES): faults, restarts,
# sweeps, job chains, staging and containers on the test cluster, the seed's full-size command; CI runs it too
test-long: test-system-deps setup-dev region-decoder
	$(PY) -m pytest -n 3 --dist loadgroup -m long

# `make demo` may have set the venv up before test-system-deps brought libjpeg's headers: build the C region
# decoder now where that left it unbuilt (the tests check the fast backend with it)
REGION_DECODER = hpc_imagenet/imagenet/data/decode/_jpeg_region
region-decoder: test-system-deps setup-dev
	@ls $(REGION_DECODER).*.so >/dev/null 2>&1 || $(PY) setup.py -q build_ext --inplace

# the unit tier only (tests/unit: no training launched; two xdist workers, one per core here): the
# loop while editing
test-fast: setup-dev
	$(PY) -m pytest -n 2 tests/unit

# The oldest torch of the supported window, as NGC PyTorch 25.01 has it (Python 3.12, torch 2.6.0, torchvision
# 0.21.0 from PyPI; requirements-compat.txt) in a second venv: the unit tier, the engine tests that differed on
# it, one DDP training under torchrun and its resume. pyenv's Python 3.12 (COMPAT_PYTHON to give another).
COMPAT_VENV ?= .venv-compat
COMPAT_PYTHON ?= $(shell pyenv prefix 3.12 2>/dev/null)/bin/python
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_DATA := data/compat
COMPAT_RUN := runs/compat
COMPAT_TRAIN := imagenet/imagenet_ddp.py -a resnet18 --image-size 32 -b 8 --workers 0 --seed 0 -p 1 \
  --dist-backend gloo --log-dir $(COMPAT_RUN) $(COMPAT_DATA)

$(COMPAT_VENV)/.installed: requirements.txt requirements-compat.txt
	@[ -x "$(COMPAT_PYTHON)" ] || { echo "error: no Python 3.12 at '$(COMPAT_PYTHON)': pyenv install 3.12, or make test-compat COMPAT_PYTHON=/path/to/python3.12" >&2; exit 2; }
	$(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_PY) -m pip install --isolated --disable-pip-version-check -q -r requirements-compat.txt
	$(COMPAT_PY) -m pip install --isolated --disable-pip-version-check -q -r requirements.txt
	$(COMPAT_PY) -c "import torch, torchvision; assert torch.__version__.startswith('2.6.0'), torch.__version__"
	touch $@

test-compat: test-system-deps $(COMPAT_VENV)/.installed
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) setup.py -q build_ext --inplace
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m pytest -n 2 -q tests/unit
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m pytest -n 0 -q tests/engine/test_engine_errors.py::test_a_stopped_rank_is_named_within_the_collective_timeout \
	  tests/engine/test_results_bench.py::test_allreduce_records tests/engine/test_torchvision_train.py::test_policies_train_on_the_batch_backends
	rm -rf $(COMPAT_RUN) && PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m hpc_imagenet.imagenet.data.demo $(COMPAT_DATA) --classes 4 --train-per-class 16 --val-per-class 4
	PYTHONPATH=$(CURDIR) $(COMPAT_VENV)/bin/torchrun --standalone --nproc_per_node=2 $(COMPAT_TRAIN) --epochs 1
	PYTHONPATH=$(CURDIR) $(COMPAT_VENV)/bin/torchrun --standalone --nproc_per_node=2 $(COMPAT_TRAIN) --epochs 2 --resume auto | tee $(COMPAT_RUN).log
	grep -q "resumed from .*: epoch 1, step 0" $(COMPAT_RUN).log && grep -q '"status": "finished"' $(COMPAT_RUN)/run.json

# The container tier in an image like NGC's PyTorch one (torch 2.6 and the project's dependencies inside it, nothing
# of the host's): Charliecloud and Podman-HPC on the test cluster's 4 nodes, preempted and resumed. The image (~5 GB)
# is built on first use and cached (hpc_imagenet/slurm/localcluster/image.py), and imported into podman and migrated once
# (hpc_imagenet/slurm/localcluster/podman.py; podman's packages only here, not in make test); -rP prints what the jobs did.
test-images: test-system-deps setup-dev
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  $(PYTHON) -m hpc_imagenet.slurm.localcluster.system_packages install podman; \
	else $(PYTHON) -m hpc_imagenet.slurm.localcluster.system_packages missing podman; fi
	HPC_IMAGENET_TORCH_IMAGE=1 $(PY) -m pytest -n 0 -rP tests/cluster/test_slurm_ngc_image.py \
	  tests/cluster/test_slurm_podman_hpc.py

# ruff's checks (rules and line length in pyproject.toml); CI runs it before the tests
lint: setup-dev
	$(PY) -m ruff check .

# Benchmarks (results/): `make bench` measures a small all-kinds preset here and writes the report;
# `make report` regenerates results/RESULTS.md, the tags' reports and the studies' write-ups from the committed records alone.
bench: setup-dev
	$(PY) -m hpc_imagenet.harness.bench quick --fresh

# as root: 1-2-4 node gloo DDP on a local SLURM cluster (hpc_imagenet/slurm/localcluster/, docs/local-cluster.md). It
# brings the cluster up and runs the same `hpc_imagenet.harness.bench scaling` command a user types on a login node,
# with SLURM_CONF set.
CLUSTER_NOTE = local SLURM cluster (hpc_imagenet/slurm/localcluster): SLURM nodes as network namespaces on one host, gloo over veth + bridge; 1 process x 1 thread per node, so points with more nodes than the host has cores share cores
bench-cluster: setup-dev
	$(PY) -m hpc_imagenet.slurm.localcluster --nodes 4 --gpus-per-node 0 -- $(PY) -m hpc_imagenet.harness.bench scaling --fresh \
	  --tag testcluster --nodes 1 2 4 --gpus-per-node 0 --cpus-per-task 1 -a resnet18 --image-size 64 \
	  --batch 16 --steps-per-epoch 25 --time 00:20:00 --timeout 1800 --note "$(CLUSTER_NOTE)"

report: setup-dev
	$(PY) -m hpc_imagenet.harness.report
	$(PY) -m studies.published_model
	$(PY) -m studies.fashion_mnist_race report
	$(PY) -m studies.benches report

clean:
	rm -rf $(VENV) $(COMPAT_VENV) runs data .pytest_cache

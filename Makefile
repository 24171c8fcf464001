# Quick start: `make demo` (set up, then train the demo) and `make test` (set up, then run pytest).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DATA ?= data/demo

.PHONY: setup demo test test-fast bench bench-cluster report clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml setup.py imagenet/data/decode/_jpeg_region.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt -r requirements-dev.txt -c constraints.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	touch $@

$(DEMO_DATA)/train:
	$(PY) -m imagenet.demo_data $(DEMO_DATA) --classes 10 --train-per-class 64 --val-per-class 20

demo: setup $(DEMO_DATA)/train
	$(VENV)/bin/torchrun --standalone --nproc_per_node=2 imagenet/imagenet_ddp.py \
	  -a resnet18 --image-size 64 -b 32 --epochs 15 --desired-acc 0.9 --workers 1 \
	  --seed 0 --log-dir runs/demo $(DEMO_DATA)

test: setup
	$(PY) -m pytest

# the unit tier only (tests/unit: no training launched, under 2 minutes on 2 cores): the loop while editing
test-fast: setup
	$(PY) -m pytest tests/unit

# Benchmarks (results/): `make bench` measures a small all-kinds preset here and writes the report;
# `make report` regenerates results/RESULTS.md + figures from the committed records alone.
bench: setup
	$(PY) -m results.bench quick --fresh

# as root: 1-2-4 node gloo DDP on the SLURM test cluster. The test tooling brings the cluster up and
# runs the same `results.bench scaling` command a user types on a login node, with SLURM_CONF set.
CLUSTER_NOTE = test cluster (tests/slurm_cluster.py): SLURM nodes as network namespaces on one host, gloo over veth + bridge; 1 process x 1 thread per node, so points with more nodes than the host has cores share cores
bench-cluster: setup
	$(PY) -m tests.slurm_cluster --nodes 4 --gpus-per-node 0 -- $(PY) -m results.bench scaling --fresh \
	  --tag testcluster --nodes 1 2 4 --gpus-per-node 0 --cpus-per-task 1 -a resnet18 --image-size 64 \
	  --batch 16 --steps-per-epoch 25 --time 00:20:00 --timeout 1800 --note "$(CLUSTER_NOTE)"

report: setup
	$(PY) -m results.report

clean:
	rm -rf $(VENV) runs data .pytest_cache

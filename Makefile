# Quick start: `make demo` (set up, then train the demo) and `make test` (set up, then run pytest).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DATA ?= data/demo

.PHONY: setup demo test bench bench-cluster report clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
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

# Benchmarks (results/): `make bench` measures a small all-kinds preset here and writes the report;
# `make report` regenerates results/RESULTS.md + figures from the committed records alone.
bench: setup
	$(PY) -m results.bench quick --fresh

# as root: 1-2-4 node gloo DDP on the SLURM test cluster (started and stopped by the command)
bench-cluster: setup
	$(PY) -m results.bench cluster-scaling --fresh

report: setup
	$(PY) -m results.report

clean:
	rm -rf $(VENV) runs data .pytest_cache

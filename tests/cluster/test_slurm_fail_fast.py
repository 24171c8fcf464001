"""On the SLURM test cluster, a misspelt flag ends every task of an srun step at once, before torch,
the rendezvous or the staging copy: one line per task, exit status 2, nothing staged."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers import PYTHON, REPO, script
from hpc_imagenet.slurm.localcluster import SlurmCluster

LINE = "error: unknown --data-backend 'falst'; did you mean fast? choose one of: baseline, dali, device, fast, pil"


@pytest.mark.slurm
def test_misspelt_backend_fails_every_task_before_anything_costly(slurm_cluster: SlurmCluster,
                                                                   tmp_path: Path) -> None:
    data, stage = tmp_path / "data", tmp_path / "stage"
    (data / "train" / "a").mkdir(parents=True)
    (data / "val" / "a").mkdir(parents=True)
    stage.mkdir()
    step = ["srun", "--nodes=2", "--ntasks-per-node=1", "--time=1"]
    command = [script("imagenet_ddp.py"), "--data-backend", "falst", "--stage-dir", f"{stage}/$SLURMD_NODENAME",
               str(data)]
    started = time.monotonic()
    proc = slurm_cluster.run([*step, PYTHON, *command], check=False, cwd=REPO)
    elapsed = time.monotonic() - started
    print(f"srun step of 2 tasks with a misspelt --data-backend: exit {proc.returncode} in {elapsed:.2f} s")
    tasks = [line for line in proc.stderr.splitlines() if not line.startswith("srun:")]
    assert proc.returncode == 2, proc.stderr
    assert tasks == [LINE, LINE], proc.stderr
    assert list(stage.iterdir()) == []

    traced = slurm_cluster.run([*step, PYTHON, "-X", "importtime", *command], check=False, cwd=REPO)
    imports = [line.split("|")[-1].strip() for line in traced.stderr.splitlines() if line.startswith("import time:")]
    assert traced.returncode == 2 and imports and "torch" not in imports, traced.stderr[-2000:]

"""SlurmEnvironment against a real SLURM cluster (hpc_imagenet/slurm/localcluster/: one slurmd per network
namespace, so every node is its own host): srun tasks are told apart from the batch shell, the
layout and master come out right on every task, a wrong -n gets its hint, and the first host of
the nodelist with the job-derived port really rendezvouses across two nodes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from hpc_imagenet.launch import environment
from tests.helpers import PYTHON, REPO
from hpc_imagenet.slurm.localcluster import FINAL_STATES, SlurmCluster, wait_for

pytestmark = pytest.mark.slurm

# gloo all_reduce across the nodes using only what detect() found (no MASTER_* exported by hand)
ALL_REDUCE = f"""
import sys, datetime, socket
sys.path.insert(0, {str(REPO)!r})
import torch, torch.distributed as dist
from hpc_imagenet.launch import environment
env = environment.detect()
env.validate(0)
dist.init_process_group("gloo", init_method=f"tcp://{{env.master_addr}}:{{env.master_port}}", rank=env.rank,
                        world_size=env.world_size, timeout=datetime.timedelta(seconds=60))
t = torch.tensor([float(env.rank + 1)])
dist.all_reduce(t)
print(env.name, env.rank, env.master_addr, env.master_port, int(t.item()), socket.gethostname(), flush=True)
dist.destroy_process_group()
"""


def sbatch(cluster: SlurmCluster, tmp_path: Path, *args: str, script: str) -> str:
    """Run a batch job to completion; its job id. Polls scontrol itself: `sbatch --wait` checks
    only every 8 s or so, which would triple these tests' time."""
    proc = cluster.run(["sbatch", "--parsable", "-o", str(tmp_path / "%j.out"), *args, "--wrap", script],
                       cwd=REPO)
    job = proc.stdout.strip().split(";")[0]

    def finished() -> Optional[Dict[str, str]]:
        state = cluster.job_state(job)  # {} once the record has aged out (MinJobAge)
        return state if not state or state.get("JobState") in FINAL_STATES else None

    state = wait_for(f"job {job}", finished, timeout=150, interval=0.3)
    output = (tmp_path / f"{job}.out").read_text() if (tmp_path / f"{job}.out").exists() else ""
    assert state.get("JobState", "COMPLETED") == "COMPLETED", f"{state}\n{output}"
    return job


def views(tmp_path: Path, pattern: str) -> List[dict]:
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob(pattern))]


def test_srun_tasks_and_the_batch_shell(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    show = f"{PYTHON} -m hpc_imagenet.launch --json --gpus 2"
    job = sbatch(slurm_cluster, tmp_path, "-N2", "--ntasks-per-node=2", "--gpus-per-node=2",
                 script=f"{show} > {tmp_path}/batch.json; srun -o {tmp_path}/task.%t.json {show}")
    batch, = views(tmp_path, "batch.json")
    assert batch["name"] == "single" and batch["error"] is None  # the shell is not one of the 4 tasks
    tasks = views(tmp_path, "task.*.json")
    first = tasks[0]["host"]
    assert [t["rank"] for t in tasks] == [0, 1, 2, 3]
    for t in tasks:
        assert t["error"] is None and t["name"] == "slurm"
        assert (t["world_size"], t["local_world_size"]) == (4, 2)
        assert (t["node_rank"], t["local_rank"], t["device_index"]) == (t["rank"] // 2, t["rank"] % 2, t["rank"] % 2)
        assert (t["master_addr"], t["master_port"]) == (first, environment.derive_port(job))
    assert len({t["host"] for t in tasks}) == 2


def test_srun_with_a_wrong_task_count_gets_the_hint(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    sbatch(slurm_cluster, tmp_path, "-N2", "--ntasks-per-node=2", "--gpus-per-node=2",
           script=f"srun -n 3 -o {tmp_path}/task.%t.json {PYTHON} -m hpc_imagenet.launch --json --gpus 2 || true")
    tasks = views(tmp_path, "task.*.json")
    assert len(tasks) == 3
    for t in tasks:
        assert t["error"] == ("slurm: the step runs 3 tasks but 2 nodes x --ntasks-per-node=2 = 4: drop "
                              "-n/--ntasks (or set it to 4) so every node runs 2 tasks")


def test_first_host_and_job_port_rendezvous_across_nodes(slurm_cluster: SlurmCluster,
                                                         tmp_path: Path) -> None:
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    job = sbatch(slurm_cluster, tmp_path, "-N2", "--ntasks-per-node=1",
                 script=f"srun {PYTHON} {script}")
    lines = sorted((tmp_path / f"{job}.out").read_text().split("\n"))
    rows = [line.split() for line in lines if line.startswith("slurm ")]
    assert [r[1] for r in rows] == ["0", "1"], lines
    assert {r[4] for r in rows} == {"3"}  # 1 + 2: both ranks took part
    assert rows[0][5] != rows[1][5]  # two hosts
    assert {(r[2], r[3]) for r in rows} == {(rows[0][5], str(environment.derive_port(job)))}  # rank 0's host

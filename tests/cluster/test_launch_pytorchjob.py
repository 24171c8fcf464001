"""Kubeflow's PyTorchJob, as two "pods" that train as one 2-rank job.

No Kubernetes operator runs here: each pod is a node of the SLURM test cluster used only for its
network namespace (own address, hostname and /etc/hosts), with no SLURM variables, and the test
gives each process exactly the variables the operator gives a pod (MASTER_ADDR = the master pod's
host, MASTER_PORT, WORLD_SIZE = pods, RANK = pod index; no LOCAL_RANK). What runs is the real
training script and the real gloo rendezvous across the two namespaces.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpc_imagenet.launch.ports import free_port
from tests.helpers import PYTHON, REPO
from tests.launch.support import Job, assert_trained, clean_env, run_jobs, train_args
from hpc_imagenet.slurm.localcluster import SlurmCluster

pytestmark = pytest.mark.slurm

PODS = ("node1", "node2")  # the master pod, then worker 0


def pod_env(rank: int, port: int) -> dict:
    # the operator's variables, and nothing of any other launcher (clean_env drops them)
    return clean_env(MASTER_ADDR=PODS[0], MASTER_PORT=str(port), WORLD_SIZE=str(len(PODS)), RANK=str(rank))


def test_each_pod_sees_itself_as_one_process_of_the_job(slurm_cluster: SlurmCluster):
    port = free_port()
    for rank, pod in enumerate(PODS):
        out = subprocess.run(slurm_cluster.node_command(pod, [PYTHON, "-m", "hpc_imagenet.launch", "--gpus", "0"]),
                             cwd=REPO,
                             env=pod_env(rank, port), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == (f"{pod}: pytorchjob: rank {rank}/2 local 0/1 node {rank} master "
                                      f"{PODS[0]}:{port} device 0: ok")


def test_two_pods_train_as_one_job(slurm_cluster: SlurmCluster, tmp_path: Path, jpeg_data: Path):
    port, run_dir = free_port(), tmp_path / "run"
    script = [PYTHON, "imagenet/imagenet_ddp.py", *train_args(run_dir, jpeg_data)]
    pods = [Job(slurm_cluster.node_command(pod, script), pod_env(rank, port), tmp_path / f"{pod}.log")
            for rank, pod in enumerate(PODS)]
    codes = run_jobs(pods, timeout_s=240)
    assert codes == [0, 0], "\n".join(f"{pod}:\n{job.output[-3000:]}" for pod, job in zip(PODS, pods))
    record = assert_trained(run_dir, world_size=2, environment="pytorchjob")
    assert record["dist"]["nodes"] == 2 and record["environment"]["hostname"] == PODS[0]
    assert "[pytorchjob, gloo]" in pods[0].output

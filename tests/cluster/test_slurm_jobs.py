"""Generated batch files train for real on the test cluster: CPU jobs (gloo, tiny generated JPEGs)
on 1, 2 and 4 nodes through the torchrun, srun, mpi and torch.distributed.launch launchers.

The selected tests' jobs are submitted at once (``sbatch --wait`` each, in the background) so their
start-up latencies overlap (make test leaves torchrun on one node, which its scontrol requeue scenario
also runs, and the PMIx starter to make test-long: tests/conftest.py); each test then checks one job:
exit 0, run.json with world size = nodes x processes from the expected launcher, two epochs, and
TensorBoard events from rank 0 only."""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import pytest

from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH
from tests.cluster.scenarios import selected_ids

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"
JOB_TIMEOUT = 300


def tiny_job(name: str, nodes: int, procs: int, launcher: str, data: Path, out: Path, *extra: str) -> List[str]:
    """Generator arguments for a tiny CPU training job (the scenarios' small ARCH, 32x32, batch 8, 2 epochs)."""
    return ["--name", name, "--nodes", str(nodes), "--gpus-per-node", "0", "--procs-per-node", str(procs),
            "--cpus-per-task", "1", "--launcher", launcher, "--time", "10", "--signal-seconds", "60",
            "--venv", str(VENV), "--data", str(data), "--arch", ARCH, "--epochs", "2", "--batch-size", "8",
            "--workers", "0", "--output", str(out / "%x-%j.out"), *extra,
            "--", "--image-size", "32", "--steps-per-epoch", "3", "--val-steps", "2", "--dist-backend", "gloo",
            "--seed", "0", "-p", "1"]


def job_env(cluster: SlurmCluster, **settings: str) -> Dict[str, str]:
    # mpirun refuses root without these; OMP 1: a dozen trainers share 2 cores
    return {**cluster.env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMP_NUM_THREADS": "1", **settings}


@dataclass
class Job:
    name: str
    nodes: int
    procs: int
    environment: str  # what run.json's dist.environment should start with
    run_dir: Path
    proc: subprocess.Popen

    def wait(self) -> subprocess.CompletedProcess:
        out, err = self.proc.communicate(timeout=JOB_TIMEOUT)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)


CASES = {  # name: (nodes, processes per node, launcher, environment, generator flags)
    "torchrun_1node": (1, 2, "torchrun", "torchrun", ()),
    "torchrun_2node": (2, 1, "torchrun", "torchrun", ()),
    "srun_4node": (4, 1, "srun", "slurm", ()),
    "mpi_2node": (2, 1, "mpi", "mpi/", ()),
    # srun --mpi=pmix starts the MPI ranks itself (slurmstepd is the PMIx server, no mpirun)
    "mpi_srun_pmix_2node": (2, 1, "mpi", "mpi/", ("--mpi-starter", "srun")),
    "launch_2node": (2, 1, "launch", "torchrun", ()),
}


@pytest.fixture(scope="module")
def jobs(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, jpeg_data, tmp_path_factory) -> Dict[str, Job]:
    tmp = tmp_path_factory.mktemp("slurm_jobs")
    selected = selected_ids(request, "test_generated_job_trains")
    started = {}
    for name, (nodes, procs, launcher, environment, flags) in CASES.items():
        if name not in selected:
            continue
        script = tmp / f"{name}.sh"
        script.write_text(render(spec_from_args(tiny_job(name, nodes, procs, launcher, jpeg_data, tmp, *flags))))
        run_dir = tmp / f"run-{name}"
        proc = subprocess.Popen(["sbatch", "--wait", "--parsable", "--export", f"ALL,LOG_DIR={run_dir}", str(script)],
                                cwd=REPO, env=job_env(slurm_cluster), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started[name] = Job(name, nodes, procs, environment, run_dir, proc)
    yield started
    for job in started.values():
        if job.proc.poll() is None:
            job.proc.kill()


def _job_output(job: Job, job_id: str, tail: int = 3000) -> str:
    logs = list(job.run_dir.parent.glob(f"{job.name}-{job_id}.out"))
    return logs[0].read_text()[-tail:] if logs else "(no output file)"


@pytest.mark.parametrize("name", list(CASES))
def test_generated_job_trains(slurm_cluster: SlurmCluster, jobs: Dict[str, Job], name: str) -> None:
    job = jobs[name]
    done = job.wait()
    job_id = done.stdout.strip().split(";")[0]
    assert done.returncode == 0, f"sbatch --wait exit {done.returncode}: {done.stderr}\n{_job_output(job, job_id)}"
    record = json.loads((job.run_dir / "run.json").read_text())
    assert record["status"] == "finished"
    assert record["dist"]["world_size"] == job.nodes * job.procs
    assert record["dist"]["nodes"] == job.nodes
    assert record["dist"]["environment"].startswith(job.environment)
    assert [e["epoch"] for e in record["epochs"]] == [0, 1]
    first_node = slurm_cluster.wait_finished(job_id)["NodeList"]
    events = sorted(job.run_dir.rglob("events.out.tfevents.*"))
    assert len(events) == 1, f"TensorBoard events from more than rank 0: {events}"
    hosts = slurm_cluster.run(["scontrol", "show", "hostnames", first_node]).stdout.split()
    assert hosts[0] in events[0].name, f"events not written on the first node {hosts[0]}: {events[0].name}"
    if job.environment == "mpi/":
        assert_site_mpi(_job_output(job, job_id, tail=100_000), record["environment"]["mpi"], starter=name)


def assert_site_mpi(log: str, ran: dict, starter: str) -> None:
    """The batch log names the system MPI that ran, found before the venv was activated; mpi4py
    loaded the system's libmpi, unless the venv holds an MPI wheel, which the log then warns about."""
    venv = str(VENV.resolve())
    if "srun_pmix" not in starter:
        mpirun = re.search(r"^mpirun: (\S+) \((.*)\)$", log, re.M)
        assert mpirun and not mpirun.group(1).startswith(venv) and "Open MPI" in mpirun.group(2), log
    loads = re.search(r"^mpi4py \S+ loads (.*) from (\S+)$", log, re.M)
    assert loads, log
    if any(VENV.glob("lib/libmpi*")):  # a venv made before the lean install: the log must say so
        assert f"warning: {venv}/lib holds an MPI library" in log, log
    else:
        assert not loads.group(2).startswith(venv) and loads.group(1).startswith("Open MPI"), log
        assert ran["file"] == loads.group(2), ran

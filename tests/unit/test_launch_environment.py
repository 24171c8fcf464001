"""Unit tests for hpc_imagenet.launch.environment: detection of every launcher from its variables, the SLURM
hostlist and task-count parsers, port derivation, and every validate() hint.

Each test patches os.environ with clear=True, so the machine's own variables never leak in."""
from __future__ import annotations

import logging
import os
from typing import Dict
from unittest import mock

import pytest

from hpc_imagenet.launch import environment as E
from hpc_imagenet.launch.environment import LaunchError


def detect_with(env: Dict[str, str]) -> E.ClusterEnvironment:
    with mock.patch.dict(os.environ, env, clear=True):
        return E.detect()


def layout(env: E.ClusterEnvironment) -> tuple:
    return (env.name, env.rank, env.local_rank, env.world_size, env.local_world_size, env.node_rank,
            env.master_addr, env.master_port)


TORCHRUN = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
            "TORCHELASTIC_RUN_ID": "none"}
# task 6 of `srun` on 2 nodes x 4 tasks (job 123456, nodes node[01-02])
SRUN = {"SLURM_JOB_ID": "123456", "SLURM_PROCID": "6", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
        "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NUM_NODES": "2",
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "4", "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
        "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_STEP_NODELIST": "node[01-02]",
        "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_STEP_ID": "0"}
# what the batch shell of the same job sees (no step of its own)
SBATCH_SHELL = {"SLURM_JOB_ID": "123456", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                "SLURM_NTASKS": "8", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "4",
                "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "node[01-02]"}
OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1", "PMIX_RANK": "3",
        "PMIX_NAMESPACE": "prterun-vm-4227@1"}
# what Kubeflow's PyTorchJob operator gives worker pod 0 of a 1 master + 1 worker job
PYTORCHJOB = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456",
              "KUBERNETES_SERVICE_HOST": "10.96.0.1", "PYTHONUNBUFFERED": "1"}
HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "PMI_FD": "9"}


# ----------------------------------------------------------------------------- detection

def test_torchrun():
    env = detect_with(TORCHRUN)
    assert isinstance(env, E.TorchElasticEnvironment)
    assert layout(env) == ("torchrun", 5, 1, 8, 4, 1, "10.0.0.1", 29400)
    assert env.device_index == 1


def test_torchrun_wins_inside_slurm_and_mpi():
    """torchrun launched by srun (or mpirun) inherits their variables; its own must win."""
    env = detect_with({**SRUN, **OMPI, **TORCHRUN})
    assert env.name == "torchrun" and env.rank == 5


def test_torch_distributed_launch_style_without_local_world_size():
    """Variables set by hand (env://) may lack LOCAL_WORLD_SIZE: assume no more than the rank proves."""
    env = detect_with({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1234"})
    assert (env.local_world_size, env.node_rank) == (2, 0)
    env.validate(0)


def test_launch_mpi_marker_names_the_mpi_library():
    env = detect_with({**OMPI, **TORCHRUN, E.MPI_MARKER: "openmpi"})
    assert isinstance(env, E.MpiLaunchEnvironment)
    assert env.name == "mpi/openmpi" and env.rank == 5 and env.master_addr == "10.0.0.1"


def test_slurm_srun_task():
    env = detect_with(SRUN)
    assert isinstance(env, E.SlurmEnvironment)
    assert layout(env) == ("slurm", 6, 2, 8, 4, 1, "node01", E.derive_port("123456"))
    env.validate(4)
    assert env.device_index == 2


def test_slurm_step_counts_win_over_allocation():
    """`srun -n 2` inside an 8-task allocation runs a 2-task step."""
    env = detect_with({**SRUN, "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
                       "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "1",
                       "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "node02"})
    assert (env.world_size, env.local_world_size, env.master_addr) == (2, 2, "node02")


def test_slurm_master_env_overrides_nodelist_and_job_port():
    env = detect_with({**SRUN, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456"})
    assert (env.master_addr, env.master_port) == ("10.1.2.3", 23456)


def test_slurm_without_tasks_per_node_uses_even_split():
    env = detect_with({k: v for k, v in SRUN.items() if "TASKS_PER_NODE" not in k})
    assert env.local_world_size == 4


def test_sbatch_shell_is_not_an_srun_task(caplog):
    """`python train.py` typed straight into a batch script: one process, with a warning."""
    env = detect_with(SBATCH_SHELL)
    assert env.name == "single"
    with caplog.at_level(logging.WARNING, logger="hpc_imagenet.launch.environment"):
        env.validate(4)
    assert "srun" in caplog.text and "8 tasks" in caplog.text


def test_mpirun_inside_slurm_allocation_is_mpi_not_slurm():
    """mpirun starts its daemons with srun (2 nodes -> a 2-task step); the 8 ranks inherit that."""
    daemon_step = {**SBATCH_SHELL, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_NODEID": "1",
                   "SLURM_STEP_NODELIST": "node[01-02]"}
    ompi = {**OMPI, "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "PMIX_RANK": "5"}
    env = detect_with({**daemon_step, **ompi})
    assert env.name == "openmpi" and (env.rank, env.world_size) == (5, 8)
    hydra = {**HYDRA, "PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALNRANKS": "4"}
    assert detect_with({**daemon_step, **hydra}).name == "mpich"


def test_srun_mpi_pmix_is_slurm():
    """`srun --mpi=pmix` sets PMIX_RANK equal to SLURM_PROCID: SLURM's richer view is used."""
    env = detect_with({**SRUN, "PMIX_RANK": "6", "PMIX_NAMESPACE": "slurm.pmix.123456.0"})
    assert env.name == "slurm" and env.master_addr == "node01"


def test_openmpi_single_node():
    env = detect_with({**OMPI, "OMPI_COMM_WORLD_LOCAL_SIZE": "4"})
    assert layout(env) == ("openmpi", 3, 1, 4, 4, 0, "127.0.0.1", E.derive_port("prterun-vm-4227@1"))
    env.validate(0)


def test_openmpi_several_nodes_needs_master_addr():
    env = detect_with(OMPI)
    assert (env.node_rank, env.master_addr) == (1, "")
    with pytest.raises(LaunchError, match=r"MASTER_ADDR is unset: start through `python -m hpc_imagenet.launch.mpi"):
        env.validate(0)
    env = detect_with({**OMPI, "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "4242"})
    assert (env.master_addr, env.master_port) == ("10.0.0.7", 4242)
    env.validate(0)


def test_mpich_hydra():
    env = detect_with(HYDRA)
    assert layout(env) == ("mpich", 1, 1, 2, 2, 0, "127.0.0.1", E.DEFAULT_PORT)
    assert detect_with({**HYDRA, "SLURM_JOB_ID": "77"}).master_port == E.derive_port("77")


def test_intel_mpi_is_hydra_too():
    env = detect_with({**HYDRA, "I_MPI_ROOT": "/opt/intel/mpi", "I_MPI_HYDRA_BOOTSTRAP": "ssh"})
    assert env.name == "mpich" and env.rank == 1


def test_pmix_with_and_without_world_size():
    env = detect_with({"PMIX_RANK": "2", "PMIX_NAMESPACE": "flux-1", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "n1"})
    assert layout(env) == ("pmix", 2, 0, 4, 1, 2, "n1", E.derive_port("flux-1"))
    with pytest.raises(LaunchError, match=r"no world size: start through `python -m hpc_imagenet.launch.mpi"):
        detect_with({"PMIX_RANK": "2", "PMIX_NAMESPACE": "flux-1"})


def test_pytorchjob_pod_is_one_process_per_node():
    """RANK/WORLD_SIZE/MASTER_* and no LOCAL_RANK: the pod is node RANK with one process."""
    env = detect_with(PYTORCHJOB)
    assert isinstance(env, E.PyTorchJobEnvironment)
    assert layout(env) == ("pytorchjob", 1, 0, 2, 1, 1, "10.0.0.1", 23456)
    env.validate(1)
    assert env.device_index == 0


def test_torchrun_inside_a_pytorchjob_pod_stays_torchrun():
    """torchrun in the pod overwrites RANK/WORLD_SIZE and adds LOCAL_RANK: torchrun wins."""
    env = detect_with({**PYTORCHJOB, "PET_NPROC_PER_NODE": "4", **TORCHRUN})
    assert env.name == "torchrun" and (env.rank, env.local_rank) == (5, 1)


def test_pytorchjob_checks():
    raises_hint(detect_with({**PYTORCHJOB, "RANK": "2"}), 0, r"pytorchjob: rank 2 is outside world size 2")
    raises_hint(detect_with({**PYTORCHJOB, "PET_NPROC_PER_NODE": "4"}), 0,
                r"asks for 4 processes per pod \(PET_NPROC_PER_NODE\) .*`torchrun --nproc-per-node=4 SCRIPT")
    raises_hint(detect_with({**PYTORCHJOB, "MASTER_PORT": "0"}), 0, r"master port 0 is not in 1-65535")
    with pytest.raises(LaunchError, match=r"pytorchjob: WORLD_SIZE='two' is not an integer"):
        detect_with({**PYTORCHJOB, "WORLD_SIZE": "two"})


def test_pytorchjob_pod_with_several_gpus_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="hpc_imagenet.launch.environment"):
        detect_with(PYTORCHJOB).validate(4)
    assert "leave 3 of 4 GPUs idle; use 4 processes per pod (container command `torchrun --nproc-per-node=4" \
        in caplog.text


def test_single_process():
    env = detect_with({})
    assert layout(env) == ("single", 0, 0, 1, 1, 0, "127.0.0.1", E.DEFAULT_PORT)
    env.validate(8)  # one process may drive many GPUs (DataParallel)
    assert "single" in env.describe()


@pytest.mark.parametrize("env,key", [
    ({**SRUN, "SLURM_PROCID": "six"}, "SLURM_PROCID"),
    ({**TORCHRUN, "WORLD_SIZE": "8.0"}, "WORLD_SIZE"),
    ({**OMPI, "OMPI_COMM_WORLD_LOCAL_RANK": "x"}, "OMPI_COMM_WORLD_LOCAL_RANK"),
    ({**TORCHRUN, "MASTER_PORT": "http"}, "MASTER_PORT"),
])
def test_garbage_values_name_the_variable(env, key):
    with pytest.raises(LaunchError) as err:
        detect_with(env)
    assert key in str(err.value) and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- hostlists

@pytest.mark.parametrize("spec,hosts", [
    ("node01", ["node01"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("gpu-a[1-2],gpu-b3", ["gpu-a1", "gpu-a2", "gpu-b3"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("a,b[1],c[3-4]x", ["a", "b1", "c3x", "c4x"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("node[1-2].ib,login", ["node1.ib", "node2.ib", "login"]),
])
def test_expand_hostlist(spec, hosts):
    assert E.expand_hostlist(spec) == hosts


@pytest.mark.parametrize("spec", ["node[1-", "node1]", "node[a-b]", "node[3-1]", "node[1-2", "", "n[[1]]"])
def test_expand_hostlist_rejects_garbage(spec):
    with pytest.raises(LaunchError, match="hostlist"):
        E.expand_hostlist(spec)


def test_bad_nodelist_is_a_launch_error():
    with pytest.raises(LaunchError, match="node\\[1-"):
        detect_with({**SRUN, "SLURM_STEP_NODELIST": "node[1-"})


@pytest.mark.parametrize("spec,counts", [("4", [4]), ("4(x2)", [4, 4]), ("2(x3),1", [2, 2, 2, 1]),
                                         ("1,2", [1, 2])])
def test_expand_tasks_per_node(spec, counts):
    assert E.expand_tasks_per_node(spec) == counts


def test_uneven_tasks_per_node_gives_each_node_its_own_count():
    env = detect_with({**SRUN, "SLURM_NTASKS_PER_NODE": "", "SLURM_STEP_NUM_TASKS": "7", "SLURM_JOB_GPUS": "0,1,2,3",
                       "SLURM_STEP_TASKS_PER_NODE": "4,3", "SLURM_PROCID": "5", "SLURM_LOCALID": "1"})
    assert env.local_world_size == 3
    with pytest.raises(LaunchError, match=r"3 task\(s\) on node 1 but it has 4 GPU\(s\): use #SBATCH "
                                          r"--ntasks-per-node=4"):
        env.validate(4)


def test_expand_tasks_per_node_rejects_garbage():
    with pytest.raises(LaunchError, match="tasks-per-node"):
        E.expand_tasks_per_node("4(x)")


# ----------------------------------------------------------------------------- ports

def test_derive_port_is_stable_in_range_and_separates_jobs():
    ports = [E.derive_port(str(job)) for job in range(123456, 123456 + 64)]
    assert len(set(ports)) == 64  # neighbouring jobs on one node never share a port
    assert all(E.PORT_BASE <= p < E.PORT_BASE + E.PORT_SPAN < 32768 for p in ports)
    assert E.derive_port("123456") == E.derive_port(" 123456 ") == E.PORT_BASE + 123456 % E.PORT_SPAN
    assert E.derive_port("prterun-a@1") == E.derive_port("prterun-a@1") != E.derive_port("prterun-b@1")
    with pytest.raises(LaunchError, match="MASTER_PORT"):
        E.derive_port("")


def test_two_slurm_jobs_on_one_node_get_different_ports():
    one = detect_with({**SRUN, "SLURM_JOB_ID": "900"})
    two = detect_with({**SRUN, "SLURM_JOB_ID": "901"})
    assert one.master_port != two.master_port
    assert detect_with({**SRUN, "SLURM_JOB_ID": "", "SLURM_JOBID": "900"}).master_port == one.master_port


# ----------------------------------------------------------------------------- validate hints

def raises_hint(env: E.ClusterEnvironment, gpus: int, pattern: str) -> str:
    with pytest.raises(LaunchError, match=pattern) as err:
        env.validate(gpus)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_hint_slurm_ntasks_per_node_differs_from_gpus():
    allocated = {**SRUN, "SLURM_GPUS_ON_NODE": "8"}
    raises_hint(detect_with(allocated), 8, r"slurm: 4 task\(s\) on node 1 but it has 8 GPU\(s\): use "
                                           r"#SBATCH --ntasks-per-node=8 .*--gpus-per-node=8")
    raises_hint(detect_with(SRUN), 2, r"slurm: 4 task\(s\) on node 1 but it has 2 GPU\(s\): use "
                                      r"#SBATCH --ntasks-per-node=2")


def test_slurm_fewer_tasks_than_unallocated_gpus_only_warns(caplog):
    """GPUs visible on a node but not allocated to the job may be someone else's."""
    with caplog.at_level(logging.WARNING, logger="hpc_imagenet.launch.environment"):
        detect_with(SRUN).validate(8)
    assert "leave 4 of 8 GPUs idle" in caplog.text


def test_hint_slurm_world_size_not_nodes_times_tasks():
    env = detect_with({**SRUN, "SLURM_STEP_NUM_TASKS": "6", "SLURM_STEP_TASKS_PER_NODE": "4,2",
                       "SLURM_PROCID": "5", "SLURM_LOCALID": "1"})
    raises_hint(env, 0, r"the step runs 6 tasks but 2 nodes x --ntasks-per-node=4 = 8: drop -n/--ntasks "
                        r"\(or set it to 8\)")


def test_slurm_gpus_per_task_binds_device_zero():
    env = detect_with({**SRUN, "SLURM_GPUS_PER_TASK": "1"})
    env.validate(1)  # each task sees only its own GPU
    assert env.device_index == 0 and env.local_rank == 2
    env = detect_with({**SRUN, "SLURM_GPUS_PER_TASK": "a100:1"})
    env.validate(1)
    assert env.device_index == 0


def test_hint_torchrun_more_processes_than_gpus():
    raises_hint(detect_with(TORCHRUN), 2, r"torchrun: 4 processes on this node but only 2 GPU\(s\) "
                                          r"visible: start one process per GPU, --nproc-per-node=2")


def test_hint_gpu_index_out_of_range_names_cuda_visible_devices():
    env = detect_with({**TORCHRUN, "LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "0,1"})
    raises_hint(env, 2, r"local rank 3 would use GPU 3 but only 2 are visible \(CUDA_VISIBLE_DEVICES=0,1\): "
                        r"start --nproc-per-node=2")


def test_fewer_processes_than_gpus_only_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="hpc_imagenet.launch.environment"):
        detect_with(TORCHRUN).validate(8)
    assert "leave 4 of 8 GPUs idle" in caplog.text


def test_hint_torchrun_uneven_nodes():
    env = detect_with({**TORCHRUN, "WORLD_SIZE": "6"})
    raises_hint(env, 0, r"world size 6 is not 2 nodes x 4 processes: give every node the same --nproc-per-node")


def test_hint_mpi_processes_per_node():
    env = detect_with({**OMPI, "MASTER_ADDR": "n1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    raises_hint(env, 1, r"openmpi: 2 processes on this node but only 1 GPU\(s\) visible: .*"
                        r"mpirun --map-by ppr:1:node")
    env = detect_with({**HYDRA, "MPI_LOCALRANKID": "0"})
    raises_hint(env, 1, r"mpich: .*mpiexec -ppn 1")


@pytest.mark.parametrize("patch,pattern", [
    ({"RANK": "8"}, r"rank 8 is outside world size 8"),
    ({"WORLD_SIZE": "0", "GROUP_WORLD_SIZE": ""}, r"world size 0 must be at least 1"),
    ({"LOCAL_WORLD_SIZE": "16", "GROUP_WORLD_SIZE": ""}, r"16 processes on this node but 8 in the whole job"),
    ({"LOCAL_RANK": "4"}, r"local rank 4 is outside the 4 processes on this node"),
    ({"MASTER_PORT": "70000"}, r"master port 70000 is not in 1-65535; set MASTER_PORT"),
])
def test_hint_inconsistent_variables(patch, pattern):
    raises_hint(detect_with({**TORCHRUN, **patch}), 0, pattern)


def test_describe_is_one_line_with_everything():
    text = detect_with(SRUN).describe()
    assert text == f"slurm: rank 6/8 local 2/4 node 1 master node01:{E.derive_port('123456')}"

"""The launcher table (hpc_imagenet.launch.launchers) is the one list: a launcher registered there is offered by
`python -m hpc_imagenet.launch.manual`, accepted and rendered by hpc_imagenet.slurm.generate, listed by `python -m
hpc_imagenet.launch --list`,
detected at run time and joined the way its entry says, with nothing else edited."""
from __future__ import annotations

import pytest

from hpc_imagenet.launch import __main__ as launch_main
from hpc_imagenet.launch import environment, launchers, manual
from hpc_imagenet.launch.envs.torchrun import TorchElasticEnvironment
from hpc_imagenet.slurm import generate

from hpc_imagenet.imagenet.run import distributed


class FakeRunEnvironment(TorchElasticEnvironment):
    """A made-up agent's workers: torchrun's variables plus a marker of its own."""

    name = "fakerun"
    VARS = {**TorchElasticEnvironment.VARS, "marker": ("FAKERUN_ID",)}
    REQUIRED = TorchElasticEnvironment.REQUIRED + ("marker",)


def _fake_flags(node: launchers.Node) -> list:
    return [f"--hosts={node.nnodes}", f"--per-host={node.nproc}", f"--leader={node.master_addr}:{node.master_port}",
            *([f"--host-index={node.node_rank}"] if node.node_rank is not None else [])]


FAKE = launchers.Launcher("fakerun", "a made-up per-node agent", FakeRunEnvironment, meets="at its leader",
                          agent="fakerun.agent", flags=_fake_flags, node_rank_flag="--host-index",
                          batch=launchers.NODE)


@pytest.fixture
def fake(monkeypatch):
    """FAKE registered for this test only (detected before torchrun, whose variables it also carries)."""
    monkeypatch.setattr(launchers, "REGISTRY", dict(launchers.REGISTRY))
    launchers.register(FAKE, before="torchrun")
    return FAKE


def test_a_registered_launcher_is_offered_by_the_per_node_commands(fake):
    assert "fakerun" in manual.build_parser()._option_string_actions["--launcher"].choices
    args = manual.build_parser().parse_args(["--nnodes", "2", "--nproc-per-node", "4", "--master-addr", "10.0.0.1",
                                             "--launcher", "fakerun", "--node", "1", "--", "train.py", "DATA"])
    assert manual.render(args) == ("python -m fakerun.agent --hosts=2 --per-host=4 --leader=10.0.0.1:29500 "
                                   "--host-index=1 train.py DATA\n")


def test_a_registered_launcher_is_accepted_and_rendered_by_the_generator(fake):
    text = generate.render(generate.spec_from_args(["--nodes", "2", "--launcher", "fakerun"]))
    # one task per node runs the agent, told its node's rank on that node
    assert "#SBATCH --ntasks-per-node=1" in text
    assert 'exec "$0" -m hpc_imagenet.launch.agent fakerun.agent --host-index="$SLURM_NODEID" "$@"' in text
    assert '--hosts="$SLURM_JOB_NUM_NODES" --per-host="$PROCS_PER_NODE" --leader="$MASTER_ADDR":"$MASTER_PORT"' in text
    with pytest.raises(generate.GenerateError, match="one task per node"):
        generate.render(generate.spec_from_args(["--launcher", "fakerun", "--tasks-per-node", "4"]))


def test_an_unregistered_launcher_is_refused_naming_the_registered_ones():
    with pytest.raises(generate.GenerateError, match="unknown launcher 'fakerun'; choose one of mpi, torchrun, "
                                                      "launch, srun$"):
        generate.render(generate.spec_from_args(["--launcher", "fakerun"]))


def test_a_registered_launcher_is_listed_detected_and_joined_its_way(fake):
    assert launch_main.table().count("fakerun") == 1 and "FAKERUN_ID" in launch_main.table()
    env = environment.detect({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
                              "MASTER_PORT": "1234", "FAKERUN_ID": "7"})
    assert type(env) is FakeRunEnvironment
    assert launchers.init_method(env) == "tcp://h:1234"  # its entry's init, not torchrun's env://


def test_torchrun_workers_join_the_agents_store_and_the_others_rank_0s_address():
    torch_vars = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert launchers.init_method(environment.detect(torch_vars)) == "env://"
    mpi = environment.detect({**torch_vars, environment.MPI_MARKER: "openmpi"})
    assert (mpi.name, launchers.init_method(mpi)) == ("mpi/openmpi", "tcp://h:1")
    assert distributed.launchers is launchers  # the engine's process-group start reads the same table


def test_every_batch_file_launcher_can_be_started_there():
    for name in launchers.in_batch_files():
        entry = launchers.get(name)
        if entry.batch == launchers.NODE:  # the agent's module, its flags and a way to learn its node's rank
            assert entry.agent and entry.flags and (entry.c10d or entry.node_rank_flag), name


def test_torchrun_meets_at_c10d_in_batch_files_by_node_rank_when_typed_and_alone_for_the_harness():
    torchrun = launchers.get("torchrun")
    assert torchrun.flags(launchers.Node("1", "2")) == ["--nnodes=1", "--nproc-per-node=2", "--standalone"]
    c10d = torchrun.flags(launchers.Node("2", "4", "h", "1", rdzv_id="9"))
    assert c10d == ["--nnodes=2", "--nproc-per-node=4", "--rdzv-id=9", "--rdzv-backend=c10d", "--rdzv-endpoint=h:1"]
    assert torchrun.node_command(launchers.Node("2", "4", "h", "1", node_rank="1"), "/venv/python", ("t.py",)) == [
        "/venv/python", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4", "--node-rank=1",
        "--master-addr=h", "--master-port=1", "t.py"]

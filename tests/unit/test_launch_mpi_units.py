"""hpc_imagenet.launch.mpi's choices, one function at a time: the target to run, the world-size hints, the MPI
library's name, MASTER_ADDR/MASTER_PORT, the layout's environment, the thread budget and exit codes
(the real mpirun/mpiexec jobs are in tests/launch/test_launch_mpi.py)."""
from __future__ import annotations

import os
import socket
import sys
from unittest import mock

import pytest

from hpc_imagenet.launch import environment, mpi

def test_parse_target():
    assert mpi.parse_target([__file__, "-a", "x"]) == ("path", __file__, ["-a", "x"])
    assert mpi.parse_target(["--", __file__]) == ("path", __file__, [])
    assert mpi.parse_target(["-m", "hpc_imagenet.imagenet.run.train_command", "--help"]) == ("module",
                                                                                   "hpc_imagenet.imagenet.run.train_command",
                                                                                   ["--help"])
    for bad, text in ((["-m"], "-m needs a module"), (["-x", "s.py"], "unknown option -x"), ([], "usage")):
        with pytest.raises(mpi.MpiLaunchError, match=text):
            mpi.parse_target(bad)


def test_check_world_hints():
    mpi.check_world(2, {"OMPI_COMM_WORLD_SIZE": "2"}, "openmpi")
    mpi.check_world(1, {}, "openmpi")
    with pytest.raises(mpi.MpiLaunchError, match="started 4 ranks but MPI \\(openmpi\\) sees 1: srun needs "
                                                 "--mpi=pmix"):
        mpi.check_world(1, {"SLURM_STEP_NUM_TASKS": "4"}, "openmpi")
    with pytest.raises(mpi.MpiLaunchError, match="different MPI library than the launcher.*MPI4PY_LIBMPI"):
        mpi.check_world(1, {"PMI_SIZE": "2", "PMI_RANK": "0"}, "openmpi")


def test_library_names():
    assert mpi.library_name("Open MPI v5.0.11, package: Open MPI ...") == "openmpi"
    assert mpi.library_name("MPICH Version:      5.0.2\nMPICH Release date: ...") == "mpich"
    assert mpi.library_name("Intel(R) MPI Library 2021.10 for Linux* OS") == "intelmpi"
    assert mpi.library_name("MVAPICH2 Version      :	2.3.7 (MPICH 3.2)") == "mvapich"
    assert mpi.library_name("Something else") == "mpi"


def test_master_addr_choices(monkeypatch):
    assert mpi.choose_master_addr({"MASTER_ADDR": "10.9.9.9"}, ["10.0.0.1"], ["10.0.0.2"], 2) == "10.9.9.9"
    assert mpi.choose_master_addr({}, ["10.0.0.1"], [], 1) == "127.0.0.1"
    # several nodes: the source address of the route towards a peer (here: a fake routing table)
    routes = {"10.0.0.2": "10.0.0.1", "192.168.5.2": "192.168.5.1"}
    monkeypatch.setattr(mpi, "route_source", routes.get)
    assert mpi.choose_master_addr({}, ["192.168.5.1", "10.0.0.1"], ["10.0.0.2"], 2) == "10.0.0.1"
    # a route through loopback (127.0.1.1 in /etc/hosts style) is never used
    monkeypatch.setattr(mpi, "route_source", lambda peer: "127.0.1.1")
    assert mpi.choose_master_addr({}, ["10.0.0.1"], ["10.0.0.2"], 2) == "10.0.0.1"
    with pytest.raises(mpi.MpiLaunchError, match="no address but loopback.*export MASTER_ADDR"):
        mpi.choose_master_addr({}, [], ["10.0.0.2"], 2)


def test_local_addresses_and_routes_are_never_loopback():
    for addr in mpi.local_addresses():
        assert not addr.startswith("127.") and socket.inet_aton(addr)
    assert mpi.route_source("127.0.0.1") == "127.0.0.1"


def test_master_port_choices():
    assert mpi.choose_master_port({"MASTER_PORT": "23456", "SLURM_JOB_ID": "5"}) == 23456
    assert mpi.choose_master_port({"SLURM_JOB_ID": "5"}) == environment.derive_port("5")
    port = mpi.choose_master_port({})
    with socket.socket() as s:
        s.bind(("", port))  # it was free
    with pytest.raises(mpi.MpiLaunchError, match="MASTER_PORT='x' is not a port number"):
        mpi.choose_master_port({"MASTER_PORT": "x"})


def test_layout_environ_is_what_detect_reads():
    layout = mpi.Layout(rank=5, world_size=8, local_rank=1, local_world_size=4, node_rank=1, num_nodes=2,
                        master_addr="10.0.0.1", master_port=23456, library="mpich")
    with mock.patch.dict(os.environ, {**layout.environ(), "PMI_RANK": "5", "PMI_SIZE": "8"}, clear=True):
        env = environment.detect()
    assert env.name == "mpi/mpich"
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size, env.node_rank) == (5, 8, 1, 4, 1)
    assert (env.master_addr, env.master_port) == ("10.0.0.1", 23456)


def test_thread_budget_shares_the_node(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert mpi.thread_budget(4) == 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})  # bound to one core by mpirun
    assert mpi.thread_budget(4) == 1


def test_exit_codes(capsys):
    assert mpi.exit_code(SystemExit()) == 0
    assert mpi.exit_code(SystemExit(3)) == 3
    assert mpi.exit_code(SystemExit("bad thing")) == 1
    assert capsys.readouterr().err == "bad thing\n"


def test_loaded_library_never_loads_mpi():
    with mock.patch.dict(sys.modules):
        sys.modules.pop("mpi4py.MPI", None)
        assert mpi.loaded_library() is None
        assert "mpi4py.MPI" not in sys.modules

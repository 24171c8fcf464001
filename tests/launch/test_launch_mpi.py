"""hpc_imagenet.launch.mpi: its error paths, then real jobs: Open MPI's ``mpirun -np 2`` and MPICH's ``mpiexec -n 2``
run hpc_imagenet.launch.mpi with the DDP script and train, and a failing rank brings the whole job down (its
choices, one function at a time, are in tests/unit/test_launch_mpi_units.py).

Open MPI is the system's (Debian's openmpi-bin/libopenmpi-dev, installed by the test setup where
missing), never a wheel in the venv; mpi4py is pointed at its library with MPI4PY_LIBMPI, so a venv
that still holds an MPI wheel cannot mix two MPIs. MPICH cannot share the system with Open MPI
(both own mpirun), so a session fixture installs the PyPI ``mpich`` wheel into
build/mpich-<version> with ``pip --prefix`` once (outside the venv), and the same mpi4py loads it
through MPI4PY_LIBMPI."""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from unittest import mock

import pytest

from hpc_imagenet.launch import mpi
from hpc_imagenet.slurm.localcluster import packages
from tests.helpers import PYTHON, REPO
from tests.launch.support import Job, assert_trained, clean_env, run_jobs, train_args

MPICH_VERSION = "5.0.2"
MPICH_PREFIX = REPO / "build" / f"mpich-{MPICH_VERSION}"

# Writes this rank's view (environment + what detect() makes of it) to OUT/rank<RANK>.json.
SHOW_ENV = """
import json, os, sys
from hpc_imagenet.launch import environment
env = environment.detect()
env.validate(0)
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "LAUNCH_MPI", "OMP_NUM_THREADS")
view = {k: os.environ.get(k) for k in keys}
view.update(name=env.name, argv=sys.argv, main=__name__)
with open(os.path.join(sys.argv[1], "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(view, f)
"""
# Rank 1 fails at once; rank 0 would sleep far past the test's deadline unless the job is aborted.
FAIL_ONE = """
import os, time
if os.environ["RANK"] == "1":
    raise ValueError("rank 1 breaks")
time.sleep(300)
"""


# ----------------------------------------------------------------------------- launchers

@pytest.fixture(scope="session")
def openmpi() -> Dict[str, str]:
    """The system Open MPI's mpirun and the environment that makes mpi4py load its libmpi."""
    try:
        mpirun = packages.system_mpirun()
        return {"mpirun": mpirun, "MPI4PY_LIBMPI": packages.openmpi_library(mpirun)}
    except (FileNotFoundError, RuntimeError) as e:
        pytest.skip(f"no system Open MPI: {e}")


def openmpi_run(openmpi: Dict[str, str]) -> List[str]:
    return [openmpi["mpirun"], "-np", "2", "--oversubscribe"]


@pytest.fixture(scope="session")
def mpich() -> Dict[str, str]:
    """MPICH's mpiexec and the environment that makes mpi4py load MPICH's libmpi."""
    MPICH_PREFIX.parent.mkdir(parents=True, exist_ok=True)
    with open(MPICH_PREFIX.parent / ".mpich.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once install it once
        if not (MPICH_PREFIX / "bin" / "mpiexec").exists():
            staging = MPICH_PREFIX.with_name(MPICH_PREFIX.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            result = subprocess.run([PYTHON, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                                     "--prefix", str(staging), f"mpich=={MPICH_VERSION}"],
                                    capture_output=True, text=True, timeout=300)
            if result.returncode:
                pytest.skip(f"cannot install the mpich wheel (no package index?): {result.stderr.strip()[-300:]}")
            staging.rename(MPICH_PREFIX)
    return {"mpiexec": str(MPICH_PREFIX / "bin" / "mpiexec"),
            "MPI4PY_LIBMPI": str(MPICH_PREFIX / "lib" / "libmpi.so.12")}


def mpich_run(mpich: Dict[str, str]) -> List[str]:
    return [mpich["mpiexec"], "-n", "2"]


def run_mpi(tmp_path: Path, launcher: List[str], args: List[str], timeout_s: float = 150,
            **env: str) -> Tuple[Optional[int], str]:
    """(exit status or None when it outlived TIMEOUT_S, output) of LAUNCHER python -m hpc_imagenet.launch.mpi ARGS."""
    job = Job([*launcher, PYTHON, "-m", "hpc_imagenet.launch.mpi", *args], clean_env(**env), tmp_path / "mpi.log")
    code, = run_jobs([job], timeout_s)
    return code, job.output


LAUNCHERS = {"openmpi": lambda request: (openmpi_run(request.getfixturevalue("openmpi")),
                                          {"MPI4PY_LIBMPI": request.getfixturevalue("openmpi")["MPI4PY_LIBMPI"]}),
             "mpich": lambda request: (mpich_run(request.getfixturevalue("mpich")),
                                       {"MPI4PY_LIBMPI": request.getfixturevalue("mpich")["MPI4PY_LIBMPI"]})}


@pytest.fixture(params=sorted(LAUNCHERS))
def launcher(request):
    """(flavour, argv prefix, extra environment) for each real MPI."""
    argv, env = LAUNCHERS[request.param](request)
    return request.param, argv, env


# ----------------------------------------------------------------------------- real jobs

@pytest.mark.mpi
def test_ranks_see_torch_variables(tmp_path, launcher):
    flavour, argv, env = launcher
    script = tmp_path / "show env.py"  # a space in the path on purpose
    script.write_text(SHOW_ENV)
    code, output = run_mpi(tmp_path, argv, [str(script), str(tmp_path)], timeout_s=90, **env)
    assert code == 0, output[-3000:]
    views = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, view in enumerate(views):
        assert view["name"] == f"mpi/{flavour}" and view["main"] == "__main__"
        assert view["argv"] == [str(script), str(tmp_path)]
        assert (view["RANK"], view["WORLD_SIZE"], view["LOCAL_RANK"], view["LOCAL_WORLD_SIZE"]) == \
            (str(rank), "2", str(rank), "2")
        assert (view["GROUP_RANK"], view["GROUP_WORLD_SIZE"], view["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
        assert int(view["OMP_NUM_THREADS"]) >= 1
    assert views[0]["MASTER_PORT"] == views[1]["MASTER_PORT"]  # rank 0's choice, broadcast


@pytest.mark.mpi
def test_ddp_training_under_mpi(tmp_path, demo_data, launcher):
    flavour, argv, env = launcher
    run_dir = tmp_path / "run"
    code, output = run_mpi(tmp_path, argv, ["imagenet/imagenet_ddp.py", *train_args(run_dir, demo_data), "-p", "1"],
                           TERM="xterm", **env)
    assert code == 0, output[-4000:]
    record = assert_trained(run_dir, world_size=2, environment=f"mpi/{flavour}")
    assert record["dist"]["backend"] == "gloo"
    ran = record["environment"]["mpi"]  # the library hpc_imagenet.launch.mpi initialised, as mpi4py reports it
    assert ran["library"].startswith({"openmpi": "Open MPI v", "mpich": "MPICH Version:"}[flavour]), ran
    assert ran["file"] == os.path.realpath(env["MPI4PY_LIBMPI"]) and re.fullmatch(r"\d\.\d", ran["standard"])
    # Open MPI gives its ranks a pty even when its output goes to a file: still one line per report
    raw = (tmp_path / "mpi.log").read_bytes()
    assert re.search(rb"Epoch: \[0\]\[1/\d\]", raw) and b"\r" not in raw, raw[-2000:]


@pytest.mark.mpi
def test_a_failing_rank_aborts_the_job(tmp_path, launcher):
    flavour, argv, env = launcher
    script = tmp_path / "fail.py"
    script.write_text(FAIL_ONE)
    code, output = run_mpi(tmp_path, argv, [str(script)], timeout_s=60, **env)
    assert code is not None, "rank 0 kept running after rank 1 failed: the job was not aborted"
    assert code != 0
    assert "ValueError: rank 1 breaks" in output
    assert "hpc_imagenet.launch.mpi: rank 1 failed (exit status 1); aborting all 2 ranks" in output
    assert "hpc_imagenet/launch/mpi.py" not in output  # the traceback starts in the script


@pytest.mark.mpi
@pytest.mark.skipif(__import__("torch").distributed.is_mpi_available(), reason="this torch has an MPI backend")
def test_dist_backend_mpi_without_torch_mpi_names_the_alternative(tmp_path, demo_data, openmpi):
    args = train_args(tmp_path / "run", demo_data)
    args[args.index("gloo")] = "mpi"
    code, output = run_mpi(tmp_path, openmpi_run(openmpi), ["imagenet/imagenet_ddp.py", *args], timeout_s=90,
                           MPI4PY_LIBMPI=openmpi["MPI4PY_LIBMPI"])
    assert code not in (0, None)
    assert "no MPI backend" in output and "use --dist-backend nccl (GPU) or gloo (CPU)" in output
    assert "Traceback" not in output


def one_line_error(result: subprocess.CompletedProcess, text: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert text in result.stderr and "Traceback" not in result.stderr


def launch_mpi_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "hpc_imagenet.launch.mpi", *args], cwd=REPO, env=clean_env(**env),
                          capture_output=True, text=True, timeout=90)


def test_outside_mpi_is_a_one_line_error(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    one_line_error(launch_mpi_cli(tmp_path, str(script)), "not started by an MPI launcher; usage: mpirun -np N")
    one_line_error(launch_mpi_cli(tmp_path), "usage: mpirun -np N python -m hpc_imagenet.launch.mpi SCRIPT")
    one_line_error(launch_mpi_cli(tmp_path, "missing.py"), "no such script: missing.py")


@pytest.mark.mpi
def test_mpi4py_library_not_matching_the_launcher(tmp_path):
    """A launcher said 2 ranks but this MPI sees itself alone: mpi4py uses another MPI."""
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    result = launch_mpi_cli(tmp_path, str(script), PMI_SIZE="2", PMI_RANK="0")
    one_line_error(result, "the launcher started 2 ranks but MPI")
    assert "ran" not in result.stdout


@pytest.mark.mpi
def test_library_probe_names_the_library_without_initialising_mpi(openmpi):
    """What a batch file logs: the library mpi4py loads (here the system Open MPI's), MPI not initialised."""
    probe = ("from hpc_imagenet.launch import mpi; print(mpi.probe_library()); "
             "from mpi4py import MPI; print('initialised', MPI.Is_initialized())")
    out = subprocess.run([PYTHON, "-c", probe], cwd=REPO, env=clean_env(MPI4PY_LIBMPI=openmpi["MPI4PY_LIBMPI"]),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line, initialised = out.stdout.splitlines()
    assert re.fullmatch(r"mpi4py \S+ loads Open MPI v\S+, .* from (\S+)", line), line
    assert line.endswith(os.path.realpath(openmpi["MPI4PY_LIBMPI"])) and initialised == "initialised False"
    cli = launch_mpi_cli(Path("."), "--library", MPI4PY_LIBMPI=openmpi["MPI4PY_LIBMPI"])
    assert cli.returncode == 0 and cli.stdout.strip() == line


def test_mpi4py_missing_is_a_one_line_error(capsys):
    with mock.patch.dict(sys.modules, {"mpi4py": None}), \
            mock.patch.dict(os.environ, {"OMPI_COMM_WORLD_SIZE": "2"}, clear=True):
        assert mpi.main([__file__]) == mpi.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: hpc_imagenet.launch.mpi needs mpi4py: pip install mpi4py") and err.count("\n") == 1

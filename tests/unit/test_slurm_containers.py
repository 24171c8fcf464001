"""Batch files that run in a container image: each runtime's wrapping as its own documentation gives it for
multi-node GPU jobs (cited per case), and the settings refused before anything is submitted. The runtimes
themselves are stand-ins here (an executable of the runtime's name on PATH): what is checked is the text."""
import subprocess

import pytest

from slurm import generate


@pytest.fixture
def runtimes(tmp_path, monkeypatch):
    """Stand-ins for the runtimes' commands on PATH, and an image file and a data folder that exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("apptainer", "singularity", "podman-hpc", "ch-run"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").write_text("#!/bin/sh\necho '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    (tmp_path / "data").mkdir()
    (tmp_path / "pt.sif").write_bytes(b"image")
    return tmp_path


def _script(tmp_path, runtime, *more, image=None):
    argv = ["--nodes", "4", "--gpus-per-node", "4", "--variant", "amp", "--data", str(tmp_path / "data"),
            "--container", image or str(tmp_path / "pt.sif"), "--container-runtime", runtime,
            "--container-mounts", str(tmp_path), *more]
    text = generate.render(generate.spec_from_args(argv))
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0  # a script bash can read
    return text


def _launch_line(text):
    return next(line for line in text.splitlines() if line.lstrip().startswith(("srun ", '"$MPIRUN"')))


def test_apptainer_runs_each_task_with_the_gpus_and_the_mounts(runtimes):
    # apptainer.org/docs/user/main/gpu.html (--nv), bind_paths_and_mounts.html (--bind SRC[:DST],...)
    text = _script(runtimes, "apptainer")
    assert f"CONTAINER_IMAGE=${{CONTAINER_IMAGE:-{runtimes}/pt.sif}}" in text
    assert f'CONTAINER_MOUNTS=${{CONTAINER_MOUNTS:-"$REPO,{runtimes}"}}' in text
    line = _launch_line(text)
    assert ('--kill-on-bad-exit=1 apptainer exec --nv --bind "$CONTAINER_MOUNTS" --pwd "$PWD" "$CONTAINER_IMAGE" '
            "bash -c 'trap \"\" USR2 TERM; exec \"$0\" -m launch.agent torch.distributed.run") in line


def test_singularity_is_apptainers_command_line(runtimes):
    assert 'singularity exec --nv --bind "$CONTAINER_MOUNTS"' in _launch_line(_script(runtimes, "singularity"))


def test_pyxis_is_srun_flags(runtimes):
    # github.com/NVIDIA/pyxis: srun --container-image --container-mounts --container-workdir; a registry image
    line = _launch_line(_script(runtimes, "pyxis", image="nvcr.io#nvidia/pytorch:25.01-py3"))
    assert ('--kill-on-bad-exit=1 --container-image="$CONTAINER_IMAGE" --container-mounts="$CONTAINER_MOUNTS" '
            '--container-workdir="$PWD" bash -c') in line


def test_podman_hpc_gets_the_gpus_the_host_network_and_one_volume_a_mount(runtimes):
    # docs.nersc.gov/development/containers/podman-hpc/: podman-hpc run --gpu, -v SRC:DST, -w DIR
    text = _script(runtimes, "podman-hpc")
    assert 'CONTAINER_VOLUMES+=(-v "$mount")' in text and "mount=$mount:$mount" in text
    assert ('podman-hpc run --rm --gpu --net host --ipc host --env-host "${CONTAINER_VOLUMES[@]}" -w "$PWD" '
            '"$CONTAINER_IMAGE" bash -c') in _launch_line(text)


def test_charliecloud_binds_each_mount(runtimes):
    # hpc.github.io/charliecloud/ch-run.html: ch-run -b SRC[:DST] -c DIR IMAGE -- CMD
    text = _script(runtimes, "charliecloud")
    assert 'CONTAINER_BINDS+=(-b "$mount")' in text
    assert 'ch-run "${CONTAINER_BINDS[@]}" -c "$PWD" "$CONTAINER_IMAGE" -- bash -c' in _launch_line(text)


def test_the_site_mpirun_starts_the_images_program_per_rank(runtimes):
    # apptainer.org/docs/user/main/mpi.html: the hybrid model, the host's mpirun outside the container
    line = _launch_line(_script(runtimes, "apptainer", "--launcher", "mpi", "--module", "openmpi"))
    assert line.lstrip().startswith('"$MPIRUN" -np') and 'apptainer exec --nv' in line
    assert line.index("apptainer exec") < line.index('"$PYTHON" -m launch.mpi')
    pmix = _launch_line(_script(runtimes, "pyxis", "--launcher", "mpi", "--mpi-starter", "srun"))
    assert pmix.lstrip().startswith("srun --mpi=pmix ") and "--container-image" in pmix


@pytest.mark.parametrize("more, says", [
    (["--container-runtime", "apptainer", "--container", "missing.sif"], "--container missing.sif does not exist"),
    (["--container-runtime", "pyxis", "--container", "img:1", "--launcher", "mpi"],
     "Pyxis starts containers through srun"),
    (["--container-runtime", "apptainer", "--container", "img:1", "--venv", ".venv"],
     "a container brings its own Python"),
    (["--container-runtime", "apptainer", "--container", "img:1", "--data", "/elsewhere/imagenet"],
     "DATA /elsewhere/imagenet is not under any --container-mounts folder"),
    (["--container-mounts", "/data"], "need --container IMAGE"),
])
def test_a_setting_that_cannot_work_is_refused_in_one_line(runtimes, capsys, more, says):
    assert generate.main(["--data", str(runtimes / "data"), "--container-mounts", str(runtimes), *more]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_a_runtime_the_node_lacks_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: no runtime, no srun
    assert generate.main(["--container", "img:1", "--container-runtime", "charliecloud", "--data", "data"]) == 2
    assert "ch-run is not on this node's PATH" in capsys.readouterr().err
    assert generate.main(["--container", "img:1", "--data", "data"]) == 2
    assert "no container runtime on this node" in capsys.readouterr().err

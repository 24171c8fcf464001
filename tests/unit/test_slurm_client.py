"""hpc_imagenet.slurm.client without a cluster: how a queue entry reads, and the one-line errors of a machine without
SLURM's commands (the client on a real cluster: tests/cluster/test_slurm_client.py)."""
import pytest

from hpc_imagenet.slurm import client


def test_progress_words():
    assert client.progress(("PENDING", "Resources")) == "queued (Resources)"
    assert client.progress(("PENDING", "None")) == "queued"
    assert client.progress(("COMPLETING", "None")) == "running"
    assert client.progress(("COMPLETED", "None")) == client.DONE
    assert client.progress(None) == client.DONE  # gone from the queue


def test_no_slurm_on_path_is_one_line_with_the_fix(tmp_path):
    env = {"PATH": str(tmp_path)}  # an empty folder: no sbatch, squeue or scancel
    with pytest.raises(client.SlurmError, match="^sbatch is not on PATH; run this on a SLURM login node"):
        client.submit(options=["--wrap", "true"], text="", env=env)
    with pytest.raises(client.SlurmError, match="^squeue is not on PATH"):
        client.states(["1"], env=env)
    client.cancel(["1"], env=env)  # a cancel never raises: it is the way out of an error


def test_submit_takes_a_file_or_a_text():
    with pytest.raises(ValueError):
        client.submit()

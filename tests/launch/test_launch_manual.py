"""hpc_imagenet.launch.manual for real: the printed commands run as two local 'nodes' on 127.0.0.1 that rendezvous
and train (the printed text, its errors and --check: tests/unit/test_launch_manual_text.py)."""
from __future__ import annotations

import subprocess

import pytest

from hpc_imagenet.launch.ports import free_port
from tests.helpers import REPO
from tests.launch.support import (Job, assert_trained, clean_env, commands, printed, run_jobs, train_args,
                                  wait_for_port)


@pytest.mark.parametrize("launcher,environment", [("torchrun", "torchrun"), ("dist-url", "dist-url")])
def test_printed_commands_rendezvous_and_train(tmp_path, demo_data, launcher, environment):
    """Node 0 and node 1 on 127.0.0.1, each running exactly the printed lines (check included)."""
    port, run_dir = free_port(), tmp_path / "run"
    text = printed("--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
                   str(port), "--launcher", launcher, "--", "imagenet/imagenet_ddp.py",
                   *train_args(run_dir, demo_data))
    node0, check, node1 = commands(text)
    env = clean_env()
    master = Job(node0, env, tmp_path / "node0.log", shell=True)
    try:
        wait_for_port(port, 60, master)
        probe = subprocess.run(check, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0 and probe.stdout.startswith("ok: "), probe.stderr
        worker = Job(node1, env, tmp_path / "node1.log", shell=True)
    except BaseException:
        master.kill()
        raise
    codes = run_jobs([master, worker], timeout_s=150)
    assert codes == [0, 0], f"node 0:\n{master.output[-3000:]}\nnode 1:\n{worker.output[-3000:]}"
    record = assert_trained(run_dir, world_size=2, environment=environment)
    assert record["dist"]["nodes"] == 2

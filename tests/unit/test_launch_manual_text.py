"""hpc_imagenet.launch.manual without launching anything: the printed per-node commands (text, quoting, hostfiles,
one-line errors) and the reachability check against a local socket (the printed commands really
run as two local nodes in tests/launch/test_launch_manual.py)."""
from __future__ import annotations

import shlex
import socket
import subprocess
import threading

import pytest

from hpc_imagenet.launch import manual
from hpc_imagenet.launch.ports import free_port
from tests.helpers import PYTHON, REPO
from tests.launch.support import clean_env, commands, printed

SEED_ARGS = ["imagenet/imagenet_ddp_apex.py", "-a", "resnet50", "--b", "208", "--workers", "20",
             "--opt-level", "O2", "/home/shared/imagenet/raw/"]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "hpc_imagenet.launch.manual", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=clean_env())


# ----------------------------------------------------------------------------- printed text

def test_torchrun_commands_for_the_seed_example():
    text = printed("--nnodes", "2", "--nproc-per-node", "4", "--master-addr", "192.168.100.11",
                   "--master-port", "8888", "--", *SEED_ARGS)
    node0, check, node1 = commands(text)
    tail = " ".join(SEED_ARGS)
    assert node0 == ("torchrun --nnodes=2 --nproc-per-node=4 --node-rank=0 --master-addr=192.168.100.11 "
                     f"--master-port=8888 {tail}")
    assert node1 == node0.replace("--node-rank=0", "--node-rank=1")
    assert check == "python -m hpc_imagenet.launch.manual --check 192.168.100.11:8888"
    assert "# --- node 0 (192.168.100.11)" in text and "8 processes" in text


def test_launch_commands_match_the_seed_tutorial():
    """The seed's own `python -m torch.distributed.launch` lines, node by node."""
    text = printed("--nnodes", "2", "--nproc-per-node", "4", "--master-addr", "192.168.100.11",
                   "--master-port", "8888", "--launcher", "launch", "--", *SEED_ARGS)
    node0, _, node1 = commands(text)
    assert node1 == ("python -m torch.distributed.launch --nproc_per_node=4 --nnodes=2 --node_rank=1 "
                     "--master_addr=192.168.100.11 --master_port=8888 " + " ".join(SEED_ARGS))
    assert "--node_rank=0" in node0


def test_dist_url_commands():
    text = printed("--nnodes", "4", "--master-addr", "10.0.0.1", "--master-port", "23456", "--launcher",
                   "dist-url", "--", "imagenet/imagenet_ddp.py", "-a", "resnet50", "--dist-backend", "nccl",
                   "--desired-acc", "0.75", "/data")
    lines = commands(text)
    assert len(lines) == 4 + 3  # four nodes, a check before each of nodes 1-3
    assert lines[0] == ("python imagenet/imagenet_ddp.py --dist-url tcp://10.0.0.1:23456 --world-size 4 "
                        "--rank 0 -a resnet50 --dist-backend nccl --desired-acc 0.75 /data")
    assert [shlex.split(line)[7] for line in lines if "--rank" in line] == ["0", "1", "2", "3"]
    text = printed("--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "h", "--launcher", "dist-url",
                   "--python", "/opt/my env/bin/python", "--", "s.py")
    assert commands(text) == ["'/opt/my env/bin/python' s.py --dist-url tcp://h:29500 --world-size 1 --rank 0 "
                              "--procs-per-node 2"]


def test_awkward_arguments_survive_the_shell():
    """Paths with spaces, quotes and $ come back out of `sh -c` exactly as given."""
    nasty = ["s p.py", "--log-dir", "runs/it's here", '/data/"x" $HOME;rm', "", "a\\b"]
    text = printed("--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h", "--", *nasty)
    for line in commands(text):
        if "hpc_imagenet.launch.manual" in line:
            continue
        echoed = subprocess.run(["sh", "-c", "printf '%s\\0' " + line], capture_output=True, text=True,
                                check=True).stdout.split("\0")[:-1]
        assert echoed == shlex.split(line)
        assert echoed[-len(nasty):] == nasty


def test_chosen_python_runs_torchrun_as_a_module():
    text = printed("--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h", "--node", "1",
                   "--python", "/opt/venv/bin/python", "--", "t.py")
    assert text.startswith("/opt/venv/bin/python -m torch.distributed.run --nnodes=2 --nproc-per-node=1 "
                           "--node-rank=1 ")


def test_single_node_command_for_scripts():
    text = printed("--nnodes", "3", "--nproc-per-node", "8", "--master-addr", "n0", "--node", "2", "--", "t.py")
    assert text == "torchrun --nnodes=3 --nproc-per-node=8 --node-rank=2 --master-addr=n0 --master-port=29500 t.py\n"


def test_loopback_master_gets_a_warning_line():
    text = printed("--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--", "t.py")
    assert "loopback" in text
    assert "loopback" not in printed("--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "10.1.1.1",
                                     "--", "t.py")


def test_hostfile_prints_mpirun_with_matching_hostfile(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# our nodes\nnode-a\n\nnode-b slots=8  # fast one\n")
    text = printed("--hostfile", str(hosts), "--nproc-per-node", "4", "--", "imagenet/imagenet_ddp.py",
                   "--log-dir", "my runs", "/data")
    lines = commands(text)
    assert lines[0] == 'for h in node-a node-b; do ssh -o BatchMode=yes "$h" true || echo "cannot ssh to $h"; done'
    assert lines[1] == "printf '%s\\n' 'node-a slots=4' 'node-b slots=4' > hostfile.mpi"
    assert lines[2] == ("mpirun -np 8 --hostfile hostfile.mpi --map-by ppr:4:node python -m hpc_imagenet.launch.mpi "
                        "imagenet/imagenet_ddp.py --log-dir 'my runs' /data")
    written = subprocess.run(["sh", "-c", lines[1].replace("> hostfile.mpi", "")], capture_output=True,
                             text=True, check=True).stdout
    assert written == "node-a slots=4\nnode-b slots=4\n"
    mpich = commands(printed("--hostfile", str(hosts), "--nproc-per-node", "2", "--mpi", "mpich", "--", "t.py"))
    assert mpich[1:] == ["printf '%s\\n' node-a:2 node-b:2 > hostfile.mpi",
                         "mpiexec -n 4 -f hostfile.mpi -ppn 2 python -m hpc_imagenet.launch.mpi t.py"]


@pytest.mark.parametrize("argv,message", [
    (["--nnodes", "2", "--nproc-per-node", "4", "--", "t.py"], "--master-addr is required"),
    (["--nnodes", "2", "--master-addr", "h", "--", "t.py"], "--nproc-per-node is required"),
    (["--nnodes", "0", "--nproc-per-node", "1", "--master-addr", "h", "--", "t.py"], "--nnodes must be at least 1"),
    (["--nnodes", "2", "--nproc-per-node", "0", "--master-addr", "h", "--", "t.py"], "--nproc-per-node must be"),
    (["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h"], "no training script"),
    (["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h", "--master-port", "0", "--", "t.py"],
     "--master-port 0 is not in 1-65535"),
    (["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h", "--launcher", "dist-url", "--", "t.py",
      "--rank", "1"], "remove --rank from the script's arguments"),
    (["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h", "--launcher", "mpi", "--", "t.py"],
     "--launcher mpi needs --hostfile"),
    (["--hostfile", "/nonexistent/hosts", "--nproc-per-node", "1", "--", "t.py"], "cannot read --hostfile"),
    (["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "h", "--node", "2", "--", "t.py"],
     "--node 2 is not in 0..1"),
    (["--check", "nohost"], "--check wants HOST:PORT"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    result = cli(*argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_hostfile_errors(tmp_path):
    empty, twice, two = tmp_path / "empty", tmp_path / "twice", tmp_path / "two"
    empty.write_text("# nothing\n\n")
    twice.write_text("a\nb\na\n")
    two.write_text("a\nb\n")
    with pytest.raises(manual.ManualError, match="lists no hosts"):
        manual.read_hostfile(str(empty))
    with pytest.raises(manual.ManualError, match="lists a host twice"):
        manual.read_hostfile(str(twice))
    with pytest.raises(manual.ManualError, match="--nnodes 3 but --hostfile lists 2 hosts"):
        printed("--hostfile", str(two), "--nnodes", "3", "--nproc-per-node", "1", "--", "t.py")
    with pytest.raises(manual.ManualError, match="drop --launcher torchrun"):
        printed("--hostfile", str(two), "--launcher", "torchrun", "--nproc-per-node", "1", "--", "t.py")


# ----------------------------------------------------------------------------- --check

def test_check_reaches_a_listening_master_that_starts_late():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        # the master starts listening a moment after the check begins: the check retries
        timer = threading.Timer(1.0, server.listen)
        timer.start()
        result = cli("--check", f"127.0.0.1:{port}", "--timeout", "20")
        timer.join()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok: {socket.gethostname()} reaches 127.0.0.1:{port}"


def test_check_fails_with_a_hint_when_nothing_listens():
    port = free_port()
    result = cli("--check", f"127.0.0.1:{port}", "--timeout", "1")
    assert result.returncode == 2
    assert f"cannot reach 127.0.0.1:{port}" in result.stderr and "start node 0 first" in result.stderr
    assert result.stderr.count("\n") == 1




def test_a_recipe_reaches_every_node_command():
    text = printed("--nnodes", "2", "--nproc-per-node", "4", "--master-addr", "192.168.100.11",
                   "--", "imagenet/imagenet_ddp.py", "-a", "resnet50", "-b", "208", "--recipe", "mlperf", "/data")
    node0, _, node1 = commands(text)
    assert node0.endswith("imagenet/imagenet_ddp.py -a resnet50 -b 208 --recipe mlperf /data")
    assert node1.endswith("--recipe mlperf /data")

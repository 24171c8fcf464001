"""With a process group, only rank 0 lists the dataset; the others get its lists, or its error."""
import re
import signal
import subprocess

import pytest

from hpc_imagenet.imagenet.data import demo
from tests.helpers import BIN, PYTHON, REPO, TINY, child_env, explain, free_port, read_run, run, script

# Runs the ddp script with scan.scan_dataset wrapped so that each call leaves a file naming the
# rank that made it; torch.distributed and the scan itself are the real ones.
SPY = """import os, sys
sys.path.insert(0, {repo!r})
from hpc_imagenet.imagenet.run import train_command
from hpc_imagenet.imagenet.data import scan
real_scan = scan.scan_dataset
def spy(root):
    with open(os.path.join({marks!r}, "scanned-by-rank-" + os.environ["RANK"]), "a") as f:
        f.write(root + "\\n")
    return real_scan(root)
scan.scan_dataset = spy
sys.exit(train_command.main("ddp"))
"""


def test_torchrun_only_rank0_scans_and_both_ranks_train(jpeg_data, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    wrapper = tmp_path / "spy_ddp.py"
    wrapper.write_text(SPY.format(repo=str(REPO), marks=str(marks)))
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", wrapper, *TINY, "--epochs", "1",
                "--log-dir", tmp_path / "run", jpeg_data], timeout=300)
    assert proc.returncode == 0, explain(proc)
    assert sorted(p.name for p in marks.iterdir()) == ["scanned-by-rank-0"], "only rank 0 may walk the dataset"
    assert (marks / "scanned-by-rank-0").read_text() == f"{jpeg_data}\n", "rank 0 scanned once"
    record = read_run(tmp_path / "run")
    assert record["status"] == "finished" and record["dist"]["world_size"] == 2
    assert record["epochs"][-1]["val_samples"] == 21  # rank 1 validated its share from rank 0's lists
    sums = record["final"]["weight_checksums"]
    assert len(sums) == 2 and sums[0] == sums[1]


@pytest.fixture
def small_data(tmp_path):
    return demo.generate(tmp_path / "data", classes=2, train_per_class=8, val_per_class=2, size=(32, 32))


def _mismatch_classes(data):
    """val's class folders no longer match train's (each bad-data error's own line is test_engine_errors')."""
    (data / "val" / "class_001").rename(data / "val" / "zebra")
    return "different class folders"


def test_bad_data_under_torchrun_every_rank_fails_with_rank0s_line(small_data, tmp_path):
    words = _mismatch_classes(small_data)
    # --tee 3 prefixes each worker's lines with [default<rank>]: so the two ranks can be told apart.
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", "--tee", "3", script("imagenet_ddp.py"),
                *TINY, "--epochs", "1", "--log-dir", tmp_path / "run", small_data], timeout=90)
    assert proc.returncode != 0, explain(proc)
    lines = (proc.stdout + proc.stderr).splitlines()
    errors = {rank: [line for line in lines if line.startswith(f"[default{rank}]:error: ")] for rank in (0, 1)}
    assert all(len(e) == 1 for e in errors.values()), explain(proc)
    assert errors[0][0].partition(":")[2] == errors[1][0].partition(":")[2], "every rank raises rank 0's error"
    assert words in errors[1][0]
    assert not [line for line in lines if re.match(r"\[default\d\]:Traceback", line)], explain(proc)


def test_bad_data_with_dist_url_each_process_exits_2(small_data, tmp_path):
    """Two independent processes (no launcher to tear the job down): neither may hang or crash."""
    _mismatch_classes(small_data)
    port = free_port()
    procs = [subprocess.Popen([PYTHON, script("imagenet_ddp.py"), *TINY, "--dist-url", f"tcp://127.0.0.1:{port}",
                               "--world-size", "2", "--rank", str(rank), "--log-dir", str(tmp_path / "run"),
                               str(small_data)], cwd=REPO, env=child_env(PYTHONFAULTHANDLER="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    except subprocess.TimeoutExpired:  # a hang: SIGABRT makes faulthandler print where each rank is stuck
        for p in procs:
            p.send_signal(signal.SIGABRT)
        stuck = [f"--- rank {rank}\n{p.communicate(timeout=30)[1][-4000:]}" for rank, p in enumerate(procs)]
        pytest.fail("a rank did not exit within 90 s of the bad data:\n" + "\n".join(stuck))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for p, (out, err) in zip(procs, outs):
        shown = f"exit {p.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
        assert p.returncode == 2, shown
        assert "Traceback" not in err, shown
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "different class folders" in errors[0] and "zebra" in errors[0], shown

"""Bad input ends with one clear line and a non-zero exit; a dying rank ends the whole job."""
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager

import pytest

from hpc_imagenet.imagenet.data import demo
from tests.helpers import PYTHON, REPO, TINY, child_env, explain, free_port, read_run, script
from tests.warm_start import warm_python


def _fails_with_one_line(proc, *words):
    assert proc.returncode == 2, explain(proc)
    assert "Traceback" not in proc.stderr, explain(proc)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, explain(proc)
    for word in words:
        assert word in errors[0], f"{word!r} not in {errors[0]!r}"
    return errors[0]


def _train(data, tmp_path, *extra):
    return warm_python(script("imagenet_nd.py"), *TINY, "--epochs", "1", "--log-dir", tmp_path / "run", *extra, data)


@pytest.fixture
def small_data(tmp_path):
    return demo.generate(tmp_path / "data", classes=2, train_per_class=8, val_per_class=2, size=(32, 32))


def _first_image(root, split="train"):
    return sorted((root / split / "class_000").iterdir())[0]


def test_missing_dataset_dir(tmp_path):
    _fails_with_one_line(_train(tmp_path / "nope", tmp_path), "does not exist", "--dummy")


def test_missing_val_split(small_data, tmp_path):
    shutil.rmtree(small_data / "val")
    _fails_with_one_line(_train(small_data, tmp_path), "val is missing", "class sub-folders")


def test_no_class_folders(tmp_path):
    for split in ("train", "val"):
        (tmp_path / "d" / split).mkdir(parents=True)
    _fails_with_one_line(_train(tmp_path / "d", tmp_path), "no class folders")


def test_train_and_val_classes_differ(small_data, tmp_path):
    (small_data / "val" / "class_001").rename(small_data / "val" / "zebra")
    _fails_with_one_line(_train(small_data, tmp_path), "different class folders", "zebra")


def test_class_folders_without_images(tmp_path):
    for split in ("train", "val"):
        (tmp_path / "d" / split / "a").mkdir(parents=True)
        (tmp_path / "d" / split / "a" / "notes.txt").write_text("x")
    _fails_with_one_line(_train(tmp_path / "d", tmp_path), "no images")


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "unreadable"])
def test_bad_image_is_fatal_and_named_unless_skipped(damage, small_data, tmp_path):
    bad = _first_image(small_data)
    if damage == "corrupt":
        bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" * 20)
    elif damage == "truncated":
        bad.write_bytes(bad.read_bytes()[:200])
    else:  # root reads any file, so a dangling link stands in for an unreadable one
        bad.unlink()
        bad.symlink_to(tmp_path / "gone.JPEG")
    _fails_with_one_line(_train(small_data, tmp_path), "cannot read image", bad.name, "--skip-bad-images")
    skipped = _train(small_data, tmp_path, "--skip-bad-images")
    assert skipped.returncode == 0, explain(skipped)
    assert "skipping unreadable image" in skipped.stderr and bad.name in skipped.stderr


def test_pretrained_without_network_fails_fast(small_data, tmp_path):
    # an empty weights cache; the download goes through a proxy port nothing listens on, so it is
    # refused at once, as on a compute node without network (the machine's own network may drop
    # packets instead, which the engine's 30 s timeout ends)
    refused = "http://127.0.0.1:9"
    env = child_env(TORCH_HOME=str(tmp_path / "torch_home"), https_proxy=refused, HTTPS_PROXY=refused, no_proxy="")
    start = time.monotonic()
    proc = warm_python(script("imagenet_nd.py"), *TINY, "--pretrained", "--epochs", "1", "--log-dir", tmp_path / "r",
                  small_data, env=env, timeout=120)
    _fails_with_one_line(proc, "could not download pretrained weights", "drop --pretrained")
    assert time.monotonic() - start < 90


def test_unknown_model(small_data, tmp_path):
    _fails_with_one_line(_train(small_data, tmp_path, "-a", "resnet51"), "unknown model", "resnet50")


def test_apex_requested_but_missing(small_data, tmp_path):
    proc = warm_python(script("imagenet_ddp_apex.py"), *TINY, "--amp-backend", "apex", "--epochs", "1",
                  "--log-dir", tmp_path / "r", small_data)
    _fails_with_one_line(proc, "Apex", "25.05", "--amp-backend native")


def test_nccl_on_a_cpu_machine(small_data, tmp_path):
    proc = warm_python(script("imagenet_ddp.py"), *TINY[:-2], "--dist-backend", "nccl", "--dist-url",
                  f"tcp://127.0.0.1:{free_port()}", "--world-size", "1", "--rank", "0", "--log-dir", tmp_path / "r",
                  small_data)
    _fails_with_one_line(proc, "nccl needs CUDA", "gloo")


def test_rendezvous_timeout_is_reported(small_data, tmp_path):
    proc = warm_python(script("imagenet_ddp.py"), *TINY, "--dist-url", f"tcp://127.0.0.1:{free_port()}",
                  "--world-size", "2", "--rank", "0", "--dist-timeout", "5", "--log-dir", tmp_path / "r", small_data,
                  timeout=120)
    _fails_with_one_line(proc, "could not join the process group", "within 5s")


def _start_node(rank, port, data, run_dir, log, *extra):
    args = [PYTHON, script("imagenet_ddp.py"), *TINY, "--dist-url", f"tcp://127.0.0.1:{port}", "--world-size", "2",
            "--rank", str(rank), "--epochs", "50", "-p", "1", "--log-dir", str(run_dir), *extra, str(data)]
    return subprocess.Popen(args, cwd=REPO, env=child_env(), stdout=log, stderr=subprocess.STDOUT, text=True)


@contextmanager
def _two_ranks_training(data, tmp_path, *extra):
    """Rank 0 and rank 1 (--dist-url, one process each) once rank 0 has printed its first step; both
    killed afterwards."""
    port = free_port()
    log0, log1 = open(tmp_path / "n0.log", "w+"), open(tmp_path / "n1.log", "w+")
    node0 = _start_node(0, port, data, tmp_path / "run", log0, *extra)
    node1 = _start_node(1, port, data, tmp_path / "run", log1, *extra)
    try:
        deadline = time.monotonic() + 180
        while "Epoch: [0][1/" not in (tmp_path / "n0.log").read_text():
            assert time.monotonic() < deadline and node0.poll() is None, (tmp_path / "n0.log").read_text()
            time.sleep(0.2)  # polling a log file, not synchronising on time
        yield node0, node1
    finally:
        for p in (node0, node1):
            p.kill()
            p.wait()
        log0.close()
        log1.close()


def test_killing_one_rank_ends_the_other(small_data, tmp_path):
    with _two_ranks_training(small_data, tmp_path) as (node0, node1):
        node1.kill()
        started = time.monotonic()
        code = node0.wait(timeout=120)
        assert code != 0, "the surviving rank must fail, not hang or pretend success"
        assert time.monotonic() - started < 120


def test_a_stopped_rank_is_named_within_the_collective_timeout(small_data, tmp_path):
    """Rank 1 stopped (SIGSTOP: alive, its sockets open): rank 0's collective times out after
    --collective-timeout (not --dist-timeout's 30 minutes) and one line names rank 1."""
    timeout_s, grace_s = 10, 5  # grace: how long the ranks that arrived wait for the others at the store
    with _two_ranks_training(small_data, tmp_path, "--collective-timeout", str(timeout_s)) as (node0, node1):
        node1.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        code = node0.wait(timeout=timeout_s + grace_s + 60)
        took = time.monotonic() - started
        text = (tmp_path / "n0.log").read_text()
        errors = [line for line in text.splitlines() if line.startswith("error: ")]
        assert code == 1 and len(errors) == 1 and "Traceback" not in text, text[-3000:]
        assert "rank(s) 1 (" in errors[0] and "did not arrive" in errors[0] and f"for {timeout_s}s" in errors[0]
        assert took < timeout_s + grace_s + 30, f"ended {took:.0f}s after the stop"


def test_a_zero_collective_timeout_is_one_line(small_data, tmp_path):
    _fails_with_one_line(_train(small_data, tmp_path, "--collective-timeout", "0"), "--collective-timeout 0",
                         "positive seconds")


def _no_bf16_cpuinfo(tmp_path):
    """A CPU without bf16 instructions, simulated: /proc/cpuinfo's flags without avx512_bf16 or amx_bf16."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: an older x86\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n")
    return cpuinfo


def _train_bf16_without_instructions(tmp_path, mode):
    return warm_python(script("imagenet_nd.py"), *TINY, "--dummy", "--dummy-size", "16", "--num-classes", "4",
                       "--epochs", "1", "--val-steps", "1", "--opt-level", "O1", "--amp-dtype", "bfloat16",
                       "--log-dir", tmp_path / "run",
                       env=child_env(HPC_IMAGENET_CPUINFO=str(_no_bf16_cpuinfo(tmp_path)), HPC_IMAGENET_CPU_BF16=mode))


def test_bf16_on_a_cpu_without_bf16_instructions_runs_fp32_and_says_so(tmp_path):
    proc = _train_bf16_without_instructions(tmp_path, "auto")
    assert proc.returncode == 0, explain(proc)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "no bfloat16 instructions" in line]
    assert len(said) == 1 and "running fp32 (--opt-level O0) instead of O1" in said[0], explain(proc)
    assert "HPC_IMAGENET_CPU_BF16=emulate runs bf16 anyway" in said[0]
    assert "precision fp32" in proc.stdout + proc.stderr, explain(proc)
    ran = read_run(tmp_path / "run")["precision"]
    assert (ran["requested"], ran["label"], ran["level"]) == ("O1-bf16", "fp32", "O0")


def test_bf16_on_a_cpu_without_bf16_instructions_runs_emulated_when_asked(tmp_path):
    proc = _train_bf16_without_instructions(tmp_path, "emulate")
    assert proc.returncode == 0, explain(proc)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "no bfloat16 instructions" in line]
    assert len(said) == 1 and "running O1 in emulated bf16" in said[0], explain(proc)
    assert "precision O1-bf16" in proc.stdout + proc.stderr, explain(proc)
    ran = read_run(tmp_path / "run")["precision"]
    assert (ran["requested"], ran["label"], ran["level"]) == ("O1-bf16", "O1-bf16", "O1")

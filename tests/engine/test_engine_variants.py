"""The four scripts, torchrun, torch.distributed.launch and the seed's command lines, run for real."""
import pytest

from hpc_imagenet.imagenet import config
from tests.helpers import BIN, PYTHON, TINY, event_files, explain, free_port, read_run, run, script, tb_scalars
from tests.warm_start import warm_python

EPOCH_TAGS = {"Loss/train", "Loss/val", "Top1/train", "Top1/val", "Top5/train", "Top5/val", "Lr",
              "Throughput/train", "Throughput/val", "Time/train", "Time/val"}


@pytest.mark.parametrize("name, extra", [
    ("imagenet_nd.py", []),
    ("imagenet_dp.py", []),
    ("imagenet_ddp.py", []),
    ("imagenet_ddp_apex.py", ["--opt-level", "O1", "--steps-per-epoch", "2"]),  # bf16 on a CPU is slow: 2 steps
])
def test_each_script_trains_two_epochs(name, extra, jpeg_data, tmp_path):
    proc = warm_python(script(name), *TINY, "--epochs", "2", "-p", "2", "--log-dir", tmp_path, *extra, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["status"] == "finished" and record["final"]["epochs_run"] == 2
    assert [row["epoch"] for row in record["epochs"]] == [0, 1]
    assert record["epochs"][-1]["val_samples"] == 21  # every validation image, once
    assert (tmp_path / "checkpoint.pth.tar").is_file() and (tmp_path / "model_best.pth.tar").is_file()
    assert "global batch 8" in proc.stdout
    assert record["data_decoder"] == {"backend": "fast", "region_decoder": True}  # tests build it in place
    if name == "imagenet_dp.py":
        assert "DataParallel: no CUDA GPU" in proc.stderr
    if name == "imagenet_ddp_apex.py":
        assert record["precision"]["label"] == "O1-bf16" and record["precision"]["backend"] == "native"


def test_python_dash_m_picks_the_variant(jpeg_data, tmp_path):
    proc = warm_python("-m", "hpc_imagenet.imagenet", "--variant", "nd", *TINY, "--epochs", "1", "--steps-per-epoch",
                       "2",
                  "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    assert read_run(tmp_path)["config"]["run"]["variant"] == "nd"


def test_torchrun_two_processes_rank0_tensorboard_and_ranks_in_sync(jpeg_data, tmp_path):
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp.py"), *TINY,
                "--epochs", "2", "-p", "1", "--log-dir", tmp_path, jpeg_data])
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["dist"]["world_size"] == 2 and record["dist"]["environment"] == "torchrun"
    sums = record["final"]["weight_checksums"]
    assert len(sums) == 2 and sums[0] == sums[1], "DDP replicas drifted apart"
    assert record["epochs"][-1]["val_samples"] == 21  # 11 + 10 across the two ranks, tail included
    assert len(event_files(tmp_path)) == 1, "only rank 0 may write TensorBoard events"
    scalars = tb_scalars(tmp_path)
    assert EPOCH_TAGS <= set(scalars), EPOCH_TAGS - set(scalars)
    assert {"Step/loss", "Step/images_per_s"} <= set(scalars)
    assert [step for step, _ in scalars["Top1/val"]] == [0, 1]
    assert all(0 <= v <= 100 for _, v in scalars["Top1/val"] + scalars["Top5/train"])
    assert all(v > 0 for _, v in scalars["Throughput/train"] + scalars["Loss/train"])
    assert scalars["Top1/val"][-1][1] == pytest.approx(record["epochs"][-1]["val_top1"], rel=1e-5)


def test_seed_torch_distributed_launch_command_verbatim(tmp_path_factory, tmp_path):
    """python -m torch.distributed.launch --nproc_per_node=2 imagenet_ddp_apex.py -a resnet50 --b 208
    --workers 20 --opt-level O2 DATA, shrunk only by appended flags so it fits 2 CPU cores."""
    from hpc_imagenet.imagenet.data import demo

    data = demo.generate(tmp_path_factory.mktemp("b208"), classes=2, train_per_class=210,
                              val_per_class=2, size=(24, 24))
    proc = run([PYTHON, "-m", "torch.distributed.launch", "--nproc_per_node=2", script("imagenet_ddp_apex.py"),
                "-a", "resnet50", "--b", "208", "--workers", "20", "--opt-level", "O2", data,
                "--image-size", "16", "--epochs", "1", "--steps-per-epoch", "1", "--log-dir", tmp_path],
               timeout=600)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["dist"]["world_size"] == 2 and record["global_batch"] == 416
    assert record["precision"]["label"] == "O2-bf16"
    assert record["config"]["data"]["workers"] == 20 and record["config"]["dist"]["local_rank"] == 0


def test_seed_dist_url_command(jpeg_data, tmp_path):
    """python imagenet_ddp.py -a resnet50 --dist-url tcp://127.0.0.1:PORT --dist-backend gloo --world-size 1
    --rank 0 --desired-acc 0.75 DATA (+ flags that make it small)."""
    proc = warm_python(script("imagenet_ddp.py"), "-a", "resnet50", "--dist-url", f"tcp://127.0.0.1:{free_port()}",
                  "--dist-backend", "gloo", "--world-size", "1", "--rank", "0", "--desired-acc", "0.75", jpeg_data,
                  "--image-size", "32", "-b", "8", "--workers", "0", "--epochs", "1", "--steps-per-epoch", "2",
                  "--val-steps", "1", "--log-dir", tmp_path)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["dist"]["environment"] == "dist-url" and record["config"]["optim"]["desired_acc"] == 0.75


def test_dist_url_spawns_one_process_per_local_device(jpeg_data, tmp_path):
    """-b and -j are per node here (pytorch/examples): -b 16 -j 1 on 2 processes -> 8 each, 1 worker each."""
    proc = warm_python(script("imagenet_ddp.py"), *TINY, "--dist-url", f"tcp://127.0.0.1:{free_port()}",
                  "--world-size", "1", "--rank", "0", "--multiprocessing-distributed", "--procs-per-node", "2",
                  "-b", "16", "-j", "1", "--epochs", "1", "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    assert ("=> -b 16 and -j 1 are per node on this launch: each of the 2 process(es) gets batch 8 and "
            "1 loader worker(s)") in proc.stdout
    record = read_run(tmp_path)
    assert record["dist"]["world_size"] == 2 and record["global_batch"] == 16
    assert (record["config"]["batch"]["per_process"], record["config"]["batch"]["workers"]) == (8, 1)
    assert (record["config"]["optim"]["batch_size"], record["config"]["data"]["workers"]) == (16, 1)  # as given
    assert record["final"]["weight_checksums"][0] == record["final"]["weight_checksums"][1]


@pytest.mark.parametrize("batch,workers,procs,expected", [
    (256, 20, 8, (32, 3)), (208, 20, 4, (52, 5)), (7, 0, 2, (3, 0)), (8, 1, 1, (8, 1))])
def test_node_level_batch_and_workers_are_divided_like_pytorch_examples(batch, workers, procs, expected):
    """main.py: batch_size = int(batch_size / ngpus); workers = int((workers + ngpus - 1) / ngpus)."""
    cfg = config.parse(["-b", str(batch), "-j", str(workers), "--procs-per-node", str(procs), "--dist-url",
                        "tcp://127.0.0.1:1", "--world-size", "2", "--rank", "0", "/data"], "ddp", environ={})
    assert (cfg.batch.per_process, cfg.batch.workers) == expected
    assert cfg.batch.processes == 2 * procs and cfg.batch.global_batch == 2 * procs * expected[0]


def test_node_level_batch_smaller_than_the_processes_is_refused():
    with pytest.raises(config.ConfigError, match=r"-b 2 is the batch per node .* its 4 processes: use -b 4"):
        config.parse(["-b", "2", "--procs-per-node", "4", "--dist-url", "tcp://127.0.0.1:1", "--world-size", "1",
                      "--rank", "0", "/data"], "ddp", environ={})


def test_device_backend_trains_on_cpu_and_records_its_decoder(jpeg_data, tmp_path):
    from hpc_imagenet.imagenet.data.decode import device

    proc = warm_python(script("imagenet_nd.py"), *TINY, "--data-backend", "device", "--epochs", "1",
                  "--steps-per-epoch", "2", "--val-steps", "1", "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    decoder = read_run(tmp_path)["data_decoder"]
    assert decoder == {"backend": "device", "device_decoder": device.decoder_name()}


def test_seed_alexnet_command(jpeg_data, tmp_path):
    proc = warm_python(script("imagenet_nd.py"), "-a", "alexnet", "--lr", "0.01", jpeg_data,
                  "--image-size", "64", "-b", "8", "--workers", "0", "--epochs", "1", "--steps-per-epoch", "2",
                  "--log-dir", tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert read_run(tmp_path)["config"]["model"]["arch"] == "alexnet"


def test_dummy_data_and_evaluate_only(dummy_run, tmp_path):
    """Trained on dummy data (the engine tier's shared dummy_run), then evaluated from its checkpoint."""
    assert read_run(dummy_run)["throughput"]["measured_steps"] >= 1
    ev = warm_python(script("imagenet_nd.py"), *TINY, "--dummy", "--dummy-size", "32", "--num-classes", "10", "-e",
                "--resume", dummy_run / "checkpoint.pth.tar", "--log-dir", tmp_path / "eval")
    assert ev.returncode == 0, explain(ev)
    assert "Evaluation: top1" in ev.stdout and read_run(tmp_path / "eval")["status"] == "evaluated"


def test_optimisation_flags_under_torchrun(jpeg_data, tmp_path):
    """--sync-bn (CPU: a warning, per-rank statistics), label smoothing, no BN decay, cosine + warm-up, O3,
    and DDP's bf16 compression hook with a static graph and small buckets: the replicas stay equal."""
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp_apex.py"), *TINY,
                "--epochs", "2", "--sync-bn", "--label-smoothing", "0.1", "--no-bn-wd", "--lr-schedule", "cosine",
                "--warmup-epochs", "1", "--opt-level", "O3", "--keep-batchnorm-fp32", "True", "-p", "1",
                "--ddp-comm-hook", "bf16", "--ddp-static-graph", "--ddp-bucket-cap-mb", "1",
                "--log-dir", tmp_path, jpeg_data])
    assert proc.returncode == 0, explain(proc)
    assert "--sync-bn needs CUDA" in proc.stderr
    record = read_run(tmp_path)
    assert record["precision"]["label"] == "O3-bf16" and record["config"]["dist"]["ddp_comm_hook"] == "bf16"
    lrs = [lr for _, lr in tb_scalars(tmp_path)["Step/lr"]]
    peak = record["lr"]
    # 3 steps an epoch, 1 warm-up epoch: after step 1 the lr is 2/3 of the peak; then warm-up, decay
    assert (lrs[0] == pytest.approx(peak * 2 / 3) and max(lrs) == pytest.approx(peak, rel=0.05)
            and lrs[-1] < max(lrs))
    assert record["final"]["weight_checksums"][0] == record["final"]["weight_checksums"][1]

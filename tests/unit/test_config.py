"""The command line: pytorch/examples and seed-tutorial flags parse with the same meanings, into sections."""
import dataclasses

import pytest

from hpc_imagenet.imagenet import config
from hpc_imagenet.launch import environment


def test_pytorch_examples_flags():
    cfg = config.parse(["-a", "resnet50", "-j", "3", "-b", "64", "--epochs", "5", "--start-epoch", "2",
                        "--lr", "0.2", "--momentum", "0.8", "--wd", "5e-5", "-p", "7", "--resume", "x.pth",
                        "-e", "--pretrained", "--seed", "1", "--gpu", "0", "--dummy"], variant="nd")
    assert (cfg.model.arch, cfg.data.workers, cfg.optim.batch_size, cfg.optim.epochs,
            cfg.optim.start_epoch) == ("resnet50", 3, 64, 5, 2)
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.optim.weight_decay, cfg.logging.print_freq) == (0.2, 0.8, 5e-5, 7)
    assert cfg.checkpoint.resume == "x.pth" and cfg.run.evaluate and cfg.model.pretrained
    assert cfg.run.seed == 1 and cfg.dist.gpu == 0
    assert cfg.data.dummy and cfg.run.variant == "nd"


def test_seed_tutorial_flags():
    cfg = config.parse(["-a", "resnet50", "--b", "208", "--workers", "20", "--opt-level", "O2", "/data"], "amp")
    assert cfg.optim.batch_size == 208 and cfg.data.workers == 20 and cfg.data.root == "/data"
    assert cfg.precision.precision_level == "O2"
    cfg = config.parse(["--dist-url", "tcp://1.2.3.4:8888", "--dist-backend", "nccl", "--world-size", "4",
                        "--rank", "3", "--desired-acc", "0.75", "/data"], "ddp")
    assert (cfg.dist.world_size, cfg.dist.rank, cfg.dist.dist_backend, cfg.optim.desired_acc) == (4, 3, "nccl", 0.75)


@pytest.mark.parametrize("flag", ["--local-rank", "--local_rank"])
def test_local_rank_both_spellings(flag):
    assert config.parse([f"{flag}=1", "--dummy"], "ddp").dist.local_rank == 1


def test_desired_acc_percentage_and_fraction_agree():
    assert config.parse(["--desired-acc", "75", "--dummy"]).optim.desired_acc == config.parse(
        ["--desired-acc", "0.75", "--dummy"]).optim.desired_acc == 0.75


def test_default_precision_per_variant():
    assert config.parse(["--dummy"], "ddp").precision.opt_level == "O0"
    assert config.parse(["--dummy"], "amp").precision.opt_level == "O1"


@pytest.mark.parametrize("argv, words", [
    ([], "no dataset"),
    (["--dummy", "-b", "0"], "--batch-size"),
    (["--dummy", "--desired-acc", "300"], "--desired-acc"),
    (["--dummy", "--loss-scale", "huge"], "--loss-scale"),
    (["--dummy", "--dist-url", "tcp://x:1", "--world-size", "2", "--rank", "2"], "--rank"),
    (["--dummy", "--keep-checkpoints", "-1"], "--keep-checkpoints -1"),
    (["--dummy", "--checkpoint-every-minutes", "-5"], "--checkpoint-every-minutes -5"),
    (["--dummy", "--straggler-threshold", "-1"], "--straggler-threshold"),
    (["--dummy", "--data-backend", "falst"], "unknown --data-backend 'falst'; did you mean fast?"),
    (["--dummy", "-a", "resnet999"], "unknown model -a 'resnet999'"),
    (["--dummy", "--recipe", "nope"], "unknown --recipe 'nope'; known recipes: examples, ffcv-16"),
    (["--dummy", "--opt-level", "O7"], "invalid choice: 'O7'"),
    (["--dummy", "--data-backend", "dali", "--skip-bad-images"], "--skip-bad-images does not work"),
    (["--dummy", "--amp-backend", "apex", "--amp-dtype", "bfloat16"], "Apex AMP scales float16 only"),
    (["--dummy", "--multiprocessing-distributed"], "--multiprocessing-distributed needs --dist-url"),
    (["--dumm"], "unrecognized arguments: --dumm; see --help"),  # allow_abbrev=False: only exact flags
])
def test_bad_values_raise_one_line_config_error(argv, words):
    with pytest.raises(config.ConfigError, match=words.replace("-", r"\-").replace("?", r"\?")) as e:
        config.parse(argv, "ddp", environ={})
    assert "\n" not in str(e.value)


def test_missing_data_folder_is_refused_only_when_asked(tmp_path):
    assert config.parse([str(tmp_path / "absent")]).data.root == str(tmp_path / "absent")
    with pytest.raises(config.ConfigError, match="dataset directory .*absent does not exist"):
        config.parse([str(tmp_path / "absent")], check_data=True)
    assert config.parse([str(tmp_path)], check_data=True).data.root == str(tmp_path)
    command = config.parse_command(["--print-config", str(tmp_path / "absent")], "ddp", launcher=environment.detect({}))
    assert command.print_config  # --print-config touches no data path


def test_compile_mode_implies_compile_and_rejects_unknown_modes():
    assert not config.parse(["--dummy"]).perf.use_compile
    assert config.parse(["--dummy", "--compile"]).perf.use_compile
    cfg = config.parse(["--dummy", "--compile-mode", "reduce-overhead"])
    assert cfg.perf.use_compile and cfg.perf.compile_mode == "reduce-overhead"
    with pytest.raises(config.ConfigError, match="invalid choice: 'fastest'"):
        config.parse(["--dummy", "--compile-mode", "fastest"])


def test_every_setting_name_is_unique_across_sections():
    names = [f.name for _, f in config.setting_fields()]
    assert len(names) == len(set(names))


def test_nd_variant_under_a_multi_process_launcher_is_refused():
    environ = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
               "MASTER_PORT": "1234"}
    with pytest.raises(config.ConfigError, match="runs as one process, but torchrun started 2"):
        config.parse(["--dummy"], "nd", environ=environ)


def test_global_batch_is_resolved_once_from_the_launcher():
    environ = {"RANK": "5", "WORLD_SIZE": "64", "LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "h",
               "MASTER_PORT": "1234"}
    batch = config.parse(["-b", "208", "-j", "6", "--dummy"], "ddp", environ=environ).batch
    assert batch == config.Batch(processes=64, per_process=208, global_batch=13312, workers=6, launcher="torchrun")
    assert config.parse(["-b", "208", "--dummy"], "nd", environ={}).batch.global_batch == 208


def test_local_gpus_follow_the_driver_and_cuda_visible_devices(tmp_path, monkeypatch):
    from hpc_imagenet.imagenet.config import batch

    for index in range(4):
        (tmp_path / f"0000:0{index}:00.0").mkdir()
    monkeypatch.setattr(batch, "NVIDIA_GPUS", tmp_path)
    assert batch.local_gpus({}) == 4
    assert batch.local_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}) == 2
    assert batch.local_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == 1  # CUDA stops at the first invalid id
    assert batch.local_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    monkeypatch.setattr(batch, "NVIDIA_GPUS", tmp_path / "none")
    assert batch.local_gpus({}) == 0


def test_settings_document_lists_every_section_and_the_batch():
    document = config.parse(["--dummy"], "ddp", environ={}).to_dict()
    assert list(document) == [*config.SECTIONS, "batch"]
    assert document["optim"]["lr_steps"] == [30, 60] and document["run"]["recipe"] == "examples"
    assert dataclasses.asdict(config.Settings().batch) == document["batch"]

"""The command line: pytorch/examples and seed-tutorial flags parse with the same meanings."""
import pytest

from imagenet import config


def test_pytorch_examples_flags():
    cfg = config.parse(["-a", "resnet50", "-j", "3", "-b", "64", "--epochs", "5", "--start-epoch", "2",
                        "--lr", "0.2", "--momentum", "0.8", "--wd", "5e-5", "-p", "7", "--resume", "x.pth",
                        "-e", "--pretrained", "--seed", "1", "--gpu", "0", "--dummy"], variant="nd")
    assert (cfg.arch, cfg.workers, cfg.batch_size, cfg.epochs, cfg.start_epoch) == ("resnet50", 3, 64, 5, 2)
    assert (cfg.lr, cfg.momentum, cfg.weight_decay, cfg.print_freq) == (0.2, 0.8, 5e-5, 7)
    assert cfg.resume == "x.pth" and cfg.evaluate and cfg.pretrained and cfg.seed == 1 and cfg.gpu == 0
    assert cfg.dummy and cfg.variant == "nd"


def test_seed_tutorial_flags():
    cfg = config.parse(["-a", "resnet50", "--b", "208", "--workers", "20", "--opt-level", "O2", "/data"], "amp")
    assert cfg.batch_size == 208 and cfg.workers == 20 and cfg.precision_level == "O2" and cfg.data == "/data"
    cfg = config.parse(["--dist-url", "tcp://1.2.3.4:8888", "--dist-backend", "nccl", "--world-size", "4",
                        "--rank", "3", "--desired-acc", "0.75", "/data"], "ddp")
    assert (cfg.world_size, cfg.rank, cfg.dist_backend, cfg.desired_acc) == (4, 3, "nccl", 0.75)


@pytest.mark.parametrize("flag", ["--local-rank", "--local_rank"])
def test_local_rank_both_spellings(flag):
    assert config.parse([f"{flag}=1", "--dummy"], "ddp").local_rank == 1


def test_desired_acc_percentage_and_fraction_agree():
    assert config.parse(["--desired-acc", "75", "--dummy"]).desired_acc == config.parse(
        ["--desired-acc", "0.75", "--dummy"]).desired_acc == 0.75


def test_default_precision_per_variant():
    assert config.parse(["--dummy"], "ddp").precision_level == "O0"
    assert config.parse(["--dummy"], "amp").precision_level == "O1"


@pytest.mark.parametrize("argv, words", [
    ([], "no dataset"),
    (["--dummy", "-b", "0"], "--batch-size"),
    (["--dummy", "--desired-acc", "300"], "--desired-acc"),
    (["--dummy", "--loss-scale", "huge"], "--loss-scale"),
    (["--dummy", "--dist-url", "tcp://x:1", "--world-size", "2", "--rank", "2"], "--rank"),
    (["--dummy", "--keep-checkpoints", "-1"], "--keep-checkpoints -1"),
    (["--dummy", "--checkpoint-every-minutes", "-5"], "--checkpoint-every-minutes -5"),
    (["--dummy", "--straggler-threshold", "-1"], "--straggler-threshold"),
])
def test_bad_values_raise_config_error(argv, words):
    with pytest.raises(config.ConfigError, match=words.replace("-", r"\-")):
        config.parse(argv, "ddp")


def test_abbreviations_are_not_accepted():
    with pytest.raises(SystemExit):
        config.parse(["--dumm"], "ddp")  # allow_abbrev=False: only the exact flags exist


def test_compile_mode_implies_compile_and_rejects_unknown_modes():
    assert not config.parse(["--dummy"]).use_compile
    assert config.parse(["--dummy", "--compile"]).use_compile
    cfg = config.parse(["--dummy", "--compile-mode", "reduce-overhead"])
    assert cfg.use_compile and cfg.compile_mode == "reduce-overhead"
    with pytest.raises(SystemExit):
        config.parse(["--dummy", "--compile-mode", "fastest"])

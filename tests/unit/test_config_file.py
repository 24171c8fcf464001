"""--config FILE: settings from a TOML file in the recipes' format, over --recipe and under the flags;
a key that is no setting, a value of the wrong kind, or a setting the command line decides ends the
run with one line naming the key (and the closest setting) and exit status 2. The recipe files ship
with the package."""
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from hpc_imagenet.imagenet import config, recipes
from hpc_imagenet.imagenet.run import train_command

REPO = Path(__file__).resolve().parents[2]


def _file(tmp_path, text):
    path = tmp_path / "site.toml"
    path.write_text(text)
    return str(path)


def test_config_values_sit_between_the_recipe_and_the_flags(tmp_path):
    path = _file(tmp_path, '[values]\nepochs = 30\nlr_steps = [10, 20]\nlabel_smoothing = 0.1\nmomentum = 1\n')
    cfg = config.parse(["--dummy", "--recipe", "goyal", "--config", path, "--epochs", "12"], environ={})
    assert cfg.optim.epochs == 12  # the flag wins over the file
    assert cfg.optim.lr_steps == (10, 20) and cfg.optim.label_smoothing == 0.1  # the file wins over the recipe
    assert cfg.optim.momentum == 1.0 and isinstance(cfg.optim.momentum, float)  # TOML's 1 is a number here
    assert cfg.optim.no_bn_wd and cfg.run.config == path  # the rest still from the recipe; run.json names the file


def test_config_rows_by_global_batch_as_a_recipes(tmp_path):
    path = _file(tmp_path, '[values]\nepochs = 3\n[[by_global_batch]]\nglobal_batch = 256\nlr = 0.2\n'
                           '[[by_global_batch]]\nglobal_batch = 1024\nlr = 0.4\n')
    assert config.parse(["--dummy", "-b", "600", "--config", path], environ={}).optim.lr == 0.4
    assert config.parse(["--dummy", "-b", "300", "--config", path], environ={}).optim.lr == 0.2


BAD = [('[values]\nlr_step = [30, 60]\n', "sets 'lr_step', which is no setting; did you mean lr_steps?"),
       ('[values]\nlabel-smoothing = 0.1\n', "did you mean label_smoothing?"),
       ('[values]\nlr = "fast"\n', "lr must be a number (got 'fast')"),
       ('[values]\nepochs = 9.5\n', "epochs must be an integer (got 9.5)"),
       ('[values]\nno_bn_wd = 1\n', "no_bn_wd must be true or false (got 1)"),
       ('[values]\nlr_steps = 30\n', "lr_steps must be a list of integers (got 30)"),
       ('[values]\nopt = "adam"\n', "opt 'adam' is not one of sgd, sgd_nesterov, rmsprop, adamw, lars, lamb"),
       ('[values]\nbatch_size = 512\n', "sets batch_size, which sizes the global batch or picks the files"),
       ('[valeus]\nlr = 0.1\n', "has 'valeus', which is not part of the format; did you mean [values]?"),
       ('[[by_global_batch]]\nglobal_batch = 256\nlrr = 0.1\n', "row global_batch = 256, sets 'lrr'"),
       ('[[by_global_batch]]\nlr = 0.1\n', "needs global_batch = a positive integer"),
       ('[values\n', "is not valid TOML")]


@pytest.mark.parametrize("text,message", BAD, ids=[m for _, m in BAD])
def test_a_bad_config_file_is_one_line_naming_the_key(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(config.ConfigError) as caught:
        config.parse(["--dummy", "--config", path], environ={})
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert path in str(caught.value)


def test_the_entry_script_exits_2_with_the_line(tmp_path, capsys):
    path = _file(tmp_path, '[values]\nwarmup_epoch = 2.0\n')
    assert train_command.main("ddp", ["--dummy", "--config", path, "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --config ") and "did you mean warmup_epochs?" in err and "\n" not in err


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(config.ConfigError, match=r"^--config: cannot read .*nope\.toml"):
        config.parse(["--dummy", "--config", str(tmp_path / "nope.toml")], environ={})


def test_a_recipe_file_is_a_config_file(tmp_path):
    """The same format: a packaged recipe given as --config sets what --recipe sets."""
    path = str(REPO / "hpc_imagenet" / "imagenet" / "recipes" / "mlperf.toml")
    by_file = config.parse(["--dummy", "-b", "512", "--config", path], environ={})
    by_name = config.parse(["--dummy", "-b", "512", "--recipe", "mlperf"], environ={})
    assert by_file.optim == by_name.optim


def test_the_recipe_files_ship_as_package_data():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "hpc_imagenet.imagenet.recipes" in find_packages(str(REPO), **setuptools["packages"]["find"])
    patterns = setuptools["package-data"]["hpc_imagenet.imagenet.recipes"]
    shipped = {p.name for pattern in patterns for p in (REPO / "hpc_imagenet" / "imagenet" / "recipes").glob(pattern)}
    assert {f"{name}.toml" for name in recipes.names()} <= shipped
    assert set(recipes.names()) >= {"examples", "goyal", "mlperf"}

"""--recipe: named presets read from hpc_imagenet/imagenet/recipes/*.toml under the explicit flags, over the defaults;
every packaged file cites its sources and names only settings."""
import math

import pytest

from hpc_imagenet.imagenet import config, recipes
from hpc_imagenet.imagenet.config.validate import check_recipe

LAUNCH_SETTINGS = {"batch_size", "workers", "world_size", "rank", "dist_url", "procs_per_node", "variant", "recipe"}


@pytest.mark.parametrize("name", recipes.names())
def test_every_recipe_names_existing_settings_and_cites_its_source(name):
    recipe = recipes.RECIPES[name]
    check_recipe(recipe)  # raises on a key no setting has, or a value of the wrong kind
    values = recipe.values_at(4096)
    assert set(values) <= set(config.section_of()), "a recipe value names a setting no section has"
    assert not set(values) & LAUNCH_SETTINGS, "the batch and the launch come from the command line"
    assert recipe.sources and all(s.cites and s.url.startswith("https://") and s.where for s in recipe.sources)
    assert recipe.epochs > 0 and recipe.published_batch in recipe.validated_batches
    assert recipe.top1 is None or 50 < recipe.top1 < 100
    assert all(row["source"] for row in recipe.by_global_batch)


def test_examples_recipe_is_the_defaults():
    assert config.parse(["--dummy", "--recipe", "examples"], environ={}) == config.parse(["--dummy"], environ={})


def test_goyal_recipe_sets_its_published_values():
    cfg = config.parse(["--dummy", "--recipe", "goyal"], environ={})
    optim = cfg.optim
    assert (optim.lr, optim.lr_scaling, optim.warmup_epochs, optim.no_bn_wd) == (0.1, "linear", 5.0, True)
    assert (optim.epochs, optim.lr_schedule, optim.lr_steps, optim.weight_decay) == (90, "step", (30, 60, 80), 1e-4)
    assert optim.lr_warmup_from_base and cfg.model.zero_init_residual
    assert cfg.run.recipe == "goyal"


def test_a_flag_given_on_the_command_line_wins_over_the_recipe():
    cfg = config.parse(["--dummy", "--recipe", "goyal", "--warmup-epochs", "2", "--lr-steps", "10", "20"],
                       environ={})
    assert cfg.optim.warmup_epochs == 2.0 and cfg.optim.lr_steps == (10, 20)
    assert cfg.optim.no_bn_wd  # the rest still comes from the recipe
    # a flag given with its default value is still given: it wins too
    assert config.parse(["--dummy", "--recipe", "goyal", "--epochs", "90", "--warmup-epochs", "0"],
                        environ={}).optim.warmup_epochs == 0.0


def test_the_row_published_nearest_the_global_batch_on_a_log_scale(monkeypatch):
    rows = ({"global_batch": 2048, "lr": 1.0, "source": "a"}, {"global_batch": 8192, "lr": 2.0, "source": "b"})
    monkeypatch.setitem(recipes.RECIPES, "probe", recipes.Recipe("probe", "probe.toml", {"epochs": 3}, rows))
    environ = {"RANK": "0", "WORLD_SIZE": "64", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "h",
               "MASTER_PORT": "1234"}
    cfg = config.parse(["--dummy", "-b", "208", "--recipe", "probe"], environ=environ)  # 13,312: nearer 8,192
    assert cfg.batch.global_batch == 13312 and cfg.optim.lr == 2.0 and cfg.optim.epochs == 3
    probe = recipes.RECIPES["probe"]
    assert [probe.row_for(b)["lr"] for b in (256, 2048, 4096, 5000, 8192, 65536)] == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert math.isclose(math.log(4096 / 2048), math.log(8192 / 4096))  # 4,096 is a tie: the smaller batch's row


def test_unknown_recipe_is_one_line_listing_the_known_ones():
    with pytest.raises(config.ConfigError,
                       match=r"^unknown --recipe 'mlperff'; known recipes: examples, ffcv-16, .*, goyal, mlperf, "
                             r"rsb-a1, rsb-a2, rsb-a3, torchvision-v2$"):
        config.parse(["--dummy", "--recipe", "mlperff"], environ={})


def test_named_in_finds_the_recipe_among_passed_through_flags():
    assert recipes.named_in(["-b", "4", "--recipe", "goyal"]) == "goyal"
    assert recipes.named_in(["--recipe=mlperf"]) == "mlperf" and recipes.named_in(["-b", "4"]) is None

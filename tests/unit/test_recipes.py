"""--recipe: named presets under the explicit flags, over the defaults."""
import pytest

from imagenet import config, recipes

LAUNCH_SETTINGS = {"batch_size", "workers", "world_size", "rank", "dist_url", "procs_per_node", "variant", "recipe"}


@pytest.mark.parametrize("name", recipes.names())
def test_every_recipe_names_existing_settings_and_cites_its_source(name):
    recipe = recipes.RECIPES[name]
    values = recipe.values(4096)
    assert set(values) <= set(config.section_of()), "a recipe value names a setting no section has"
    assert not set(values) & LAUNCH_SETTINGS, "the batch and the launch come from the command line"
    assert recipe.source and recipe.epochs > 0 and recipe.published_batch > 0
    assert recipe.top1 is None or 50 < recipe.top1 < 100


def test_examples_recipe_is_the_defaults():
    assert config.parse(["--dummy", "--recipe", "examples"], environ={}) == config.parse(["--dummy"], environ={})


def test_goyal_recipe_sets_its_published_values():
    cfg = config.parse(["--dummy", "--recipe", "goyal"], environ={})
    optim = cfg.optim
    assert (optim.lr, optim.lr_scaling, optim.warmup_epochs, optim.no_bn_wd) == (0.1, "linear", 5.0, True)
    assert (optim.epochs, optim.lr_schedule, optim.lr_steps, optim.weight_decay) == (90, "step", (30, 60, 80), 1e-4)
    assert cfg.run.recipe == "goyal"


def test_a_flag_given_on_the_command_line_wins_over_the_recipe():
    cfg = config.parse(["--dummy", "--recipe", "goyal", "--warmup-epochs", "2", "--lr-steps", "10", "20"],
                       environ={})
    assert cfg.optim.warmup_epochs == 2.0 and cfg.optim.lr_steps == (10, 20)
    assert cfg.optim.no_bn_wd  # the rest still comes from the recipe
    # a flag given with its default value is still given: it wins too
    assert config.parse(["--dummy", "--recipe", "goyal", "--epochs", "90", "--lr", "0.1"],
                        environ={}).optim.warmup_epochs == 5.0


def test_recipe_values_see_the_global_batch(monkeypatch):
    seen = []
    monkeypatch.setitem(recipes.RECIPES, "probe", recipes.Recipe(
        "probe", "a test", None, 1, 1, values=lambda global_batch: seen.append(global_batch) or {"lr": 0.2}))
    environ = {"RANK": "0", "WORLD_SIZE": "64", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "h",
               "MASTER_PORT": "1234"}
    assert config.parse(["--dummy", "-b", "208", "--recipe", "probe"], environ=environ).optim.lr == 0.2
    assert seen == [13312]


def test_unknown_recipe_is_one_line_listing_the_known_ones():
    with pytest.raises(config.ConfigError,
                       match=r"^unknown --recipe 'mlperff'; known recipes: examples, ffcv-16, .*, goyal, mlperf$"):
        config.parse(["--dummy", "--recipe", "mlperff"], environ={})

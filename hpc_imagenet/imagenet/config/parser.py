"""One flat command line -> :class:`Settings`: flags over ``--config FILE`` over the recipe over the defaults.

The parser is built from the sections' fields, so flags and settings cannot drift apart. A flag
counts as given when it appears on the command line (the explicit parser's defaults are
``argparse.SUPPRESS``), so ``--recipe goyal --warmup-epochs 2`` keeps 2 whatever the recipe says.
argparse's own errors become one-line :class:`ConfigError` (never the whole usage text).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, NoReturn, Optional, Sequence

from hpc_imagenet.launch import environment

from hpc_imagenet.imagenet import recipes
from hpc_imagenet.imagenet.config import batch as batches
from hpc_imagenet.imagenet.config import torchvision_cli
from hpc_imagenet.imagenet.config.choices import LAYERWISE_OPTIMIZERS
from hpc_imagenet.imagenet.config.errors import ConfigError
from hpc_imagenet.imagenet.config.sections import SECTIONS, Settings, setting_fields
from hpc_imagenet.imagenet.config.validate import check_recipe, validate


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ConfigError (one line, then 'see --help') instead of printing its usage."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; see --help")


@dataclass(frozen=True)
class Command:
    """A parsed command line: the settings, and whether to print them instead of training."""
    settings: Settings
    print_config: bool = False


def build_parser(variant: str, explicit: bool = False) -> argparse.ArgumentParser:
    """The command line of VARIANT ("any": --variant is a flag). With ``explicit``, a flag that is not
    given leaves no attribute (its default is SUPPRESS), so parse() can tell given from default."""
    parser = OneLineParser(
        description=f"Train a torchvision model on ImageNet ({variant} variant)",
        allow_abbrev=False,  # '--b' must mean --batch-size, not any flag starting with b
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, add_help=not explicit)
    if explicit:  # help comes from the parser that shows the defaults
        parser.add_argument("-h", "--help", action=_FullHelp, variant=variant)
    for _, f in setting_fields():
        meta = dict(f.metadata)
        flags = meta.pop("flags")
        if f.name == "variant" and variant != "any":
            continue  # the entry script fixes it
        default = argparse.SUPPRESS if explicit else _default(f)
        if flags[0].startswith("-"):
            parser.add_argument(*flags, dest=f.name, default=default, **meta)
        else:
            parser.add_argument(flags[0], default=default, **meta)
    torchvision_cli.add_to(parser)
    parser.add_argument("--print-config", action="store_true", default=argparse.SUPPRESS if explicit else False,
                        help="print the resolved settings (after the recipe, the flags and the launcher's world "
                             "size) as one JSON document and exit, touching neither the data nor the network")
    return parser


class _FullHelp(argparse.Action):
    def __init__(self, option_strings, dest, variant: str, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show this help and exit")
        self.variant = variant

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        build_parser(self.variant).print_help()
        parser.exit()


def _default(setting: dataclasses.Field) -> Any:
    return setting.default_factory() if setting.default is dataclasses.MISSING else setting.default


def _normalised(values: Dict[str, Any]) -> Dict[str, Any]:
    """Values as the settings hold them: --desired-acc 75 means 0.75, lists become tuples."""
    out = torchvision_cli.normalised(values)
    if out.get("desired_acc") is not None and out["desired_acc"] > 1:
        out["desired_acc"] = out["desired_acc"] / 100.0
    for name in ("lr_steps", "train_crop_scale", "train_crop_ratio"):
        if name in out:
            out[name] = tuple(out[name])
    return out


def _recipe(name: str) -> recipes.Recipe:
    if name not in recipes.RECIPES:
        raise ConfigError(f"unknown --recipe {name!r}; known recipes: {', '.join(recipes.names())}")
    recipe = recipes.RECIPES[name]
    check_recipe(recipe)
    return recipe


def _config_file(path: Optional[str]) -> Optional[recipes.Recipe]:
    """The --config FILE, read and checked (None without one)."""
    if path is None:
        return None
    try:
        recipe = recipes.read(Path(path), name=path)
    except recipes.RecipeError as e:
        raise ConfigError(f"--config: {e}") from None
    check_recipe(recipe, f"--config {path}")
    return recipe


def _file_values(recipe: Optional[recipes.Recipe], global_batch: int) -> Dict[str, Any]:
    """A file's values at GLOBAL_BATCH as the flags would give them: TOML's 10 for a float setting is 10.0."""
    if recipe is None:
        return {}
    floats = {f.name for _, f in setting_fields() if f.metadata.get("type") is float}
    values = recipe.values_at(global_batch)
    for name in floats & set(values):
        values[name] = [float(v) for v in values[name]] if isinstance(values[name], list) else float(values[name])
    return _normalised(values)


def _resolve_batch(values: Mapping[str, Any], launcher: environment.ClusterEnvironment) -> batches.Batch:
    distributed = values["variant"] in ("ddp", "amp")
    return batches.resolve(values["batch_size"], values["workers"], distributed=distributed,
                           dist_url=values["dist_url"],
                           multiprocessing_distributed=values["multiprocessing_distributed"],
                           nodes=values["world_size"], procs_per_node=values["procs_per_node"], launcher=launcher,
                           accum_steps=max(1, values["accum_steps"]),  # validate() names a bad --accum-steps
                           no_accel=values["no_accel"])


def _assemble(values: Mapping[str, Any], batch: batches.Batch) -> Settings:
    by_section: Dict[str, Dict[str, Any]] = {name: {} for name in SECTIONS}
    for section, f in setting_fields():
        by_section[section][f.name] = values[f.name]
    return Settings(**{name: SECTIONS[name](**fields) for name, fields in by_section.items()}, batch=batch)


def parse_command(argv: Optional[Sequence[str]] = None, variant: str = "ddp", *, check_data: bool = True,
                  launcher: Optional[environment.ClusterEnvironment] = None) -> Command:
    """Parse, apply the recipe, resolve the batch for LAUNCHER (this process's launcher, detected here when
    not given), validate.
    Raises ConfigError (or launch's LaunchError) with one line; imports neither torch nor DALI."""
    given = vars(build_parser(variant, explicit=True).parse_args(argv))
    print_config = bool(given.pop("print_config", False))
    defaults = {f.name: _default(f) for _, f in setting_fields()}
    if torchvision_cli.is_torchvision(argv if argv is not None else sys.argv[1:]):
        defaults.update(torchvision_cli.DIALECT_DEFAULTS)  # its --lr is the global batch's; recipes and flags win
    if variant != "any":
        given["variant"] = variant
    recipe = _recipe(given.get("recipe", defaults["recipe"]))
    config_file = _config_file(given.get("config"))
    flags = {**defaults, **_normalised(given)}
    # the files set no batch or launch setting (check_recipe)
    batch = _resolve_batch(flags, launcher or environment.detect())
    values = {**defaults, **_file_values(recipe, batch.global_batch), **_file_values(config_file, batch.global_batch),
              **_normalised(given)}
    torchvision_cli.step_milestones(values, given)
    if values["opt_level"] is None:  # the variant's default level, written down for run.json
        values["opt_level"] = "O1" if values["variant"] == "amp" else "O0"
    if values["opt"] in LAYERWISE_OPTIMIZERS:  # they skip norms and biases as MLPerf's LARS: run.json says so
        values["no_bn_wd"] = True
    settings = _assemble(values, batch)
    validate(settings, check_data=check_data and not print_config)
    return Command(settings, print_config)


def parse(argv: Optional[Sequence[str]] = None, variant: str = "ddp", *, check_data: bool = False,
          environ: Optional[Mapping[str, str]] = None) -> Settings:
    """The settings of a command line (no data-folder check unless asked: tests and tools parse
    command lines for folders that exist elsewhere), resolved for the launcher ENVIRON's variables
    name (this process's when None)."""
    return parse_command(argv, variant, check_data=check_data, launcher=environment.detect(environ)).settings

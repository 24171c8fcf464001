"""The settings of a training run: sections, one flat command line, one validation pass.

``parse_command(argv, variant)`` turns a command line into a :class:`Command` holding the
:class:`Settings` (one frozen dataclass per section: run, data, model, optim, precision, perf,
dist, checkpoint, logging) plus the :class:`Batch` the launch resolves, after applying the
``--recipe`` and ``--config FILE`` (both read by :mod:`hpc_imagenet.imagenet.recipes`) under the explicit flags
and validating everything that can be known without torch. Nothing in this package imports torch,
so a bad command line fails in a fraction of a second, before the rendezvous, the staging copy or
the dataset scan.
docs/configuration.md is the user's page.
"""
from hpc_imagenet.imagenet.config.batch import Batch, local_gpus
from hpc_imagenet.imagenet.config.choices import COMPILE_MODES, DATA_BACKENDS, MODELS, OPT_LEVELS, VARIANTS
from hpc_imagenet.imagenet.config.errors import ConfigError
from hpc_imagenet.imagenet.config.parser import Command, build_parser, parse, parse_command
from hpc_imagenet.imagenet.config.sections import (SECTIONS, CheckpointSettings, DataSettings, DistSettings,
                                                   LoggingSettings, ModelSettings, OptimSettings, PerfSettings,
                                                   PrecisionSettings, RunSettings, Settings, section_of, setting_fields,
                                                   WARMUP_STEPS)
from hpc_imagenet.imagenet.config.validate import validate

__all__ = [
    "Batch", "COMPILE_MODES", "CheckpointSettings", "Command", "ConfigError", "DATA_BACKENDS", "DataSettings",
    "DistSettings", "LoggingSettings", "MODELS", "ModelSettings", "OPT_LEVELS", "OptimSettings", "PerfSettings",
    "PrecisionSettings", "RunSettings", "SECTIONS", "Settings", "VARIANTS", "build_parser", "local_gpus", "parse",
    "parse_command", "section_of", "setting_fields", "validate", "WARMUP_STEPS",
]

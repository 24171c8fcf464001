"""Every closed set of names a flag can take, known without importing torch, torchvision or DALI.

The validation pass checks the command line against these lists before anything costly starts
(the rendezvous, staging, the dataset scan). Where the truth lives in a library (the models
torchvision provides, the decoders the data package registers), a unit test checks that the list
here still matches it.
"""
from __future__ import annotations

from hpc_imagenet.imagenet.common.variants import VARIANTS  # noqa: F401  (the settings import it from here)

OPT_LEVELS = ("O0", "O1", "O2", "O3")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DIST_BACKENDS = ("nccl", "gloo", "mpi")

# hpc_imagenet.imagenet.data.decode.BACKENDS; the batch backends decode whole batches (no per-sample skipping).
DATA_BACKENDS = ("baseline", "dali", "device", "fast", "pil")
BATCH_DATA_BACKENDS = ("dali",)

# torchvision.models.list_models(module=torchvision.models): the classification models (torchvision 0.29).
MODELS = (
    "alexnet",
    "convnext_base", "convnext_large", "convnext_small", "convnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_v2_s",
    "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
    "regnet_x_16gf", "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf", "regnet_x_800mf",
    "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf", "regnet_y_400mf",
    "regnet_y_800mf", "regnet_y_8gf",
    "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1",
    "swin_b", "swin_s", "swin_t", "swin_v2_b", "swin_v2_s", "swin_v2_t",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32",
    "wide_resnet101_2", "wide_resnet50_2",
)

# hpc_imagenet.imagenet.train.optim's optimizers and hpc_imagenet.imagenet.train.schedules.KINDS (a unit test checks
# they agree).
OPTIMIZERS = ("sgd", "sgd_nesterov", "rmsprop", "adamw", "lars", "lamb")
# The layerwise ones leave norm and bias parameters out of weight decay (MLPerf's LARS skip list).
LAYERWISE_OPTIMIZERS = ("lars", "lamb")
LR_SCHEDULES = ("step", "cosine", "poly", "ramp", "exponential")
# torchvision's references/classification/train.py names for them: accepted as they are written.
LR_SCHEDULE_ALIASES = {"steplr": "step", "cosineannealinglr": "cosine", "exponentiallr": "exponential"}
# --auto-augment: torchvision's train.py names (ra: RandAugment, ta_wide: TrivialAugmentWide, augmix:
# AugMix, else an AutoAugmentPolicy value); hpc_imagenet.imagenet.data.augment builds them.
AUTO_AUGMENT_POLICIES = ("ta_wide", "ra", "augmix", "imagenet", "cifar10", "svhn")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
# The models whose residual blocks --zero-init-residual zeroes (torchvision's zero_init_residual).
RESIDUAL_MODELS = tuple(m for m in MODELS if m.startswith(("resnet", "resnext", "wide_resnet")))

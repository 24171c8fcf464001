"""hpc-imagenet: train ImageNet ResNets with PyTorch on HPC clusters and measure how well it scales.

The one name the project installs. Its parts live at the checkout's root, where users run them
(``imagenet/``, ``launch/``, ``slurm/``, ``results/``); the folders here are links to them, so that
``hpc_imagenet.imagenet``, ``hpc_imagenet.launch``, ``hpc_imagenet.slurm`` and ``hpc_imagenet.results``
are the same files from a checkout and from a wheel (which holds copies). Every module imports the
others by these names, so none is loaded twice under two names.
"""

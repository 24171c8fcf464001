"""Build script for the one optional C extension; the project's metadata is in pyproject.toml.

hpc_imagenet/imagenet/data/decode/_jpeg_region.c links the system libjpeg-turbo (Debian/Ubuntu: libjpeg-dev;
RHEL: libjpeg-turbo-devel). ``optional=True``: where no compiler or headers exist the install still
succeeds, and the fast backend decodes whole JPEG rows instead (hpc_imagenet/imagenet/data/decode/jpeg.py).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("hpc_imagenet.imagenet.data.decode._jpeg_region",
                             ["hpc_imagenet/imagenet/data/decode/_jpeg_region.c"],
                             libraries=["jpeg"], extra_compile_args=["-O2"], optional=True)])

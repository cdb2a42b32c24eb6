"""Build of the core's one optional C extension, ``hicache_sdk._copy`` (bulk copies with
streaming stores, :mod:`hicache_sdk.kit.segments`). Everything else is in pyproject.toml.
``optional=True``: without a compiler the install succeeds and the copies use ctypes."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("hicache_sdk._copy", ["hicache_sdk/_copy.c"], optional=True)])

"""Build hook: put the repository's ``conf/`` and ``datasets/`` inside the package.

``pyproject.toml`` holds all metadata; this file only extends ``build_py`` so a wheel (and
``pip install .``) carries the shipped Hydra configs, gate tolerances and prompt sets as
``speedbench/conf`` and ``speedbench/datasets``. A checkout keeps using the top-level folders
(see ``speedbench/paths.py``).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("conf", "datasets")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's folders
        for name in SHIPPED:
            source = ROOT / name
            if not source.is_dir():
                continue
            target = Path(self.build_lib) / "speedbench" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))


setup(cmdclass={"build_py": BuildPyWithData})

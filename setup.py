"""The one build step pyproject.toml cannot say: search_spaces/ and dashboard/ stay top-level
folders of the checkout (where the README shows them) and ship inside the wheel as
tuner/_data/search_spaces and tuner/_data/dashboard. `tuner.shipped(name)` finds either."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("search_spaces", "dashboard")


class BuildPyWithShippedFolders(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own folders in place
        for name in SHIPPED:
            target = Path(self.build_lib) / "tuner" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(ROOT / name, target,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithShippedFolders})

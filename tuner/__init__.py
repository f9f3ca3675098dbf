"""tuner: finds the fastest way to serve an LLM on a GPU type by launching real serving trials."""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("tuner")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

# The data files that ship inside the package (GPU specs, model shapes, the corpus, schemas).
DATA_DIR = Path(__file__).resolve().parent / "data"


def shipped(name: str) -> Path:
    """A top-level folder of the project (`search_spaces`, `dashboard`): in an installed wheel,
    the copy the build put in tuner/_data/ (see setup.py); in a checkout, the folder itself."""
    here = Path(__file__).resolve().parent
    packaged = here / "_data" / name
    return packaged if packaged.is_dir() else here.parent / name

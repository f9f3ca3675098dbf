"""tuner: finds the fastest way to serve an LLM on a GPU type by launching real serving trials."""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("tuner")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

# The data files that ship inside the package (GPU specs, model shapes, the corpus, schemas).
DATA_DIR = Path(__file__).resolve().parent / "data"

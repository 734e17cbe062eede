"""fa: generate, run, verify and compare FlashAttention homework programs."""
from importlib import metadata

try:
    __version__ = metadata.version("fa-toolkit")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "unknown (not installed)"

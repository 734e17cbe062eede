"""fa: generate, run, verify and compare FlashAttention homework programs."""
from pathlib import Path

# The project checkout: programs are built here with make and suite files live here.
ROOT = Path(__file__).resolve().parent.parent

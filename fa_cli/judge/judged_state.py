"""A run's judged cases kept between two processes. fa class times every program's cases first,
each timed run alone on the GPU, and looks into the failures after, side by side
(classroom/whole_class.py): `fa run --save-judged FILE` judges the cases, writes their results
here and stops before the search for a cause; `fa run --from-judged FILE` takes them back and
goes on from there, as one fa run would have. The file is fa's own (written outside any sandbox),
whole or not at all, and holds for these cases and this fa only. It is a pickle: --from-judged
takes only a file fa wrote (fa class keeps them in CLASS/records/, which no sandboxed run sees)."""
from __future__ import annotations

import pickle
from pathlib import Path

import fa_cli

from ..errors import FaError
from ..files import atomic_file


def save(path: str | Path, names: list[str], results: list) -> None:
    with atomic_file(Path(path)) as f:
        pickle.dump(dict(fa=fa_cli.__version__, names=list(names), results=results), f)


def load(path: str | Path, names: list[str]) -> list:
    """The results kept for exactly these cases by this fa; else a one-line error."""
    try:
        with open(path, "rb") as f:
            kept = pickle.load(f)
    except Exception as e:  # a file cut short or not fa's: any error of the unpickling is the file's
        raise FaError(f"{path}: not a judged run fa can read ({type(e).__name__})") from None
    if not isinstance(kept, dict) or kept.get("fa") != fa_cli.__version__ or kept.get("names") != list(names):
        raise FaError(f"{path}: judged by another fa or for other cases than {', '.join(names)}")
    return kept["results"]

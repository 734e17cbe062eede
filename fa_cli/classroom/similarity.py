"""Pairs of submissions that share code, for a TA to look at: copydetect's fingerprints (winnowing
over Pygments tokens, as MOSS does: names and literals stand as one token each, so renamed
variables do not hide a copy), each source against the same source of every other student, with
what fa init gives every student (fa_cli/starter) counted as boilerplate. Nothing leaves the
machine. A pair is a place to look, never a verdict."""
from __future__ import annotations

import io
import itertools
from importlib import resources

from .submissions import SOURCES, Submission

NOISE_TOKENS = 25      # a run shorter than this is never counted (copydetect's noise threshold)
GUARANTEE_TOKENS = 30  # a run this long is always found (its guarantee threshold)
WINDOW = GUARANTEE_TOKENS - NOISE_TOKENS + 1
LANGUAGE = {"hw4.cu": "cuda", "hw4.hip": "cuda", "hw4.cpp": "cpp"}  # HIP reads as CUDA C++ to Pygments
SHOWN = 10  # pairs kept, most shared first


def _fingerprint(name: str, text: str, boilerplate=()):
    from copydetect import CodeFingerprint  # copydetect imports matplotlib: not at every start of fa
    return CodeFingerprint(name, NOISE_TOKENS, WINDOW, boilerplate=list(boilerplate), language=LANGUAGE[name],
                           fp=io.StringIO(text))


def _starter(name: str) -> list[int]:
    """The starter's fingerprints for this source (none for hw4.cpp: fa init gives no CPU one)."""
    starter = resources.files("fa_cli") / "starter" / name
    return list(_fingerprint(name, starter.read_text()).hashes) if starter.is_file() else []


def pairs(submissions: list[Submission]) -> list[dict]:
    """The SHOWN most similar pairs, each: the two students, the source, the share of each one's
    code found in the other (0 to 1), the tokens they share and where (character spans)."""
    from copydetect import compare_files
    found = []
    for name in SOURCES:
        boilerplate = _starter(name)
        prints = [(s.student, s.folder / name) for s in submissions if name in s.files]
        prints = [(student, path, _fingerprint(name, path.read_text(errors="replace"), boilerplate))
                  for student, path in prints]
        for (a, path_a, fa_), (b, path_b, fb) in itertools.combinations(prints, 2):
            shared, (share_a, share_b), (spans_a, spans_b) = compare_files(fa_, fb)
            if shared:
                found.append(dict(a=a, b=b, source=name, share_a=round(float(share_a), 3),
                                  share_b=round(float(share_b), 3), tokens=int(shared),
                                  spans_a=_spans(spans_a), spans_b=_spans(spans_b)))
    found.sort(key=lambda p: (-max(p["share_a"], p["share_b"]), -p["tokens"]))
    return found[:SHOWN]


def _spans(slices) -> list[list[int]]:
    return [[int(s), int(e)] for s, e in zip(*slices)] if len(slices) == 2 and len(slices[0]) else []


def lines_of(found: list[dict], most: int = 5) -> list[str]:
    """The first pairs as lines for the terminal."""
    return [f"{p['a']} ~ {p['b']} ({p['source']}): {p['share_a']:.0%} of {p['a']}'s code and {p['share_b']:.0%} "
            f"of {p['b']}'s in common ({p['tokens']} tokens)" for p in found[:most]]

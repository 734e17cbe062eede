"""A butterfly line that shuffles one value into another's sum or max: `s1 += __shfl_xor(s0, off)`
beside `s0 += __shfl_xor(s0, off)`, a line copied for a second value with its operand left as it
was. Each lane then holds its own partial of the second value plus its partners' of the first: the
lanes disagree on it, which the map reads as weights that differ by column. Read from the source
text, and said only beside a measured disagreement of the lanes (linear_map's columns)."""
from __future__ import annotations

import re
from pathlib import Path

# target op= shuffle(operand, ...) or target = max(target, shuffle(operand, ...)); a _sync variant's mask first
MASK = r"(?:[^,()]+,\s*)?"
SUMMED = re.compile(rf"\b(\w+)\s*\+=\s*__shfl\w*\s*\(\s*{MASK}(\w+)\s*,")
MAXED = re.compile(rf"\b(\w+)\s*=\s*f?max\w*\s*\(\s*\1\s*,\s*__shfl\w*\s*\(\s*{MASK}(\w+)\s*,")


def crossed(source: Path | None) -> str:
    """Words for the first shuffle line whose operand is another value that the source also reduces
    into itself ("" where none, or no source)."""
    try:
        lines = source.read_text(errors="replace").splitlines() if source else []
    except OSError:
        return ""
    found = [(n, m.group(1), m.group(2), line.strip()) for n, line in enumerate(lines, 1)
             for pattern in (SUMMED, MAXED) if (m := pattern.search(line.split("//")[0]))]
    own = {target for _, target, operand, _ in found if target == operand}
    for n, target, operand, text in found:
        if target != operand and operand in own:
            return (f"the source's line {n} (`{text[:70]}`) reduces the shuffle of {operand} into {target}, where its "
                    f"other lines reduce each value into itself: every lane's {target} then holds its own partial plus "
                    f"its partners' {operand}, a value the lanes do not agree on")
    return ""

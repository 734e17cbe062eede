"""What the search for a cause found: one finding, its kind and its lines."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Finding:
    kind: str  # race, harmless, memcheck, racecheck, crash, asan, size, missing-tool, clean
    lines: list[str]
    fields: dict = field(default_factory=dict)

    @property
    def is_cause(self) -> bool:
        return self.kind in ("race", "intermittent", "memcheck", "racecheck", "crash", "asan", "size")

"""An ERROR at the program's own check of an event's elapsed time with "device not ready": the
runtime says that while the event has not completed, that is, while the work recorded before it
still runs. Whether a wait for that event (cudaEventSynchronize) comes before the call in the
source is read and said with the line; an observation beside the tools, never in their place.
With "invalid resource handle" there: an event created without timing (cudaEventDisableTiming),
whose creating line is shown, or one destroyed or never created.
"""
from __future__ import annotations

import re

from .findings import Finding, Kind
from .freed_early import FUNCTION_START, failed_call, failed_line
from .leaving_early import SHOWN
from .steps import Context, Step

ELAPSED = re.compile(r"\b(?:cuda|hip)EventElapsedTime\s*\([^,]*,\s*(\w+)\s*,\s*(\w+)\s*\)")
NOT_READY = re.compile(r"not ready", re.I)
INVALID_HANDLE = re.compile(r"invalid resource handle", re.I)
NO_TIMING = re.compile(r"\b(?:cuda|hip)EventDisableTiming\b")


def waited_for(lines: list[str], number: int, before: str, event: str) -> int | None:
    """The line of a wait for the event (or for the whole device) after the event was recorded and
    before the call (`before`: the failing line's text before the call), in its function."""
    wait = re.compile(rf"\b(?:cuda|hip)(?:EventSynchronize\s*\(\s*{re.escape(event)}\b|DeviceSynchronize\s*\()")
    record = re.compile(rf"\b(?:cuda|hip)EventRecord(?:WithFlags)?\s*\(\s*{re.escape(event)}\b")
    if wait.search(before):
        return number
    for at in range(number - 1, 0, -1):
        if wait.search(lines[at - 1].split("EventRecord")[-1] if record.search(lines[at - 1]) else lines[at - 1]):
            return at
        if record.search(lines[at - 1]) or FUNCTION_START.match(lines[at - 1]):
            return None  # a wait before the record waits for nothing of it
    return None


class TimeReadEarly(Step):
    """An ERROR "device not ready" at the program's own check of cudaEventElapsedTime."""

    name = "an event's time read before the event completed, or from an event that keeps no time"

    def applies(self, ctx: Context) -> bool:
        found = failed_line(ctx) if ctx.verdict == "ERROR" and ctx.signal is None else None
        return found is not None and (NOT_READY.search(found[1]) or INVALID_HANDLE.search(found[1])) is not None

    def run(self, ctx: Context) -> list[Finding]:
        if (call := failed_call(ctx)) is None or (m := ELAPSED.search(call[2][call[0] - 1])) is None:
            return []
        number, error, lines = call
        start, stop = m.group(1), m.group(2)
        if INVALID_HANDLE.search(error):
            return [no_timing(ctx.source.name, number, error, lines, start, stop)]
        wait = waited_for(lines, number, lines[number - 1][:m.start()], stop)
        said = f"line {wait} waits for {stop} after it was recorded (`{lines[wait - 1].strip()[:SHOWN]}`): the event " \
            f"not ready may be {start}, the other one (recorded on a stream nothing waited for?)" if wait else \
            f"no cudaEventSynchronize({stop}) (nor a wait for the device) comes between its record and the call in " \
            f"its function: wait for {stop} first"
        return [Finding(Kind.OBSERVED, [
            f"the call that failed, {ctx.source.name} line {number} (`{lines[number - 1].strip()[:SHOWN]}`: {error}), "
            f"reads the time from event {start} to {stop}, which the runtime refuses with \"not ready\" while either "
            f"has not completed (the work recorded before it still running): {said}"],
            dict(line=number, waited_at=wait))]


def no_timing(name: str, number: int, error: str, lines: list[str], start: str, stop: str) -> Finding:
    """"invalid resource handle" from the elapsed time of start to stop: the line that creates an
    event without timing, where the source has one."""
    made = [at for at, text in enumerate(lines, 1) if NO_TIMING.search(text.split("//")[0])]
    named = re.compile(rf"\b(?:{re.escape(start)}|{re.escape(stop)})\b")
    ours = next((at for at in made if named.search(lines[at - 1])), None)  # start's or stop's own creation
    if ours is None and made:  # or a function that makes events so, called where start or stop is made
        maker = function_of(lines, made[0])
        ours = made[0] if maker and any(named.search(t) and re.search(rf"\b{maker}\s*\(", t) for t in lines) else None
    said = f"line {ours} creates an event with cudaEventDisableTiming (`{lines[ours - 1].strip()[:SHOWN]}`), and " \
        f"{start} or {stop} is made there or by it: an event made so keeps no time; create {start} and {stop} with " \
        "cudaEventCreate" if ours else \
        f"line {made[0]} creates an event with cudaEventDisableTiming, whether {start} and {stop} are made so fa " \
        "could not read" if made else \
        "no line creates an event with cudaEventDisableTiming: an event destroyed, or never created"
    return Finding(Kind.OBSERVED, [
        f"the call that failed, {name} line {number} (`{lines[number - 1].strip()[:SHOWN]}`: {error}), reads the time "
        f"from event {start} to {stop}, which the runtime refuses with \"invalid resource handle\" for an event that "
        f"keeps no time (created with cudaEventDisableTiming) or is not one: {said}"],
        dict(line=number, no_timing_at=ours))


def function_of(lines: list[str], at: int) -> str | None:
    """The name of the function whose body holds line `at` (the nearest function start above it)."""
    for text in reversed(lines[:at]):
        if FUNCTION_START.match(text):
            m = re.search(r"(\w+)\s*\([^()]*\)\s*\{?\s*$", text.strip())
            return m.group(1) if m else None
    return None

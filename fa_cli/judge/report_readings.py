"""What a compute-sanitizer report tells beyond its own lines, read against the run it came from:
a shared-memory access past what the launches gave a block, a global access just past an
allocation (its size as floats of the input), an access at a null pointer (with the copy of a
table of pointers that counts its entries in another type's bytes), a vector access off its
alignment, an output initcheck found
unwritten (its batch, row and column) or an atomic add onto memory nothing wrote first."""
from __future__ import annotations

import re
from pathlib import Path

from ..cases.format import Shape
from ..programs.timing import launches
from .diagnose import quoted, source_lines
from .launch_errors import base_name
from .tool_logs import NEAREST_ALLOCATION


OUT_OF_BOUNDS = r"(?:Access to|Address) (0x[0-9a-f]+) is out of bounds"  # memcheck's address line, both spellings


def shared_past_end(first: list[str], stderr: str) -> str | None:
    """memcheck's first report, an out-of-bounds __shared__ access, against the shared memory a
    block of that kernel had at its launches (the launch log's smem: static and dynamic): where the
    access lies past it, in words; None where it does not, or the log cannot tell."""
    text = " ".join(first)
    hit = re.search(r"Invalid __shared__ (read|write) of size \d+ bytes.*?\bat (.+?)\+0x[0-9a-f]+\b.*?" + OUT_OF_BOUNDS,
                    text)
    if not hit:
        return None
    kernel, at = hit.group(2).strip(), int(hit.group(3), 16)
    logged = launches(stderr)
    same = [launch for launch in logged if launch.kernel == kernel] or \
        [launch for launch in logged if base_name(launch.kernel) == base_name(kernel)]
    sizes = sorted({launch.smem for launch in same})
    if len(sizes) != 1 or at < sizes[0]:
        return None
    return (f"the {hit.group(1)} is at byte {at:,} of its block's shared memory, and {base_name(kernel)}'s launches "
            f"gave a block {sizes[0]:,} bytes (static and dynamic, fa's launch log of the judged run): an access past "
            "the shared memory a block has (a dynamic size given at the launch, its third argument, smaller than "
            "what the kernel's tiles use, or an index past the end of its shared array)")


# Counts of floats a kernel's buffers hold, on a case's shape.
BUFFER_COUNTS = (("B*N*N", lambda s: s.B * s.N * s.N), ("B*N*d", lambda s: s.B * s.N * s.d),
                 ("N*N", lambda s: s.N * s.N), ("B*N", lambda s: s.B * s.N), ("N*d", lambda s: s.N * s.d),
                 ("N", lambda s: s.N))
MOST_COPIES = 16  # a size read as c x a count, c up to this (splits, tiles, warps a row)


def as_floats(size: int, shape: Shape) -> str | None:
    """A size in bytes as c x BUFFER_COUNTS floats on `shape`, every reading that fits ("4 x B*N*d
    floats = 8 x N*d floats": B = 2, N = d or B = 1 make some alike); None where none does."""
    fits = []
    for name, count in BUFFER_COUNTS:
        floats, n = size // 4, count(shape)
        if size % 4 == 0 and n and floats % n == 0 and 1 <= floats // n <= MOST_COPIES:
            fits.append(f"{name} floats" if floats == n else f"{floats // n} x {name} floats")
    return " = ".join(fits) or None


def global_past_end(first: list[str], shape: Shape) -> str | None:
    """memcheck's first report, a __global__ access out of bounds that lies after its nearest
    allocation by less than that allocation's own size: in words, with the allocation's size as
    floats of the case's B, N and d (every reading that fits). memcheck names the nearest allocation,
    not the buffer the line indexes: the words say what follows where the two are one. None otherwise."""
    access = re.search(r"Invalid __global__ (read|write|atomic)", first[0]) if first else None
    placed = next((m for line in first[1:] if (m := NEAREST_ALLOCATION.match(line))), None)
    if not access or not placed or placed.group(2) != "after":
        return None
    past, size = (int(placed.group(g).replace(",", "")) for g in (1, 3))
    if past >= size:
        return None
    floats = as_floats(size, shape)
    of = f", {floats} on this {shape} input" if floats else ""
    return (f"the {access.group(1)} lies {past:,} byte{'s' if past > 1 else ''} past the end of the allocation "
            f"nearest it ({size:,} bytes{of}); where that is the buffer the line indexes, the index reaches past "
            "its end: a buffer allocated smaller than the kernel indexes it (for fewer splits, tiles or rows than "
            "it writes), or an index bounded past the buffer's size")


NULL_PAGE = 1 << 20  # an address under this is a null pointer plus an index, not a buffer's neighbour
FOUR_BYTES = ("float", "int", "unsigned", "unsigned int", "int32_t", "uint32_t")
COPY_CALL = re.compile(r"\b(?:cuda|hip)Memcpy\w*\s*\((.*)")
POINTER_TABLE = (r"vector\s*<\s*(?:const\s+)?\w+\s*(?:const\s*)?\*\s*>\s*{}\b",  # std::vector<float*> NAME
                 r"\w+\s*(?:const\s*)?\*\s*(?:const\s*)?\*\s*{}\b",  # float** NAME
                 r"\w+\s*\*\s*{}\s*\[")  # float* NAME[...]


def null_pointer(first: list[str], source: Path | None) -> list[str]:
    """memcheck's first report, a __global__ access at an address under NULL_PAGE: a null pointer
    dereferenced, in words; with the source's copies of a table of pointers whose byte count is
    in sizeof of a 4-byte type (half of a table of 8-byte pointers reaches the device). [] where
    the address is not near 0."""
    text = " ".join(first)
    hit = re.search(r"Invalid __global__ (read|write|atomic).*?" + OUT_OF_BOUNDS, text)
    if not hit or int(hit.group(2), 16) >= NULL_PAGE:
        return []
    at = int(hit.group(2), 16)
    said = [f"the {hit.group(1)} is at address {hit.group(2)}, {at:,} bytes past 0: a null pointer dereferenced (an "
            "index added to it): a pointer the kernel was given, or read from device memory, that was never set (a "
            "table of pointers copied short, a pointer left NULL on the host, an allocation never made)"]
    return said + short_pointer_copies(source)


# the lines a misaligned vector access comes from: a vector cast of a float pointer, a pointer offset by a
# constant number of floats (a base moved off its allocation's alignment)
VECTOR_LINES = (r"reinterpret_cast\s*<\s*(?:const\s+)?(?:float|int)[234]\s*\*|\((?:const\s+)?float[234]\s*\*\)",
                r"\*\s*\w+\s*=\s*\w+\s*\+\s*\d+\s*;", r"(?:<<<|GGL\s*\()[^;]*[(,]\s*\w+\s*\+\s*\d+\s*[,)]")


def address_readings(first: list[str], source: Path | None) -> list[str]:
    """What memcheck's first report's address tells: a null pointer, or a vector access off its
    alignment."""
    return null_pointer(first, source) or misaligned(first, source)


def misaligned(first: list[str], source: Path | None) -> list[str]:
    """memcheck's first report, a __global__ access of S bytes at an address that is no multiple of
    S: how far past the boundary, in floats, with the source's vector casts and constant offsets
    ([] where the report is of another kind)."""
    hit = re.search(r"Invalid __global__ (read|write) of size (\d+) bytes.*?(?:Access to|Address) (0x[0-9a-f]+) is "
                    r"misaligned", " ".join(first))
    if not hit:
        return []
    size, at = int(hit.group(2)), int(hit.group(3), 16)
    off = at % size
    said = [f"the {hit.group(1)} of {size} bytes is at {hit.group(3)}, {off} bytes past a {size}-byte boundary: an "
            f"access of {size} bytes needs an address that is a multiple of {size}, and cudaMalloc's are 256-byte "
            "aligned: a pointer moved off that alignment"]
    if size >= 8 and off % 4 == 0:  # a vector of floats: the pitch said in floats
        said[0] += (f" by {off // 4} floats, no multiple of {size // 4} (a base plus a constant, a row, tile or batch "
                    "start at such a pitch)")
    if source and (shown := source_lines(source, VECTOR_LINES)):
        said.append(f"lines with a vector cast or a constant offset in {source.name}: {quoted(shown)}")
    return said


def short_pointer_copies(source: Path | None) -> list[str]:
    """Copies (cudaMemcpy, hipMemcpy) of a table of pointers counted in sizeof of a 4-byte type,
    each in words with its line."""
    try:
        text = source.read_text(errors="replace") if source else ""
    except OSError:
        return []
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        call = COPY_CALL.search(line.split("//")[0])
        sizes = re.findall(r"sizeof\s*\(\s*([\w:\s]+?)\s*\)", call.group(1)) if call else []
        if not sizes or sizes[0] not in FOUR_BYTES:
            continue
        for name in dict.fromkeys(re.findall(r"\b([A-Za-z_]\w*)\b", call.group(1))):
            if any(re.search(p.format(re.escape(name)), text) for p in POINTER_TABLE):
                found.append(f"line {n} copies {name}, a table of pointers (8 bytes an entry), with a byte count in "
                             f"sizeof({sizes[0]}) (4 bytes an entry): only the first half of the table reaches the "
                             f"device, the rest of it is never set: `{line.strip()}`")
                break
    return found


ATOMIC_UNWRITTEN = ("an atomic add onto memory nothing wrote first: an accumulator not zeroed there (no memset over "
                    "it, or one of too few bytes: a count of floats where bytes belong)")


def unwritten_output(first: list[str], B: int, N: int, d: int) -> str | None:
    """What initcheck's first report tells: a read by an atomic add (an accumulator never zeroed), or
    where a copy back of the whole output (B*N*d floats) whose source was never written falls in it:
    its batch, row and column; None else."""
    text = " ".join(first)
    if re.search(r"Uninitialized __global__ memory read.*?\bat (?:void )?(?:unsafeA|a)tomicAdd\b", text):
        return ATOMIC_UNWRITTEN
    copy = re.search(r"host access to (0x[0-9a-f]+) of size ([\d,]+) bytes", text)
    read = re.search(r"Uninitialized access to (0x[0-9a-f]+) on access by cudaMemcpy\w* source", text)
    if not copy or not read:
        return None
    base, size, at = int(copy.group(1), 16), int(copy.group(2).replace(",", "")), int(read.group(1), 16)
    if size != B * N * d * 4 or not base <= at < base + size:
        return None
    b, rest = divmod((at - base) // 4, N * d)
    return (f"the copy back is the whole output ({size:,} bytes); the first value initcheck found unwritten in it "
            f"is at byte {at - base:,}: the output's batch {b}, row {rest // d}, column {rest % d}")

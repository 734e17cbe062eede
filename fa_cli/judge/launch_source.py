"""What the host code says about a launch, read from the source without a run: a kernel given its
arguments in another order than its parameters (two swapped, by name: `n` for B and `b` for N), a
template instance launched with dynamic shared memory whose limit was raised for another instance
only, and a copy to the device issued after the launch of a kernel that reads what it copies, with no
later launch of it (on one stream the copy runs after the kernel, which reads the earlier value).
Each is said as what the source shows, beside the measurements, never a cause by itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .findings import Finding, Kind
from .leaving_early import SHOWN, code_lines
from .steps import Context, Step

KERNEL = re.compile(r"__global__\s")
BOUNDS = re.compile(r"__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)")
CHEVRONS = re.compile(r"\b(\w+)\s*(<[^<>;()]*>)?\s*<<<((?:[^;]|;(?!\s*$))*?)>>>\s*\(([^;]*)\)\s*;")
GGL = re.compile(r"\bhipLaunchKernelGGL\s*\(\s*(?:HIP_KERNEL_NAME\s*\(\s*)?(\w+)\s*(<[^<>;]*>)?[^,]*,([^;]*)\)\s*;")
# the dynamic shared memory limit raised for one kernel (a template's instance is a kernel of its own)
RAISED = re.compile(r"\b(?:cuda|hip)FuncSetAttribute\s*\(\s*(?:\([^()]*\)\s*)?&?\s*(\w+)\s*(<[^<>;]*>)?\s*,"
                    r"[^;]*MaxDynamicSharedMemorySize")
BY_ARRAY = re.compile(r"\b(?:cuda|hip)LaunchKernel\s*\(\s*(?:\([^()]*\)\s*)?&?\s*(\w+)(?:<[^<>]*>)?\s*,"
                      r"[^,]*,[^,]*,\s*(\w+)\s*[,)]")
SYMBOL_COPY = re.compile(r"\b(?:cuda|hip)MemcpyToSymbol(?:Async)?\s*\(\s*(?:HIP_SYMBOL\s*\(\s*)?(\w+)")
BUFFER_COPY = re.compile(r"\b(?:cuda|hip)Memcpy(?:Async)?\s*\(\s*(\w+)\s*,[^;]*HostToDevice")
LOOPING = re.compile(r"\b(for|while|do)\b")
CONDITIONAL = re.compile(r"\b(if|else|switch|case)\b")
LAMBDA = re.compile(r"\]\s*(?:\([^()]*\))?\s*(?:mutable\s*)?(?:->\s*[\w:<>]+\s*)?$")  # a lambda's body opens here
INTEGER = re.compile(r"^(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|short|size_t|u?int(?:32|64)_t|unsigned)"
                     r"\b[^*&\[]*$")  # a size's parameter, not a pointer
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
DEFAULT_SHARED = 48 * 1024  # bytes of dynamic shared memory a block gets without raising its limit


@dataclass
class Launch:
    kernel: str
    line: int  # where its arguments are written (the argument array's line for cudaLaunchKernel)
    at: int  # the launch's offset in the text
    end: int  # the offset past its statement
    args: list[str | None]  # each argument's plain name, None where it is an expression
    template: str = ""  # the instance launched: `<64>`, spaces left out
    shared: str = ""  # its bytes of dynamic shared memory as written (a third launch parameter)


def top_level_split(text: str) -> list[str]:
    """A list of arguments split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]] if text.strip() else parts


def plain_name(arg: str) -> str | None:
    """`&n`, `(void*)&b`, `in.N`, `p->B` -> n, b, N, B; None for anything else (a sum, a call)."""
    arg = re.sub(r"^\s*(?:\((?:const\s+)?\w+\s*\**\s*\)\s*)*&?\s*", "", arg).strip()
    m = re.fullmatch(r"(?:\w+\s*(?:\.|->)\s*)*(\w+)", arg)
    return m.group(1) if m and not m.group(1)[0].isdigit() else None


def block_end(text: str, brace: int) -> int:
    """The offset past the `}` that closes the `{` at brace."""
    depth = 0
    for i in range(brace, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if depth == 0:
            return i + 1
    return len(text)


def kernels(text: str) -> dict[str, tuple[list[str | None], list[str], str]]:
    """Each kernel's parameter names, their declarations and its body's text."""
    found = {}
    for m in KERNEL.finditer(text):
        brace = text.find("{", m.end())
        head = BOUNDS.sub("", text[m.end():brace]) if brace > 0 else ""
        sig = re.search(r"(\w+)\s*\(((?:[^()]|\([^()]*\))*)\)\s*$", head)
        if sig:
            params = [re.sub(r"\s*=.*$|\[.*\]", "", p).strip() for p in top_level_split(sig.group(2))]
            found[sig.group(1)] = ([(re.findall(r"\w+", p) or [None])[-1] for p in params], params,
                                   text[brace:block_end(text, brace)])
    return found


def line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def launches(text: str, names: set[str] | None) -> list[Launch]:
    """Every launch of a kernel of the source: <<<>>>, hipLaunchKernelGGL, cudaLaunchKernel with an
    argument array written in the source before it."""
    found = []
    for m in CHEVRONS.finditer(text):
        if names is None or m.group(1) in names:
            config = top_level_split(m.group(3))
            found.append(Launch(m.group(1), line_of(text, m.start(4)), m.start(), m.end(),
                                [plain_name(a) for a in top_level_split(m.group(4))], instance(m.group(2)),
                                config[2].strip() if len(config) > 2 else ""))
    for m in GGL.finditer(text):
        if names is None or m.group(1) in names:  # grid, block, shared bytes and stream come before the kernel's own
            parts = top_level_split(m.group(3))
            found.append(Launch(m.group(1), line_of(text, m.start()), m.start(), m.end(),
                                [plain_name(a) for a in parts[4:]], instance(m.group(2)),
                                parts[2].strip() if len(parts) > 2 else ""))
    for m in BY_ARRAY.finditer(text):
        array = list(re.finditer(rf"\b{re.escape(m.group(2))}\s*\[\s*\w*\s*\]\s*=\s*\{{([^}}]*)\}}",
                                 text[:m.start()]))
        if (names is None or m.group(1) in names) and array:
            found.append(Launch(m.group(1), line_of(text, array[-1].start()), m.start(), m.end(),
                                [plain_name(a) for a in top_level_split(array[-1].group(1))]))
    return found


def instance(template: str | None) -> str:
    return re.sub(r"\s+", "", template or "")


def limit_not_raised(text: str, launch: Launch) -> tuple[int, str] | None:
    """(line, the instance it raises) of a dynamic shared memory limit raised for another instance of
    the launched kernel and never for the one launched with dynamic shared memory."""
    raised = [(m, instance(m.group(2))) for m in RAISED.finditer(text) if m.group(1) == launch.kernel]
    literal = re.compile(r"<\d+(?:,\d+)*>")  # an instance named by a parameter or a macro may be any of them
    small = launch.shared.isdigit() and int(launch.shared) <= DEFAULT_SHARED
    if launch.shared in ("", "0") or small or not raised or not literal.fullmatch(launch.template) or \
            any(not literal.fullmatch(t) or t == launch.template for _, t in raised):
        return None
    return line_of(text, raised[0][0].start()), raised[0][1]


def swapped(launch: Launch, params: list[str | None], decls: list[str]) -> tuple[int, int] | None:
    """Two integer parameters whose arguments carry each other's names (case aside): sizes swapped,
    not buffers (a ping-pong of two pointers is given in either order on purpose)."""
    low = [p.lower() if p and INTEGER.match(decl) else None for p, decl in zip(params, decls)]
    got = [a.lower() if a else None for a in launch.args]
    if len(got) != len(low):
        return None
    for i in range(len(low)):
        for j in range(i + 1, len(low)):
            if got[i] and got[j] and low[i] != low[j] and got[i] == low[j] and got[j] == low[i]:
                return i, j
    return None


def statement_head(text: str, at: int) -> str:
    """The start of the statement that `at` lies in (or the head of the block that opens at `at`):
    from the last `;`, `{` or `}` outside parentheses, with parenthesised parts emptied."""
    seg = text[max(text.rfind("{", 0, at), text.rfind("}", 0, at)) + 1:at]
    while (flat := re.sub(r"\([^()]*\)", "()", seg)) != seg:
        seg = flat
    return seg.rsplit(";", 1)[-1]


def blocks_at(text: str, at: int) -> tuple[list[int], list[str]]:
    """The offsets of the `{` of every block around `at`, outermost first, and their heads."""
    heads, opened = [], []
    for m in re.finditer(r"[{}]", text[:at]):
        if m.group() == "{":
            heads.append(statement_head(text, m.start()))
            opened.append(m.start())
        elif heads:
            heads.pop()
            opened.pop()
    return opened, heads


def copied_after(text: str, launch: Launch, ks: dict, every: list[Launch]) -> tuple[int, str, str] | None:
    """(line, what, name) of a copy to the device after a launch in main, on the launch's own path
    (in its block or one around it, not on a branch), of a symbol the kernel reads or a buffer it is
    given, with no later launch that reads it and nothing freeing or allocating it between; None
    where the launch is in a loop or a lambda (the copy may come before the next time round)."""
    opened, heads = blocks_at(text, launch.at)
    if not opened or not re.search(r"\bmain\s*\(", heads[0]) or LOOPING.search(statement_head(text, launch.at)) or \
            any(LOOPING.search(h) or LAMBDA.search(h) for h in heads[1:]):
        return None
    given, body = {a for a in launch.args if a}, ks[launch.kernel][2]
    for pattern, what in ((SYMBOL_COPY, "copies to the symbol"), (BUFFER_COPY, "copies to")):
        for m in pattern.finditer(text, launch.end, block_end(text, opened[0])):
            name, later = m.group(1), [o for o in launches(text, None) if o.at > m.start()]
            around = blocks_at(text, m.start())[0]
            if around != opened[:len(around)] or CONDITIONAL.search(statement_head(text, m.start())) or \
                    re.search(rf"\b(?:cuda|hip)(?:Malloc|Free)\w*\s*\([^;]*\b{re.escape(name)}\b",
                              text[launch.end:m.start()]):
                continue
            symbol = pattern is SYMBOL_COPY
            reads = (lambda o: o.kernel not in ks or re.search(rf"\b{re.escape(name)}\b", ks[o.kernel][2])) \
                if symbol else (lambda o: name in o.args)  # a kernel whose body fa has not: it may
            if (re.search(rf"\b{re.escape(name)}\b", body) if symbol else name in given) and \
                    not any(reads(o) for o in later):
                return line_of(text, m.start()), what, name
    return None


def read(text: str) -> list[str]:
    """What the launches' host code shows, one sentence each."""
    text = STRING.sub('""', text)  # a launch written in a message is no launch
    ks = kernels(text)
    every = launches(text, set(ks))
    shown = text.splitlines()
    said, copies = [], set()
    for launch in every:
        params, decls, _ = ks[launch.kernel]
        if pair := swapped(launch, params, decls):
            i, j = pair
            said.append(f"line {launch.line} (`{shown[launch.line - 1].strip()[:SHOWN]}`) gives {launch.kernel} "
                        f"{launch.args[i]} for its parameter {params[i]} and {launch.args[j]} for {params[j]}: two "
                        "arguments in each other's places by their names (the kernel computes with those two values "
                        "exchanged)")
        if other := limit_not_raised(text, launch):
            line, raised = other
            said.append(f"line {line} (`{shown[line - 1].strip()[:SHOWN]}`) raises the dynamic shared memory limit of "
                        f"{launch.kernel}{raised} only, and line {line_of(text, launch.at)} launches "
                        f"{launch.kernel}{launch.template} with dynamic shared memory, whose own limit nothing raises "
                        "(each instance of a template is a kernel of its own: past 48 KB its launch is refused)")
        if (copy := copied_after(text, launch, ks, every)) and copy not in copies:
            copies.add(copy)  # one copy after a launch in each branch of an if: said once
            line, what, name = copy
            said.append(f"line {line} (`{shown[line - 1].strip()[:SHOWN]}`) {what} {name} after line "
                        f"{line_of(text, launch.at)} launches {launch.kernel}, which reads it, and no launch of it "
                        "follows: on one stream the copy runs after the kernel, which reads what was there before")
    return list(dict.fromkeys(said))


class LaunchAsWritten(Step):
    """A failing GPU program's launches as its source writes them."""

    name = "the launches as the source writes them"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict in ("WRONG", "ERROR") and ctx.kind != "cpu" and ctx.source is not None

    def run(self, ctx: Context) -> list[Finding]:
        try:
            text = "\n".join(code_lines(ctx.source))
        except OSError:
            return []
        said = read(text)
        return [Finding(Kind.OBSERVED, [f"read in {ctx.source.name}: {s}" for s in said])] if said else []

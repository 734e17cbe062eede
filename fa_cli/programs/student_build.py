"""A student's source built as the course builds it: with the Makefile beside it where there is
one (the commands its rule runs, read with `make -n` and run in a copy of the folder; the GPU
target replaced by this machine's where the compiler has not the course's, and said), else with
the course's example line. A build that fails under the course's (or the Makefile's) C++ standard
is tried under the newer ones: one that builds names the standard the source needs, and where
to set it. Builds run in a scratch folder; only a built program reaches the cache.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import locations
from ..settings import compiler_command
from . import sandbox, wave64
from .devices import list_devices
from .processes import run_tool

# A student's source by its suffix: the compiler of the course's line for it.
SOURCE_COMPILERS = {".cu": "nvcc", ".hip": "hipcc", ".cpp": "g++", ".cc": "g++"}
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")  # the names make looks for, in its order
COMPILER_WORD = re.compile(r"(?:^|/)(nvcc|hipcc|g\+\+|gcc|c\+\+|clang\+\+|clang|amdclang\+\+)$")
# nvcc's ways of naming a GPU target: -arch=sm_61, -arch sm_61, --gpu-architecture=..., -gencode ...
ARCH_FLAGS = ("-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code", "--gpu-code")
COPY_LIMIT = 8 << 20  # a file of the source's folder larger than this is no part of a build


def source_compiler(source: Path) -> str:
    """The compiler of a source's build here: hw4.hip goes to nvcc where it runs on the NVIDIA
    emulation of the MI210 (wave64.emulated), else to the compiler of its suffix."""
    if wave64.emulates(source):
        return "nvcc"
    return SOURCE_COMPILERS[source.suffix]


def nvcc_targets() -> list[int]:
    """The sm_XY numbers this nvcc builds (its --list-gpu-arch)."""
    listed = run_tool([compiler_command("nvcc"), "--list-gpu-arch"]).stdout.split()
    return sorted(int(a.split("_")[1]) for a in listed if a.startswith("compute_"))


def local_target(compiler: str) -> str | None:
    """The GPU target this machine runs: its own GPU's, else the oldest the compiler builds."""
    vendor = {"nvcc": "nvidia", "hipcc": "amd"}.get(compiler)
    for dev in list_devices():
        if dev.vendor == vendor:
            return dev.arch
    if compiler == "nvcc":
        archs = nvcc_targets()
        return f"sm_{archs[0]}" if archs else "sm_61"
    return "gfx90a" if compiler == "hipcc" else None


# What a source asks of its build that the course's line does not give: OpenMP's pragmas are
# ignored without -fopenmp (a racy program then runs serially and passes), std::thread and
# pthreads need -pthread. Flag -> the pattern in the source that asks for it.
SOURCE_NEEDS = {"-fopenmp": re.compile(r"^\s*#\s*pragma\s+omp\b|\bomp_get_\w+\s*\(|#\s*include\s*<omp\.h>", re.M),
                "-pthread": re.compile(r"#\s*include\s*<(thread|pthread\.h|future)>|\bstd::(thread|async)\b")}


def source_needs(source: Path) -> list[str]:
    """The flags a source asks for (SOURCE_NEEDS), in their order there."""
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return []
    return [flag for flag, pattern in SOURCE_NEEDS.items() if pattern.search(text)]


def course_line(source: Path, output: Path | str, extra: tuple[str, ...] = ()) -> list[str]:
    """The course's build line for a source (its example Makefile: nvcc -std=c++11 -O3, hipcc
    -std=c++14 -O3), for this machine's GPU (the course's sm_61 is no target of CUDA 13), with the
    flags the source asks for (source_needs: -fopenmp, -pthread) so that it runs as its author meant."""
    compiler = source_compiler(source)
    target = local_target(compiler)
    needs = source_needs(source)
    if source.suffix == ".hip" and compiler == "nvcc":  # the MI210's rules on the NVIDIA GPU
        argv = wave64.build_line(compiler_command("nvcc"), target)
        needs = [f"-Xcompiler={flag}" for flag in needs]
    elif compiler == "nvcc":
        argv = [compiler_command("nvcc"), "-std=c++11", "-O3", f"-arch={target}"]
        needs = [f"-Xcompiler={flag}" for flag in needs]  # host code's flags, through nvcc
    elif compiler == "hipcc":
        argv = [compiler_command("hipcc"), "-std=c++14", "-O3", f"--offload-arch={target}"]
    else:
        argv = [compiler_command("g++"), "-std=c++11", "-O3"]
    return [*argv, *needs, *extra, "-o", str(output), str(source), "-lm"]


def makefile_of(source: Path) -> Path | None:
    """The Makefile beside a source, as make would take it, or None."""
    return next((source.parent / n for n in MAKEFILES if (source.parent / n).is_file()), None)


@dataclass
class Recipe:
    """How a source is built: shell lines run in order in the build folder, the file they make
    there, the words that say which build it is, and what fa changed of the student's lines."""
    lines: list[str]
    product: str
    how: str
    changes: list[str] = field(default_factory=list)
    makefile: Path | None = None


def course_recipe(source: Path, extra: tuple[str, ...] = ()) -> Recipe:
    argv = course_line(source, source.stem, extra)
    argv[-2] = str(source.resolve())
    return Recipe([shlex.join(argv)], source.stem, "the course's line")


def copy_folder(folder: Path, work: Path) -> None:
    """The source's folder as a build sees it: its files (none over COPY_LIMIT), one level of
    subfolders, no version-control folders. A link is copied as the link, never read through
    here: a confined build sees only what the sandbox shows it, a file a link names elsewhere
    not among it."""
    for item in folder.iterdir():
        if item.name.startswith(".git"):
            continue
        if item.is_symlink():
            os.symlink(os.readlink(item), work / item.name)
        elif item.is_file() and item.stat().st_size <= COPY_LIMIT:
            shutil.copy2(item, work / item.name)
        elif item.is_dir():
            for sub in item.iterdir():
                if sub.is_symlink() or (sub.is_file() and sub.stat().st_size <= COPY_LIMIT):
                    (work / item.name).mkdir(exist_ok=True)
                    shutil.copy2(sub, work / item.name / sub.name, follow_symlinks=False)


def make_commands(makefile: Path, goal: str, work: Path) -> list[str] | None:
    """The commands make would run for a goal (or its default goal, ""), every prerequisite
    remade: `make -n -B`, in the copy. None where make cannot say."""
    argv = ["make", "-n", "-B", "--no-print-directory", "-f", makefile.name, *([goal] if goal else [])]
    env = {**os.environ, "MAKEFLAGS": ""}
    argv, confined = sandbox.build_run(argv, work, env)
    proc = run_tool(argv, cwd=work, env=env, **confined)
    if proc.returncode != 0:
        return None
    return [line for line in proc.stdout.splitlines() if line.strip()]


def each_compiler_command(line: str, change) -> str:
    """The shell line with change(words) applied to each compiler command in it. A line of
    commands joined by && (a Makefile's `echo ... && nvcc ...`) is taken apart there; a part with
    other shell syntax (; | < > ` $) is left as it is."""
    parts = re.split(r"\s+&&\s+", line)
    for i, part in enumerate(parts):
        try:
            words = shlex.split(part) if not re.search(r"[;&|<>`$]", part) else None
        except ValueError:  # quotes shlex cannot pair
            words = None
        if words and compiler_of_line(words):
            parts[i] = shlex.join(change(words))
    return " && ".join(parts)


def compiler_of_line(words: list[str]) -> str | None:
    match = COMPILER_WORD.search(words[0]) if words else None
    return match.group(1) if match else None


def retarget(words: list[str], target: str, known: list[int]) -> tuple[list[str], str | None]:
    """An nvcc line with its GPU targets replaced by `target` where this nvcc lacks one of them:
    the new words, and what changed in words (None: nothing)."""
    kept, named, i = [], [], 0
    while i < len(words):
        word, flag = words[i], words[i].split("=", 1)[0]
        if flag in ARCH_FLAGS:
            value = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else "")
            named.append(word if "=" in word else f"{word} {value}")
            i += 1 if "=" in word else 2
            continue
        kept.append(word)
        i += 1
    numbers = [int(n) for text in named for n in re.findall(r"(?:sm|compute)_(\d+)", text)]
    if not named or all(n in known for n in numbers):
        return words, None
    missing = sorted({n for n in numbers if n not in known})
    said = f"{' '.join(named)} -> -arch={target} (this nvcc has no sm_{', sm_'.join(map(str, missing))})"
    return [kept[0], f"-arch={target}", *kept[1:]], said


def for_emulation(words: list[str], target: str) -> list[str]:
    """A Makefile's hipcc line as fa's MI210 emulation builds it: nvcc's line (wave64) with the
    student's language, macro, include and optimization flags, output and inputs."""
    line = wave64.build_line(compiler_command("nvcc"), target)
    keep = [w for w in words[1:] if re.match(r"-(std=|D|I|U|O\d?$|o$)", w) or not w.startswith("-")]
    line = [w for w in line if not (w.startswith("-std=") and any(k.startswith("-std=") for k in keep))]
    return [*line, *keep]


def makefile_recipe(source: Path, makefile: Path, work: Path, extra: tuple[str, ...] = ()) -> Recipe | str:
    """The Makefile's rule for the program (its target named as the source's stem, else its
    default goal), as shell lines for the copy in `work`; a string says why there is none."""
    goal = source.stem
    lines = make_commands(makefile, goal, work)
    if lines is None:
        goal, lines = "", make_commands(makefile, "", work)
    if not lines:
        return f"make -n in its folder gives no commands for {source.stem} ({makefile.name})"
    compiler = source_compiler(source)
    target = local_target(compiler) or ""
    known = nvcc_targets() if compiler == "nvcc" else []
    changes, products = [], []

    def as_built_here(words: list[str]) -> list[str]:
        tool = compiler_of_line(words)
        if source.suffix == ".hip" and compiler == "nvcc":
            words = for_emulation(words, target)
            changes.append(f"{tool} -> nvcc through {wave64.LABEL.split(':')[0]}")
        elif tool == "nvcc":
            words, said = retarget(words, target, known)
            changes.extend([said] if said else [])
        words = [*words, *extra]
        if "-o" in words[:-1]:
            products.append(words[words.index("-o") + 1])
        return words
    out = [each_compiler_command(line, as_built_here) for line in lines]
    product = products[-1] if products else None
    if product is None:
        return f"its Makefile's rule ({'make ' + goal if goal else 'make'}) names no output (-o) of a compiler"
    how = f"its {makefile.name}'s rule, make {goal}" if goal else f"its {makefile.name}'s default goal, make"
    return Recipe(out, product, how, list(dict.fromkeys(changes)), makefile)


def run_recipe(recipe: Recipe, work: Path, env: dict) -> str | None:
    """Run a recipe's lines in `work`: None where its product is there, else the first error line."""
    for line in recipe.lines:
        argv, confined = sandbox.build_run(["bash", "-c", line], work, env)
        proc = run_tool(argv, cwd=work, env=env, **confined)
        if proc.returncode != 0:
            text = proc.stderr + proc.stdout
            errors = [l for l in text.splitlines() if "error" in l.lower()] or [l for l in text.splitlines() if l.strip()]
            return errors[0].strip() if errors else f"exit code {proc.returncode}"
    return None if (work / recipe.product).is_file() else f"it made no {recipe.product}"


def with_standard(recipe: Recipe, std: str) -> Recipe:
    """The recipe with every compiler command's C++ standard set to `std`."""
    def set_standard(words: list[str]) -> list[str]:
        words = [w for w in words if not w.startswith(("-std=", "--std="))]
        return [words[0], f"-std={std}", *words[1:]]
    lines = [each_compiler_command(line, set_standard) for line in recipe.lines]
    return Recipe(lines, recipe.product, recipe.how, recipe.changes, recipe.makefile)


def standard_of(recipe: Recipe) -> str:
    """The C++ standard a recipe's compiler lines ask for (the compiler's default where none)."""
    found = re.findall(r"--?std=(\S+)", " ".join(recipe.lines))
    return found[-1] if found else "the compiler's default"


def standard_year(std: str) -> int:
    """c++11 -> 11, gnu++17 -> 17, c++1z -> 17, c++98 -> -2 (before all); a compiler's default
    (no -std) counts as C++14, the oldest default of the compilers here."""
    aliases = {"0x": 11, "1y": 14, "1z": 17, "2a": 20, "2b": 23}
    match = re.search(r"\+\+(\w\w)$", std)
    if not match:
        return 14
    code = match.group(1)
    return aliases.get(code) or (int(code) - 100 if int(code) >= 90 else int(code))


def standard_needed(recipe: Recipe, scratch: Path, env: dict) -> str | None:
    """The oldest newer standard under which the recipe builds, tried in copies of the folder:
    C++17 first (then C++14 where older than that was asked), else C++20; None where none builds
    (the error is not one of the standard): two more builds at most for a source that is wrong."""
    asked = standard_year(standard_of(recipe))

    def builds(std: str) -> bool:
        trial = scratch / std
        shutil.copytree(scratch / "src", trial)
        return run_recipe(with_standard(recipe, std), trial, env) is None
    if asked < 17 and builds("c++17"):
        return "c++14" if asked < 14 and builds("c++14") else "c++17"
    return "c++20" if asked < 20 and builds("c++20") else None


def build(source: Path, output: Path, extra: tuple[str, ...] = (), announce=None) -> str | None:
    """Build a student's source into `output`: None where it built, else one line saying why not
    (the compiler's first error, and the standard the source needs where a newer one builds it)."""
    makefile = makefile_of(source)
    emulation = source.suffix == ".hip" and source_compiler(source) == "nvcc"
    if emulation and (leftover := wave64.cuda_leftover(source)):
        return f"not for the MI210: {leftover}"
    # hipcc picks the NVIDIA platform where nvcc is installed: the AMD build names its platform.
    platform = {"HIP_PLATFORM": "amd"} if source.suffix == ".hip" and not emulation else {}
    with locations.scratch("build") as scratch:
        work = scratch / "src"
        work.mkdir()
        if makefile:  # the Makefile's rule runs in a copy of its folder; the course's line names the source
            copy_folder(source.parent, work)
        recipe = makefile_recipe(source, makefile, work, extra) if makefile else course_recipe(source, extra)
        if isinstance(recipe, str):
            return recipe
        if announce:
            announce(describe(recipe, source, platform, emulation))
        # The compiler's temporary files in a folder of fa's own: hipcc (ROCm 5.2) leaves folders
        # and archives in the temporary directory on every build.
        env = {**os.environ, "TMPDIR": str(scratch), **platform}
        error = run_recipe(recipe, work, env)
        said: list[str] = []  # what fa changed to build it, kept beside the program (build_note)
        if error is not None and toolkit_standard(error, standard_of(recipe)):
            recipe, work, error = rebuilt_for_toolkit(recipe, error, scratch, env, said.append, source.name)
            for line in said if announce else ():
                announce(line)
        if error is None:
            output.parent.mkdir(parents=True, exist_ok=True)
            keep_note(output, "".join(said))
            shutil.move(str(work / recipe.product), str(output))
            return None
        std = standard_needed(recipe, scratch, env)
    return error + (standard_advice(std, recipe, source) if std else "")


def note_path(output: Path) -> Path:
    return output.with_name(output.name + ".built-as")


def keep_note(output: Path, note: str) -> None:
    """What fa changed in a program's build, kept beside it: said again each time the kept
    program is used (fa run a second time, a class's runs after its builds), none left where none."""
    if note:
        note_path(output).write_text(note + "\n")
    else:
        note_path(output).unlink(missing_ok=True)


def build_note(output: Path) -> str:
    """The line keep_note kept for a built program; "" where its build changed nothing."""
    try:
        return note_path(output).read_text().strip()
    except OSError:
        return ""


DIALECT_SILENCED = "-DCCCL_IGNORE_DEPRECATED_CPP_DIALECT"  # CUDA 13's own switch: its headers' check only warns


def rebuilt_for_toolkit(recipe: Recipe, error: str, scratch: Path, env: dict, announce, name: str):
    """The recipe run again where the toolkit's own headers refuse the asked standard (CUDA 13's
    libcu++ needs C++17 where the course's line asks C++11; the judge's CUDA 12 only warns): first
    at the asked standard with the headers' check silenced (DIALECT_SILENCED), as the judge's
    toolkit builds it; else at the standard they ask for, said so, with what that leaves unknown.
    (recipe, folder, None) where one builds, else (the first recipe, its folder, its error)."""
    asked, newer = standard_of(recipe), toolkit_standard(error, standard_of(recipe))
    silenced = with_flag(recipe, DIALECT_SILENCED)
    for trial, label, said in ((silenced, "silenced", f"built here at -std={asked} with {DIALECT_SILENCED} (the "
                                f"headers' check then only warns, as CUDA 12's does), nothing else changed"),
                               (with_standard(recipe, newer), newer, f"it does not build at -std={asked} even with "
                                f"that check silenced: built here with -std={newer}; whether {name} itself needs "
                                f"C++{newer[3:]} or only this toolkit's headers do, fa cannot tell here")):
        folder = scratch / f"toolkit-{label}"
        shutil.copytree(scratch / "src", folder)
        if run_recipe(trial, folder, env) is None:
            if announce:
                announce(f"{toolkit_words(asked, error)}: {said}")
            return trial, folder, None
    return recipe, scratch / "src", error


def with_flag(recipe: Recipe, flag: str) -> Recipe:
    """The recipe with a flag added to every compiler command."""
    lines = [each_compiler_command(line, lambda words: [words[0], flag, *words[1:]]) for line in recipe.lines]
    return Recipe(lines, recipe.product, recipe.how, recipe.changes, recipe.makefile)


def toolkit_words(asked: str, error: str) -> str:
    """That the toolkit's own headers refuse the asked standard, in words."""
    return (f"-std={asked} stops in this toolkit's own headers ({error[:160]}), where the judge's CUDA (12 or older, "
            "for sm_61) only warns")


def toolkit_standard(error: str, asked: str) -> str | None:
    """The standard a compiler error from the toolkit's own headers asks for (CUDA 13's
    cpp_dialect.h: "libcu++ requires at least C++ 17"), where it is newer than the `asked` one (a
    -std value); None for an error of the source's."""
    match = re.search(r"/cuda[^/\s]*/\S*\.h:\d+:\d+: error: #error .*requires at least C\+\+ ?(\d\d)", error)
    if not match or standard_year(asked) >= int(match.group(1)):
        return None
    return f"c++{match.group(1)}"


def course_standard(source: Path) -> str:
    """The C++ standard the course builds a source with: its Makefile's -std where it sets one,
    else the course's line's (c++11 for a .cu, c++14 for a .hip)."""
    makefile = makefile_of(source)
    if makefile:
        with locations.scratch("build") as scratch:
            copy_folder(source.parent, scratch)
            recipe = makefile_recipe(source, makefile, scratch)
        if isinstance(recipe, Recipe) and standard_of(recipe).startswith(("c++", "gnu++")):
            return standard_of(recipe)
    return standard_of(course_recipe(source))


def standard_advice(std: str, recipe: Recipe, source: Path) -> str:
    asked = standard_of(recipe)
    if recipe.makefile:
        return (f"; it builds with -std={std} and not with {recipe.makefile.name}'s -std={asked}: the source needs "
                f"C++{std[3:]}, so set -std={std} in {recipe.makefile}")
    return (f"; it builds with -std={std} and not with the course's -std={asked}: the source needs C++{std[3:]}; "
            f"a Makefile beside {source.name} that sets -std={std} (the course takes one) is the build fa uses then")


def describe(recipe: Recipe, source: Path, platform: dict, emulation: bool) -> str:
    """The announce line: the build and its lines, what fa changed, the flags the source asks for."""
    lines = " && ".join(recipe.lines)
    env = "".join(f"{k}={v} " for k, v in platform.items())
    which = f"; {source.name} as {wave64.LABEL}" if emulation else \
        f"; {source.name} for AMD" if source.suffix == ".hip" else ""
    text = f"building {env}{lines} ({recipe.how}{which})"
    if recipe.changes:
        text += "; changed here: " + "; ".join(recipe.changes)
    needs = source_needs(source)
    if needs and not recipe.makefile:
        text += (f" ({' and '.join(needs)}: the source asks for {'them' if len(needs) > 1 else 'it'}; the course's "
                 "example line has no such flag, so a Makefile of your own must add it)")
    return text

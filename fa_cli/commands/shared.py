"""What the commands share: programs found and built, cases and inputs made, launchers, tables shown."""
from __future__ import annotations

import shutil
from pathlib import Path

import click

from ..cases import generate, suite
from ..cases.format import Shape, check_shape
from ..errors import FaError
from ..files import gigabytes
from ..judge import expected, verdict
from ..programs import programs, ready, slurm
from ..report import lines, markdown, tables
from ..report.records import append


def note(text: str) -> None:
    """A line on stderr about something fa did on the user's behalf."""
    lines.echo(f"fa: {text}", err=True)


def built(prog: programs.Program) -> programs.Program:
    """programs.ensure_built, saying every 5 s how long a build has taken once it passes 10 s."""
    if prog.path.exists():
        return programs.ensure_built(prog, note)
    with tables.progress(f"building {prog.name}", None):
        return programs.ensure_built(prog, note)


def program_for(name: str) -> programs.Program:
    return built(programs.resolve(name))


def selected_cases(cases, all_cases: bool, suite_text: str | None) -> list[str]:
    """The cases run, bench and gen were given (options.case_options): names and files as typed
    (a bare number is a case of --suite's suite), every case of the suite with --all or with
    --suite alone, a --suite list's cases."""
    listed = suite_text.split(",") if suite_text and suite_text not in suite.SUITES else []
    suite_name = suite_text if suite_text in suite.SUITES else None
    names = suite.named_cases(cases, suite_name) + [n for n in listed if n]
    if all_cases or (suite_name and not cases):
        names += [n for n in suite.cases(suite_name or suite.DEFAULT_SUITE) if n not in names]
    return names


def check_names(names) -> None:
    """Every case name and input file valid, before anything is built or generated: a name that
    is wrong is said before what this machine lacks (an input file's header is read, no more)."""
    for name in names:
        if suite.is_case_name(name) and not Path(name).exists():
            suite.case(name)
        else:
            verdict.target_for(name)


def runnable(name: str, runner, try_cpu: bool = True, check: bool = True) -> programs.Program:
    """The program NAME, refused in one line where it needs a GPU this machine lacks (before any
    input is generated), then built if it has to be. A student's source is built first even
    then, as the course builds it, so that a laptop without the GPU still says whether it
    builds (a source that needs C++17, a missing header) before it says it cannot run it."""
    prog = programs.resolve(name)
    if check and (runner is None or not runner.remote) and (no_gpu := ready.gpu_problem(prog, name, try_cpu)):
        if prog.source is None:
            raise FaError(no_gpu)
        raise FaError(build_then(prog, no_gpu))
    return built(prog)


def build_then(prog: programs.Program, no_gpu: str) -> str:
    """A student's source built without its GPU: that it builds, then why it does not run here (the
    line returned); or its build's error and why it would not run here (raised, with the build's
    exit status)."""
    compiler = programs.compiler_of(prog.source)
    if not shutil.which(compiler):
        return f"{no_gpu}; {compiler} is not installed here either, so its build was not checked"
    try:
        built(prog)
    except FaError as e:
        raise FaError(f"{e}; {no_gpu}", exit_code=e.exit_code) from None
    return f"{prog.source.name} builds ({prog.path}); {no_gpu}"


def targets_for(names, shapes=(), scratch: Path | None = None) -> list[suite.Target]:
    """Suite cases, input files and bench shapes; says which inputs it had to generate. scratch: a
    folder of the command's own where inputs that are not here are generated (and go with it),
    instead of the cache, where they stay."""
    found = []
    for item in [*names, *shapes]:
        # A bar only shows while an input is being generated (batches written, total unknown here).
        with tables.progress(f"input {item}", None) as advance:
            if scratch is not None and (target := verdict.scratch_target(item, scratch, advance, note)):
                pass
            elif isinstance(item, Shape):
                target = verdict.shape_target(item, progress=advance)
            else:
                target = verdict.target_for(item, advance, note)  # a changed shipped input is said
        if target.generated:
            note(f"generated {target.name} ({target.shape}) into {target.input_path}"
                 + (", removed at the end (--keep-inputs keeps it in the cache)" if scratch else ""))
        found.append(target)
    return found


def check_room_for_inputs(names, shapes, scratch: Path) -> None:
    """The inputs a command will generate into its scratch folder, all at once there: refused in one
    line, before any is made, where they do not fit."""
    _, _, making = ready.to_generate(names, with_expected=False)  # the suite cases whose input is not here
    making += sum(s.input_bytes for s in shapes if not generate.stamp_holds(*verdict.shape_input(s)))
    room = ready.free_bytes(scratch)
    if making > room:
        raise FaError(f"{scratch.parent}, for the inputs this command generates: needs {gigabytes(making)} "
                      f"({making} bytes), only {gigabytes(room)} free: set TMPDIR to a folder with room, name "
                      "fewer cases, or keep them in the cache (--keep-inputs)")


def ensure_expected(targets: list[suite.Target]) -> None:
    """Compute the expected outputs still missing, saying first what that costs where it is long."""
    expected.ensure(expected.missing(targets), note, tables.progress)


def make_launcher(launcher: str, partition: str | None, gres: str | None,
                  srun_args: tuple[str, ...]) -> slurm.SlurmLauncher | None:
    """The launcher programs run through: None to run them here. Where it is one, outputs go to
    a work directory the nodes share (locations.shared_workdir)."""
    if launcher == "direct":
        if partition or gres or srun_args:
            raise click.UsageError("--partition, --gres and --srun-arg need --launcher slurm")
        return None
    if not partition:
        raise click.UsageError("--launcher slurm needs --partition")
    return slurm.SlurmLauncher(partition, gres, srun_args)


def parse_shape(text: str) -> Shape:
    try:
        B, N, d = (int(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected B,N,d such as 26,32768,64") from None
    return check_shape(B, N, d, f"--shape {text}")


def show(header: list[str], body: list[list[str]], as_markdown: bool, title: str, keys: int = 1) -> None:
    """A command's table: on the terminal, or as markdown for a report (80 columns, the first
    `keys` columns naming a row)."""
    if as_markdown:
        click.echo(markdown.markdown_table(header, body, keys=keys), nl=False)
    else:
        tables.show(tables.compare_table(header, body, title))


def save_and_plot(records: list[dict], results: Path | None, plot: Path | None, chart) -> None:
    if results:
        append(results, records)
        lines.echo(f"{tables.plural(len(records), 'record')} added to {results}")
    if plot:
        lines.echo(f"wrote {chart(records, plot)}")

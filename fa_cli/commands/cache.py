"""fa cache: what the cache directory keeps; --clear."""
from __future__ import annotations


import click

from .. import locations, settings
from ..cases import cache
from ..programs import ready
from ..report import lines
from .group import main


@main.command(name="cache")
@click.option("--clear", is_flag=True, help="Remove everything fa keeps there (files that are not fa's stay).")
def cache_cmd(clear) -> None:
    """What fa keeps in its cache directory (FA_CACHE, else ~/.cache/fa): generated inputs,
    expected outputs, student builds and fa's builds, each with its size; --clear removes them."""
    where = locations.cache_dir()
    kept = cache.clear(where) if clear else cache.usage(where)
    named = " (FA_CACHE)" if settings.cache_override() else ""
    lines.echo(f"{'removed from' if clear else 'kept in'} {where}{named}")
    for k in kept:
        lines.echo(f"  {k.kind:<17} {k.files:>6} files  {ready.human_bytes(k.bytes):>9}")
    lines.echo(f"  {'in all':<17} {sum(k.files for k in kept):>6} files  {ready.human_bytes(cache.total(kept)):>9} "
               f"({cache.total(kept)} bytes)")
    if not clear and cache.total(kept):
        lines.echo("fa cache --clear removes them (fa makes each again when a command needs it)")

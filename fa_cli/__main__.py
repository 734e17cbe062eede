"""python -m fa_cli: the fa command, through whichever interpreter runs it."""
from .commands import main

main(prog_name="fa")

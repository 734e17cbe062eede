"""Entry point of one `fa bench --slurm-array` task: python -m fa_cli.slurm_task PLAN INDEX."""
import sys
from pathlib import Path

from fa_cli.errors import FaError
from fa_cli.slurm import run_task

if __name__ == "__main__":
    try:
        run_task(Path(sys.argv[1]), int(sys.argv[2]))
    except FaError as e:
        print(f"fa: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)

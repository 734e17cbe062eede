"""User-facing errors: one line of text and an exit code, never a traceback."""


class FaError(Exception):
    """An error the user can act on. exit_code 2: unusable input; 1: a run failed."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code

"""fa class: a TA's whole class judged in one command (submissions.py: the class copied and
hashed; judging.py: each submission built and run confined, its record kept; table.py: the
class table)."""

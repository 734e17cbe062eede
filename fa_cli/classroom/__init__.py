"""fa class: a TA's whole class judged in one command (submissions.py: the class copied and
hashed; judging.py: each program built and judged, its record kept; cluster.py: the same as
Slurm job arrays; table.py, similarity.py, page.py: the class table, similar pairs, the page;
whole_class.py: these in their order)."""

"""The programs: found, built, run, timed; the GPUs and what runs here."""

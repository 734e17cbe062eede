"""The judgement: expected outputs, verification, verdicts, diagnoses, causes."""

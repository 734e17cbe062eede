"""What is kept and shown: records, tables, charts, the write-up."""

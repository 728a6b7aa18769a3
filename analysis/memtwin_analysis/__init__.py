"""memtwin's analysis: reads result JSON/CSV files only (so it works from a notebook too) and draws
the figures of `memtwin report` with matplotlib."""

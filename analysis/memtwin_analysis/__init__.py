"""memtwin's analysis: reads result JSON/CSV files only (so it works from a notebook too), gives
them as pandas DataFrames (frames) and draws the figures of `memtwin report` with matplotlib.
pip install './analysis[frames]' installs it as a package."""

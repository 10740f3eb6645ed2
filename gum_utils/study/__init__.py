"""The study: profiles, the grid of cells on Dask, tuning, and where run files live."""

"""The report: result files to tables, statistics, claims, figures and the book. Imports neither torch nor Dask."""

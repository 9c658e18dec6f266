"""Nsight Systems: its declaration (profiler), the re-implementation of `nsys stats`/`nsys analyze`
over an export's SQLite tables (stats) and hpcprof's own analyses of a run's exports (analysis)."""

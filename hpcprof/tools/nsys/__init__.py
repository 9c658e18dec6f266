"""Nsight Systems: its declaration (profiler), its result tables (tables), the re-implementation of
`nsys stats`/`nsys analyze` over an export's SQLite tables (stats), hpcprof's own analyses of a
run's exports and its headline metrics (analysis) and its figures in the HTML report (report)."""

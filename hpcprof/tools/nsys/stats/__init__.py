"""NVIDIA's `nsys stats` and `nsys analyze`, re-implemented over an export's SQLite tables: reading an
export (db, schema, cache, loaders, nvtx, arrays, numerics), the reports (reports, small, summaries, traces,
projection, um_mpi) and the expert-system rules (rules, rules_cli), identical to nsys's own output.
hpcprof's own analyses of a run's exports (its window, activity, critical path, Echo) are in
hpcprof.tools.nsys.analysis and build on this package, never the other way."""

"""The built-in profiling tools, one package each (nsys, torch, ncu): a tool's `profiler` module
declares its `Profiler` (base.py: its options, launch, collector, tables, metrics and figures),
its `tables` module its result tables (hpcprof.core.catalog's ToolCatalog), and its sub-packages hold
its collector, analyses, headline metrics and commands (analysis) and its report figures (report). The registry (hpcprof.profilers)
lists the declarations; the other rooms reach a tool through it, never by its name."""

"""The built-in profiling tools, one package each (nsys, torch, ncu): a tool's `profiler` module
declares its `Profiler` (base.py: its options, launch, collector, tables, metrics and figures),
and its sub-packages hold its collector, analyses and commands. The registry (hpcprof.profilers)
lists the declarations; the other rooms reach a tool through it, never by its name."""

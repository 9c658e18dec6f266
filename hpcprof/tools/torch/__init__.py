"""torch.profiler: its declaration (profiler), its result tables (tables), HTA's analyses of its
Kineto traces and its headline metrics (analysis) and its figures in the HTML report (report)."""

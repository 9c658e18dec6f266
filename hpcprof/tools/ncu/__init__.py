"""Nsight Compute: its declaration (profiler), its result table (tables), the analyses of its
reports (analysis) and its figures in the HTML report (report)."""

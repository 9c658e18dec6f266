"""Nsight Compute: its declaration (profiler) and the analyses of its reports (analysis)."""

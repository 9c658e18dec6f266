"""torch.profiler: its declaration (profiler) and HTA's analyses of its Kineto traces (analysis)."""

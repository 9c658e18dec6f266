"""hpcprof: profile distributed PyTorch work on HPC clusters.

Flow: config -> render -> schedulers -> rank wrapper -> workloads -> collect -> analysis
-> store -> report.
"""

__version__ = "0.1.0"

"""Trace analyses: HTA 0.5.0's five analyses of torch.profiler (Kineto) traces, for all ranks.

`load.load_traces` reads one trace file per rank, decoded in batches by `stream` (never the
whole JSON in memory); the functions in `analyses` turn the loaded ranks into tables of numpy
columns with HTA's column names (`table.Table`: its `frame()` is the DataFrame, its `write_csv`
pandas' CSV bytes, without importing pandas); `cli` is `hpcprof trace ...`; `collect` feeds the
campaign store.
"""

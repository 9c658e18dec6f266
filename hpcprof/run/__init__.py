"""A run directory and what it holds, read back: its layout (rundir), its record (record),
its result tables (results), the rank of a per-rank file (ranks, rank_sets) and the known
workdirs (workdirs). It imports only hpcprof.core."""

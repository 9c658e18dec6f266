"""Workloads hpcprof launches: `command` (any argv), `seqpar`, `ddp`."""

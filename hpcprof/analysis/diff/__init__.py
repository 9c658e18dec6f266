"""Profiles read for `hpcprof diff` (profiles.py): their per-iteration GPU time over the measured window."""

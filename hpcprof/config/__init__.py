"""Configuration: site configs and experiment files, validated into typed models."""

#: Most sweep points one submit expands without --max-points (here, not in experiment.py, so the
#: CLI can show it without importing the models).
MAX_POINTS = 1000

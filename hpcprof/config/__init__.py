"""Configuration: site configs and experiment files, validated into typed models."""

#: The sweep-point parameter that numbers repetitions (here, so that `report` and `compare` read
#: sweep points without importing the models).
REPEAT = "repeat"
#: Most sweep points one submit expands without --max-points (here, not in experiment.py, so the
#: CLI can show it without importing the models).
MAX_POINTS = 1000

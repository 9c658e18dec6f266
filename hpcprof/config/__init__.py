"""Configuration: site configs and experiment files, validated into typed models."""

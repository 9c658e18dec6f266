"""Runs as a campaign: submit rendered runs (submit), decide their state (jobstate) and
record both in the campaign store (store)."""

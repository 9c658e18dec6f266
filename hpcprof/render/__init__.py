"""Render job scripts and rank wrappers from Jinja templates (StrictUndefined, quoted values)."""

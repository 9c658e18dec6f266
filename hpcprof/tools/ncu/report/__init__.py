"""ncu's part of the HTML report (above hpcprof.report: its figures of a run)."""

"""Why a run hung or died, from what its ranks left: the Flight Recorder dumps, Python stacks and
exception records the injected start-up hook wrote into `<run>/forensics/` (hpcprof.inject), the
rank logs and the launcher's own lines in the job log.

- `dumps`: the Flight Recorder's pickles, read without running code from them; per process group
  the last collective each rank entered and completed, and the first collective that some ranks
  never entered or that did not match across ranks (PyTorch's own `fr_trace` analyser where it
  imports, hpcprof's reader of the same format otherwise; tests/test_forensics.py holds them equal).
- `ranks`: what each rank left: its stacks (faulthandler), its uncaught exception, its log's
  error line, the signal or exit code its launcher reported.
- `verdict`: the two joined with the run's state into one sentence and a per-rank table, cached
  in `derived/forensics.json`.
"""

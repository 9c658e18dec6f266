"""The start-up hook of the ranks' Python: this directory's modules are copied into every run as
`<run>/inject/` and put first on the ranks' PYTHONPATH by the rank wrapper, so that any Python a
rank runs imports `sitecustomize` from there, without a change to the user's files.

`sitecustomize` arms what the rank wrapper asked for through the environment (HPCPROF_FORENSICS:
`_hpcprof_forensics`), once per rank (not again in the rank's own Python children), and
(HPCPROF_STEPS: `_hpcprof_steps`, the optimizer step hook) in every Python of the rank, then runs
the `sitecustomize` it shadows (passing over any other copy or link of this directory on the
path). `_hpcprof_files` holds what they share: the line on stderr that never raises, the checked
settings, hpcprof's own descriptors guarded against reuse. The hook is invisible to the program
(benchmarks/reliability_hook.py tries hostile ones). The modules run in the rank's interpreter, which need not have
hpcprof installed: they import nothing of hpcprof and only the standard library.
"""

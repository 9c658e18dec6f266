"""The base every room uses: errors, the safe readers and writers, the models' base, the
worker pool, the table printer and the catalog of result tables and metrics. It imports
nothing else of hpcprof."""

#!/usr/bin/env python
"""An `nsys stats` report script (run by nsys's own Python and SQLite, on the GPU machine) that prints
nsys 2025.3.1's SQLite function rtree_scale(t, min, max) over a grid: the NVTX projection reports
store it in their R*Tree (hpcprof/tools/nsys/analysis/projection.rtree_scale reproduces it). nsys runs a
report only from its reports folder:

    cp benchmarks/gpu/rtree_scale_probe.py $(dirname $NSYS)/reports/
    $NSYS stats --report rtree_scale_probe --format csv --output $OUT/probe EXPORT.sqlite

(any export with a StringIds table). Results: benchmarks/gpu/results/rtree_scale_probe.txt.
"""
import nsysstats


class RtreeScaleProbe(nsysstats.Report):
    display_name = "rtree_scale probe"
    usage = "rtree_probe -- rtree_scale(t, min, max) over a grid"
    should_display = False
    query = """
WITH RECURSIVE
    spans(mn, mx) AS (VALUES (0, 10), (1000, 1010), (1000, 2000), (5000000000, 9000000000), (0, 2147483647),
        (0, 2147483648), (0, 4294967296), (123456789, 98765432109), (28000000, 80000000), (0, 3), (7, 7)),
    steps(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM steps WHERE k < 40)
SELECT mn, mx, t, rtree_scale(t, mn, mx) AS scaled, typeof(rtree_scale(t, mn, mx)) AS type
FROM (SELECT mn, mx, mn + ((mx - mn) * k) / 40 AS t FROM spans, steps
      UNION SELECT mn, mx, mn + 1 FROM spans UNION SELECT mn, mx, mx - 1 FROM spans
      UNION SELECT mn, mx, mn - 1 FROM spans UNION SELECT mn, mx, mx + 1 FROM spans)
ORDER BY 1, 2, 3
"""


if __name__ == "__main__":
    RtreeScaleProbe.Main()

#!/usr/bin/env bash
# cancel-recovered.sh -- cancel every job in the queue of the Slurm that SLURM_CONF (or
# /etc/slurm/slurm.conf) names, waiting until the queue is empty (20 s at most). Run by
# tests/run.sh and slurm-cluster.sh right after they start a controller: it recovers the queue of an
# earlier run that was killed, including jobs whose cancel came after the last state save, and those
# would hold the test node's CPUs (an array of `sleep 300` did, and a test timed out behind it).
set -euo pipefail
jobs=$(squeue -h -o %F | sort -u)     # %F: an array's own id, so one scancel takes all its tasks
[ -z "$jobs" ] && exit 0
echo "cancel-recovered.sh: cancelling jobs an earlier run left: $(echo $jobs)" >&2
scancel $jobs || true
for _ in $(seq 1 100); do [ -z "$(squeue -h -o %i)" ] && exit 0; sleep 0.2; done
echo "cancel-recovered.sh: still queued after 20 s: $(squeue -h -o %i | tr '\n' ' ')" >&2

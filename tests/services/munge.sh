#!/usr/bin/env bash
# munge.sh -- the munged that both Slurms of the tests use (Debian 12, root). Idempotent.
#
# Reuses a munged that answers. Otherwise clears what a dead one left in /run/munge (a socket and
# lock owned by whoever ran it: a root-owned lock keeps the munge user's munged from starting) and
# starts munged as the munge user, as Debian's service and ../shared/tools/slurm-local.sh do.
set -euo pipefail
command -v munged >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends munge >/dev/null
munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && exit 0
ps -C munged -o stat= | grep -qv Z && { echo "munge.sh: a munged runs but does not answer; stop it first" >&2; exit 1; }
install -d -o munge -g munge -m 755 /run/munge
rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock /run/munge/munged.pid
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create 2>/dev/null || /usr/sbin/create-munge-key -f
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
runuser -u munge -- /usr/sbin/munged
for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && exit 0; sleep 0.2; done
echo "munge.sh: munged started but does not answer after 10 s" >&2
exit 1

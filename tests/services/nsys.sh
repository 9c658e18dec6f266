#!/usr/bin/env bash
# Install nsys 2022.4 (Debian 12 non-free `nsight-systems-target`) for the nsys stats
# differential tests. Idempotent; needs root (enables non-free in the apt sources).
set -euo pipefail
NSYS=/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
[ -x "$NSYS" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "tests/services/nsys.sh: not root, nsys 2022.4 not installed" >&2
  exit 0
fi
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  grep -q non-free /etc/apt/sources.list.d/debian.sources ||
    sed -i -E 's/^(Components:.*main)(.*)$/\1\2 contrib non-free/' /etc/apt/sources.list.d/debian.sources
else
  grep -qE '^deb .* non-free( |$)' /etc/apt/sources.list 2>/dev/null ||
    echo "deb http://deb.debian.org/debian bookworm main contrib non-free" >> /etc/apt/sources.list
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nsight-systems-target >/dev/null
"$NSYS" --version

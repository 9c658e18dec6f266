#!/usr/bin/env bash
# Nsight Systems 2022.4 (Debian non-free `nsight-systems-target`), the reference `nsys stats` of the
# differential tests. Idempotent; as root. Enables the non-free component in the apt sources first.
# Prints the path of nsys.
set -euo pipefail
NSYS=/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
if [ ! -x "$NSYS" ]; then
  [ "$(id -u)" = 0 ] || { echo "nsys.sh: installing nsight-systems-target needs root" >&2; exit 1; }
  src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ] && ! grep -q non-free "$src"; then
    sed -i 's/^Components: main$/Components: main contrib non-free/' "$src"
  elif [ ! -f "$src" ] && ! grep -qs non-free /etc/apt/sources.list; then
    sed -i 's/ main$/ main contrib non-free/' /etc/apt/sources.list
  fi
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nsight-systems-target >/dev/null
fi
echo "$NSYS"

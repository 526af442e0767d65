#!/bin/sh
# Installs what nabla needs to build and test on Debian 12, only what is missing.
# Non-interactive and idempotent: a second run installs nothing.
set -eu
PKGS="build-essential cmake pkg-config libopenblas-openmp-dev libcmocka-dev zlib1g-dev clang libomp-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "deps.sh: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null

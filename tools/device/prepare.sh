#!/usr/bin/env bash
# Run HERE (a machine with network): download the Debian packages the GPU machine lacks into
# .debs/ (git-ignored), so they travel with the working tree to a GPU machine that has no
# network. tools/device/build.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/../.."
packages=(nlohmann-json3-dev libcli11-dev libboost1.74-dev libgtest-dev libgmock-dev
  libbenchmark-dev ninja-build)
mkdir -p .debs
cd .debs
apt-get download "${packages[@]}"
ls -1 *.deb

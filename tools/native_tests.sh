#!/usr/bin/env bash
# The native tests as a lane of their own, for a developer (CI runs the same through pytest: tests/test_native_build.py): the native core built from the pinned sdists and tested against files the Python
# runtime writes (magicselector native test): the host build with AddressSanitizer and
# UndefinedBehaviorSanitizer (leak checks on), then the static ARM64 build, its tests run under
# qemu-aarch64-static. A skipped native test fails the lane (--strict). Needs the native extra (zig),
# CMake >= 3.25 and qemu-user-static (.ci/run installs it). Extra arguments go to both `native test`
# runs (e.g. --limit 500 for the issue's full text parity, --jobs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v qemu-aarch64-static >/dev/null || { echo "native lane: qemu-aarch64-static is not installed" >&2; exit 1; }
data="$(mktemp -d)/native-test-data"
start=$(date +%s)
ASAN_OPTIONS=detect_leaks=1 python3 -m magicselector native test --target host --sanitize --strict --data "$data" "$@"
host=$(date +%s)
python3 -m magicselector native test --target arm64 --strict --data "$data" --reuse-data "$@"
end=$(date +%s)
echo "native lane: host+sanitizers $((host - start)) s, arm64 under qemu $((end - host)) s"

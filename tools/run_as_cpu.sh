#!/usr/bin/env bash
# Run a command as if this x86-64 CPU were a smaller one: CPUID answers with the profile's
# features (tools/cpuid_mask/cpuid_mask.c, through LD_PRELOAD and CPUID faulting), so
# onnxruntime, numpy and torch take that CPU's kernels and run them natively.
#
#   tools/run_as_cpu.sh avx2 -- magicselector bench latency --threads 1
#
# Profiles: avx2 (AVX2/FMA/F16C/BMI; no AVX-512, no AVX512-VNNI or AVX-VNNI, no AMX).
# glibc picks its own string functions and library subdirectories in ld.so, before the
# library loads, so GLIBC_TUNABLES switches its AVX-512 choices off too.
# The library is built once per source version into ${XDG_CACHE_HOME:-~/.cache}/magicselector.
set -euo pipefail

usage() {
    echo "usage: $0 PROFILE -- COMMAND [ARGS...]   (PROFILE: avx2)" >&2
    exit 2
}

[[ $# -ge 3 && "$2" == "--" ]] || usage
profile="$1"
shift 2

case "$profile" in
    avx2) glibc_off="-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512ER,-AVX512PF,-AVX512VL" ;;
    *) echo "$0: unknown profile '$profile' (known: avx2)" >&2; exit 2 ;;
esac

if [[ "$(uname -m)" != "x86_64" ]]; then
    echo "$0: CPUID masking needs an x86-64 CPU, this is $(uname -m)" >&2
    exit 3
fi
if ! grep -qw cpuid_fault /proc/cpuinfo; then
    echo "$0: this CPU/kernel has no CPUID faulting ('cpuid_fault' is missing from /proc/cpuinfo" \
         "flags; common on AMD and in VMs that do not pass it through), so CPUID cannot be masked" >&2
    exit 3
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_file="$here/cpuid_mask/cpuid_mask.c"
cache_dir="${XDG_CACHE_HOME:-$HOME/.cache}/magicselector/cpuid_mask"
digest="$(sha256sum "$source_file" | cut -c1-16)"
library="$cache_dir/libcpuid_mask-$digest.so"

if [[ ! -f "$library" ]]; then
    if ! command -v gcc >/dev/null; then
        echo "$0: gcc is needed to build $source_file" >&2
        exit 3
    fi
    mkdir -p "$cache_dir"
    tmp="$(mktemp "$cache_dir/build.XXXXXX")"
    gcc -O2 -Wall -Wextra -shared -fPIC -o "$tmp" "$source_file" -ldl
    mv -f "$tmp" "$library"
fi

export MAGICSELECTOR_CPUID_PROFILE="$profile"
export LD_PRELOAD="$library${LD_PRELOAD:+:$LD_PRELOAD}"
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.cpu.hwcaps=$glibc_off"
exec "$@"

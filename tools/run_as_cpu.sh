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
#
# Without CPUID faulting ('cpuid_fault' missing from /proc/cpuinfo: common on AMD and in VMs) the
# mask covers onnxruntime only, and the wrapper says so on stderr: tools/cpuid_mask/
# patch_onnxruntime.py (needs objdump) copies the onnxruntime package that python3 imports
# (MAGICSELECTOR_PYTHON to name another) into ${XDG_CACHE_HOME:-~/.cache}/magicselector/
# cpuid-patched with each CPUID of its binding turned into UD2; that copy goes first on
# PYTHONPATH and the library (MAGICSELECTOR_CPUID_PATCHED=1) answers its UD2s with the masked
# CPUID. numpy, usearch, torch and the bench's own CPUID reads see the real CPU (glibc's
# string functions still follow GLIBC_TUNABLES). MAGICSELECTOR_CPUID_FALLBACK=1 takes this way
# even where CPUID faulting exists (tests).
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

patched_mode=0
if [[ "${MAGICSELECTOR_CPUID_FALLBACK:-}" == 1 ]] || ! grep -qw cpuid_fault /proc/cpuinfo; then
    # no CPUID faulting: a copy of onnxruntime with its CPUIDs patched to UD2 (see the header)
    if ! command -v objdump >/dev/null; then
        echo "$0: this CPU/kernel has no CPUID faulting ('cpuid_fault' is missing from /proc/cpuinfo" \
             "flags), and the fallback (a patched copy of onnxruntime) needs objdump from binutils" >&2
        exit 3
    fi
    python="${MAGICSELECTOR_PYTHON:-python3}"
    if ! patched_path="$("$python" "$here/cpuid_mask/patch_onnxruntime.py")" || [[ -z "$patched_path" ]]; then
        echo "$0: this CPU/kernel has no CPUID faulting, and patching a copy of onnxruntime for" \
             "$python failed (above), so CPUID cannot be masked" >&2
        exit 3
    fi
    patched_mode=1
fi

export MAGICSELECTOR_CPUID_PROFILE="$profile"
if [[ $patched_mode == 1 ]]; then
    export MAGICSELECTOR_CPUID_PATCHED=1
    export MAGICSELECTOR_CPUID_SITES="$patched_path/cpuid-sites.txt"
    case ":${PYTHONPATH:-}:" in
        *":$patched_path:"*) ;;
        *) export PYTHONPATH="$patched_path${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
    echo "run_as_cpu: no CPUID faulting here; onnxruntime (patched copy) sees an $profile CPU, other" \
         "libraries (numpy, usearch, glibc string functions via tunables) see the real CPU" >&2
fi
case ":${LD_PRELOAD:-}:" in
    *":$library:"*) ;;
    *) export LD_PRELOAD="$library${LD_PRELOAD:+:$LD_PRELOAD}" ;;
esac
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.cpu.hwcaps=$glibc_off"
exec "$@"

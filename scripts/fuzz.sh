#!/usr/bin/env bash
# Fuzzes one parser with libFuzzer for a while:
#
#   scripts/fuzz.sh TARGET SECONDS [LIBFUZZER-ARGS...]
#
# TARGET: trace_reader (traces/lib TraceReader), config (presets, key.path=value overrides,
# CARDSIM_CONFIG files), fabric_decode (the fabric server's frames and messages) or
# chakra_import (Chakra ET files and ASTRA-sim's process-group JSON, for replay). Builds
# the targets with clang, libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer in
# build-fuzz/ (the first run takes a few minutes), starts from the seed corpus in
# tests/fuzz/corpus/TARGET (copied, so the seeds stay as they are) and prints libFuzzer's
# final statistics. A crashing input is saved in build-fuzz/crashes/TARGET/; add it to the
# seed corpus once fixed, and the ctest fuzz_corpus_TARGET keeps it a regression test.
# Exit status: 0 when no input crashed, 1 when one did, 2 on a usage error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
targets="trace_reader config fabric_decode chakra_import"
if [ $# -lt 2 ] || ! [[ " $targets " == *" $1 "* ]] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [LIBFUZZER-ARGS...]   (TARGET: ${targets// /, })" >&2
  exit 2
fi
target="$1"; seconds="$2"; shift 2
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ is missing (scripts/setup.sh installs it)" >&2
  exit 2
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCARDSIM_FUZZ=ON \
    -DCARDSIM_BUILD_TORCH=OFF -DCARDSIM_BUILD_BENCHMARKS=OFF >/dev/null
fi
cmake --build build-fuzz --target "cardsim_fuzz_$target" > build-fuzz/last-build.log 2>&1 ||
  { cat build-fuzz/last-build.log; exit 1; }
work="build-fuzz/corpus/$target"
crashes="build-fuzz/crashes/$target"
mkdir -p "$work" "$crashes"
cp -n tests/fuzz/corpus/"$target"/* "$work"/ 2>/dev/null || true
# Leaks are reported but a parser that allocates once (static caches) is not a leak.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
set +e
"build-fuzz/tests/fuzz/cardsim_fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$crashes/" -max_len=65536 "$@" "$work" 2> "build-fuzz/fuzz-$target.log"
rc=$?
set -e
grep -aE "^stat::|^#[0-9]+.*DONE|Done [0-9]+ runs" "build-fuzz/fuzz-$target.log" || true
if [ $rc -ne 0 ]; then
  tail -40 "build-fuzz/fuzz-$target.log" >&2
  echo "fuzz.sh: $target crashed; the input is in $crashes/" >&2
  exit 1
fi
echo "fuzz.sh: $target: no crash in ${seconds} s"

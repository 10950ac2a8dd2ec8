#!/usr/bin/env bash
# Sets up (if needed) and runs every test: GoogleTest suites under ctest, then pytest, then
# the GoogleTest suites again built with AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/test.sh                       everything
#   scripts/test.sh --sanitize SANITIZE   the suites under SANITIZE, in their own tree
#                                         (CARDSIM_SANITIZE=... scripts/setup.sh):
#     address,undefined  every GoogleTest case, then the device pytest suite of each card
#                        with the torch extension built with the sanitizers (build-asan/)
#     thread             every GoogleTest case (build-tsan/)
#
# Exits non-zero if anything fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# A stage's heading, with the wall time since the script began (where a slow run spent it).
stage() { echo "== $* [${SECONDS} s]"; }

# The GoogleTest suites under a sanitizer; every finding fails its test. Suppressions
# (tests/sanitizers/*.supp) are for third-party code only.
asan_options="halt_on_error=1:detect_leaks=1:strict_string_checks=1"
ubsan_options="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp"
sanitized_ctest() {
  local sanitize="$1" tree=build-asan
  [ "$sanitize" = thread ] && tree=build-tsan
  CARDSIM_SANITIZE="$sanitize" scripts/setup.sh
  stage "ctest under -fsanitize=$sanitize ($tree/)"
  ASAN_OPTIONS="$asan_options" \
  LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="$ubsan_options" \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp" \
    ctest --test-dir "$tree" --output-on-failure -j"$(nproc)"
}

# The device pytest suites of both cards with the extension, the kernels and the shim built
# with ASan and UBSan (build-asan/python shadows the packages, holding its own _C). Python
# and torch are not instrumented: the ASan runtime is preloaded (it must come first), with
# libstdc++ (ASan resolves the real __cxa_throw at start-up, before torch loads it). Leak
# checking is off here: CPython and torch keep their allocations to the end by design; our
# own code's leaks are the GoogleTest run's to find.
sanitized_device_suites() {
  local status=0 card rc
  CARDSIM_SANITIZE=address,undefined CARDSIM_SANITIZE_TORCH=1 scripts/setup.sh
  local preload
  preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)"
  for card in mlu supa; do
    stage "pytest device suite as $card under -fsanitize=address,undefined (build-asan/)"
    set +e
    CARDSIM_TEST_CARD=$card LD_PRELOAD="$preload" PYTHONPATH="$root/build-asan/python" \
      ASAN_OPTIONS="${asan_options/detect_leaks=1/detect_leaks=0}" UBSAN_OPTIONS="$ubsan_options" \
      .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/device \
        --cardsim-expect-extension "$root/build-asan/python/cardsim_torch"
    rc=$?
    set -e
    [ $rc -ne 0 ] && status=1
  done
  return $status
}

if [ "${1:-}" = "--sanitize" ]; then
  [ $# -eq 2 ] || { echo "usage: scripts/test.sh [--sanitize address,undefined|thread]" >&2; exit 2; }
  status=0
  sanitized_ctest "$2" || status=1
  if [ "$2" != thread ]; then sanitized_device_suites || status=1; fi
  exit $status
elif [ $# -gt 0 ]; then
  echo "usage: scripts/test.sh [--sanitize address,undefined|thread]" >&2
  exit 2
fi

scripts/setup.sh

status=0
stage "ctest"
ctest --test-dir build --output-on-failure -j"$(nproc)" || status=1

stage "pytest (device suite as mlu, end-to-end, demo)"
set +e
.venv/bin/python -m pytest -q tests/python
rc=$?
set -e
# 5 = no tests collected: fail loudly rather than pass on nothing.
[ $rc -ne 0 ] && status=1

stage "pytest (device suite as supa)"
set +e
CARDSIM_TEST_CARD=supa .venv/bin/python -m pytest -q tests/python/device
rc=$?
set -e
[ $rc -ne 0 ] && status=1

stage "pytest (device suite as mlu under the async checker: correct programs report nothing)"
set +e
CARDSIM_CHECK=async,raise .venv/bin/python -m pytest -q tests/python/device \
  --ignore tests/python/device/test_async_check.py
rc=$?
set -e
[ $rc -ne 0 ] && status=1

# CI runs the AddressSanitizer/UndefinedBehaviorSanitizer C++ suite on every submission (the
# device suites under them, with their own build of the torch extension, are
# scripts/test.sh --sanitize address,undefined).
sanitized_ctest address,undefined || status=1

stage "done (status $status)"
exit $status

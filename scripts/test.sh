#!/usr/bin/env bash
# Sets up (if needed) and runs every test: GoogleTest suites under ctest, then pytest, then
# the GoogleTest suites again built with AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/test.sh                       everything
#   scripts/test.sh --sanitize SANITIZE   only the GoogleTest suites under SANITIZE
#                                         (address,undefined or thread), in build-asan/ or
#                                         build-tsan/ (CARDSIM_SANITIZE=... scripts/setup.sh)
#
# Exits non-zero if anything fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# The GoogleTest suites under a sanitizer; every finding fails its test. Suppressions
# (tests/sanitizers/*.supp) are for third-party code only.
sanitized_ctest() {
  local sanitize="$1" tree=build-asan
  [ "$sanitize" = thread ] && tree=build-tsan
  CARDSIM_SANITIZE="$sanitize" scripts/setup.sh
  echo "== ctest under -fsanitize=$sanitize ($tree/)"
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1" \
  LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp" \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp" \
    ctest --test-dir "$tree" --output-on-failure -j"$(nproc)"
}

if [ "${1:-}" = "--sanitize" ]; then
  [ $# -eq 2 ] || { echo "usage: scripts/test.sh [--sanitize address,undefined|thread]" >&2; exit 2; }
  sanitized_ctest "$2"
  exit $?
elif [ $# -gt 0 ]; then
  echo "usage: scripts/test.sh [--sanitize address,undefined|thread]" >&2
  exit 2
fi

scripts/setup.sh

status=0
echo "== ctest"
ctest --test-dir build --output-on-failure -j"$(nproc)" || status=1

echo "== pytest (device suite as mlu, end-to-end, demo)"
set +e
.venv/bin/python -m pytest -q tests/python
rc=$?
set -e
# 5 = no tests collected: fail loudly rather than pass on nothing.
[ $rc -ne 0 ] && status=1

echo "== pytest (device suite as supa)"
set +e
CARDSIM_TEST_CARD=supa .venv/bin/python -m pytest -q tests/python/device
rc=$?
set -e
[ $rc -ne 0 ] && status=1

echo "== pytest (device suite as mlu under the async checker: correct programs report nothing)"
set +e
CARDSIM_CHECK=async,raise .venv/bin/python -m pytest -q tests/python/device \
  --ignore tests/python/device/test_async_check.py
rc=$?
set -e
[ $rc -ne 0 ] && status=1

# CI runs the AddressSanitizer/UndefinedBehaviorSanitizer C++ suite on every submission.
sanitized_ctest address,undefined || status=1

exit $status

#!/usr/bin/env bash
# Sets up (if needed) and runs every test: GoogleTest suites under ctest, then pytest.
# Exits non-zero if anything fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
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

exit $status

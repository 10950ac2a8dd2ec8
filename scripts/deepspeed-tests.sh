#!/usr/bin/env bash
# Runs DeepSpeed's own unit tests on an emulated card and prints a table per test path.
#
#   scripts/deepspeed-tests.sh [--card mlu|supa] [--out DIR] [--test-timeout S]
#                              [--path-timeout S] [--sample N] [--no-setup]
#                              [--deepspeed installed|checkout]
#                              DEEPSPEED-SOURCE-DIR [TEST-PATHS...] [-- PYTEST-ARGS...]
#
# TEST-PATHS are relative to DEEPSPEED-SOURCE-DIR/tests (e.g. unit/v1/accelerator, or
# unit/comm/test_dist.py::TestDistAllReduce); without any, a default list runs. Each path is
# one pytest session run from DEEPSPEED-SOURCE-DIR/tests (DeepSpeed's pytest.ini and
# conftest.py apply) with DS_ACCELERATOR=mlu|supa. --deepspeed installed (the default) tests
# the deepspeed package installed in cardsim's .venv with the checkout's tests (DeepSpeed's
# conftest would put the checkout's package first: the tests run from a link to the tests
# directory instead, so it finds none); --deepspeed checkout tests the checkout's package,
# which must then be pip-installed (an uninstalled checkout reports version 0.0.0 and an
# incomplete version table, and some tests fail on that). PYTEST-ARGS go to every session (e.g. -- -k "not fp16" -x).
# --sample N keeps one in N parametrizations of each test function (every function still
# runs; for paths that take hours on a small machine). scripts/setup.sh runs first unless
# --no-setup is given (for a CI job that ran it already).
#
# Cards: DeepSpeed's harness finds supa cards with `brsmi gpu list` (the look-alike in
# .venv/bin, put first on PATH); for mlu it has no branch, so scripts/deepspeed_tests/
# cardsim_deepspeed_plugin.py, loaded with -p, counts them with `cnmon -l` and sets
# CUDA_VISIBLE_DEVICES for the harness. CARDSIM_DEVICES and CARDSIM_PRESET apply as usual.
#
# Time limits: --test-timeout (default 300 s, env CARDSIM_DS_TEST_TIMEOUT) per test, enforced
# by the plugin (the test fails, its ranks are killed, the session goes on); DeepSpeed's
# DS_UNITTEST_TIMEOUT is set above it (unless given) so that the harness's own limit, which
# ends the whole session, only acts as a backstop; --path-timeout (default 3600 s, env
# CARDSIM_DS_PATH_TIMEOUT) is the wall limit of one path's session (SIGINT, so pytest still
# writes its report, then SIGKILL 120 s later).
#
# Output: pytest's output on the terminal, and per path a log and a junit file in --out
# (default build/deepspeed-tests/<card>). Exit status 1 if a test failed or errored or a
# path did not finish, 2 on a usage error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  awk 'NR > 1 && /^# Cards:/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2
  exit "${1:-2}"
}

default_paths=(unit/v1/accelerator unit/comm unit/ops/adam unit/ops/lion unit/runtime/comm
               unit/runtime/half_precision unit/runtime/zero unit/v1/zero unit/checkpoint
               unit/launcher unit/utils)
card=mlu
out=""
test_timeout="${CARDSIM_DS_TEST_TIMEOUT:-300}"
path_timeout="${CARDSIM_DS_PATH_TIMEOUT:-3600}"
src=""
setup=1
sample="${CARDSIM_DS_SAMPLE:-1}"
against=installed
paths=()
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --card) [ $# -ge 2 ] || usage; card="$2"; shift 2 ;;
    --card=*) card="${1#--card=}"; shift ;;
    --out) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --test-timeout) [ $# -ge 2 ] || usage; test_timeout="$2"; shift 2 ;;
    --test-timeout=*) test_timeout="${1#--test-timeout=}"; shift ;;
    --path-timeout) [ $# -ge 2 ] || usage; path_timeout="$2"; shift 2 ;;
    --path-timeout=*) path_timeout="${1#--path-timeout=}"; shift ;;
    --sample) [ $# -ge 2 ] || usage; sample="$2"; shift 2 ;;
    --sample=*) sample="${1#--sample=}"; shift ;;
    --no-setup) setup=0; shift ;;
    --deepspeed) [ $# -ge 2 ] || usage; against="$2"; shift 2 ;;
    --deepspeed=*) against="${1#--deepspeed=}"; shift ;;
    -h|--help) usage 0 ;;
    --) shift; pytest_args=("$@"); break ;;
    -*) echo "deepspeed-tests.sh: unknown option '$1'" >&2; usage ;;
    *) if [ -z "$src" ]; then src="$1"; else paths+=("$1"); fi; shift ;;
  esac
done
case "$card" in mlu|supa) ;; *) echo "deepspeed-tests.sh: --card must be mlu or supa, got '$card'" >&2; exit 2 ;; esac
case "$against" in installed|checkout) ;; *) echo "deepspeed-tests.sh: --deepspeed must be installed or checkout, got '$against'" >&2; exit 2 ;; esac
[ -n "$src" ] || { echo "deepspeed-tests.sh: DEEPSPEED-SOURCE-DIR is missing" >&2; usage; }
for n in "$test_timeout" "$path_timeout"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "deepspeed-tests.sh: time limits are whole seconds, got '$n'" >&2; exit 2; }
done
[[ "$sample" =~ ^[1-9][0-9]*$ ]] || { echo "deepspeed-tests.sh: --sample takes a whole number >= 1, got '$sample'" >&2; exit 2; }
src="$(cd "$src" 2>/dev/null && pwd)" || { echo "deepspeed-tests.sh: no directory '$src'" >&2; exit 2; }
if [ ! -f "$src/tests/unit/common.py" ] || [ ! -d "$src/deepspeed" ]; then
  echo "deepspeed-tests.sh: '$src' is not a DeepSpeed source checkout (no tests/unit/common.py or deepspeed/)" >&2
  exit 2
fi
[ ${#paths[@]} -gt 0 ] || paths=("${default_paths[@]}")
for p in "${paths[@]}"; do
  [ -e "$src/tests/${p%%::*}" ] || { echo "deepspeed-tests.sh: no test path '$p' in $src/tests" >&2; exit 2; }
done
[ -n "$out" ] || out="$root/build/deepspeed-tests/$card"

if [ "$setup" = 1 ]; then
  "$root/scripts/setup.sh" >&2
elif [ ! -x "$root/.venv/bin/python" ] || ! ls "$root"/accelerators/python/cardsim_torch/_C*.so >/dev/null 2>&1; then
  echo "deepspeed-tests.sh: --no-setup, but cardsim is not set up (run scripts/setup.sh)" >&2
  exit 2
fi

mkdir -p "$out"
out="$(cd "$out" && pwd)"
src_version="$(cat "$src/version.txt" 2>/dev/null || echo '?')"
if [ "$against" = installed ]; then
  # DeepSpeed's tests/conftest.py puts the directory above itself first on sys.path; seen
  # through this link that directory has no deepspeed package, so the installed one is used.
  # pytest runs from the link's directory (a physical one: a cwd inside the link would
  # resolve to the checkout) and is given the paths through the link.
  run_dir="$out/.deepspeed-tree"
  mkdir -p "$run_dir"
  ln -sfn "$src/tests" "$run_dir/tests"
  # Some tests import the checkout's top-level accelerator/ package (what setup.py installs
  # as deepspeed.accelerator): the installed one stands in. No top-level op_builder/: with
  # none, the accelerators load deepspeed.ops.op_builder, whose sources are the installed
  # package's (a top-level one would look for csrc/ beside it).
  ds_pkg="$(cd "$out" && "$root/.venv/bin/python" -c 'import os, deepspeed; print(os.path.dirname(deepspeed.__file__))' 2>/dev/null)" || ds_pkg=""
  rm -f "$run_dir/op_builder"
  [ -z "$ds_pkg" ] || ln -sfn "$ds_pkg/accelerator" "$run_dir/accelerator"
  arg_prefix="tests/"
  ds_version="$(cd "$out" && "$root/.venv/bin/python" -c 'import deepspeed.git_version_info as v; print(v.version)' 2>/dev/null)" || {
    echo "deepspeed-tests.sh: no deepspeed package installed in $root/.venv (run scripts/setup.sh, or use --deepspeed checkout)" >&2
    exit 2
  }
  ds_what="DeepSpeed $ds_version (installed) with the tests of $src ($src_version)"
  if [ "${ds_version%%+*}" != "$src_version" ]; then
    echo "deepspeed-tests.sh: note: the tests come from DeepSpeed $src_version, the package tested is $ds_version" >&2
  fi
else
  run_dir="$src/tests"
  arg_prefix=""
  ds_what="DeepSpeed $src_version from $src"
fi
manifest="$out/manifest.tsv"
: > "$manifest"

export DS_ACCELERATOR="$card"
export PATH="$root/.venv/bin:$PATH"                     # cnmon, brsmi
export PYTHONPATH="$root/scripts/deepspeed_tests${PYTHONPATH:+:$PYTHONPATH}"
export CARDSIM_DS_TEST_TIMEOUT="$test_timeout"
export CARDSIM_DS_SAMPLE="$sample"
if [ -z "${DS_UNITTEST_TIMEOUT:-}" ]; then
  if [ "$test_timeout" -gt 0 ]; then export DS_UNITTEST_TIMEOUT=$((test_timeout + 120)); fi
fi

echo "== DeepSpeed tests on emulated $card cards: ${#paths[@]} path(s) from $src/tests; reports in $out"
for p in "${paths[@]}"; do
  slug="$(printf '%s' "$p" | tr -c 'A-Za-z0-9._-' '_')"
  xml="$out/$slug.xml"
  log="$out/$slug.log"
  rm -f "$xml"
  echo "== $p ($card)"
  start=$(date +%s.%N)
  set +e
  (cd "$run_dir" && timeout -s INT -k 120 "$path_timeout" \
     "$root/.venv/bin/python" -m pytest -p cardsim_deepspeed_plugin -p no:cacheprovider -rfEsx --continue-on-collection-errors \
       --junitxml="$xml" "$arg_prefix$p" ${pytest_args[@]+"${pytest_args[@]}"}) 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  end=$(date +%s.%N)
  wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  note=""
  [ "$sample" = 1 ] || note="sample 1/$sample"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$xml" "$rc" "$wall" "$path_timeout" "$note" >> "$manifest"
done

echo
rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
[ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+changes"
echo "== DeepSpeed tests on emulated $card cards (cardsim $rev; $ds_what)"
set +e
"$root/.venv/bin/python" "$root/scripts/deepspeed_tests/junit_table.py" "$manifest" | tee "$out/table.txt"
status=${PIPESTATUS[0]}
set -e
exit "$status"

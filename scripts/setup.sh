#!/usr/bin/env bash
# Installs what is missing (Debian packages, the Python environment in .venv/) and builds
# cardsim into build/. Idempotent: on a set-up machine it only runs an up-to-date build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf '[setup] %s [%s s]\n' "$*" "$SECONDS"; }

# ---- Debian packages -------------------------------------------------------------------
apt_packages=(build-essential cmake ninja-build ccache pkg-config libsystemc-dev libboost-dev
              libprotobuf-dev protobuf-compiler libgtest-dev python3-venv clang)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- Python environment ----------------------------------------------------------------
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$python" -m venv .venv
fi
stamp=.venv/.cardsim-requirements
want="$(cat requirements.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing Python requirements into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -r requirements.txt
  # DeepSpeed 0.19.8 is an sdist: build it without prebuilt ops and without DS_ACCELERATOR,
  # or its setup picks an accelerator at build time.
  if ! .venv/bin/python -c "import importlib.metadata as m; assert m.version('deepspeed') == '0.19.8'" 2>/dev/null; then
    log "installing deepspeed==0.19.8"
    env -u DS_ACCELERATOR DS_BUILD_OPS=0 .venv/bin/python -m pip install -q deepspeed==0.19.8
  fi
  echo "$want" > "$stamp"
fi

# torch_mlu, torch_supa, torch_supa_ext and cardsim_torch live in accelerators/python; the
# build puts the extension module there. A .pth file makes them importable from the venv
# (and from the processes DeepSpeed's launcher and torchrun start with it).
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$(cat "$site/cardsim.pth" 2>/dev/null)" != "$root/accelerators/python" ]; then
  echo "$root/accelerators/python" > "$site/cardsim.pth"
fi

# cnmon and brsmi, the management tools of the emulated cards (accelerators/python/
# cardsim_tools): small launchers in .venv/bin, rewritten only when they differ.
for tool in cnmon brsmi; do
  launcher="#!$root/.venv/bin/python
# cardsim's $tool (written by scripts/setup.sh)
import sys
sys.path.insert(0, \"$root/accelerators/python\")
from cardsim_tools.$tool import main
sys.exit(main())"
  if [ "$(cat ".venv/bin/$tool" 2>/dev/null)" != "$launcher" ] || [ ! -x ".venv/bin/$tool" ]; then
    printf '%s\n' "$launcher" > ".venv/bin/$tool"
    chmod +x ".venv/bin/$tool"
  fi
done

# ---- Sanitizer build (CARDSIM_SANITIZE=address,undefined or thread) -------------------------
# Its own tree (build-asan/, build-tsan/) over SystemC built from Debian's source with the
# pthread back end (scripts/build-systemc.sh): the C++ libraries, tools and GoogleTest suites.
# With CARDSIM_SANITIZE_TORCH=1 (address/undefined only) also the torch extension, built into
# a shadow of the Python packages, $tree/python, whose cardsim_torch links every source file
# but holds its own _C (PYTHONPATH=$tree/python puts it first; see scripts/test.sh).
if [ -n "${CARDSIM_SANITIZE:-}" ]; then
  case "$CARDSIM_SANITIZE" in
    address|undefined|address,undefined|undefined,address) tree=build-asan; systemc="$root/.deps/systemc-pthreads"; systemc_san="" ;;
    thread) tree=build-tsan; systemc="$root/.deps/systemc-tsan"; systemc_san=thread ;;
    *) echo "setup.sh: CARDSIM_SANITIZE must be address, undefined, address,undefined or thread, got '$CARDSIM_SANITIZE'" >&2; exit 2 ;;
  esac
  with_torch=OFF
  if [ "${CARDSIM_SANITIZE_TORCH:-0}" = 1 ]; then
    [ "$tree" = build-asan ] || { echo "setup.sh: CARDSIM_SANITIZE_TORCH=1 needs CARDSIM_SANITIZE=address and/or undefined (ThreadSanitizer cannot see inside the uninstrumented Python and torch)" >&2; exit 2; }
    with_torch=ON
  elif grep -q "^CARDSIM_BUILD_TORCH:BOOL=ON$" "$tree/CMakeCache.txt" 2>/dev/null; then
    with_torch=ON   # built once with torch: keep it rather than reconfigure
  fi
  scripts/build-systemc.sh "$systemc" $systemc_san
  if [ "$with_torch" = ON ]; then
    shadow="$root/$tree/python"
    mkdir -p "$shadow/cardsim_torch"
    for pkg in accelerators/python/*/; do
      pkg="$(basename "$pkg")"
      [ "$pkg" = cardsim_torch ] || ln -sfn "$root/accelerators/python/$pkg" "$shadow/$pkg"
    done
    find "$shadow" -xtype l -delete   # links to files removed since
    for f in accelerators/python/cardsim_torch/*; do
      case "$(basename "$f")" in _C.*|__pycache__) continue ;; esac
      ln -sfn "$root/$f" "$shadow/cardsim_torch/$(basename "$f")"
    done
  fi
  if [ ! -f "$tree/build.ninja" ] || ! grep -q "^CARDSIM_SANITIZE:STRING=$CARDSIM_SANITIZE$" "$tree/CMakeCache.txt" ||
     ! grep -q "^CARDSIM_BUILD_TORCH:BOOL=$with_torch$" "$tree/CMakeCache.txt"; then
    log "configuring $tree/ (-fsanitize=$CARDSIM_SANITIZE, torch extension $with_torch)"
    cmake -S . -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCARDSIM_SANITIZE="$CARDSIM_SANITIZE" \
      -DCARDSIM_SYSTEMC_PREFIX="$systemc" -DCARDSIM_BUILD_TORCH="$with_torch" -DCARDSIM_BUILD_BENCHMARKS=OFF \
      -DCARDSIM_PYTHON="$root/.venv/bin/python" -DCARDSIM_TORCH_PACKAGE_DIR="$root/$tree/python/cardsim_torch" >/dev/null
  fi
  log "building $tree/"
  if ! cmake --build "$tree" -- -j"$(nproc)" > "$tree/last-build.log" 2>&1; then
    cat "$tree/last-build.log"
    log "build failed"
    exit 1
  fi
  log "ready ($tree/)"
  exit 0
fi

# ---- Build -----------------------------------------------------------------------------
if [ ! -f build/build.ninja ] || ! grep -q "^CARDSIM_PYTHON:FILEPATH=$root/.venv/bin/python$" build/CMakeCache.txt; then
  log "configuring build/"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCARDSIM_PYTHON="$root/.venv/bin/python" >/dev/null
fi
log "building"
if ! cmake --build build -- -j"$(nproc)" > build/last-build.log 2>&1; then
  cat build/last-build.log
  log "build failed"
  exit 1
fi
grep -E 'warning:' build/last-build.log || true
# cardsim, the command-line tool, on the venv's PATH.
[ "$(readlink .venv/bin/cardsim 2>/dev/null)" = "$root/build/traces/cardsim" ] ||
  ln -sfn "$root/build/traces/cardsim" .venv/bin/cardsim
log "ready"

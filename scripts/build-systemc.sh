#!/usr/bin/env bash
# Builds SystemC 2.3.4 from Debian's source package with the pthread back end (Debian's own
# libsystemc uses QuickThreads coroutines, whose stack switches AddressSanitizer and
# ThreadSanitizer cannot follow) and installs it into PREFIX:
#
#   scripts/build-systemc.sh PREFIX [SANITIZE]
#
# SANITIZE (e.g. "thread") instruments SystemC itself too: ThreadSanitizer needs every
# library that synchronizes threads instrumented; AddressSanitizer does not. Idempotent: a
# PREFIX that holds a build from the same inputs is left alone. Uses a deb-src entry for
# bookworm (added if missing) and dpkg-dev's dpkg-source.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: scripts/build-systemc.sh PREFIX [SANITIZE]" >&2; exit 2; }
prefix="$(mkdir -p "$1" && cd "$1" && pwd)"
sanitize="${2:-}"
stamp="$prefix/.cardsim-systemc"
want="systemc 2.3.4-2 pthreads sanitize=$sanitize $(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -f "$prefix/lib/pkgconfig/systemc.pc" ]; then
  exit 0
fi
log() { printf '[systemc] %s\n' "$*"; }
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
need=()
for p in dpkg-dev autoconf automake libtool; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
src_root="$root/.deps/systemc-src"
src="$src_root/systemc-2.3.4"
if [ ! -f "$src/configure" ]; then
  if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then
    log "adding a deb-src entry for bookworm"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
      $sudo tee /etc/apt/sources.list.d/cardsim-deb-src.sources >/dev/null
    $sudo apt-get update -qq
  fi
  log "fetching Debian's source package"
  rm -rf "$src_root" && mkdir -p "$src_root"
  (cd "$src_root" && apt-get source -qq systemc >/dev/null 2>&1)
  [ -f "$src/configure" ] || { echo "build-systemc.sh: apt-get source systemc gave no $src/configure" >&2; exit 1; }
fi
if [ ! -f "$src/src/Makefile.in" ]; then
  # Debian regenerates the build system (dh_autoreconf); so do we.
  log "autoreconf"
  (cd "$src" && autoreconf -fi > "$src_root/autoreconf.log" 2>&1) || { tail -20 "$src_root/autoreconf.log"; exit 1; }
fi
build="$prefix/.build"
rm -rf "$build" && mkdir -p "$build"
flags="-O1 -g -std=c++17 -fno-omit-frame-pointer"
[ -z "$sanitize" ] || flags="$flags -fsanitize=$sanitize"
cxx="g++"
command -v ccache >/dev/null && cxx="ccache g++"
log "building with the pthread back end${sanitize:+, -fsanitize=$sanitize} into $prefix"
(cd "$build" && "$src/configure" -q --prefix="$prefix" --with-unix-layout --enable-pthreads --disable-static \
   CXX="$cxx" CXXFLAGS="$flags" LDFLAGS="${sanitize:+-fsanitize=$sanitize}" > configure.log 2>&1 &&
 make -j"$(nproc)" > make.log 2>&1 && make install > install.log 2>&1) || {
  for f in "$build"/*.log; do tail -n 30 "$f"; done
  echo "build-systemc.sh: building SystemC failed (logs in $build)" >&2
  exit 1
}
[ -f "$prefix/lib/pkgconfig/systemc.pc" ] || { echo "build-systemc.sh: no systemc.pc under $prefix/lib" >&2; exit 1; }
echo "$want" > "$stamp"
log "done"

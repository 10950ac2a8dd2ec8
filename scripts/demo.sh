#!/usr/bin/env bash
# Sets up (if needed) and runs the main demo: two streams on a simulated MLU370-X8 with a
# printed timeline. Extra arguments go to the demo (--preset NAME, --set key.path=value).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh >&2
exec build/driver_shim/cardsim_stream_timeline "$@"

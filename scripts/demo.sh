#!/usr/bin/env bash
# Sets up everything and runs `netveil demo`: a two-host lab in network namespaces, protected with ESP.
# Run as root: `sudo scripts/demo.sh` (extra arguments go to `netveil demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup >/dev/null
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
cargo build --release -q -p netveil
exec target/release/netveil demo "$@"

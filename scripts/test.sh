#!/usr/bin/env bash
# The whole test suite: format, lints, docs, layers and the one IP parser; unit and known-answer tests, namespace and interop tests (root),
# scapy interop, fuzz smoke.
# Installs what it needs first (.ci/setup). Run as root: `sudo scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export CARGO_TERM_COLOR=never
# Stages skipped on this run: named in the final line. In CI (CI=true) no stage may be skipped.
skipped=()
skip() {
  if [ "${CI:-}" = true ]; then
    echo "CI: the $1 stage may not be skipped ($2)" >&2
    exit 1
  fi
  echo "($1 skipped: $2)"
  skipped+=("$1")
}

echo "== hygiene: format, lints, docs, layers"
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
cargo fmt --all --check
cargo clippy --release --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace
scripts/check-ip-offsets
scripts/check-rng && scripts/check-rng --self-test
if [ -x ../shared/tools/check-layers ]; then
  ../shared/tools/check-layers
else
  skip "layer check" "../shared/tools/check-layers not present"
fi

echo "== cargo test (release; includes network-namespace tests, which need root)"
cargo build --release -p netveil
cargo test --release --workspace

echo "== scapy interop (scapy as the independent ESP/AH oracle)"
NETVEIL_BIN="$PWD/target/release/netveil" .venv/bin/python -m pytest tests/scapy -q -p no:cacheprovider

echo "== fuzz smoke (every target briefly; longer runs: cd fuzz && cargo +nightly fuzz run TARGET)"
if [ "${NETVEIL_SKIP_FUZZ:-0}" = 1 ]; then
  skip "fuzz smoke" "NETVEIL_SKIP_FUZZ=1"
else
  if ! rustup toolchain list | grep -q nightly; then
    rustup toolchain install nightly --profile minimal
  fi
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
  secs="${NETVEIL_FUZZ_SECONDS:-10}"
  ( cd fuzz
    targets=$(cargo +nightly fuzz list)
    n=$(echo "$targets" | grep -c . || true)
    declared=$(grep -c '^\[\[bin\]\]' Cargo.toml || true)
    [ "$n" -gt 0 ] || { echo "fuzz smoke: no fuzz target found (cargo fuzz list printed nothing)"; exit 1; }
    [ "$n" -eq "$declared" ] || { echo "fuzz smoke: cargo fuzz lists $n targets, fuzz/Cargo.toml declares $declared"; exit 1; }
    ran=0
    for t in $targets; do
      echo "-- $t (${secs}s)"
      out=$(cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -max_len=2048 2>&1) \
        || { echo "$out" | tail -n 30; echo "fuzz target $t failed"; exit 1; }
      # libFuzzer's last words: "Done N runs in S second(s)"; a target that ran no input did not run.
      runs=$(echo "$out" | sed -n 's/^Done \([0-9]*\) runs.*/\1/p' | tail -n 1)
      [ "${runs:-0}" -gt 0 ] || { echo "$out" | tail -n 5; echo "fuzz target $t ran no input"; exit 1; }
      echo "$t: $runs runs"
      ran=$((ran + 1))
    done
    [ "$ran" -eq "$declared" ] || { echo "fuzz smoke: ran $ran of $declared targets"; exit 1; }
    echo "fuzz smoke: $ran targets ran" )
fi
if [ "${#skipped[@]}" -gt 0 ]; then
  echo "== all tests passed (skipped: $(IFS=,; echo "${skipped[*]}" | sed 's/,/, /g'))"
else
  echo "== all tests passed"
fi

#!/usr/bin/env bash
# The whole test suite: format, lints, docs, layers, module circles and sizes, and the one IP parser; unit and known-answer tests, namespace and interop tests (root),
# scapy interop, fuzz smoke.
# Installs what it needs first (.ci/setup). Run as root: `sudo scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The wall time of each stage (bash's SECONDS) and the total are named in the final line, and after a failure in the
# last line printed: CI logs show where the time goes. `stage NAME` ends the running stage and starts NAME.
stage_names=()
stage_secs=()
stage_name=""
stage_t0=$SECONDS
stage() {
  if [ -n "$stage_name" ]; then
    stage_names+=("$stage_name")
    stage_secs+=($((SECONDS - stage_t0)))
  fi
  stage_name="$1"
  stage_t0=$SECONDS
}
# (Called in a command substitution: ends the running stage in the subshell's copy.)
stage_times() {
  local out="" i
  stage ""
  for i in "${!stage_names[@]}"; do
    out+="${out:+, }${stage_names[$i]} ${stage_secs[$i]}"
  done
  echo "${SECONDS} s (stages in s: $out)"
}
trap 'rc=$?; [ "$rc" = 0 ] || echo "== FAILED (exit $rc) in stage $stage_name after $(stage_times)"; rm -f "${NETVEIL_SKIP_LOG:-}"' EXIT
stage setup
bash .ci/setup
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export CARGO_TERM_COLOR=never
# Stages skipped on this run: named in the final line. In CI (CI=true; .ci/run exports it) no stage may be skipped.
# Tests skip through netveil-testkit's skip(), which fails them in CI and otherwise appends "TEST: WHY" to the file
# NETVEIL_SKIP_LOG names: a fresh one per run, whose tests the final line names too.
in_ci() { case "${CI:-}" in "" | 0 | [Ff][Aa][Ll][Ss][Ee]) return 1 ;; *) return 0 ;; esac; }
skipped=()
NETVEIL_SKIP_LOG="$(mktemp -t netveil-skipped.XXXXXX)"
export NETVEIL_SKIP_LOG
skipped_tests() {
  [ -s "$NETVEIL_SKIP_LOG" ] || return 0
  # "TEST: WHY" lines (a test's name has no ": "; its module path may have "::").
  local names
  names=$(sed 's/: .*//' "$NETVEIL_SKIP_LOG" | sort -u)
  echo "$(echo "$names" | wc -l) test(s): $(echo "$names" | paste -sd, - | sed 's/,/, /g')"
}
skip() {
  if in_ci; then
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
stage fmt
cargo fmt --all --check
# Every cargo step in the `ci` profile (Cargo.toml: release without LTO): the dependencies' metadata and build
# scripts (aws-lc's C build among them) are built once, by clippy, for all of them.
stage clippy
cargo clippy --profile ci --all-targets -- -D warnings
stage doc
RUSTDOCFLAGS="-D warnings" cargo doc --profile ci --no-deps --workspace
# The netveil binary on its own features (the test build unifies them with the tests' dev-dependencies): type-checked
# on the libraries' metadata that rustdoc just needed, without building it twice.
cargo check --profile ci -p netveil
stage checks
scripts/check-ip-offsets
scripts/check-rng && scripts/check-rng --self-test
# The layer check lives beside the repository, in ../shared/tools (NETVEIL_SHARED names another shared/); a copy of
# it is kept in scripts/check-layers. A worktree or a clone of a local checkout elsewhere (under /tmp, say) finds the
# shared one beside the repository it came from.
shared_check_layers() {
  local origin common c
  common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
  origin=$(git remote get-url origin 2>/dev/null || true)
  for c in ${NETVEIL_SHARED:+"$NETVEIL_SHARED/tools/check-layers"} ../shared/tools/check-layers \
    ${common:+"$(dirname "$common")/../shared/tools/check-layers"}; do
    [ -x "$c" ] && { echo "$c"; return; }
  done
  if [ -n "$origin" ] && [ -d "$origin" ]; then
    common=$(git -C "$origin" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
    for c in "$origin/../shared/tools/check-layers" ${common:+"$(dirname "$common")/../shared/tools/check-layers"}; do
      [ -x "$c" ] && { echo "$c"; return; }
    done
  fi
}
# Without a shared/ (a CI machine may have none), the copy kept in scripts/ runs: the check never skips.
check_layers=$(shared_check_layers)
"${check_layers:-scripts/check-layers}"
# Inside each crate: no circle of modules, the declared order of the top-level modules (`// layers:` in each crate
# root), no file over 900 lines, no daemon fn over 150 (scripts/check-modules says how; the full check, never --only).
scripts/check-modules --self-test
scripts/check-modules

echo "== cargo test (profile ci: optimised; includes network-namespace tests, which need root)"
stage test-build
# The test build makes target/ci/netveil too (the namespace tests run it; so does the scapy stage).
cargo test --profile ci --workspace --no-run
stage test-run
cargo test --profile ci --workspace

echo "== scapy interop (scapy as the independent ESP/AH oracle)"
stage scapy
NETVEIL_BIN="$PWD/target/ci/netveil" .venv/bin/python -m pytest tests/scapy -q -p no:cacheprovider

echo "== fuzz smoke (every target briefly; longer runs: cd fuzz && cargo +nightly fuzz run TARGET)"
stage fuzz-build
if [ "${NETVEIL_SKIP_FUZZ:-0}" = 1 ]; then
  skip "fuzz smoke" "NETVEIL_SKIP_FUZZ=1"
else
  if ! rustup toolchain list | grep -q nightly; then
    rustup toolchain install nightly --profile minimal
  fi
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
  secs="${NETVEIL_FUZZ_SECONDS:-10}"
  cd fuzz
  targets=$(cargo +nightly fuzz list)
  n=$(echo "$targets" | grep -c . || true)
  declared=$(grep -c '^\[\[bin\]\]' Cargo.toml || true)
  [ "$n" -gt 0 ] || { echo "fuzz smoke: no fuzz target found (cargo fuzz list printed nothing)"; exit 1; }
  [ "$n" -eq "$declared" ] || { echo "fuzz smoke: cargo fuzz lists $n targets, fuzz/Cargo.toml declares $declared"; exit 1; }
  # Each target starts from its committed seeds (fuzz/seeds/TARGET, read-only; from the repository's test data:
  # fuzz/make-seeds), with fuzz/corpus/TARGET (git-ignored) as the corpus it writes.
  ./make-seeds --check
  # Every target in one build (cargo builds them side by side; `fuzz run` then finds them up to date), then the
  # runs, as many at a time as there are CPUs: libFuzzer runs on one, so each target still has a CPU to itself for
  # its whole time.
  cargo +nightly fuzz build
  # The build has the cheap deterministic stand-ins for DH, ML-KEM and signatures (--cfg fuzzing, see
  # crates/crypto/src/fuzz.rs): the bytes they hash first are in a target's binary (the test build's netveil is
  # checked for their absence by crates/netveil/tests/no_fuzz_crypto.rs, with the same search).
  grep -qaF "netveil fuzz-only crypto" target/x86_64-unknown-linux-gnu/release/ike_pair ||
    { echo "fuzz build: the fuzzing crypto stand-ins are not in ike_pair"; exit 1; }
  stage fuzz-run
  # Each run's output (kept after a failure; fuzz/target is ignored by git).
  logs=target/smoke-logs
  rm -rf "$logs" && mkdir -p "$logs"
  jobs=$(nproc)
  for t in $targets; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    echo "-- $t (${secs}s)"
    mkdir -p "corpus/$t"
    ( rc=0
      cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$secs" -max_len=2048 \
        >"$logs/$t.log" 2>&1 || rc=$?
      echo "$rc" >"$logs/$t.rc" ) &
  done
  wait
  ran=0
  for t in $targets; do
    out=$(cat "$logs/$t.log")
    [ "$(cat "$logs/$t.rc")" = 0 ] || { tail -n 30 <<<"$out"; echo "fuzz target $t failed"; exit 1; }
    # libFuzzer's last words: "Done N runs in S second(s)"; a target that ran no input did not run.
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' <<<"$out" | tail -n 1)
    [ "${runs:-0}" -gt 0 ] || { tail -n 5 <<<"$out"; echo "fuzz target $t ran no input"; exit 1; }
    # It read its seeds ("INFO: seed corpus: files: N ..." counts the files of both folders).
    # (Here-strings, not pipes: grep -q stops reading early, and under pipefail the writer's SIGPIPE failed the run.)
    grep -q "INFO: seed corpus: files: [1-9]" <<<"$out" ||
      { head -n 20 <<<"$out"; echo "fuzz target $t read no seed"; exit 1; }
    echo "$t: $runs runs"
    ran=$((ran + 1))
  done
  [ "$ran" -eq "$declared" ] || { echo "fuzz smoke: ran $ran of $declared targets"; exit 1; }
  echo "fuzz smoke: $ran targets ran"
  cd ..
fi
times=$(stage_times)
# What was skipped: stages, and the tests that skipped (each with its reason, before the final line).
if [ -s "$NETVEIL_SKIP_LOG" ]; then
  echo "== skipped tests (testkit::skip; a failure under CI):"
  sort -u "$NETVEIL_SKIP_LOG" | sed 's/^/  /'
  skipped+=("$(skipped_tests)")
fi
if [ "${#skipped[@]}" -gt 0 ]; then
  echo "== all tests passed in $times (skipped: $(printf '%s; ' "${skipped[@]}" | sed 's/; $//'))"
else
  echo "== all tests passed in $times (nothing skipped)"
fi

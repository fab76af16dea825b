#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (docs/fuzzing.md): builds them all in one `cargo fuzz
# build`, then fuzzes each for FUZZ_SECONDS (default 30) starting from its seed corpus in
# testdata/fuzz/<target>/. A crash, panic, failed invariant, leak or timeout fails the run, and
# libFuzzer's reproducer is left in fuzz/artifacts/<target>/.
#
# The repository is never written: libFuzzer adds new inputs to the FIRST corpus directory, which
# is a fresh temporary directory; testdata/fuzz/<target> is passed second, read only.
#
# Usage: scripts/fuzz.sh [target...]          (default: every target)
# Environment: FUZZ_SECONDS (per target, default 30), FUZZ_SANITIZER (address | none; default
# address), FUZZ_KEEP_CORPUS (a directory to keep the grown corpora in; default: thrown away).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/certeasy-target}"
seconds="${FUZZ_SECONDS:-30}"
sanitizer="${FUZZ_SANITIZER:-address}"
targets=(jws csr identifier config overrides)
[ $# -gt 0 ] && targets=("$@")

# cargo-fuzz passes nightly-only compiler flags (-Zsanitizer, sancov passes). The machine has
# only the stable toolchain, which accepts them when told it is bootstrapping the compiler.
export RUSTC_BOOTSTRAP=1
# The fuzz build instruments every crate, so it cannot share the workspace's artefacts; it gets
# its own directory beside them (kept between runs like the rest of the target directory).
fuzz_target_dir="$CARGO_TARGET_DIR/fuzz"

log() { printf '\n==> %s\n' "$*" >&2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

log "building fuzz targets (sanitizer: $sanitizer)"
build_started=$(date +%s)
# Optimised, with debug assertions and overflow checks (cargo-fuzz's default); 16 codegen units
# build faster on two cores for slightly slower fuzzing.
cargo fuzz build --sanitizer "$sanitizer" --target-dir "$fuzz_target_dir" --codegen-units 16
echo "fuzz build: $(( $(date +%s) - build_started )) s" >&2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
summary=()
for target in "${targets[@]}"; do
  seeds="testdata/fuzz/$target"
  [ -d "$seeds" ] || { echo "FATAL: no seed corpus $seeds"; exit 1; }
  corpus="$work/corpus-$target"
  mkdir -p "$corpus" fuzz/artifacts/"$target"
  log "fuzzing $target for $seconds s"
  out="$work/$target.log"
  # -timeout: an input that takes 10 s is a hang worth a reproducer. -rss_limit_mb: a parser
  # that needs 2 GiB for a small input is a finding too.
  if cargo fuzz run --sanitizer "$sanitizer" --target-dir "$fuzz_target_dir" --codegen-units 16 "$target" \
      "$corpus" "$seeds" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      >"$out" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -n 60 "$out"
    echo "reproducer(s): $(ls -1 fuzz/artifacts/"$target" 2>/dev/null | tr '\n' ' ')"
  fi
  # The last libFuzzer status line: executions, coverage (edges), features, corpus size.
  last="$(grep -E '^#[0-9]+' "$out" | tail -n 1 || true)"
  execs="$(grep -E '^stat::number_of_executed_units' "$out" | awk '{s += $2} END {print s + 0}')"
  line="$target: $result, $execs executions in ${seconds} s; last status: ${last:-none}"
  echo "$line" >&2
  summary+=("$line")
  if [ -n "${FUZZ_KEEP_CORPUS:-}" ]; then
    mkdir -p "$FUZZ_KEEP_CORPUS/$target"
    cp -n "$corpus"/* "$FUZZ_KEEP_CORPUS/$target"/ 2>/dev/null || true
  fi
done

log "fuzzing summary"
printf '%s\n' "${summary[@]}"
exit "$status"

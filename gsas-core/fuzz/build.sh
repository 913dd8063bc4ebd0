#!/usr/bin/env bash
# Builds the gsas-core fuzz targets non-interactively on stable Rust, and optionally runs them.
#
#   gsas-core/fuzz/build.sh                       # install cargo-fuzz if missing, build all targets
#   gsas-core/fuzz/build.sh --run SECONDS         # ... then run each target for SECONDS
#   gsas-core/fuzz/build.sh --run 60 parse        # only the named targets
#
# cargo-fuzz needs nightly compiler flags (AddressSanitizer, coverage instrumentation);
# RUSTC_BOOTSTRAP=1 unlocks them on the stable toolchain, so no nightly toolchain is needed.
# cargo-fuzz is installed with `cargo install cargo-fuzz --locked` only when `cargo fuzz` is
# not found. Builds go to $CARGO_TARGET_DIR (default: gsas-core/fuzz/target). Crashes are
# written to artifacts/<target>/ and the corpus grows in corpus/<target>/ (neither is
# committed). Prints how long the install, the build and each run took.
#
# Exit status: 0 when everything built and no run found a crash; 1 when a fuzz target
# failed (crash, leak, timeout: see artifacts/<target>/); 2 for usage errors.
set -euo pipefail

FUZZ_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "build.sh: $*" >&2; exit 2; }
usage() { sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

RUN_SECONDS=""
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --run)
            [ $# -ge 2 ] || die "--run needs a number of seconds"
            [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "--run: '$2' is not a positive number of seconds"
            RUN_SECONDS="$2"
            shift 2
            ;;
        -h | --help) usage; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done

command -v cargo >/dev/null 2>&1 || die "cargo not found"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "build.sh: cargo-fuzz not found; installing it (cargo install cargo-fuzz --locked)"
    t0=$SECONDS
    cargo install cargo-fuzz --locked
    echo "build.sh: cargo-fuzz installed in $((SECONDS - t0)) s"
fi
echo "build.sh: $(cargo fuzz --version | head -n 1), $(rustc --version)"

cd "$FUZZ_DIR"
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FUZZ_DIR/target}"

mapfile -t ALL < <(cargo fuzz list)
[ "${#ALL[@]}" -gt 0 ] || die "cargo fuzz list found no targets in $FUZZ_DIR"
if [ "${#TARGETS[@]}" -eq 0 ]; then
    TARGETS=("${ALL[@]}")
fi
for target in "${TARGETS[@]}"; do
    printf '%s\n' "${ALL[@]}" | grep -qx -- "$target" ||
        die "unknown fuzz target '$target' (targets: ${ALL[*]})"
done

t0=$SECONDS
for target in "${TARGETS[@]}"; do
    cargo fuzz build "$target"
done
echo "build.sh: built ${TARGETS[*]} in $((SECONDS - t0)) s (target dir $CARGO_TARGET_DIR)"

[ -n "$RUN_SECONDS" ] || exit 0

# Per-target libFuzzer options. `engines` splits its input into packets: inputs beyond a few
# hundred bytes only repeat what shorter ones cover and slow every execution down.
options_for() {
    case "$1" in
        engines) echo "-max_len=512" ;;
        *) echo "" ;;
    esac
}

failed=()
for target in "${TARGETS[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    echo "build.sh: running $target for $RUN_SECONDS s"
    t0=$SECONDS
    # shellcheck disable=SC2046  # the options are single words by construction
    if cargo fuzz run "$target" -- -max_total_time="$RUN_SECONDS" -print_final_stats=1 \
        $(options_for "$target"); then
        echo "build.sh: $target ran $((SECONDS - t0)) s without a failure" \
            "(corpus: $(find "corpus/$target" -type f | wc -l) inputs)"
    else
        echo "build.sh: $target FAILED after $((SECONDS - t0)) s; see artifacts/$target/" >&2
        failed+=("$target")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "build.sh: failing targets: ${failed[*]}" >&2
    exit 1
fi

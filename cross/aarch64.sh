#!/usr/bin/env bash
# Build or test gsas for aarch64-unknown-linux-gnu (the QFDB boards) without a container.
#
#   cross/aarch64.sh build [cargo args...]    # e.g. --release -p gsas-launch
#   cross/aarch64.sh test  [cargo args...]    # runs the tests under qemu-aarch64 -L /
#   cross/aarch64.sh env                      # print the environment it would use
#   cross/aarch64.sh --help                   # this text
#
# Toolchain choice:
#   * rustup's aarch64 std when it is installed (`rustup target add aarch64-unknown-linux-gnu`);
#   * otherwise Debian's `rustc-web` with `libstd-rust-web-dev:arm64` (after
#     `dpkg --add-architecture arm64`): RUSTC and RUSTDOC point at /usr/bin/rustc and
#     /usr/bin/rustdoc, and the build uses its own target directory so that the two
#     compilers do not invalidate each other's artefacts.
# The linker (aarch64-linux-gnu-gcc) and the test runner (qemu-aarch64 -L /) come from
# .cargo/config.toml.  Without a subcommand argument list, `test` covers every crate meant
# for the boards (the workspace minus the x86-only benchmark crate).
set -euo pipefail

TARGET=aarch64-unknown-linux-gnu
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Crates that never run on the boards.
HOST_ONLY=(gsas-bench)

die() { echo "cross/aarch64.sh: $*" >&2; exit 2; }

select_toolchain() {
    if command -v rustup >/dev/null 2>&1 &&
        rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
        TOOLCHAIN="rustup"
        export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
    else
        [ -x /usr/bin/rustc ] && [ -x /usr/bin/rustdoc ] ||
            die "no aarch64 standard library: install rustup's ($TARGET) or Debian's rustc-web and libstd-rust-web-dev:arm64"
        [ -d /usr/lib/rustlib/$TARGET/lib ] ||
            die "Debian rustc found but not libstd-rust-web-dev:arm64 (dpkg --add-architecture arm64; apt-get install libstd-rust-web-dev:arm64)"
        TOOLCHAIN="debian"
        export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
        export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/debian-rustc}"
    fi
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || die "aarch64-linux-gnu-gcc missing (apt-get install gcc-aarch64-linux-gnu)"
    # C code built by build scripts (the cc crate) for the target.
    export CC_aarch64_unknown_linux_gnu="${CC_aarch64_unknown_linux_gnu:-aarch64-linux-gnu-gcc}"
    export CXX_aarch64_unknown_linux_gnu="${CXX_aarch64_unknown_linux_gnu:-aarch64-linux-gnu-g++}"
    export AR_aarch64_unknown_linux_gnu="${AR_aarch64_unknown_linux_gnu:-aarch64-linux-gnu-ar}"
    # Programs that start other aarch64 programs (launcher tests) run them through qemu too.
    export QEMU_LD_PREFIX="${QEMU_LD_PREFIX:-/}"
    # The dev profile at opt-level 1 (debug assertions and overflow checks stay on): qemu
    # translates every instruction, and unoptimized code has several times more of them.
    # Measured on the 2-CPU CI machine, same tests, one build each way: gsas-core's
    # sim_lossy 72 s -> 5.2 s, symheap_proptest 41 -> 2.7 s, two shmem barrier tests
    # 29 -> 4.9 s, cluster's eight PEs on four Exanet nodes 73 -> 20 s; the clean build
    # takes about 12 min instead of 6, and 9.6 min with line tables only for debug
    # information (enough for the file:line of a backtrace). Set
    # CARGO_PROFILE_DEV_OPT_LEVEL=0 CARGO_PROFILE_DEV_DEBUG=true for a build that a
    # debugger steps through line by line.
    export CARGO_PROFILE_DEV_OPT_LEVEL="${CARGO_PROFILE_DEV_OPT_LEVEL:-1}"
    export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
}

cmd="${1:-}"
[ -n "$cmd" ] || die "usage: cross/aarch64.sh {build|test|check|clippy|env} [cargo args...] (--help)"
if [ "$cmd" = "-h" ] || [ "$cmd" = "--help" ]; then
    sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
shift
select_toolchain
cd "$ROOT"
case "$cmd" in
    env)
        echo "toolchain=$TOOLCHAIN RUSTC=${RUSTC:-rustup} CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
        ;;
    test)
        command -v qemu-aarch64 >/dev/null 2>&1 || die "qemu-aarch64 missing (apt-get install qemu-user)"
        if [ $# -eq 0 ]; then
            set -- --workspace $(printf -- '--exclude %s ' "${HOST_ONLY[@]}")
        fi
        exec cargo test --target "$TARGET" "$@"
        ;;
    build | check | clippy)
        if [ $# -eq 0 ]; then
            set -- --workspace $(printf -- '--exclude %s ' "${HOST_ONLY[@]}")
        fi
        exec cargo "$cmd" --target "$TARGET" "$@"
        ;;
    *) die "unknown subcommand '$cmd'" ;;
esac

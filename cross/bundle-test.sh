#!/usr/bin/env bash
# Test of cross/bundle.sh: build the QFDB bundle (dev profile, reusing the aarch64 target
# directory of scripts/test-all), unpack it, and check it:
#
#   * the expected files are there and MANIFEST verifies (sha256sum -c);
#   * gsas-atomicd, oshrun, gshrun and libshmem.so are 64-bit aarch64 ELF files (ELF header
#     read here, and `file` when it is installed);
#   * oshrun --version and gsas-atomicd --version run under qemu-aarch64 and print the
#     workspace version; gsas-info --parsable names OpenSHMEM 1.6, the aarch64 build and
#     the prefix;
#   * the unpacked oshcc (bundle built with --prefix = the unpack directory) compiles and
#     links a C program against the bundled headers and libraries, shared and static, and
#     the result is aarch64 too;
#   * the other implementations' names are links to the right wrapper or launcher (oshcxx,
#     shmemc++, shmemcxx -> oshc++; shmemcc -> oshcc; shmemrun -> oshrun), and shmemcc
#     builds the same program;
#   * the systemd unit starts PREFIX/bin/gsas-atomicd with PREFIX/etc/gsas/cluster.toml;
#   * the binaries and libshmem.so carry no DWARF, each a .gnu_debuglink to NAME.debug; the
#     -dbg tarball holds those files (same build ids) and the whole libshmem.a, and
#     unpacked beside them lets gdb-multiarch (when installed) find a source line of
#     libshmem.so; libshmem.a carries no DWARF.
#
#   cross/bundle-test.sh            exit 0 when every check passed, 1 otherwise
#   cross/bundle-test.sh --help     this text (nothing is built)
set -euo pipefail

case "${1:-}" in
    "") ;;
    -h|--help)
        sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0 ;;
    *)
        echo "cross/bundle-test.sh: unknown argument '$1' (--help)" >&2
        exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gsas-bundle-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
FAILS=0
PASSES=0
ok() { PASSES=$((PASSES + 1)); echo "ok    $*"; }
bad() { FAILS=$((FAILS + 1)); echo "FAIL  $*"; }
check() { # check DESCRIPTION CMD...
    local what="$1"; shift
    if "$@" >"$WORK/check.log" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/      /' "$WORK/check.log"; fi
}

command -v qemu-aarch64 >/dev/null 2>&1 || { echo "bundle-test: qemu-aarch64 missing" >&2; exit 1; }
VERSION="$(awk '/^\[workspace.package\]/ {p = 1; next} /^\[/ {p = 0}
    p && $1 == "version" {gsub(/"/, "", $3); print $3}' "$ROOT/Cargo.toml")"
PREFIX="$WORK/opt/gsas"
TARBALL="$WORK/bundle.tar.gz"

"$ROOT/cross/bundle.sh" --debug --quiet --prefix "$PREFIX" --out "$TARBALL" ||
    { echo "bundle-test: cross/bundle.sh failed" >&2; exit 1; }
mkdir -p "$PREFIX"
tar -C "$PREFIX" --strip-components=1 -xzf "$TARBALL"
check "top directory is gsas-qfdb-$VERSION" \
    bash -c "tar -tzf '$TARBALL' | cut -d/ -f1 | sort -u | grep -qx 'gsas-qfdb-$VERSION'"

for f in bin/gsas-atomicd bin/oshrun bin/gshrun bin/gsas-info bin/oshcc bin/oshc++ lib/libshmem.a \
    lib/libshmem.so "lib/libshmem.so.$VERSION" lib/pkgconfig/gsas-shmem.pc include/shmem.h \
    include/shmemx.h include/pshmem.h include/mpp/shmem.h etc/gsas/cluster.toml \
    systemd/gsas-atomicd@.service share/gsas/build-info README.md MANIFEST; do
    check "has $f" test -e "$PREFIX/$f"
done
for alias in oshcxx:oshc++ shmemcc:oshcc shmemc++:oshc++ shmemcxx:oshc++ shmemrun:oshrun \
    gshrun:oshrun oshmem_info:gsas-info; do
    check "bin/${alias%%:*} is a link to ${alias#*:}" \
        bash -c "[ -L '$PREFIX/bin/${alias%%:*}' ] && [ \"\$(readlink '$PREFIX/bin/${alias%%:*}')\" = '${alias#*:}' ]"
done
check "MANIFEST verifies" bash -c "cd '$PREFIX' && sha256sum --quiet -c MANIFEST"

# Debug information apart (the -dbg tarball).
DBG_TARBALL="$WORK/bundle-dbg.tar.gz"
check "the -dbg tarball exists beside the bundle" test -f "$DBG_TARBALL"
check "the bundle holds no .debug directory" \
    bash -c "! tar -tzf '$TARBALL' | grep -q '/\.debug/'"
build_id() { aarch64-linux-gnu-readelf -n "$1" | sed -n 's/.*Build ID: //p'; }
for b in bin/gsas-atomicd bin/oshrun bin/gsas-info "lib/libshmem.so.$VERSION"; do
    base="$(basename "$b")"
    check "$b carries no DWARF and links to $base.debug" \
        bash -c "! aarch64-linux-gnu-readelf -S '$PREFIX/$b' | grep -q '\.debug_info' &&
            aarch64-linux-gnu-readelf --string-dump=.gnu_debuglink '$PREFIX/$b' | grep -q ' $base\.debug\$'"
done
check "lib/libshmem.a carries no DWARF" \
    bash -c "! aarch64-linux-gnu-readelf -S '$PREFIX/lib/libshmem.a' | grep -q '\.debug_info'"
tar -C "$PREFIX" --strip-components=1 -xzf "$DBG_TARBALL"
check "the -dbg tarball's lib/.debug/libshmem.a has the DWARF" \
    bash -c "aarch64-linux-gnu-readelf -S '$PREFIX/lib/.debug/libshmem.a' | grep -q '\.debug_info'"
for b in bin/gsas-atomicd bin/oshrun bin/gsas-info "lib/libshmem.so.$VERSION"; do
    dbg="$(dirname "$b")/.debug/$(basename "$b").debug"
    check "$dbg holds the DWARF of $b (same build id)" \
        bash -c "$(declare -f build_id); id=\$(build_id '$PREFIX/$b') && [ -n \"\$id\" ] &&
            [ \"\$(build_id '$PREFIX/$dbg')\" = \"\$id\" ] &&
            aarch64-linux-gnu-readelf -S '$PREFIX/$dbg' | grep -q '\.debug_info'"
done
if command -v gdb-multiarch >/dev/null 2>&1; then
    check "gdb-multiarch finds the source line of shmem_barrier_all through the .debug file" \
        bash -c "gdb-multiarch -batch -ex 'info line shmem_barrier_all' '$PREFIX/lib/libshmem.so.$VERSION' 2>&1 |
            grep -q 'capi/mod.rs'"
else
    echo "SKIPPED: bundle-test: gdb-multiarch not installed, the source-line check through the .debug file did not run"
fi
check "cluster.toml is configs/qfdb.toml" cmp "$ROOT/configs/qfdb.toml" "$PREFIX/etc/gsas/cluster.toml"
check "unit starts the bundled daemon with the bundled config" \
    grep -q "^ExecStart=$PREFIX/bin/gsas-atomicd --config $PREFIX/etc/gsas/cluster.toml --node %i" \
    "$PREFIX/systemd/gsas-atomicd@.service"
check "README names the prefix and has no placeholder" \
    bash -c "grep -q '$PREFIX' '$PREFIX/README.md' && ! grep -q '@[A-Z_]*@' '$PREFIX/README.md'"

is_aarch64() { # ELF magic, class 64-bit, e_machine EM_AARCH64 (183)
    local hdr
    hdr="$(od -An -tx1 -N20 "$1" | tr -d ' \n')"
    [ "${hdr:0:8}" = 7f454c46 ] && [ "${hdr:8:2}" = 02 ] && [ "${hdr:36:4}" = b700 ]
}
for b in bin/gsas-atomicd bin/oshrun bin/gshrun "lib/libshmem.so.$VERSION"; do
    check "$b: ELF header says 64-bit aarch64" is_aarch64 "$PREFIX/$b"
    if command -v file >/dev/null 2>&1; then
        check "$b: file says ARM aarch64" bash -c "file -L '$PREFIX/$b' | grep -q 'ELF 64-bit LSB.*ARM aarch64'"
    fi
done
check "libshmem.a holds aarch64 objects" \
    bash -c "aarch64-linux-gnu-objdump -f '$PREFIX/lib/libshmem.a' 2>/dev/null | grep -m1 -q 'architecture: aarch64'"

export QEMU_LD_PREFIX="${QEMU_LD_PREFIX:-/}"
check "oshrun --version under qemu prints $VERSION" \
    bash -c "qemu-aarch64 -L / '$PREFIX/bin/oshrun' --version | grep -q '$VERSION'"
check "gsas-atomicd --version under qemu prints $VERSION" \
    bash -c "qemu-aarch64 -L / '$PREFIX/bin/gsas-atomicd' --version | grep -q '$VERSION'"
check "gsas-info --parsable under qemu: OpenSHMEM 1.6, built for aarch64, this prefix" \
    bash -c "out=\$(qemu-aarch64 -L / '$PREFIX/bin/gsas-info' --parsable) &&
        grep -qx 'openshmem:version:1.6' <<<\"\$out\" &&
        grep -qx 'build:target:aarch64-unknown-linux-gnu' <<<\"\$out\" &&
        grep -qx 'install:prefix:$PREFIX' <<<\"\$out\""

cat >"$WORK/hello.c" <<'EOF'
#include <shmem.h>
#include <stdio.h>
int main(void) {
    shmem_init();
    printf("PE %d of %d\n", shmem_my_pe(), shmem_n_pes());
    shmem_finalize();
    return 0;
}
EOF
check "oshcc builds a program against the bundle (shared library)" \
    "$PREFIX/bin/oshcc" "$WORK/hello.c" -o "$WORK/hello"
check "the program is aarch64 and links the bundled libshmem.so" \
    bash -c "$(declare -f is_aarch64); is_aarch64 '$WORK/hello' &&
             aarch64-linux-gnu-readelf -d '$WORK/hello' | grep -q 'NEEDED.*libshmem.so'"
check "oshcc -static-shmem builds a program against libshmem.a" \
    "$PREFIX/bin/oshcc" -static-shmem "$WORK/hello.c" -o "$WORK/hello-static"
check "shmemcc (Open MPI's name) builds the same program" \
    bash -c "$(declare -f is_aarch64); '$PREFIX/bin/shmemcc' '$WORK/hello.c' -o '$WORK/hello-shmemcc' &&
             is_aarch64 '$WORK/hello-shmemcc'"
check "the static-shmem program needs no libshmem.so" \
    bash -c "! aarch64-linux-gnu-readelf -d '$WORK/hello-static' | grep -q 'NEEDED.*libshmem'"

echo "== $PASSES passed, $FAILS failed (board bundle)"
[ "$FAILS" -eq 0 ]

#!/usr/bin/env bash
# Build the QFDB board bundle: one tarball with everything a board needs.
#
#   cross/bundle.sh [--out FILE.tar.gz] [--prefix /opt/gsas] [--debug] [--quiet]
#
# Builds gsas and the shmem library for aarch64-unknown-linux-gnu through
# scripts/install --target aarch64-unknown-linux-gnu (which uses cross/aarch64.sh, hence the
# same toolchain choice and target directory: target/debian-rustc with Debian's rustc), then
# packs, under a top directory gsas-qfdb-VERSION/:
#
#   bin/{gsas-atomicd,oshrun,gsas-info,oshcc,oshc++}  aarch64 binaries and compiler wrappers
#                                                     (gshrun and the other names: links)
#   bin/{oshcxx,shmemcc,shmemc++,shmemcxx,shmemrun}   links to them under the names of other
#                                                     implementations (as scripts/install)
#   lib/libshmem.so*, lib/libshmem.a, lib/pkgconfig/  the shared and static library
#   include/                                          shmem.h, shmemx.h, pshmem.h, mpp/
#   etc/gsas/cluster.toml                             configs/qfdb.toml (one QFDB, 4 nodes)
#   systemd/gsas-atomicd@.service                     the unit, ExecStart pointed at PREFIX
#   README.md                                         copying, starting, running a job
#   MANIFEST                                          every file with its sha256 (the
#                                                     links are not files: tar keeps them)
#
# The binaries and libshmem.so come without their debug information (scripts/install strips
# it into .debug/NAME.debug files); those go into a second tarball, FILE-dbg.tar.gz
# (gsas-qfdb-VERSION-aarch64-dbg.tar.gz), under the same top directory: unpacked over the
# installation it puts bin/.debug/ and lib/.debug/ beside the binaries, where gdb, perf and
# Rust's backtraces find them (each binary's .gnu_debuglink names its file).
#
# PREFIX (default /opt/gsas) is where the bundle is meant to be unpacked on the boards: the
# compiler wrappers and the pkg-config file carry it (they name the headers and libraries),
# and the systemd unit starts PREFIX/bin/gsas-atomicd.
#
# --debug packs the dev profile (cheap in CI: it reuses the aarch64 test build of
# scripts/test-all); the default is the release profile.  Output: FILE (default
# target/bundle/gsas-qfdb-VERSION-aarch64.tar.gz).  Exit status 0 on success, 2 for bad
# arguments, 1 for a failed step.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET=aarch64-unknown-linux-gnu

die() { echo "bundle: $*" >&2; exit 1; }
usage() {
    echo "bundle: $*" >&2
    echo "usage: cross/bundle.sh [--out FILE.tar.gz] [--prefix DIR] [--debug] [--quiet]" >&2
    exit 2
}

OUT=""
PREFIX=/opt/gsas
PROFILE_ARG=()
QUIET=0
while [ $# -gt 0 ]; do
    case "$1" in
    --out) [ $# -ge 2 ] || usage "--out needs a file name"; OUT="$2"; shift 2 ;;
    --out=*) OUT="${1#--out=}"; shift ;;
    --prefix) [ $# -ge 2 ] || usage "--prefix needs a directory"; PREFIX="$2"; shift 2 ;;
    --prefix=*) PREFIX="${1#--prefix=}"; shift ;;
    --debug) PROFILE_ARG=(--debug); shift ;;
    --quiet) QUIET=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
    esac
done
case "$PREFIX" in
/*) ;;
*) usage "--prefix must be an absolute path on the board, not '$PREFIX'" ;;
esac
case "$PREFIX" in
*[[:space:]\|\&\\]*) usage "--prefix '$PREFIX' contains white space or one of | & \\" ;;
esac
say() { [ "$QUIET" = 1 ] || echo "$@"; }

VERSION="$(awk '/^\[workspace.package\]/ {p = 1; next} /^\[/ {p = 0}
    p && $1 == "version" {gsub(/"/, "", $3); print $3}' "$ROOT/Cargo.toml")"
[ -n "$VERSION" ] || die "cannot read the workspace version from Cargo.toml"
NAME="gsas-qfdb-$VERSION"
OUT="${OUT:-$ROOT/target/bundle/$NAME-aarch64.tar.gz}"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
mkdir -p "$(dirname "$OUT")" || die "cannot create the directory of $OUT"

for f in configs/qfdb.toml gsas-launch/dist/gsas-atomicd@.service cross/bundle-README.md; do
    [ -f "$ROOT/$f" ] || die "$ROOT/$f is missing"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gsas-bundle.XXXXXX")" || die "cannot create a scratch directory"
trap 'rm -rf "$WORK"' EXIT
TOP="$WORK/$NAME"

# --- build and install into the bundle tree -------------------------------------------------
QUIET_ARG=()
[ "$QUIET" = 1 ] && QUIET_ARG=(--quiet)
say "bundle: building for $TARGET (scripts/install ${PROFILE_ARG[*]:-})"
"$ROOT/scripts/install" --prefix "$TOP" --target "$TARGET" "${PROFILE_ARG[@]}" "${QUIET_ARG[@]}" ||
    die "scripts/install --target $TARGET failed"

# The wrappers and the pkg-config file name the install prefix: make it the board's.
for f in bin/oshcc bin/oshc++ lib/pkgconfig/gsas-shmem.pc; do
    [ -f "$TOP/$f" ] || die "scripts/install did not produce $f"
    sed -i "s|$TOP|$PREFIX|g" "$TOP/$f"
    if grep -q "$WORK" "$TOP/$f"; then
        die "$f still names the build directory"
    fi
done

# --- configuration, unit, README --------------------------------------------------------------
install -D -m 0644 "$ROOT/configs/qfdb.toml" "$TOP/etc/gsas/cluster.toml"
install -d "$TOP/systemd"
sed -e "s|/usr/local/bin/gsas-atomicd|$PREFIX/bin/gsas-atomicd|g" \
    -e "s|/etc/gsas/cluster.toml|$PREFIX/etc/gsas/cluster.toml|g" \
    "$ROOT/gsas-launch/dist/gsas-atomicd@.service" >"$TOP/systemd/gsas-atomicd@.service"
grep -q "ExecStart=$PREFIX/bin/gsas-atomicd --config $PREFIX/etc/gsas/cluster.toml" \
    "$TOP/systemd/gsas-atomicd@.service" || die "the unit's ExecStart was not rewritten"
sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$VERSION|g" -e "s|@NAME@|$NAME|g" \
    "$ROOT/cross/bundle-README.md" >"$TOP/README.md"
if grep -q '@[A-Z_]*@' "$TOP/README.md"; then
    die "unreplaced placeholder in README.md"
fi

# --- check the binaries really are aarch64 -----------------------------------------------------
for b in bin/gsas-atomicd bin/oshrun bin/gshrun lib/libshmem.so.$VERSION; do
    # ELF header: class 2 (64-bit) at byte 4, e_machine 183 (0xB7, EM_AARCH64) at bytes 18-19.
    hdr="$(od -An -tx1 -N20 "$TOP/$b" | tr -d ' \n')"
    [ "${hdr:0:8}" = 7f454c46 ] && [ "${hdr:8:2}" = 02 ] && [ "${hdr:36:4}" = b700 ] ||
        die "$b is not a 64-bit aarch64 ELF file (header $hdr)"
done

# --- the debug information apart ----------------------------------------------------------------
DBG_OUT="${OUT%.tar.gz}-dbg.tar.gz"
[ "$DBG_OUT" != "$OUT" ] || DBG_OUT="$OUT-dbg.tar.gz"
mkdir -p "$WORK/dbg/$NAME/bin" "$WORK/dbg/$NAME/lib"
for d in bin/.debug lib/.debug; do
    [ -d "$TOP/$d" ] || die "scripts/install did not produce $d"
    mv "$TOP/$d" "$WORK/dbg/$NAME/$d"
done

# --- manifest and tarball ----------------------------------------------------------------------
(cd "$TOP" && find . -type f ! -name MANIFEST | LC_ALL=C sort | sed 's|^\./||' |
    xargs sha256sum >MANIFEST) || die "cannot write the manifest"
tar -C "$WORK" --owner=0 --group=0 --numeric-owner -czf "$OUT.tmp" "$NAME" || die "tar failed"
tar -C "$WORK/dbg" --owner=0 --group=0 --numeric-owner -czf "$DBG_OUT.tmp" "$NAME" ||
    die "tar of the debug information failed"
mv -f "$OUT.tmp" "$OUT"
mv -f "$DBG_OUT.tmp" "$DBG_OUT"
say "bundle: $OUT ($(du -h "$OUT" | cut -f1)); on each node: mkdir -p $PREFIX && tar -C $PREFIX --strip-components=1 -xzf $(basename "$OUT")"
say "bundle: $DBG_OUT ($(du -h "$DBG_OUT" | cut -f1)), the debug information: unpack it the same way where you debug"

#!/usr/bin/env bash
# check.sh - tests of the OpenSHMEM 1.5 C headers in shmem/include (shmem.h, shmemx.h,
# pshmem.h, mpp/shmem.h, mpp/shmemx.h).  Needs only compilers: the library is not involved;
# a generated stub library stands in for it where a test has to link and run.
#
# For the host compilers (gcc/g++) and the board compilers (aarch64-linux-gnu-gcc/g++, run
# under qemu-aarch64 -L /) it checks:
#   1. prototypes: every symbol of docs/spec/openshmem-1.5-c-symbols.tsv and its pshmem_ twin
#      is declared with its 1.5 signature (redeclared from signatures.tsv and its address
#      taken, as C11 and as C++11), and the headers declare no other routine;
#   2. generics: exactly the generic names of docs/spec exist in C11 (the 67 of 1.5 and those
#      of gsas-beyond-1.5-c11-generics.txt; none in C99 or C++); every
#      generic called with every type of its table, with and without a leading context,
#      reaches the right routine and has the right result type; calls with an unsupported
#      type fail to compile, naming the default association;
#   3. C++11/14/17: typed calls, a complex reduction, shmem_global_exit in a [[noreturn]]
#      function, <mpp/shmem.h> and <pshmem.h>;
#   4. C99/C11/C17/C2x: the constants (compile-time assertions) and the handles;
#   5. header hygiene: every header alone and twice, with strict extra warnings;
#   6. the cache routines that 1.5 removed (declared by gsas as deprecated no-ops): calls
#      compile in C and C++, each with a deprecation warning.
# The symbols are those of docs/spec/openshmem-1.5-c-symbols.tsv and of
# docs/spec/gsas-beyond-1.5-c-symbols.tsv (shmem_team_ptr, ibput and ibget of 1.6, the cache
# routines); the generic names those of docs/spec/openshmem-1.5-c11-generics.txt and
# gsas-beyond-1.5-c11-generics.txt.
# Plus, once: the gsas version in shmemx.h equals the Cargo workspace version.
#
# Environment: CHECK_AARCH64=0 skips the board compilers (they are required by default).
# Exit status: 0 when every check passed, 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../../.." && pwd)
inc="$root/shmem/include"
work=$(mktemp -d "${TMPDIR:-/tmp}/gsas-headers.XXXXXX")
trap 'rm -rf "$work"' EXIT

NO_MATCH=gsas_shmem_generic_called_with_unsupported_argument_type
CWARN=(-Wall -Wextra -pedantic -Werror)
CSTRICT=(-Wundef -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wredundant-decls
    -Wconversion -Wsign-conversion -Wcast-qual -Wwrite-strings)
CXXSTRICT=(-Wundef -Wshadow -Wredundant-decls -Wconversion -Wsign-conversion -Wcast-qual
    -Wold-style-cast -Wzero-as-null-pointer-constant -Wuseless-cast)

passed=0
failed=0
ok() {
    passed=$((passed + 1))
    echo "  ok    $*"
}
bad() {
    failed=$((failed + 1))
    echo "  FAIL  $*"
}
# quiet LOG CMD...: run CMD, keep its output in LOG, show the output on failure.
quiet() {
    local log=$1
    shift
    if "$@" >"$log" 2>&1; then
        return 0
    fi
    sed 's/^/        | /' "$log" | head -n 40
    return 1
}

echo "== generating test sources from docs/spec"
python3 "$here/gen_tests.py" "$root" "$work/gen"
gen="$work/gen"
nsym=$(wc -l <"$gen/symbols.txt")
ngen=$(wc -l <"$gen/generics.txt")

# Runs every per-toolchain check.  $1 label, $2 C compiler, $3 C++ compiler, $4.. runner.
check_toolchain() {
    local label=$1 cc=$2 cxx=$3
    shift 3
    local runner=("$@")
    local out="$work/$label"
    mkdir -p "$out"
    local I=(-I"$inc" -I"$here")
    echo "== $label: $cc / $cxx"

    # 1. Prototypes.
    if quiet "$out/decls.log" "$cc" -std=c11 "${CWARN[@]}" "${I[@]}" -c "$gen/decls.c" \
        -o "$out/decls.o"; then
        ok "C11: $nsym prototypes (symbols + pshmem_ twins) match their 1.5 signatures, 0 missing"
    else
        bad "C11: prototypes missing or different"
    fi
    if quiet "$out/decls_cxx.log" "$cxx" -std=c++11 "${CWARN[@]}" "${I[@]}" -x c++ \
        -c "$gen/decls.c" -o "$out/decls_cxx.o"; then
        ok "C++11: the same $nsym prototypes"
    else
        bad "C++11: prototypes missing or different"
    fi
    printf '#include <shmem.h>\n#include <shmemx.h>\n#include <pshmem.h>\n' >"$out/all.c"
    if quiet "$out/aux.log" "$cc" -std=c99 "${I[@]}" -c "$out/all.c" -o "$out/all.o" \
        -aux-info "$out/aux.txt"; then
        sed -n "s|^/\* $inc/[^ ]* \*/ extern .*[ *]\([A-Za-z_][A-Za-z0-9_]*\) (.*|\1|p" \
            "$out/aux.txt" | sort >"$out/declared.txt"
        sort "$gen/symbols.txt" >"$out/expected.txt"
        local extra missing
        extra=$(comm -23 "$out/declared.txt" "$out/expected.txt" | head -n 5 | tr '\n' ' ')
        missing=$(comm -13 "$out/declared.txt" "$out/expected.txt" | head -n 5 | tr '\n' ' ')
        if [ -z "$extra" ] && [ -z "$missing" ]; then
            ok "the headers declare exactly the $(wc -l <"$out/declared.txt") routines of the TSV and their twins"
        else
            bad "declared set differs: extra [$extra] missing [$missing]"
        fi
    else
        bad "could not list the declared routines"
    fi

    # 2. Generic names, dispatch, result types, rejected types.
    printf '#include <shmem.h>\n' >"$out/one.c"
    list_generics() {
        "$@" -dM -E "${I[@]}" "$out/one.c" | sed -n 's/^#define \(shmem_[a-z0-9_]*\)(.*/\1/p' |
            sort
    }
    if list_generics "$cc" -std=c11 >"$out/gen_c11.txt" &&
        diff <(sort "$gen/generics.txt") "$out/gen_c11.txt" >"$out/gen_diff.txt"; then
        ok "C11: exactly the $ngen generic names are defined"
    else
        bad "C11: generic names differ from the spec list"
        sed 's/^/        | /' "$out/gen_diff.txt" | head -n 20
    fi
    local n99 nxx
    n99=$(list_generics "$cc" -std=c99 | wc -l)
    nxx=$(list_generics "$cxx" -std=c++17 -x c++ | wc -l)
    if [ "$n99" -eq 0 ] && [ "$nxx" -eq 0 ]; then
        ok "C99 and C++17: no generic macros"
    else
        bad "generic macros leak into C99 ($n99) or C++ ($nxx)"
    fi
    if quiet "$out/stubs.log" "$cc" -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter \
        "${I[@]}" -c "$gen/stubs.c" -o "$out/stubs.o"; then
        ok "stub library: a definition of every routine compiles against the prototypes"
    else
        bad "stub library does not compile"
    fi
    if quiet "$out/generics_c17.log" "$cc" -std=c17 "${CWARN[@]}" "${I[@]}" -c \
        "$gen/generics.c" -o "$out/generics_c17.o" &&
        quiet "$out/generics.log" "$cc" -std=c11 "${CWARN[@]}" "${I[@]}" \
            "$gen/generics.c" "$out/stubs.o" -o "$out/generics"; then
        ok "C11/C17: every generic with every type of its table compiles (result types asserted)"
        if quiet "$out/generics.run" "${runner[@]}" "$out/generics"; then
            ok "dispatch: $(tail -n 1 "$out/generics.run")"
        else
            bad "dispatch: wrong routines selected"
        fi
    else
        bad "C11: generic calls do not compile"
    fi
    local neg name nneg=0 nneg_ok=0
    for neg in "$gen"/neg_*.c; do
        name=$(basename "$neg" .c)
        nneg=$((nneg + 1))
        if "$cc" -std=c11 -Wall -Wextra -Werror "${I[@]}" -c "$neg" -o "$out/$name.o" \
            >"$out/$name.log" 2>&1; then
            bad "$name: an unsupported type compiled"
        elif grep -q "$NO_MATCH" "$out/$name.log"; then
            nneg_ok=$((nneg_ok + 1))
        else
            bad "$name: rejected, but not by the default association"
            sed 's/^/        | /' "$out/$name.log" | head -n 10
        fi
    done
    if [ "$nneg_ok" -eq "$nneg" ]; then
        ok "$nneg calls with unsupported types are compile errors at the call ($NO_MATCH)"
    fi

    # 3. C++.
    local std
    for std in c++11 c++14 c++17; do
        if quiet "$out/cxx_$std.log" "$cxx" -std=$std "${CWARN[@]}" "${CXXSTRICT[@]}" "${I[@]}" \
            "$here/cxx_usage.cpp" "$out/stubs.o" -o "$out/cxx_$std"; then
            if quiet "$out/cxx_$std.run" "${runner[@]}" "$out/cxx_$std"; then
                ok "$std: typed calls, complex reductions, [[noreturn]] global_exit, mpp/ and pshmem.h: $(tail -n 1 "$out/cxx_$std.run")"
            else
                bad "$std: calls reached the wrong routines"
            fi
        else
            bad "$std: cxx_usage.cpp does not compile"
        fi
    done

    # 4. C dialects: constants and handles.
    for std in c99 c11 c17 c2x; do
        if quiet "$out/const_$std.log" "$cc" -std=$std "${CWARN[@]}" "${I[@]}" \
            "$here/constants.c" "$out/stubs.o" -o "$out/const_$std" &&
            quiet "$out/const_$std.run" "${runner[@]}" "$out/const_$std"; then
            ok "$std: constants and handles (static assertions, case labels, static initializers)"
        else
            bad "$std: constants.c"
        fi
    done

    # 5. Header hygiene: each header alone and twice, strict warnings, C and C++.
    local h hdr_ok=1
    for h in shmem.h shmemx.h pshmem.h mpp/shmem.h mpp/shmemx.h; do
        printf '#include <%s>\n#include <%s>\nint gsas_header_probe;\n' "$h" "$h" >"$out/h.c"
        for std in c99 c11 c17; do
            quiet "$out/h.log" "$cc" -std=$std "${CWARN[@]}" "${CSTRICT[@]}" "${I[@]}" -c \
                "$out/h.c" -o "$out/h.o" || {
                bad "$h as $std"
                hdr_ok=0
            }
        done
        for std in c++11 c++17; do
            quiet "$out/h.log" "$cxx" -std=$std "${CWARN[@]}" "${CXXSTRICT[@]}" "${I[@]}" \
                -x c++ -c "$out/h.c" -o "$out/h.o" || {
                bad "$h as $std"
                hdr_ok=0
            }
        done
    done
    if [ "$hdr_ok" -eq 1 ]; then
        ok "each header alone and twice: C99/C11/C17, C++11/C++17 with strict warnings"
    fi

    # 6. The cache routines 1.5 removed: calls compile, each with a deprecation warning.
    local fn ncache=0 cache_ok=1
    {
        printf '#include <shmem.h>
#include <pshmem.h>
static long x;
int main(void) {
'
        for fn in clear_cache_inv set_cache_inv udcflush; do
            printf '    shmem_%s();
    pshmem_%s();
' "$fn" "$fn"
        done
        for fn in clear_cache_line_inv set_cache_line_inv udcflush_line; do
            printf '    shmem_%s(&x);
    pshmem_%s(&x);
' "$fn" "$fn"
        done
        printf '    return 0;
}
'
    } >"$out/cache.c"
    for std in c99 c11 c++11 c++17; do
        local comp=$cc lang=c
        case $std in c++*) comp=$cxx lang=c++ ;; esac
        if ! quiet "$out/cache_$std.log" "$comp" -std=$std -Wall -Wextra -pedantic "${I[@]}"             -x $lang -c "$out/cache.c" -o "$out/cache.o"; then
            bad "$std: calls of the cache routines do not compile"
            cache_ok=0
            continue
        fi
        ncache=$(grep -c "deprecated.*removed in OpenSHMEM 1.5" "$out/cache_$std.log" || true)
        if [ "$ncache" -ne 12 ]; then
            bad "$std: $ncache deprecation warnings for 12 calls of the cache routines"
            sed 's/^/        | /' "$out/cache_$std.log" | head -n 20
            cache_ok=0
        fi
    done
    if [ "$cache_ok" -eq 1 ]; then
        ok "C99/C11, C++11/C++17: the 12 calls of the cache routines compile, each with a deprecation warning"
    fi
}

check_toolchain "$(gcc -dumpmachine)" gcc g++

if [ "${CHECK_AARCH64:-1}" = 0 ]; then
    echo "== aarch64: skipped (CHECK_AARCH64=0)"
else
    missing=""
    for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-aarch64; do
        command -v "$tool" >/dev/null || missing="$missing $tool"
    done
    if [ -n "$missing" ]; then
        echo "== aarch64"
        bad "missing:$missing (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user; or CHECK_AARCH64=0)"
    else
        check_toolchain aarch64-linux-gnu aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ \
            qemu-aarch64 -L /
    fi
fi

echo "== version"
cargo_version=$(awk '/^\[workspace.package\]/ {in_pkg = 1; next}
    /^\[/ {in_pkg = 0}
    in_pkg && $1 == "version" {gsub(/"/, "", $3); print $3}' "$root/Cargo.toml")
header_version=$(printf '#include <shmemx.h>\n' | gcc -I"$inc" -E -dM -x c - |
    awk '$2 == "GSAS_VERSION_MAJOR" {a = $3} $2 == "GSAS_VERSION_MINOR" {b = $3}
         $2 == "GSAS_VERSION_PATCH" {c = $3} END {print a "." b "." c}')
if [ -n "$cargo_version" ] && [ "$cargo_version" = "$header_version" ]; then
    ok "GSAS_VERSION_* in shmemx.h = workspace version $cargo_version"
else
    bad "GSAS_VERSION_* in shmemx.h is $header_version, the workspace version is '$cargo_version'"
fi

echo "== $passed passed, $failed failed"
[ "$failed" -eq 0 ]

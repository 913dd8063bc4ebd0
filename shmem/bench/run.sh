#!/usr/bin/env bash
# The OpenSHMEM benchmark of gsas: latency, bandwidth and instruction counts of the C
# library, one node and across two atomic services.  A benchmark, not a test: it asserts
# nothing about the figures; it prints them beside the targets.
#
#   shmem/bench/run.sh [--prefix DIR] [--no-install] [--quick] [--no-udp] [--no-callgrind]
#
#   --prefix DIR     where to install (release build) and take oshcc/oshrun from
#                    (default: target/shmem-bench/prefix)
#   --no-install     use an existing installation in the prefix
#   --quick          short runs (smoke test of the benchmark itself)
#   --no-udp         skip the two-service part
#   --no-callgrind   skip the instruction counts
#
# What it runs (programs in shmem/bench/, built with the installed oshcc -O2):
#   1. one node:   oshrun -n 2 shmem_lat --bind        (PE i pinned to CPU i)
#   2. callgrind:  oshrun -n 2 valgrind --tool=callgrind --callgrind-out-file=cg.%p \
#                      shmem_icount 100000
#                  then callgrind_annotate --inclusive=yes on PE 0's file: the inclusive Ir of
#                  shmem_long_p and shmem_putmem per call, and the loop-difference figure
#                  ((Ir(loop_X) - Ir(loop_empty) + Ir(empty_call)) / N; see shmem_icount.c),
#                  for the shared library and for -static-shmem.
#   3. two services on loopback: two installed gsas-atomicd from a generated cluster file,
#      shmem_lat started by mpiexec.hydra (-launcher fork) with rank 0 on node 0 and rank 1
#      on node 1 (GSAS_NODE, GSAS_SERVICE per rank), beside udp_pingpong (the raw UDP round
#      trip between two pinned, busy-polling processes).
# Needs: gcc, valgrind (for 2), mpich's mpiexec.hydra (for 3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PREFIX="$ROOT/target/shmem-bench/prefix"
INSTALL=1
QUICK=()
UDP=1
CALLGRIND=1
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "run.sh: --prefix needs a directory" >&2; exit 2; }; PREFIX="$2"; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --quick) QUICK=(--quick); shift ;;
    --no-udp) UDP=0; shift ;;
    --no-callgrind) CALLGRIND=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "run.sh: $*" >&2; exit 1; }
if [ "$INSTALL" = 1 ]; then
    "$ROOT/scripts/install" --prefix "$PREFIX" --quiet || die "scripts/install failed"
fi
[ -x "$PREFIX/bin/oshcc" ] || die "no installation in $PREFIX (run without --no-install)"
B="$(dirname "$PREFIX")/build"
mkdir -p "$B"
OSHCC="$PREFIX/bin/oshcc"
OSHRUN="$PREFIX/bin/oshrun"
"$OSHCC" -O2 -g "$ROOT/shmem/bench/shmem_lat.c" -o "$B/shmem_lat"
"$OSHCC" -O2 -g "$ROOT/shmem/bench/shmem_icount.c" -o "$B/shmem_icount"
"$OSHCC" -O2 -g -static-shmem "$ROOT/shmem/bench/shmem_icount.c" -o "$B/shmem_icount_static"
"${CC:-cc}" -O2 "$ROOT/shmem/bench/udp_pingpong.c" -o "$B/udp_pingpong"

result() { # result FILE NAME -> value
    awk -v n="$2" '$1 == "RESULT" && $2 == n {print $3}' "$1"
}

echo "== one node, 2 PEs pinned to CPUs 0 and 1 ($(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
"$OSHRUN" -n 2 --timeout 900 "$B/shmem_lat" --bind "${QUICK[@]}" | tee "$B/one-node.txt"

ICOUNT_P="" ICOUNT_PUT=""
if [ "$CALLGRIND" = 1 ]; then
    command -v valgrind >/dev/null 2>&1 || die "valgrind not found (apt-get install valgrind), or use --no-callgrind"
    N=100000
    [ ${#QUICK[@]} -gt 0 ] && N=10000
    for variant in shmem_icount shmem_icount_static; do
        rm -f "$B"/cg.*
        echo "== instructions per call ($variant): $OSHRUN -n 2 valgrind --tool=callgrind --callgrind-out-file=$B/cg.%p $B/$variant $N"
        "$OSHRUN" -n 2 --timeout 1800 valgrind --tool=callgrind --callgrind-out-file="$B/cg.%p" \
            "$B/$variant" "$N" >"$B/$variant.log" 2>&1 || {
            cat "$B/$variant.log"
            die "the callgrind run failed"
        }
        # PE 0's profile is the one that ran the loops.
        prof=""
        for f in "$B"/cg.*; do
            callgrind_annotate --inclusive=yes --threshold=100 "$f" >"$B/$variant.annotate.tmp" 2>/dev/null || true
            if grep -q ':loop_long_p ' "$B/$variant.annotate.tmp"; then
                prof="$f"
                mv "$B/$variant.annotate.tmp" "$B/$variant.annotate"
            fi
        done
        rm -f "$B/$variant.annotate.tmp"
        [ -n "$prof" ] || die "no callgrind profile has the loops of shmem_icount (see $B/$variant.log)"
        # Inclusive Ir of a function: the first number on its line (commas removed).
        ir() { awk -v f="$1" '{ for (i = 2; i <= NF; i++) if ($i ~ (":" f "$")) { v = $1; gsub(",", "", v); print v; exit } }' "$B/$variant.annotate"; }
        lp=$(ir loop_long_p); lm=$(ir loop_putmem_8); le=$(ir loop_empty); ec=$(ir empty_call)
        fp=$(ir shmem_long_p); fm=$(ir shmem_putmem)
        awk -v n="$N" -v lp="$lp" -v lm="$lm" -v le="$le" -v ec="${ec:-0}" -v fp="${fp:-0}" -v fm="${fm:-0}" -v v="$variant" 'BEGIN {
            printf "%-20s shmem_long_p: %6.2f instr/call (inclusive), %6.2f (loop difference)\n", v, fp / n, (lp - le + ec) / n
            printf "%-20s shmem_putmem 8 B: %6.2f instr/call (inclusive), %6.2f (loop difference)\n", v, fm / n, (lm - le + ec) / n
        }' | tee -a "$B/icount.txt"
        if [ "$variant" = shmem_icount ]; then
            ICOUNT_P=$(awk -v n="$N" -v fp="${fp:-0}" 'BEGIN { printf "%.1f", fp / n }')
            ICOUNT_PUT=$(awk -v n="$N" -v fm="${fm:-0}" 'BEGIN { printf "%.1f", fm / n }')
        fi
    done
fi

if [ "$UDP" = 1 ]; then
    HYDRA="$(command -v mpiexec.hydra || true)"
    [ -n "$HYDRA" ] || die "mpiexec.hydra not found (apt-get install mpich), or use --no-udp"
    D="$(mktemp -d "${TMPDIR:-/tmp}/gsas-bench.XXXXXX")"
    PIDS=()
    cleanup() {
        for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
        for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
        rm -rf "$D"
    }
    trap cleanup EXIT
    port() { python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    {
        printf '[cluster]\nname = "bench-loopback"\n\n[defaults]\nservice_timeout_ms = 60000\n'
        for i in 0 1; do
            printf '\n[[nodes]]\nid = %d\nhost = "127.0.0.1"\nudp_port = %d\ncontrol_socket = "%s"\ntransport = "udp"\n' \
                "$i" "$(port)" "$D/node$i.sock"
        done
    } >"$D/cluster.toml"
    for i in 0 1; do
        "$PREFIX/bin/gsas-atomicd" --config "$D/cluster.toml" --node "$i" --log-level warn &
        PIDS+=($!)
    done
    for i in 0 1; do
        for _ in $(seq 1 500); do [ -S "$D/node$i.sock" ] && break; sleep 0.02; done
        [ -S "$D/node$i.sock" ] || die "gsas-atomicd for node $i did not create its socket"
    done
    echo "== two atomic services on loopback (UDP), PE 0 on node 0, PE 1 on node 1"
    env -u PMI_FD -u PMI_RANK -u PMI_SIZE timeout 1800 "$HYDRA" -launcher fork \
        -n 1 -env GSAS_NODE 0 -env GSAS_SERVICE "$D/node0.sock" "$B/shmem_lat" --bind "${QUICK[@]}" : \
        -n 1 -env GSAS_NODE 1 -env GSAS_SERVICE "$D/node1.sock" "$B/shmem_lat" --bind "${QUICK[@]}" \
        | tee "$B/two-nodes.txt"
    echo "== raw UDP round trip"
    "$B/udp_pingpong" "${QUICK[@]}" | tee "$B/udp.txt"
fi

echo
echo "== summary (targets: best peer on this machine class)"
printf '%-34s %14s %14s %s\n' "figure" "one node" "two services" "target"
line() { # line LABEL NAME TARGET CMP(le|ge) UNIT
    local one two
    one=$(result "$B/one-node.txt" "$2")
    two=$([ -f "$B/two-nodes.txt" ] && result "$B/two-nodes.txt" "$2" || true)
    local verdict
    verdict=$(awk -v v="$one" -v t="$3" -v c="$4" 'BEGIN { if (v == "") print "?"; else if ((c == "le" && v + 0 <= t + 0) || (c == "ge" && v + 0 >= t + 0)) print "met"; else print "MISSED" }')
    printf '%-34s %14s %14s %s %s %s (%s)\n' "$1" "${one:-?} $5" "${two:--}" "$([ "$4" = le ] && echo '<=' || echo '>=')" "$3" "$5" "$verdict"
}
line "put 8 B (us)" put_8B 0.04 le us
line "put 8 B + quiet (us)" putq_8B 0.04 le us
line "get 8 B (us)" get_8B 0.03 le us
line "put 1 KiB (us)" put_1KiB 1e9 le us
line "get 1 KiB (us)" get_1KiB 1e9 le us
line "put 64 KiB + quiet (us)" putq_64KiB 1e9 le us
line "get 64 KiB (us)" get_64KiB 1e9 le us
line "shmem_long_p (us)" long_p 1e9 le us
line "fetch-add 64-bit (us)" fadd64 0.03 le us
line "compare-swap 64-bit (us)" cswap64 1e9 le us
line "put bw 32 x 1 MiB, hot (GB/s)" bw_1MiB 45 ge GB/s
line "  the same per CPU second (GB/s)" bw_1MiB_cpu 45 ge GB/s
line "put bw 32 x 1 MiB, 32 MiB (GB/s)" bw_32MiB 1e-9 ge GB/s
SHARE=$(result "$B/one-node.txt" cpu_share_bw_1MiB)
if [ -n "$SHARE" ]; then
    printf '%-34s %14s %14s %s\n' "PE 0's CPU share during bw 1 MiB" "$SHARE" "-" \
        "$(awk -v v="$SHARE" 'BEGIN { print (v < 0.9 ? "(below 0.9: another process shared the core; the bandwidths are not the library'"'"'s)" : "(the core was PE 0'"'"'s)") }')"
fi
if [ -n "$ICOUNT_P" ]; then
    printf '%-34s %14s %14s %s\n' "shmem_long_p (instructions)" "$ICOUNT_P" "-" "<= 16 ($(awk -v v="$ICOUNT_P" 'BEGIN { print (v <= 16 ? "met" : "MISSED") }'))"
    printf '%-34s %14s %14s %s\n' "shmem_putmem 8 B (instructions)" "$ICOUNT_PUT" "-" "-"
fi
[ -f "$B/udp.txt" ] && printf '%-34s %14s %14s %s\n' "raw UDP round trip 8 B (us)" "-" "$(result "$B/udp.txt" udp_rtt_8B)" "(physical limit of UDP here)"
echo "(1e9 and 1e-9: no target; figures are medians of batches; details in $B)"

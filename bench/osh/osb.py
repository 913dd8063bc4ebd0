"""The runner behind scripts/bench: builds the OpenSHMEM benchmark programs (osb_*.c) with
each target's oshcc, runs them on each target, and writes the results folder.

What it is: the orchestration (targets, plan, processes, progress, Ctrl-C, CSV, facts).
What it is not: the measuring (the C programs do that) or the drawing (report.py).
Single-threaded; every child process runs in its own session so that it can be ended with
everything it started.
"""

import csv
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import report

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).resolve().parent
PROGRAMS = ("p2p", "coll", "gups")
CSV_FIELDS = ("target", "benchmark", "family", "size_bytes", "pes", "unit", "statistic", "value")
STATS = ("median", "min", "max")

# What each program reports, so that a missing row is noticed (report.check).
P2P_SIZED = [
    ("put_quiet", "put_lat"), ("put_fence", "put_lat"), ("put_barrier", "put_lat"),
    ("put_nbi_quiet", "put_lat"), ("get", "get_lat"), ("get_nbi_quiet", "get_lat"),
    ("put", "put_bw"), ("put_nbi", "put_bw"), ("get_nbi", "get_bw"),
    ("put_nbi_rate", "msgrate"), ("put_signal", "signal"),
]
P2P_AMO = ["fetch_add", "add", "compare_swap", "fetch"]
P2P_FLAG = ["flag_quiet", "flag_p_wait", "flag_p_test"]
COLL_SIZED = ["broadcast", "collect", "fcollect", "alltoall", "reduce_sum"]
# The team forms (OpenSHMEM 1.5; a 1.4 implementation reports them skipped).
COLL_TEAM_SIZED = ["team_" + b for b in COLL_SIZED]
COLL_SYNC = ["barrier", "sync", "team_sync"]

OMPI_ENV = {
    # docs: /work/shared/docs/peers.md (why each is needed with Debian 12's Open MPI 4.1.4)
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_osc": "ucx", "OMPI_MCA_oob_tcp_if_include": "lo",
    "OMPI_MCA_btl_tcp_if_include": "lo", "UCX_NET_DEVICES": "lo",
}


def make_plan(quick):
    """Sizes, PE counts and rounds of a run."""
    if quick:
        return {"sizes": [1, 4096, 65536], "coll_sizes": [8],
                "pes": [2, 4], "rounds": 1, "args": ["--quick"]}
    return {"sizes": [1 << k for k in range(23)], "coll_sizes": [8, 512, 4096],
            "pes": [2, 4, 8], "rounds": 3, "args": ["--batches", "11"]}


def steps(plan, kind="gsas"):
    """(program, PEs, arguments) of one target (of `kind`), in order."""
    if kind == "raw":
        return [("udp", 2, plan["args"])]
    progs = plan.get("programs", PROGRAMS)
    out = []
    if "p2p" in progs:
        out.append(("p2p", 2, ["--sizes", ",".join(map(str, plan["sizes"]))]))
    for n in plan["pes"] if "coll" in progs else []:
        out.append(("coll", n, ["--sizes", ",".join(map(str, plan["coll_sizes"]))]))
    for n in plan["pes"] if "gups" in progs else []:
        out.append(("gups", n, []))
    return [(p, n, plan["args"] + a) for p, n, a in out]


def expected_rows(plan, skipped=(), kind="gsas"):
    """Every (benchmark, size, PEs) the programs of a `kind` target report for `plan`, minus
    `skipped`."""
    if kind == "raw":
        return {("udp_rtt", 8, 2), ("udp_half_rtt", 8, 2)}
    progs = plan.get("programs", PROGRAMS)
    rows = set()
    if "p2p" in progs:
        for size in plan["sizes"]:
            rows.update((b, size, 2) for b, _ in P2P_SIZED)
        rows.update((b, 8, 2) for b in P2P_AMO + P2P_FLAG)
    table = (512 << 10) if "--quick" in plan["args"] else (4 << 20)
    for n in plan["pes"]:
        if "coll" in progs:
            rows.update((b, 0, n) for b in COLL_SYNC)
            rows.update((b, s, n) for b in COLL_SIZED + COLL_TEAM_SIZED
                        for s in plan["coll_sizes"])
        if "gups" in progs:
            rows.add(("gups", table, n))
    return {r for r in rows if r[0] not in skipped}


def parse_line(line):
    """One output line of a program -> ("row", dict) | ("skip", (bench, reason)) | None."""
    f = line.rstrip("\n").split("\t")
    if f[0] == "OSB" and len(f) == 9:
        return "row", {"benchmark": f[1], "family": f[2], "size_bytes": int(f[3]),
                       "pes": int(f[4]), "unit": f[5],
                       "median": float(f[6]), "min": float(f[7]), "max": float(f[8])}
    if f[0] == "OSB_SKIP" and len(f) == 3:
        return "skip", (f[1], f[2])
    return None


def aggregate(raw):
    """Rows of every round -> CSV rows: median of the round medians, min of the minima, max
    of the maxima, per (target, benchmark, size, PEs)."""
    groups = {}
    for r in raw:
        groups.setdefault((r["target"], r["benchmark"], r["size_bytes"], r["pes"]), []).append(r)
    out = []
    for (t, b, s, n), rs in groups.items():
        meds = sorted(r["median"] for r in rs)
        k = len(meds)
        med = meds[k // 2] if k % 2 else 0.5 * (meds[k // 2 - 1] + meds[k // 2])
        vals = {"median": med, "min": min(r["min"] for r in rs), "max": max(r["max"] for r in rs)}
        for st in STATS:
            out.append({"target": t, "benchmark": b, "family": rs[0]["family"], "size_bytes": s,
                        "pes": n, "unit": rs[0]["unit"], "statistic": st, "value": vals[st]})
    return out


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in CSV_FIELDS})


# ---------------------------------------------------------------- processes and cleanup

class Children:
    """Every process this run started (each in its own session), ended on the way out."""

    def __init__(self, log):
        self.procs = []
        self.log = log  # where the children's stderr goes unless told otherwise

    def start(self, argv, **kw):
        kw.setdefault("stderr", self.log)
        p = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def end(self, p, grace=3.0):
        """SIGTERM to p's process group, SIGKILL after `grace` seconds."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever else is left in its group (PEs of a launcher)
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if p.poll() is None:
            p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def end_all(self):
        for p in reversed(list(self.procs)):
            self.end(p)


def shm_names():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def shm_in_use():
    """Names under /dev/shm that some process maps or holds open."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        used.add(line[i + 9:].split()[0])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
                if t.startswith("/dev/shm/"):
                    used.add(t[9:].split()[0])
        except OSError:
            continue
    return used


# /dev/shm names the OpenSHMEM implementations we launch create (Open MPI's vader and sm
# BTLs, UCX's posix transport); only those are removed, other new objects are reported.
SHM_PREFIXES = ("vader_segment.", "sm_segment.", "ucx_shm_posix_")


def remove_orphan_shm(before):
    """Removes the /dev/shm objects of SHM_PREFIXES that appeared since `before` and that no
    process uses any more (what a killed job leaves); returns (removed, other new names)."""
    new = shm_names() - before
    if not new:
        return [], []
    unused = sorted(new - shm_in_use())
    gone = [n for n in unused if n.startswith(SHM_PREFIXES)]
    for n in gone:
        try:
            os.unlink(f"/dev/shm/{n}")
        except OSError:
            pass
    return gone, [n for n in unused if n not in gone]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- targets

class Target:
    """One implementation over one transport: how to compile and how to launch."""

    def __init__(self, name, oshcc, launch, env=None, where="same node", kind="peer"):
        self.name, self.oshcc, self.launch_argv = name, oshcc, launch
        self.env = dict(os.environ, **(env or {}))
        self.where, self.kind = where, kind
        self.daemons = []
        self.scratch = None

    def launch(self, n, prog, args, timeout):
        a = [x.replace("{n}", str(n)) for x in self.launch_argv]
        if not any("{n}" in x for x in self.launch_argv):
            a += ["-np", str(n)]
        return a + [str(prog)] + list(args)

    def start(self, children, scratch):
        """Starts what the target needs before its jobs (daemons); raises RuntimeError."""

    def stop(self, children):
        for d in self.daemons:
            children.end(d)
        self.daemons = []


GSAS_TARGETS = ("gsas-shm", "gsas-ring", "gsas-udp", "gsas-exanet", "gsas-verbs")


class GsasTarget(Target):
    """gsas from an installed prefix: one node (`shm`: the PEs map each other's memory;
    `ring`: the same with GSAS_DIRECT=0, every operation through the node's service over
    the PE's request ring), two UDP nodes, two emulated Exanet nodes, or two nodes on the
    software verbs device (verbs-emu's softverbs-env sets it up; the prefix must be
    installed --with-verbs)."""

    def __init__(self, name, prefix, transport, tools=None):
        where = {"shm": "same node", "ring": "same node, through the service"}.get(
            transport, "other node")
        env = {"GSAS_DIRECT": "0"} if transport == "ring" else None
        super().__init__(name, str(prefix / "bin/oshcc"), [], env, where=where, kind="gsas")
        if transport == "ring":
            transport = "shm"
        self.prefix, self.transport = prefix, transport
        self.emu = (tools or {}).get("exanet")
        self.softverbs_env = (tools or {}).get("verbs")
        self.config = None

    def launch(self, n, prog, args, timeout):
        a = [str(self.prefix / "bin/oshrun")]
        if self.transport != "shm":
            a += ["--config", str(self.config or "GENERATED-CLUSTER-FILE")]
        return a + ["-n", str(n), "--timeout", str(int(timeout)), "--", str(prog)] + list(args)

    def start(self, children, scratch):
        if self.transport == "shm":
            return
        # Unix socket paths are short: a directory under /tmp, not the results folder.
        self.scratch = scratch
        lines = ["# generated by scripts/bench", "[cluster]", f'name = "bench-{self.transport}"',
                 "", "[defaults]", 'symmetric_size = "64m"', "service_timeout_ms = 60000"]
        for i in range(2):
            lines += ["", "[[nodes]]", f"id = {i}", f'name = "bench{i}"', 'host = "127.0.0.1"',
                      f"udp_port = {free_port()}", f'control_socket = "{scratch}/node{i}.sock"']
            if self.transport == "udp":
                lines.append('transport = "udp"')
            elif self.transport == "verbs":
                lines += ['transport = "verbs"', f'verbs_device = "softverbs{i}"']
            else:
                eps = ", ".join(f'"exanet-ep{k}"' for k in range(6))
                lines += ['transport = "exanet"', f'coord = "0.0.0.{i}.0"',
                          f"uio_devices = [{eps}]"]
        self.config = scratch / "cluster.toml"
        self.config.write_text("\n".join(lines) + "\n")
        if self.transport == "verbs":
            # The software device's library first in LD_LIBRARY_PATH, its fabric directory
            # and device count, for the daemons and the PEs alike.
            sv = scratch / "sv"
            sv.mkdir(exist_ok=True)
            r = subprocess.run([str(self.softverbs_env), "--devices", "2", "--dir", str(sv)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"softverbs-env failed: {r.stderr.strip()}")
            for line in r.stdout.splitlines():
                key, _, value = line.removeprefix("export ").partition("=")
                self.env[key] = shlex.split(value)[0] if value else ""
        if self.transport == "exanet":
            root = scratch / "exa"
            self.env["GSAS_EXANET_EMU"] = str(root)
            emu = children.start([str(self.emu), "--root", str(root), "--nodes", "2", "--eps", "6",
                                  "--log", "warn"], stdout=subprocess.DEVNULL)
            self.daemons.append(emu)
            wait_for(lambda: (root / "ready").exists(), emu, "exanet-emu")
        for i in range(2):
            d = children.start([str(self.prefix / "bin/gsas-atomicd"), "--config",
                                str(self.config), "--node", str(i), "--log-level", "warn"],
                               env=self.env, stdout=subprocess.DEVNULL)
            self.daemons.append(d)
            sock = scratch / f"node{i}.sock"
            wait_for(lambda: sock.exists(), d, f"gsas-atomicd --node {i}")


class RawUdpTarget(Target):
    """`udp-raw`: osb_udp.c, plain sockets built with cc, the raw UDP round trip on loopback
    with both ends busy-polling (the floor of a cross-node collective)."""

    def __init__(self):
        super().__init__("udp-raw", os.environ.get("CC", "cc"), [], where="other process",
                         kind="raw")

    def launch(self, n, prog, args, timeout):
        return [str(prog)] + list(args)


def wait_for(ready, proc, what, limit=60.0):
    t0 = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before it was ready")
        if time.monotonic() - t0 > limit:
            raise RuntimeError(f"{what} not ready after {limit:.0f} s")
        time.sleep(0.02)


def make_target(spec, prefix, tools):
    """A --target value -> Target, or (None, reason) when its implementation is missing.
    `tools`: the emulators' paths ("exanet": exanet-emu, "verbs": softverbs-env)."""
    if spec in GSAS_TARGETS:
        return GsasTarget(spec, prefix, spec.split("-")[1], tools), None
    base, _, other = spec.partition("=")
    if base in GSAS_TARGETS and other:
        # Another installed gsas (an earlier build) beside this one: named after its folder.
        alt = Path(other).resolve()
        if not os.access(alt / "bin/oshcc", os.X_OK):
            return None, f"{alt}/bin/oshcc is not an executable"
        return GsasTarget(f"{base}:{alt.name}", alt, base.split("-")[1], tools), None
    if spec in ("ompi", "ompi-tcp"):
        if not (os.access("/usr/bin/oshcc", os.X_OK) and os.access("/usr/bin/oshrun", os.X_OK)):
            return None, ("Open MPI's /usr/bin/oshcc and /usr/bin/oshrun are not installed "
                          "(apt-get install openmpi-bin libopenmpi-dev)")
        launch = ["/usr/bin/oshrun", "-np", "{n}", "--oversubscribe"]
        env = dict(OMPI_ENV)
        where = "same node"
        if spec == "ompi-tcp":
            env["UCX_TLS"] = "tcp,self"
            launch += ["-x", "UCX_TLS", "-x", "UCX_NET_DEVICES", "--mca", "pml", "ucx", "--mca",
                       "opal_common_ucx_tls", "any", "--mca", "opal_common_ucx_devices", "any",
                       "--mca", "btl", "self,tcp"]
            where = "other node (UCX over TCP on loopback)"
        return Target(spec, "/usr/bin/oshcc", launch, env, where), None
    if spec == "udp-raw":
        if not shutil.which(os.environ.get("CC", "cc")):
            return None, "no C compiler (cc, or $CC)"
        return RawUdpTarget(), None
    if spec.startswith("peer:"):
        parts = spec.split(":", 3)
        if len(parts) != 4 or not all(parts[1:]):
            raise SystemExit(f"bench: --target {spec!r}: expected peer:NAME:OSHCC:LAUNCHER "
                             "(LAUNCHER may hold {n} for the PE count; else -np N is appended)")
        _, name, oshcc, launcher = parts
        if not os.access(oshcc, os.X_OK):
            return None, f"{oshcc} is not an executable"
        return Target(name, oshcc, shlex.split(launcher)), None
    raise SystemExit(f"bench: unknown target {spec!r} (gsas-shm, gsas-ring, gsas-udp, gsas-exanet, "
                     "gsas-verbs, ompi, "
                     "ompi-tcp, udp-raw, or peer:NAME:OSHCC:LAUNCHER)")


# ---------------------------------------------------------------- progress

class Progress:
    """One status line on a terminal (stderr); nothing when stderr is not a terminal."""

    def __init__(self, total, enabled):
        self.total, self.done, self.enabled = total, 0, enabled
        self.t0 = time.monotonic()
        self.width = 0

    def show(self, what):
        if not self.enabled:
            return
        el = time.monotonic() - self.t0
        left = "?" if self.done == 0 else fmt_time(el / self.done * (self.total - self.done))
        line = f"[{self.done}/{self.total}] {what}  elapsed {fmt_time(el)}, left ~{left}"
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()
        self.width = len(line)

    def say(self, msg):
        """A line that stays (warnings, skips): printed whether or not on a terminal."""
        if self.enabled and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            self.width = 0
        print(msg, file=sys.stderr, flush=True)

    def finish(self):
        if self.enabled and self.width:
            sys.stderr.write("\n")


def fmt_time(s):
    s = int(s)
    return f"{s // 60}:{s % 60:02d}"


# ---------------------------------------------------------------- facts

def run_text(argv, cwd=None):
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def loadavg():
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return []


def machine_facts(argv, profile):
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    dirty = run_text(["git", "status", "--porcelain", "--untracked-files=no"], ROOT)
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": "scripts/bench " + " ".join(shlex.quote(a) for a in argv),
        "host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(),
        "kernel": platform.release(), "os": run_text(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
        "commit": run_text(["git", "rev-parse", "HEAD"], ROOT) + (" (with local changes)" if dirty else ""),
        "gsas_build": profile, "rustc": run_text(["rustc", "--version"]),
        "cc": run_text(["cc", "--version"]).splitlines()[0] if run_text(["cc", "--version"]) else "",
        "load_before": loadavg(),
    }


# ---------------------------------------------------------------- the run

def run_build(args):
    """Runs a build command in ROOT, in a session of its own, and returns its status. Ctrl-C
    or SIGTERM of the run (KeyboardInterrupt here) ends it and everything it started (cargo,
    rustc, the C compiler) before the run goes on to exit: SIGTERM to its process group,
    SIGKILL after 5 s."""
    p = subprocess.Popen(args, cwd=ROOT, start_new_session=True)
    try:
        return p.wait()
    except BaseException:
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                pass
        raise


def build_gsas(profile, prefix, need_emu, need_verbs, say):
    """scripts/install into `prefix` (--with-verbs when the verbs target is wanted), and
    exanet-emu and softverbs-env when needed; returns their paths as make_target's tools.
    Cargo's own progress (its bar on a terminal, `Compiling ...` lines otherwise) reaches
    the user's standard error: a first build takes minutes."""
    args = [str(ROOT / "scripts/install"), "--prefix", str(prefix)]
    if profile == "debug":
        args.append("--debug")
    if need_verbs:
        args.append("--with-verbs")
    say(f"bench: building gsas ({profile}) into {prefix} (a first build takes minutes)")
    if run_build(args) != 0:
        raise SystemExit("bench: scripts/install failed")
    tdir = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    tools = {}
    for need, name, pkg in ((need_emu, "exanet", "exanet-emu"),
                            (need_verbs, "verbs", "softverbs-env")):
        if not need:
            continue
        crate = "verbs-emu" if name == "verbs" else pkg
        cargo = ["cargo", "build", "-p", crate, "--bin", pkg]
        if profile == "release":
            cargo.append("--release")
        if run_build(cargo) != 0:
            raise SystemExit(f"bench: building {pkg} failed")
        tools[name] = tdir / profile / pkg
    return tools


def compile_programs(t, bdir, programs=PROGRAMS):
    bdir.mkdir(parents=True, exist_ok=True)
    for p in ("udp",) if t.kind == "raw" else programs:
        r = subprocess.run([t.oshcc, "-O2", "-o", str(bdir / f"osb_{p}"), str(SRC / f"osb_{p}.c")],
                           env=t.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{t.oshcc} osb_{p}.c failed:\n{r.stderr.strip()}")


# A CPU-bound process of --beside: a loop that makes no system call (the name at the end marks
# it in ps).
HOG = [sys.executable, "-c", "while True: pass", "osb-beside"]


def run_job(children, t, argv, timeout, log):
    """Runs one job; yields parsed output lines; raises RuntimeError on failure or timeout."""
    shm0 = shm_names()
    log.write(f"$ {' '.join(shlex.quote(a) for a in argv)}\n")
    log.flush()
    t0 = time.monotonic()
    p = children.start(argv, env=t.env, stdout=subprocess.PIPE, stderr=log, text=True)
    expired = threading.Event()

    def expire():
        expired.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        for line in p.stdout:
            log.write(line)
            parsed = parse_line(line)
            if parsed:
                yield parsed
        p.wait()
        if expired.is_set():
            raise RuntimeError(f"timed out after {timeout:.0f} s (killed)")
        if p.returncode != 0:
            raise RuntimeError(f"exit status {p.returncode}")
    finally:
        timer.cancel()
        children.end(p)
        log.write(f"bench: job took {time.monotonic() - t0:.1f} s\n")
        gone, other = remove_orphan_shm(shm0)
        if gone:
            log.write(f"bench: removed leftover /dev/shm objects: {' '.join(gone)}\n")
        if other:
            log.write(f"bench: new unused /dev/shm objects left alone: {' '.join(other)}\n")


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Build the OpenSHMEM benchmarks, run them on targets, write CSV, figures "
                    "and a summary into --out. Subcommands: 'compare A B' and 'check DIR'.")
    ap.add_argument("--quick", action="store_true", help="a short run (pipeline check)")
    ap.add_argument("--out", type=Path, help="results folder (default target/bench/results-DATE)")
    ap.add_argument("--target", action="append", default=[],
                    help="comma-separated: gsas-shm, gsas-ring (one node with GSAS_DIRECT=0), "
                         "gsas-udp, gsas-exanet, gsas-verbs (two "
                         "nodes on the software verbs device), ompi, ompi-tcp, "
                         "udp-raw, peer:NAME:OSHCC:LAUNCHER, gsas-udp=PREFIX (another "
                         "installed gsas, e.g. an earlier build) "
                         "(default gsas-shm,gsas-udp,gsas-exanet,ompi)")
    ap.add_argument("--programs", help="comma-separated subset of p2p,coll,gups (default all)")
    ap.add_argument("--pes", help="comma-separated PE counts of coll and gups (default 2,4,8; "
                                  "quick 2,4)")
    ap.add_argument("--sizes", help="comma-separated message sizes of p2p in bytes "
                                    "(default 1 B to 4 MiB in powers of two)")
    ap.add_argument("--coll-sizes", help="comma-separated bytes per PE of the collectives, "
                                         "multiples of 8 up to 65536 (default 8,512,4096)")
    ap.add_argument("--build", choices=("release", "debug"), default="release",
                    help="gsas build profile (debug only to check the pipeline)")
    ap.add_argument("--prefix", type=Path, help="use this installed gsas (no build)")
    ap.add_argument("--rounds", type=int, help="rounds over all targets (default 3, quick 1)")
    ap.add_argument("--timeout", type=float, help="seconds per job (default 1800, quick 120)")
    ap.add_argument("--beside", type=int, default=0, metavar="N",
                    help="run N CPU-bound processes beside every job, to measure on a loaded "
                         "machine (default 0)")
    a = ap.parse_args(argv)
    if a.beside < 0:
        raise SystemExit("bench: --beside must be 0 or more")

    plan = make_plan(a.quick)
    if a.rounds:
        if a.rounds < 1:
            raise SystemExit("bench: --rounds must be at least 1")
        plan["rounds"] = a.rounds
    if a.programs:
        progs = tuple(p for p in a.programs.split(",") if p)
        if not progs or any(p not in PROGRAMS for p in progs):
            raise SystemExit(f"bench: --programs {a.programs!r}: a subset of p2p,coll,gups")
        plan["programs"] = progs
    for opt, key in ((a.pes, "pes"), (a.coll_sizes, "coll_sizes"), (a.sizes, "sizes")):
        if opt:
            try:
                plan[key] = [int(x) for x in opt.split(",") if x]
            except ValueError:
                raise SystemExit(f"bench: --{key.replace('_', '-')} {opt!r}: numbers, "
                                 "comma-separated") from None
            if not plan[key] or min(plan[key]) < 1:
                raise SystemExit(f"bench: --{key.replace('_', '-')} {opt!r}: positive numbers")
    if any(s % 8 or s > 65536 for s in plan["coll_sizes"]):
        raise SystemExit("bench: --coll-sizes: multiples of 8 up to 65536")
    timeout = a.timeout or (120.0 if a.quick else 1800.0)
    specs = [s for v in (a.target or ["gsas-shm,gsas-udp,gsas-exanet,ompi"])
             for s in v.split(",") if s]
    out = (a.out or ROOT / "target/bench" / time.strftime("results-%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tty = sys.stderr.isatty()
    prog = Progress(0, tty)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM as Ctrl-C from the start: the build, the compiles and the jobs are ended.
    old_term = signal.signal(signal.SIGTERM, on_term)

    profile = a.build
    prefix = a.prefix
    gsas_wanted = any(s.startswith("gsas-") and "=" not in s for s in specs)
    tools = {}
    if gsas_wanted:
        if prefix is None:
            prefix = ROOT / "target/bench" / profile / "prefix"
            tools = build_gsas(profile, prefix, "gsas-exanet" in specs, "gsas-verbs" in specs,
                               prog.say)
        else:
            profile = f"installed ({prefix})"
            tools = {"exanet": os.environ.get("GSAS_EXANET_EMU_BIN") or shutil.which("exanet-emu"),
                     "verbs": (os.environ.get("GSAS_SOFTVERBS_ENV_BIN")
                               or shutil.which("softverbs-env"))}
    facts = machine_facts(argv, profile)
    facts.update({"quick": a.quick, "plan": plan, "targets": {}, "skipped": {}, "failed": [],
                  "interrupted": False, "beside": a.beside})
    targets = []
    for s in specs:
        t, why = make_target(s, prefix, tools)
        if t is None:
            prog.say(f"bench: SKIPPED target {s}: {why}")
            facts["skipped"][s] = why
        elif t.kind == "gsas" and t.transport == "exanet" and not tools.get("exanet"):
            why = "no exanet-emu (set GSAS_EXANET_EMU_BIN with --prefix)"
            prog.say(f"bench: SKIPPED target {s}: {why}")
            facts["skipped"][s] = why
        elif t.kind == "gsas" and t.transport == "verbs" and not tools.get("verbs"):
            why = "no softverbs-env (set GSAS_SOFTVERBS_ENV_BIN with --prefix)"
            prog.say(f"bench: SKIPPED target {s}: {why}")
            facts["skipped"][s] = why
        else:
            targets.append(t)

    raw, skips = [], {}
    scratch_root = Path(f"/tmp/gsas-bench-{os.getpid()}")
    log = open(out / "run.log", "w", buffering=1)  # line-buffered: readable while it runs
    children = Children(log)
    for t in list(targets):
        try:
            compile_programs(t, out / "build" / t.name, plan.get("programs", PROGRAMS))
            facts["targets"][t.name] = {"oshcc": t.oshcc, "where_pe1_runs": t.where,
                                        "launch": " ".join(t.launch(2, "PROGRAM", [], timeout))}
        except RuntimeError as e:
            prog.say(f"bench: FAILED to build for target {t.name}: {e}")
            facts["failed"].append(f"{t.name}: build: {e}")
            targets.remove(t)
    job_list = [(r, t, s) for r in range(plan["rounds"]) for t in targets
                for s in steps(plan, t.kind)]
    prog.total = len(job_list)
    raw_f = open(out / "raw.csv", "w", newline="")
    raw_w = csv.DictWriter(raw_f, fieldnames=("round", "target", "benchmark", "family",
                                              "size_bytes", "pes", "unit", "median", "min", "max"))
    raw_w.writeheader()
    started = None
    broken = set()  # targets that could not start
    try:
        for _ in range(a.beside):
            children.start(HOG, stdout=subprocess.DEVNULL)
        for rnd, t, (p, n, args) in job_list:
            if t.name in broken:
                prog.done += 1
                continue
            if started is not t:
                if started is not None:
                    started.stop(children)
                    facts["targets"][started.name]["load_after"] = loadavg()
                started = t
                facts["targets"][t.name].setdefault("load_before", loadavg())
                scratch = scratch_root / t.name
                scratch.mkdir(parents=True, exist_ok=True)
                prog.show(f"{t.name}: starting")
                try:
                    t.start(children, scratch)
                except RuntimeError as e:
                    prog.say(f"bench: FAILED to start target {t.name}: {e}")
                    facts["failed"].append(f"{t.name}: start: {e}")
                    t.stop(children)
                    broken.add(t.name)
                    prog.done += 1
                    started = None
                    continue
            prog.show(f"round {rnd + 1}/{plan['rounds']} {t.name}: osb_{p} on {n} PEs")
            argv_job = t.launch(n, out / "build" / t.name / f"osb_{p}", args, timeout)
            try:
                for kind, v in run_job(children, t, argv_job, timeout, log):
                    if kind == "row":
                        v.update(round=rnd, target=t.name)
                        raw.append(v)
                        raw_w.writerow(v)
                        raw_f.flush()
                    else:
                        skips.setdefault(t.name, {})[v[0]] = v[1]
            except RuntimeError as e:
                prog.say(f"bench: FAILED {t.name} osb_{p} on {n} PEs: {e} (see {out}/run.log)")
                facts["failed"].append(f"{t.name}: osb_{p} on {n} PEs: {e}")
            prog.done += 1
        if started is not None:
            started.stop(children)
            facts["targets"][started.name]["load_after"] = loadavg()
    except KeyboardInterrupt:
        facts["interrupted"] = True
        prog.say("bench: interrupted; ending the jobs and keeping the results so far")
    finally:
        children.end_all()
        signal.signal(signal.SIGTERM, old_term)
        raw_f.close()
        log.close()
        shutil.rmtree(scratch_root, ignore_errors=True)
        prog.finish()
    facts["load_after"] = loadavg()
    facts["benchmark_skips"] = skips
    rows = aggregate(raw)
    write_csv(out / "results.csv", rows)
    (out / "facts.json").write_text(json.dumps(facts, indent=2) + "\n")
    report.write_report(out, rows, facts)
    print(f"bench: {len(rows)} rows, figures and summary in {out}/ (summary.md)")
    if facts["interrupted"]:
        return 130
    return 1 if facts["failed"] else 0


def selftest():
    """Runs test_osb.py (the Python half's tests); exit status 0 when all pass."""
    import unittest
    suite = unittest.defaultTestLoader.loadTestsFromName("test_osb")
    res = unittest.TextTestRunner(verbosity=2).run(suite)
    print(f"bench selftest: ran {res.testsRun}, failed {len(res.failures) + len(res.errors)}, "
          f"skipped {len(res.skipped)}")
    return 0 if res.wasSuccessful() else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "selftest":
        sys.exit(selftest())
    if len(sys.argv) > 1 and sys.argv[1] in ("compare", "check"):
        sys.exit(report.main(sys.argv[1:]))
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # before the first job (nothing to keep) or while drawing (the
        # summary and the whole images drawn so far stay; report.write_report)
        print("\nbench: interrupted", file=sys.stderr)
        sys.exit(130)

"""The drawing half of scripts/bench: figures (matplotlib, PNG and SVG), the summary page
(Markdown), `compare` (two result folders against each other) and `check` (is a result
folder complete?).

Input is the CSV osb.py writes (one row per target, benchmark, size, PEs, statistic) and its
facts.json; nothing here runs a benchmark.
"""

import csv
import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# family -> (title, x axis, higher is better)
FAMILIES = {
    "put_lat": ("Put latency (PE 0 -> PE 1)", "size", False),
    "get_lat": ("Get latency (PE 0 <- PE 1)", "size", False),
    "put_bw": ("Put throughput (window of 32, then quiet)", "size", True),
    "get_bw": ("Get throughput (window of 32 get_nbi, then quiet)", "size", True),
    "signal": ("Put with signal (ping-pong, half round trip)", "size", False),
    "msgrate": ("Message rate (window of 32 put_nbi, then quiet)", "size", True),
    "amo": ("64-bit atomics, PE 0 -> PE 1", "bench", False),
    "flag": ("Flag ping-pong (shmem_long_p, then the partner's wait; round trip)", "bench", False),
    "coll": ("Collectives against the number of PEs", "pes", False),
    "app": ("GUPS: random XOR updates of a distributed table", "pes", True),
}


def load_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["size_bytes"] = int(r["size_bytes"])
        r["pes"] = int(r["pes"])
        r["value"] = float(r["value"])
    return rows


def table(rows):
    """rows -> {(target, bench, size, pes): {"median":.., "min":.., "max":.., "unit", "family"}}"""
    t = {}
    for r in rows:
        k = (r["target"], r["benchmark"], r["size_bytes"], r["pes"])
        e = t.setdefault(k, {"unit": r["unit"], "family": r["family"]})
        e[r["statistic"]] = r["value"]
    return t


def ordered(seq):
    out = []
    for x in seq:
        if x not in out:
            out.append(x)
    return out


def size_label(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def cost_ratio(a, b, higher_better):
    """`a`'s cost over `b`'s, one way for every figure: time per operation for latencies,
    the inverse for rates (so below 1, `a` is faster: it takes less time or moves more)."""
    if a <= 0 or b <= 0:
        return float("nan")
    return b / a if higher_better else a / b


def unit_label(unit):
    """The unit as a reader writes it (the CSV keeps the ASCII `us`)."""
    return "µs" if unit == "us" else unit


def target_label(t, facts):
    """A target named with where its second PE runs: `gsas-udp (PE 1 on another node over
    UDP)`."""
    where = facts.get("targets", {}).get(t, {}).get("where_pe1_runs")
    return f"{t} (PE 1 on {where})" if where else t


def footer(facts):
    """The provenance line stamped on every image."""
    load = lambda k: " ".join(facts.get(k) or []) or "?"  # noqa: E731
    commit = str(facts.get("commit") or "?")
    parts = [f"gsas {commit[:12]}{' (local changes)' if 'local changes' in commit else ''}",
             f"{facts.get('date_utc', '?')} UTC",
             "quick run: not for publication" if facts.get("quick") else "full run",
             f"load {load('load_before')} before, {load('load_after')} after, "
             f"on {facts.get('cpus', '?')} CPUs"]
    if facts.get("beside"):
        parts.append(f"beside {facts['beside']} CPU-bound processes")
    if facts.get("interrupted"):
        parts.append("INTERRUPTED")
    return " | ".join(parts)


# ---------------------------------------------------------------- figures

def not_measured(t, bench, facts):
    """Why target `t` has no figure for `bench`."""
    why = (facts.get("benchmark_skips", {}).get(t, {}).get(bench)
           or facts.get("skipped", {}).get(t))
    if why:
        return f"{t}: skipped ({why})"
    return f"{t}: no figure (failed or not run)"


def note_in_legend(ax, notes):
    """A line of the panel's legend for each target the panel lacks ("ompi: skipped
    (...)"), with no marker: the legend is placed where it covers no data and no other
    text, which a free text in a corner of the panel was not (it lay under the legend)."""
    for n in notes:
        ax.plot([], [], " ", label=n)


def draw(out, rows, targets, facts=None):
    """One figure per family, every target overlaid; returns {family: png name}.

    Sizes and PE counts are ticked where they were measured (and nowhere else), a point
    marks every figure, latencies are in µs, the legend says where each target's PE 1 runs,
    the atomics and the flag ping-pong are dots with min..max whiskers (no bars on a log
    axis), a panel names the targets it lacks and why, and every image carries the run's
    provenance as a footer. SVG text stays text (searchable; the tests read it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    facts = facts or {}
    matplotlib.rcParams["svg.fonttype"] = "none"

    tab = table(rows)
    colors = {t: plt.get_cmap("tab10")(i % 10) for i, t in enumerate(targets)}
    styles = ["-", "--", ":", "-."]
    figdir = out / "fig"
    figdir.mkdir(parents=True, exist_ok=True)
    made = {}
    for fam, (title, axis, higher) in FAMILIES.items():
        keys = [k for k, v in tab.items() if v["family"] == fam and "median" in v]
        if not keys:
            continue
        unit = tab[keys[0]]["unit"]
        benches = ordered(k[1] for k in keys)
        if axis == "bench":
            fig, ax = plt.subplots(figsize=(8, 4.5))
            width = 0.8 / max(1, len(targets))
            for i, t in enumerate(targets):
                xs, ys, lo, hi = [], [], [], []
                for j, b in enumerate(benches):
                    k = next((k for k in keys if k[0] == t and k[1] == b), None)
                    if k is None:
                        continue
                    v = tab[k]
                    xs.append(j + (i - (len(targets) - 1) / 2) * width)
                    ys.append(v["median"])
                    lo.append(v["median"] - v.get("min", v["median"]))
                    hi.append(v.get("max", v["median"]) - v["median"])
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", markersize=5, capsize=3,
                                color=colors[t], label=target_label(t, facts))
            ax.set_xticks(range(len(benches)), benches)
            ax.set_yscale("log")
            ax.set_ylabel(f"latency ({unit_label(unit)}), median; whiskers: min..max")
            ax.set_title(f"{title} (lower is better)", fontsize=11)
            missing = [not_measured(t, b, facts) for t in targets for b in benches
                       if not any(k[0] == t and k[1] == b for k in keys)]
            note_in_legend(ax, missing)
            ax.legend(fontsize=7)
            ax.grid(True, axis="y", which="both", alpha=0.3)
        else:
            ncol = min(3, len(benches))
            nrow = math.ceil(len(benches) / ncol)
            fig, axes = plt.subplots(nrow, ncol, figsize=(max(8.0, 5.2 * ncol), 3.9 * nrow + 0.4),
                                     squeeze=False)
            for ax in axes.flat[len(benches):]:
                ax.set_visible(False)
            for ax, b in zip(axes.flat, benches):
                bkeys = [k for k in keys if k[1] == b]
                other = ordered(sorted(k[3] if axis == "size" else k[2] for k in bkeys))
                for t in targets:
                    for si, o in enumerate(other):
                        ks = sorted((k for k in bkeys if k[0] == t and
                                     (k[3] if axis == "size" else k[2]) == o),
                                    key=lambda k: k[2] if axis == "size" else k[3])
                        if not ks:
                            continue
                        xs = [k[2] if axis == "size" else k[3] for k in ks]
                        med = [tab[k]["median"] for k in ks]
                        lab = target_label(t, facts)
                        if len(other) > 1:
                            lab += f", {o} PEs" if axis == "size" else f", {size_label(o)}"
                        ax.plot(xs, med, styles[si % len(styles)], marker="o", markersize=3,
                                color=colors[t], label=lab)
                        ax.fill_between(xs, [tab[k].get("min", m) for k, m in zip(ks, med)],
                                        [tab[k].get("max", m) for k, m in zip(ks, med)],
                                        color=colors[t], alpha=0.12, linewidth=0)
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                # Ticks at the measured points only.
                measured = sorted({k[2] if axis == "size" else k[3] for k in bkeys})
                ax.xaxis.set_major_locator(FixedLocator(measured))
                ax.xaxis.set_minor_locator(NullLocator())
                if axis == "size":
                    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(v))))
                    ax.set_xlabel("message size (log scale; ticks where measured)")
                    if len(measured) > 8:
                        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
                else:
                    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v)}"))
                    ax.set_xlabel("PEs (log scale; ticks where measured)")
                ax.set_ylabel(f"{unit_label(unit)} (median; band: min..max)")
                note_in_legend(ax, [not_measured(t, b, facts) for t in targets
                                    if not any(k[0] == t for k in bkeys)])
                one = other[0] if len(other) == 1 else 0
                ax.set_title(b + (f" ({size_label(one)} per PE)" if axis == "pes" and one else ""),
                             fontsize=10)
                ax.grid(True, which="both", alpha=0.3)
                ax.legend(fontsize=7)
            fig.suptitle(f"{title}{' (higher is better)' if higher else ' (lower is better)'}",
                         fontsize=12)
        fig.text(0.005, 0.004, footer(facts), fontsize=6.5, color="0.35", va="bottom")
        # Room for the footer below and, with panels, the figure's title above theirs.
        fig.tight_layout(rect=(0, 0.035, 1, 0.95 if axis != "bench" else 1))
        for ext in ("png", "svg"):
            # Whole files only: an interrupt while drawing leaves no truncated image.
            tmp = figdir / f".{fam}.{ext}.tmp"
            fig.savefig(tmp, dpi=110, format=ext)
            tmp.replace(figdir / f"{fam}.{ext}")
        plt.close(fig)
        made[fam] = f"fig/{fam}.png"
    return made


# ---------------------------------------------------------------- summary page

def fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.3g}"
    return f"{v:.3g}"


def summary(rows, facts, targets, pairs, figs, title):
    """The Markdown page: facts, targets, one table and one figure per family."""
    tab = table(rows)
    L = [f"# {title}", ""]
    if facts.get("interrupted"):
        L += ["**Interrupted (Ctrl-C): the results below are those taken before it.**", ""]
    for f in facts.get("failed", []):
        L.append(f"* **FAILED** {f}")
    if facts.get("failed"):
        L.append("")
    load = facts.get("load_before") or ["?"]
    cpus = facts.get("cpus") or 1
    beside = facts.get("beside") or 0
    if beside:
        L += [f"**Measured beside {beside} CPU-bound processes** (`--beside {beside}`): every "
              "job, of every target, ran on a machine loaded on purpose.", ""]
    try:
        # Taken before the processes of --beside started: the machine's own load.
        busy = float(load[0]) > 0.5 * cpus
    except ValueError:
        busy = False
    if busy or facts.get("quick") or facts.get("gsas_build") == "debug":
        why = []
        if busy:
            why.append(f"the machine was loaded (load average {load[0]} on {cpus} CPUs)")
        if facts.get("quick"):
            why.append("--quick takes few samples")
        if facts.get("gsas_build") == "debug":
            why.append("gsas was a debug build")
        L += [f"> **These figures check the pipeline, they are not for publication:** "
              f"{'; '.join(why)}.", ""]
    L += ["## Machine and build", "", "| fact | value |", "|---|---|"]
    for k in ("date_utc", "command", "host", "cpu", "cpus", "kernel", "os", "commit",
              "gsas_build", "rustc", "cc", "load_before", "load_after"):
        if k in facts:
            v = facts[k]
            L.append(f"| {k} | {' '.join(v) if isinstance(v, list) else v} |")
    L += ["", "## Targets", "", "| target | PE 1 runs on | launch | load before / after |",
          "|---|---|---|---|"]
    for t in targets:
        i = facts.get("targets", {}).get(t, {})
        lb = " ".join(i.get("load_before", [])) or "-"
        la = " ".join(i.get("load_after", [])) or "-"
        L.append(f"| {t} | {i.get('where_pe1_runs', '-')} | `{i.get('launch', '-')}` | "
                 f"{lb} / {la} |")
    for t, why in facts.get("skipped", {}).items():
        L.append(f"| {t} | **SKIPPED**: {why} | | |")
    for t, bs in facts.get("benchmark_skips", {}).items():
        for b, why in bs.items():
            L.append(f"| {t} | benchmark {b} skipped: {why} | | |")
    L.append("")
    if pairs:
        L += ["Ratios `A / B`: A's cost over B's, from the medians (time per operation; for "
              "rates, the inverse): **below 1, A is faster**, above 1 slower, for every "
              "figure alike.", ""]
    for fam, (ftitle, axis, higher) in FAMILIES.items():
        keys = ordered((k[1], k[2], k[3]) for k, v in tab.items() if v["family"] == fam)
        if not keys:
            continue
        border = ordered(b for b, _, _ in keys)  # the programs' order
        keys = sorted(keys, key=lambda k: (border.index(k[0]), k[2], k[1]))
        unit = next(v["unit"] for v in tab.values() if v["family"] == fam)
        L += [f"## {ftitle}", "", f"![{fam}]({figs[fam]})" if fam in figs else "", "",
              f"Median {unit_label(unit)} ({'higher' if higher else 'lower'} is better)."]
        head = ["benchmark", "size", "PEs"] + targets + [f"{a} / {b}" for a, b in pairs]
        L += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for b, s, n in keys:
            meds = {t: tab.get((t, b, s, n), {}).get("median") for t in targets}
            cells = [b, size_label(s), str(n)] + [fmt(meds[t]) for t in targets]
            for a, c in pairs:
                if meds.get(a) is None or meds.get(c) is None:
                    cells.append("-")
                else:
                    cells.append(f"{cost_ratio(meds[a], meds[c], higher):.3g}")
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
    return "\n".join(L) + "\n"


def write_report(out, rows, facts, title="OpenSHMEM benchmarks", pairs=None):
    targets = ordered([r["target"] for r in rows] + list(facts.get("targets", {})))
    if pairs is None:
        pairs = [(targets[0], t) for t in targets[1:]]
    # The summary first, without figures, so that a run interrupted while drawing keeps
    # it; then again with the figures drawn. Each write replaces the file whole.
    def write_summary(figs):
        tmp = out / ".summary.md.tmp"
        tmp.write_text(summary(rows, facts, targets, pairs, figs, title))
        tmp.replace(out / "summary.md")
    write_summary({})
    write_summary(draw(out, rows, targets, facts) if rows else {})


# ---------------------------------------------------------------- compare and check

def compare(a, b, out):
    """Draws folders a and b against each other: targets named a:T and b:T."""
    la, lb = a.name, b.name
    if la == lb:
        la, lb = "A", "B"
    rows = []
    for label, d in ((la, a), (lb, b)):
        for r in load_rows(d / "results.csv"):
            r["target"] = f"{label}:{r['target']}"
            rows.append(r)
    fa = json.loads((a / "facts.json").read_text())
    fb = json.loads((b / "facts.json").read_text())
    common = [t for t in fa.get("targets", {}) if t in fb.get("targets", {})]
    facts = {"targets": {}, "date_utc": f"{fa.get('date_utc')} / {fb.get('date_utc')}",
             "commit": f"{la}: {fa.get('commit')} / {lb}: {fb.get('commit')}",
             "load_before": fa.get("load_before", []) + ["/"] + fb.get("load_before", []),
             "cpus": fa.get("cpus"), "failed": fa.get("failed", []) + fb.get("failed", [])}
    for label, f in ((la, fa), (lb, fb)):
        for t, i in f.get("targets", {}).items():
            facts["targets"][f"{label}:{t}"] = i
    out.mkdir(parents=True, exist_ok=True)
    pairs = [(f"{la}:{t}", f"{lb}:{t}") for t in common]
    write_report(out, rows, facts, title=f"Comparison: {a} against {b}", pairs=pairs)
    return 0


# A flag ping-pong without quiet (`flag_p_wait`, `flag_p_test`) may cost at most this many
# times the one with quiet, plus FLAG_SLACK_US, on a gsas target (scripts/bench check): a put
# that leaves only when a timer comes round (the progress keeper's 1 ms tick), or a test loop
# that keeps the CPU from the service that must apply the partner's put, costs milliseconds
# per round trip where the quiet one costs tens to hundreds of microseconds. Generous, so
# that a loaded machine or a debug build does not trip it; not a performance target.
FLAG_RATIO = 3
FLAG_SLACK_US = 700


def flag_problems(tab, target):
    """The no-quiet flag ping-pongs of `target` that cost more than the quiet one allows."""
    bad = []
    for (t, b, size, pes), v in sorted(tab.items()):
        if t != target or b not in ("flag_p_wait", "flag_p_test") or "median" not in v:
            continue
        quiet = tab.get((t, "flag_quiet", size, pes), {}).get("median")
        if quiet is None:
            continue
        limit = FLAG_RATIO * quiet + FLAG_SLACK_US
        if v["median"] > limit:
            bad.append(f"{t}: {b} at {pes} PEs takes {v['median']:.1f} us per round trip, "
                       f"more than {FLAG_RATIO} x flag_quiet ({quiet:.1f} us) + {FLAG_SLACK_US} us: "
                       "a put without quiet waits for something (a timer?) before it reaches its PE")
    return bad


def check(d, expect_targets):
    """Is folder d complete? Returns a list of problems (empty: complete)."""
    import osb
    bad = []
    facts = json.loads((d / "facts.json").read_text())
    rows = load_rows(d / "results.csv")
    tab = table(rows)
    bad += [f"failure recorded: {f}" for f in facts.get("failed", [])]
    if facts.get("interrupted"):
        bad.append("the run was interrupted")
    ran = list(facts.get("targets", {}))
    for t in expect_targets:
        if t not in ran:
            bad.append(f"target {t} did not run ({facts.get('skipped', {}).get(t, 'not requested')})")
    for t in ran:
        skipped = facts.get("benchmark_skips", {}).get(t, {})
        want = osb.expected_rows(facts["plan"], skipped, "raw" if t == "udp-raw" else "gsas")
        have = {(k[1], k[2], k[3]) for k in tab if k[0] == t}
        missing = sorted(want - have)
        if missing:
            bad.append(f"{t}: {len(missing)} expected rows missing, e.g. {missing[:3]}")
        extra = sorted(have - want)
        if extra:
            bad.append(f"{t}: unexpected rows, e.g. {extra[:3]}")
        for k, v in tab.items():
            if k[0] != t:
                continue
            st = [v.get(s) for s in ("min", "median", "max")]
            if None in st or not all(math.isfinite(x) and x > 0 for x in st) \
                    or not st[0] <= st[1] <= st[2]:
                bad.append(f"{t}: {k[1:]} has bad statistics {st}")
        if t.startswith("gsas"):
            bad += flag_problems(tab, t)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    fams = {v["family"] for v in tab.values()}
    for fam in sorted(fams):
        png, svg = d / "fig" / f"{fam}.png", d / "fig" / f"{fam}.svg"
        try:
            img = mpimg.imread(png)
            if img.ndim != 3 or img.shape[0] < 100 or img.shape[1] < 100 or img.std() == 0:
                bad.append(f"{png}: not a plausible figure (shape {img.shape})")
        except Exception as e:  # noqa: BLE001 - any decoding failure is the finding
            bad.append(f"{png}: does not decode ({e})")
        try:
            if not ET.parse(svg).getroot().tag.endswith("svg"):
                bad.append(f"{svg}: not an SVG document")
        except (OSError, ET.ParseError) as e:
            bad.append(f"{svg}: does not parse ({e})")
    text = (d / "summary.md").read_text() if (d / "summary.md").exists() else ""
    if not text:
        bad.append("summary.md is missing or empty")
    for t in ran + list(facts.get("skipped", {})):
        if t not in text:
            bad.append(f"summary.md does not name target {t}")
    for fam in fams:
        if f"fig/{fam}.png" not in text:
            bad.append(f"summary.md does not show fig/{fam}.png")
    return bad


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="scripts/bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="draw two result folders against each other")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--out", type=Path, required=True)
    k = sub.add_parser("check", help="is a result folder complete? (exit 1 if not)")
    k.add_argument("dir", type=Path)
    k.add_argument("--targets", default="", help="comma-separated targets that must have run")
    a = ap.parse_args(argv)
    if a.cmd == "compare":
        for d in (a.a, a.b):
            if not (d / "results.csv").exists():
                sys.exit(f"bench compare: {d}/results.csv not found")
        r = compare(a.a, a.b, a.out)
        print(f"bench compare: figures and summary in {a.out}/ (summary.md)")
        return r
    for f in ("facts.json", "results.csv"):
        if not (a.dir / f).exists():
            what = "no such folder" if not a.dir.exists() else f"{f} not found"
            print(f"bench check: {a.dir}: {what} (a folder that scripts/bench --out wrote)",
                  file=sys.stderr)
            return 2
    problems = check(a.dir, [t for t in a.targets.split(",") if t])
    for p in problems:
        print(f"bench check: {p}")
    if problems:
        print(f"bench check: FAILED ({len(problems)} problems) in {a.dir}")
        return 1
    n = len(load_rows(a.dir / "results.csv"))
    print(f"bench check: ok: {a.dir} has every expected row ({n} rows), figures decode, "
          "the summary names every target")
    return 0

"""Tests of scripts/bench's Python half (run by `scripts/bench selftest`, in scripts/test-all).

The pure parts on made-up rows: parsing, aggregation over rounds, the expected rows, the
figures and summary, `check` (that it passes a complete folder and finds what is wrong in
a broken one) and `compare`.  With OSB_TEST_PREFIX naming an installed gsas, also real runs: Ctrl-C
(no process left, the results so far kept) and jobs that fail (reported, exit status 1).
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import re
import unittest
import xml.etree.ElementTree as ET
from pathlib import Path

import osb
import report

HERE = Path(__file__).resolve().parent


def fake_run(out, targets, plan, skip=None):
    """A result folder as osb.main writes it, from made-up figures."""
    raw = []
    for ti, t in enumerate(targets):
        for rnd in range(plan["rounds"]):
            for b, s, n in sorted(osb.expected_rows(plan, (skip or {}).get(t, {}))):
                fam = next((f for x, f in osb.P2P_SIZED if x == b), None)
                fam = fam or ("amo" if b in osb.P2P_AMO else "flag" if b in osb.P2P_FLAG
                              else "app" if b == "gups" else "coll")
                v = (1 + ti) * (1 + s / 1000) * n * (1 + rnd / 10)
                raw.append({"round": rnd, "target": t, "benchmark": b, "family": fam,
                            "size_bytes": s, "pes": n, "unit": "us", "median": v,
                            "min": v * 0.9, "max": v * 1.2})
    rows = osb.aggregate(raw)
    osb.write_csv(out / "results.csv", rows)
    facts = {"plan": plan, "quick": True, "cpus": 2, "load_before": ["0.1", "0.1", "0.1"],
             "load_after": ["0.7", "0.2", "0.1"], "commit": "0123456789abcdef0123",
             "date_utc": "2026-12-02 01:00",
             "targets": {t: {"where_pe1_runs": "same node", "launch": "x"} for t in targets},
             "skipped": {"peer-x": "not installed"}, "failed": [], "interrupted": False,
             "benchmark_skips": skip or {}}
    (out / "facts.json").write_text(json.dumps(facts))
    report.write_report(out, rows, facts)
    return rows


class Pure(unittest.TestCase):
    def test_parse_line(self):
        kind, r = osb.parse_line("OSB\tput\tput_bw\t4096\t2\tMB/s\t10.5\t9\t11\n")
        self.assertEqual(kind, "row")
        self.assertEqual((r["benchmark"], r["size_bytes"], r["pes"], r["median"]),
                         ("put", 4096, 2, 10.5))
        self.assertEqual(osb.parse_line("OSB_SKIP\tput_signal\tneeds 1.5"),
                         ("skip", ("put_signal", "needs 1.5")))
        self.assertIsNone(osb.parse_line("some noise from a launcher"))
        self.assertIsNone(osb.parse_line("OSB\ttoo\tfew"))

    def test_aggregate_takes_median_of_medians_and_extremes(self):
        raw = [{"target": "t", "benchmark": "b", "family": "f", "size_bytes": 8, "pes": 2,
                "unit": "us", "median": m, "min": lo, "max": hi}
               for m, lo, hi in ((3, 2, 4), (1, 0.5, 9), (2, 1.5, 2.5))]
        got = {r["statistic"]: r["value"] for r in osb.aggregate(raw)}
        self.assertEqual(got, {"median": 2, "min": 0.5, "max": 9})
        two = osb.aggregate(raw[:2])
        self.assertEqual([r["value"] for r in two if r["statistic"] == "median"], [2.0])

    def test_expected_rows(self):
        plan = osb.make_plan(True)
        rows = osb.expected_rows(plan)
        n_sizes, n_pes, n_coll = len(plan["sizes"]), len(plan["pes"]), len(plan["coll_sizes"])
        self.assertEqual(len(rows), len(osb.P2P_SIZED) * n_sizes + len(osb.P2P_AMO)
                         + len(osb.P2P_FLAG)
                         + n_pes * (3 + 2 * len(osb.COLL_SIZED) * n_coll + 1))
        less = osb.expected_rows(plan, {"put_signal": "x"})
        self.assertEqual(len(rows) - len(less), n_sizes)
        self.assertEqual(len(osb.steps(plan)), 1 + 2 * n_pes)

    def test_program_subsets_raw_udp_and_other_prefixes(self):
        plan = dict(osb.make_plan(True), programs=("coll",), pes=[2, 8])
        self.assertEqual([(p, n) for p, n, _ in osb.steps(plan)], [("coll", 2), ("coll", 8)])
        rows = osb.expected_rows(plan)
        self.assertEqual({b for b, _, _ in rows},
                         {"barrier", "sync", "team_sync", *osb.COLL_SIZED, *osb.COLL_TEAM_SIZED})
        self.assertEqual({n for _, _, n in rows}, {2, 8})
        self.assertEqual([p for p, _, _ in osb.steps(plan, "raw")], ["udp"])
        self.assertEqual(osb.expected_rows(plan, kind="raw"),
                         {("udp_rtt", 8, 2), ("udp_half_rtt", 8, 2)})
        t, why = osb.make_target("gsas-udp=/nonexistent/prefix", None, None)
        self.assertIsNone(t)
        self.assertIn("/nonexistent/prefix/bin/oshcc", why)
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "bin").mkdir()
            cc = Path(d) / "bin/oshcc"
            cc.write_text("#!/bin/sh\n")
            cc.chmod(0o755)
            t, _ = osb.make_target(f"gsas-udp={d}", None, None)
            self.assertEqual((t.name, t.transport, t.kind), (f"gsas-udp:{Path(d).name}", "udp", "gsas"))
        raw, _ = osb.make_target("udp-raw", None, None)
        self.assertEqual(raw.launch(2, "/x/osb_udp", ["--quick"], 10), ["/x/osb_udp", "--quick"])
        # gsas-ring: one node like gsas-shm (no cluster file, no daemons), every operation
        # through the service: GSAS_DIRECT=0 in the jobs' environment, and only there.
        ring, _ = osb.make_target("gsas-ring", Path("/p"), None)
        shm, _ = osb.make_target("gsas-shm", Path("/p"), None)
        self.assertEqual((ring.transport, ring.kind, ring.env.get("GSAS_DIRECT")), ("shm", "gsas", "0"))
        self.assertNotEqual(shm.env.get("GSAS_DIRECT"), "0")
        self.assertEqual(ring.launch(2, "/x/osb_p2p", [], 10), shm.launch(2, "/x/osb_p2p", [], 10))
        self.assertIn("through the service", ring.where)

    def test_ratios_and_labels(self):
        # A / B is A's cost over B's, for latencies and rates alike (below 1: A faster).
        self.assertEqual(report.cost_ratio(2.0, 1.0, False), 2.0)  # A twice the latency
        self.assertEqual(report.cost_ratio(2.0, 1.0, True), 0.5)   # A twice the bandwidth
        self.assertEqual(report.unit_label("us"), "µs")
        self.assertEqual(report.target_label("t", {"targets": {"t": {"where_pe1_runs": "x"}}}),
                         "t (PE 1 on x)")
        self.assertEqual(report.size_label(4 << 20), "4 MiB")
        self.assertEqual(report.size_label(1536), "1536 B")

    def test_orphan_shm_objects_of_launchers_are_removed(self):
        before = osb.shm_names()
        pid = os.getpid()
        orphan = Path(f"/dev/shm/ucx_shm_posix_osbtest_{pid}")
        held = Path(f"/dev/shm/vader_segment.osbtest.{pid}")
        foreign = Path(f"/dev/shm/osbtest-not-ours-{pid}")
        for p in (orphan, held, foreign):
            p.write_bytes(b"x")
        try:
            with open(held, "rb"):
                gone, other = osb.remove_orphan_shm(before)
            self.assertIn(orphan.name, gone)
            self.assertFalse(orphan.exists())
            self.assertTrue(held.exists(), "an object in use was removed")
            self.assertIn(foreign.name, other)
            self.assertTrue(foreign.exists(), "an object of unknown origin was removed")
        finally:
            for p in (orphan, held, foreign):
                p.unlink(missing_ok=True)

    def test_the_docs_state_the_sizes_the_run_uses(self):
        """docs/bench.md's paragraph on sizes says what make_plan does (it once said 1 MiB
        where the quick run used 64 KiB)."""
        doc = (HERE.parent.parent / "docs/bench.md").read_text()
        para = " ".join(doc[doc.index("Sizes run from"):].split("\n\n")[0].split())
        q, f = osb.make_plan(True), osb.make_plan(False)
        label = report.size_label
        self.assertIn(f"Sizes run from {label(f['sizes'][0])} to {label(f['sizes'][-1])} in "
                      "powers of two", para)
        self.assertEqual(f["sizes"], [1 << k for k in range(len(f["sizes"]))])
        self.assertIn("(`--quick`: " + ", ".join(label(v) for v in q["sizes"]) + ")", para)
        self.assertIn("collectives at " + ", ".join(label(v) for v in f["coll_sizes"][:-1])
                      + f" and {label(f['coll_sizes'][-1])} (per PE; `--quick`: "
                      + ", ".join(label(v) for v in q["coll_sizes"]) + ")", para)
        self.assertIn("for " + ", ".join(str(n) for n in f["pes"][:-1]) + f" and {f['pes'][-1]}"
                      " PEs (`--quick`: " + ", ".join(str(n) for n in q["pes"]) + ")", para)

    def test_the_build_shows_cargos_progress(self):
        """A first build takes minutes: scripts/install and cargo run without --quiet and
        with their output passed through (not captured), after a line that says so."""
        calls, said = [], []

        class FakePopen:
            def __init__(self, args, **kw):
                calls.append((args, kw))
                self.pid = 0

            def wait(self, timeout=None):
                return 0

        real = osb.subprocess.Popen
        osb.subprocess.Popen = FakePopen
        try:
            tools = osb.build_gsas("debug", Path("/tmp/p"), True, True, said.append)
        finally:
            osb.subprocess.Popen = real
        self.assertEqual(len(calls), 3, calls)  # install, exanet-emu, softverbs-env
        self.assertTrue(calls[0][0][0].endswith("scripts/install"), calls)
        for args, kw in calls:
            self.assertNotIn("--quiet", args)
            self.assertNotIn("-q", args)
            for k in ("stdout", "stderr", "capture_output"):
                self.assertNotIn(k, kw, args)
            self.assertTrue(kw.get("start_new_session"), args)  # ended as a group
        self.assertIn("--with-verbs", calls[0][0])
        self.assertTrue(any("building gsas" in s and "minutes" in s for s in said), said)
        self.assertEqual(set(tools), {"exanet", "verbs"})

    def test_unknown_target_is_an_error(self):
        with self.assertRaises(SystemExit):
            osb.make_target("nonsense", Path("/nowhere"), None)
        with self.assertRaises(SystemExit):
            osb.make_target("peer:only-name", Path("/nowhere"), None)
        t, why = osb.make_target("peer:x:/nonexistent/oshcc:oshrun", Path("/"), None)
        self.assertIsNone(t)
        self.assertIn("/nonexistent/oshcc", why)


def text_boxes(svg):
    """(text, x0, x1, top, bottom) of every unrotated text element of a matplotlib SVG
    written with svg.fonttype "none", from its anchor, font size and length (DejaVu Sans:
    about 0.55 em a character, ascent 0.75 em, descent 0.2 em). Texts placed by a group's
    transform (mathtext tick labels, whose parts have no x/y of their own) are left out."""
    out = []
    for e in ET.parse(svg).getroot().iter():
        if not e.tag.endswith("text") or e.get("x") is None:
            continue
        t = "".join(e.itertext()).strip()
        rot = re.match(r"rotate\((-?[\d.]+)", e.get("transform", ""))
        if not t or (rot and float(rot.group(1)) != 0):
            continue
        style = e.get("style", "")
        fs = float(re.search(r"font: ([\d.]+)px", style).group(1))
        anchor = re.search(r"text-anchor: (\w+)", style).group(1)
        x, y, w = float(e.get("x")), float(e.get("y")), 0.55 * fs * len(t)
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        out.append((t, x0, x0 + w, y - 0.75 * fs, y + 0.2 * fs))
    return out


def text_overlaps(svg):
    """Pairs of texts of `svg` whose boxes (text_boxes) intersect."""
    b = text_boxes(svg)
    return [(p[0], q[0]) for i, p in enumerate(b) for q in b[i + 1:]
            if p[1] < q[2] and q[1] < p[2] and p[3] < q[4] and q[3] < p[4]]


class TextBoxes(unittest.TestCase):
    def test_overlapping_texts_are_found(self):
        d = Path(tempfile.mkdtemp(prefix="osb-boxes-"))
        try:
            f = d / "t.svg"
            t = ('<text style="font: 10px \'DejaVu Sans\'; text-anchor: {a}" x="{x}" '
                 'y="{y}" transform="rotate({r} {x} {y})">{s}</text>')
            f.write_text('<svg xmlns="http://www.w3.org/2000/svg">'
                         + t.format(a="middle", x=100, y=20, r="-0", s="Collectives title")
                         + t.format(a="middle", x=110, y=26, r="-0", s="barrier")
                         + t.format(a="start", x=100, y=60, r="-0", s="apart")
                         + t.format(a="middle", x=100, y=20, r="-90", s="rotated label")
                         + "</svg>")
            self.assertEqual(text_overlaps(f), [("Collectives title", "barrier")])
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Folder(unittest.TestCase):
    """One made-up complete folder (drawing is the slow part), copied where a test breaks it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="osb-test-"))
        cls.plan = osb.make_plan(True)
        cls.good = cls.tmp / "good"
        cls.good.mkdir()
        fake_run(cls.good, ["one", "two"], cls.plan, {"two": {"put_signal": "1.4"}})

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def copy(self, name):
        d = self.tmp / name
        shutil.copytree(self.good, d)
        return d

    def test_complete_folder_passes_check(self):
        self.assertEqual(report.check(self.good, ["one", "two"]), [])
        text = (self.good / "summary.md").read_text()
        self.assertIn("| one / two |", text)
        self.assertIn("below 1, A is faster", text)
        self.assertNotIn("0.00x", text)
        self.assertIn("peer-x | **SKIPPED**", text)
        self.assertIn("benchmark put_signal skipped", text)
        for fam in report.FAMILIES:
            self.assertTrue((self.good / "fig" / f"{fam}.svg").stat().st_size > 1000)

    def test_check_finds_what_is_wrong(self):
        d = self.copy("broken")
        rows = report.load_rows(d / "results.csv")
        kept = [r for r in rows if not (r["target"] == "two" and r["benchmark"] == "alltoall")]
        osb.write_csv(d / "results.csv", kept)
        (d / "fig" / "amo.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
        (d / "fig" / "coll.svg").write_text("<svg")
        probs = "\n".join(report.check(d, ["one", "two", "three"]))
        self.assertIn("two: ", probs)
        self.assertIn("expected rows missing", probs)
        self.assertIn("amo.png: does not decode", probs)
        self.assertIn("coll.svg: does not parse", probs)
        self.assertIn("target three did not run", probs)
        (d / "summary.md").write_text("nothing here")
        self.assertIn("summary.md does not name target one", "\n".join(report.check(d, [])))

    def test_check_catches_a_put_that_waits_for_a_timer(self):
        rows = report.load_rows(self.good / "results.csv")
        tab = report.table(rows)
        # The made-up figures cost the same with and without quiet: nothing to report.
        self.assertEqual(report.flag_problems(tab, "one"), [])
        slow = {k: dict(v) for k, v in tab.items()}
        key = ("gsas-udp", "flag_quiet", 8, 2)
        slow[key] = {"median": 40.0, "min": 35.0, "max": 50.0, "unit": "us", "family": "flag"}
        slow[("gsas-udp", "flag_p_wait", 8, 2)] = dict(slow[key], median=100.0)
        # 2.25 ms per round trip: each put waited for the 1 ms tick.
        slow[("gsas-udp", "flag_p_test", 8, 2)] = dict(slow[key], median=2250.0)
        probs = report.flag_problems(slow, "gsas-udp")
        self.assertEqual(len(probs), 1, probs)
        self.assertIn("flag_p_test at 2 PEs takes 2250.0 us", probs[0])
        self.assertIn("a timer?", probs[0])

    def test_figures_tell_the_truth(self):
        """The rendered SVGs: ticks only at measured sizes, µs, placement in the legend,
        the provenance footer, a title per panel, a note for a target a panel lacks, dots
        with whiskers (no bars) for the atomics."""
        def texts(fam):
            root = ET.parse(self.good / "fig" / f"{fam}.svg").getroot()
            return ["".join(e.itertext()).strip() for e in root.iter()
                    if e.tag.endswith("text")]
        t = texts("put_lat")
        measured = {report.size_label(s) for s in self.plan["sizes"]}
        sizes = {x for x in t if x.endswith(" B") or x.endswith("KiB") or x.endswith("MiB")}
        self.assertEqual(sizes, measured, t)  # no tick at 2 B, 8 B, 32 B ...
        self.assertTrue(any("µs" in x for x in t), t)
        self.assertIn("one (PE 1 on same node)", t)
        # Provenance on every image: the commit (12 digits), the date, quick or full, the
        # load before and after.
        for fam in report.FAMILIES:
            foot = [x for x in texts(fam) if x.startswith("gsas ")]
            self.assertEqual(foot, ["gsas 0123456789ab | 2026-12-02 01:00 UTC | quick run: not "
                                    "for publication | load 0.1 0.1 0.1 before, 0.7 0.2 0.1 "
                                    "after, on 2 CPUs"], fam)
        self.assertIn("put_quiet", t)
        self.assertTrue(any(x.startswith("Put latency") for x in t), t)
        s = texts("signal")
        self.assertTrue(any("two: skipped (1.4)" in x for x in s), s)
        # The note is a line of the panel's legend, which is placed clear of it; a free
        # text in the panel's corner lay under the legend (the collectives of a full run).
        root = ET.parse(self.good / "fig" / "signal.svg").getroot()
        legend = ["".join(e.itertext()).strip() for g in root.iter()
                  if g.tag.endswith("}g") and (g.get("id") or "").startswith("legend")
                  for e in g.iter() if e.tag.endswith("text")]
        self.assertTrue(any("two: skipped (1.4)" in x for x in legend), legend)
        amo = (self.good / "fig" / "amo.svg").read_text()
        self.assertIn("whiskers: min..max", amo)
        # A bar would be a path filled with a target's colour (tab10's first, #1f77b4); the
        # dots are markers (<use>), the whiskers unfilled lines.
        self.assertIsNone(re.search(r'<path [^>]*style="fill: #1f77b4', amo))
        self.assertIn('<use xlink:href="#', amo)

    def test_a_full_run_says_so_on_its_images(self):
        d = self.copy("full")
        facts = json.loads((d / "facts.json").read_text())
        facts.update(quick=False, interrupted=True)
        rows = report.load_rows(d / "results.csv")
        report.draw(d, rows, ["one", "two"], facts)
        for fam in report.FAMILIES:
            root = ET.parse(d / "fig" / f"{fam}.svg").getroot()
            foot = ["".join(e.itertext()).strip() for e in root.iter()
                    if e.tag.endswith("text") and "".join(e.itertext()).startswith("gsas ")]
            self.assertEqual(len(foot), 1, fam)
            self.assertIn("| full run |", foot[0])
            self.assertNotIn("publication", foot[0])
            self.assertTrue(foot[0].endswith("| INTERRUPTED"), foot[0])

    def test_no_text_of_a_figure_overlaps_another(self):
        """Titles, panel titles, legends, notes, tick labels and the footer of every
        rendered SVG: no two unrotated texts share space (the collectives' title was once
        drawn over a panel's, a skipped target's note over a legend)."""
        for fam in report.FAMILIES:
            svg = self.good / "fig" / f"{fam}.svg"
            if svg.exists():
                self.assertEqual(text_overlaps(svg), [], fam)

    def test_interrupted_drawing_keeps_the_summary_and_whole_images(self):
        import matplotlib.figure
        out = Path(tempfile.mkdtemp(prefix="osb-draw-"))
        real = matplotlib.figure.Figure.savefig
        calls = []

        def interrupt_third(fig, *a, **k):  # Ctrl-C in the second figure's PNG
            calls.append(1)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return real(fig, *a, **k)
        try:
            matplotlib.figure.Figure.savefig = interrupt_third
            with self.assertRaises(KeyboardInterrupt):
                fake_run(out, ["gsas-shm", "peer-x"], osb.make_plan(True))
        finally:
            matplotlib.figure.Figure.savefig = real
        try:
            self.assertTrue((out / "summary.md").exists(), "no summary after the interrupt")
            self.assertIn("gsas-shm", (out / "summary.md").read_text())
            left = sorted(p.name for p in (out / "fig").iterdir())
            self.assertEqual([n for n in left if n.endswith(".tmp")], [], left)
            for svg in (out / "fig").glob("*.svg"):  # every image there is whole
                ET.parse(svg)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def test_check_of_a_missing_folder_is_one_line(self):
        d = Path(tempfile.mkdtemp(prefix="osb-none-"))
        try:
            for target, want in ((d / "absent", "no such folder"), (d, "facts.json not found")):
                r = subprocess.run([sys.executable, str(HERE / "osb.py"), "check", str(target)],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(want, r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_compare_two_folders(self):
        a, b, out = self.copy("before"), self.copy("after"), self.tmp / "cmp"
        self.assertEqual(report.compare(a, b, out), 0)
        text = (out / "summary.md").read_text()
        self.assertIn("before:one / after:one", text)
        self.assertIn("before:two / after:two", text)
        self.assertTrue((out / "fig" / "put_lat.png").exists())


class EarlyInterrupts(unittest.TestCase):
    """Ctrl-C and SIGTERM before the first job, with stand-ins for a long build (CARGO)
    and a long compile (a peer target's oshcc): no installed gsas needed."""

    def interrupt_while(self, marker_name, argv, env, signal_group):
        """Starts scripts/bench with `argv`, waits until the stand-in that writes
        `marker_name` into the scratch folder runs (a build or a compile that sleeps), then
        sends SIGINT to the run's process group, as a terminal's Ctrl-C does
        (`signal_group`), or SIGTERM to the run alone; returns (status, output, scratch)."""
        work = Path(tempfile.mkdtemp(prefix="osb-early-"))
        marker = work / marker_name
        p = subprocess.Popen([sys.executable, str(HERE / "osb.py"), "--out", str(work / "out")]
                             + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, OSB_T_WORK=str(work), **env),
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                self.assertLess(time.monotonic(), deadline, "the stand-in never started")
                self.assertIsNone(p.poll(), p.stdout.read() if p.poll() is not None else "")
                time.sleep(0.05)
            if signal_group:
                os.killpg(p.pid, signal.SIGINT)
            else:
                p.send_signal(signal.SIGTERM)
            text, _ = p.communicate(timeout=60)
            return p.returncode, text, work
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)

    def stand_in(self, work_var, name, marker):
        """A script that writes `marker` into $OSB_T_WORK and sleeps, as a long build or
        compile would; returns its path."""
        d = Path(tempfile.mkdtemp(prefix="osb-stand-in-"))
        self.addCleanup(shutil.rmtree, d, True)
        f = d / name
        f.write_text(f'#!/bin/sh\necho $$ > "${work_var}/{marker}"\nexec sleep 300\n')
        f.chmod(0o755)
        return f

    def assert_ended_cleanly(self, rc, text, work, marker):
        try:
            self.assertEqual(rc, 130, text)
            self.assertIn("interrupted", text)
            self.assertNotIn("Traceback", text)
            pid = int((work / marker).read_text())
            # Gone, or dead and not reaped yet by whoever adopted it (a zombie).
            state = subprocess.run(["ps", "-o", "stat=,args=", "-p", str(pid)],
                                   capture_output=True, text=True).stdout.strip()
            self.assertTrue(state == "" or state.startswith("Z"),
                            f"the stand-in {pid} still runs: {state}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_ctrl_c_or_sigterm_during_the_build_ends_it(self):
        cargo = self.stand_in("OSB_T_WORK", "cargo", "building")
        for group in (True, False):
            rc, text, work = self.interrupt_while(
                "building", ["--target", "gsas-shm", "--build", "debug", "--quick"],
                {"CARGO": str(cargo)}, group)
            self.assertIn("bench: building gsas", text)
            self.assert_ended_cleanly(rc, text, work, "building")

    def test_ctrl_c_before_the_first_job_ends_the_run(self):
        oshcc = self.stand_in("OSB_T_WORK", "oshcc", "compiling")
        for group in (True, False):
            rc, text, work = self.interrupt_while(
                "compiling", ["--target", f"peer:slow:{oshcc}:true", "--quick"], {}, group)
            self.assert_ended_cleanly(rc, text, work, "compiling")


class Beside(unittest.TestCase):
    """--beside N: N CPU-bound processes run during every job and are gone after the run;
    the summary and the figures say so. A peer target of stand-ins (no installed gsas)."""

    def test_cpu_bound_processes_run_beside_every_job_and_end_with_the_run(self):
        work = Path(tempfile.mkdtemp(prefix="osb-beside-"))
        self.addCleanup(shutil.rmtree, work, True)
        # The stand-in compiler writes a "program" that reports how many processes of
        # --beside run (and run, not sleep) while it does, and one figure.
        oshcc = work / "oshcc"
        oshcc.write_text(
            "#!/bin/sh\n"
            "cat > \"$3\" <<'EOF'\n"
            "#!/bin/sh\n"
            "sleep 0.5\n"
            "n=0\n"
            "for p in $(pgrep -f 'osb-beside$'); do\n"
            "  s=$(cut -d' ' -f3 /proc/$p/stat)\n"
            "  [ \"$s\" = R ] && n=$((n+1))\n"
            "done\n"
            "echo $n >> \"$OSB_T_WORK/seen\"\n"
            "printf 'OSB\\tput_quiet\\tput_lat\\t8\\t2\\tus\\t1\\t1\\t1\\n'\n"
            "EOF\n"
            "chmod +x \"$3\"\n")
        oshcc.chmod(0o755)
        out = work / "out"
        r = subprocess.run([sys.executable, str(HERE / "osb.py"), "--quick", "--out", str(out),
                            "--programs", "p2p", "--rounds", "2", "--beside", "2",
                            "--target", f"peer:standin:{oshcc}:env N={{n}}"],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OSB_T_WORK=str(work)))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # Both jobs saw both processes at work.
        self.assertEqual((work / "seen").read_text().split(), ["2", "2"])
        left = subprocess.run(["pgrep", "-f", "osb-beside$"], capture_output=True, text=True)
        self.assertEqual(left.stdout.strip(), "", "a process of --beside outlived the run")
        self.assertEqual(json.loads((out / "facts.json").read_text())["beside"], 2)
        self.assertIn("**Measured beside 2 CPU-bound processes**",
                      (out / "summary.md").read_text())
        self.assertIn("beside 2 CPU-bound processes", report.footer(
            json.loads((out / "facts.json").read_text())))
        r = subprocess.run([sys.executable, str(HERE / "osb.py"), "--beside", "-1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("--beside must be 0 or more", r.stderr)


@unittest.skipUnless(os.environ.get("OSB_TEST_PREFIX"),
                     "OSB_TEST_PREFIX (an installed gsas) is not set")
class EndToEnd(unittest.TestCase):
    def test_programs_answer_help_and_print_a_header(self):
        prefix = Path(os.environ["OSB_TEST_PREFIX"])
        work = Path(tempfile.mkdtemp(prefix="osb-help-"))
        try:
            for p, args in (("p2p", ["--sizes", "8"]), ("coll", ["--sizes", "8"]),
                            ("gups", []), ("udp", [])):
                prog = work / f"osb_{p}"
                cc = os.environ.get("CC", "cc") if p == "udp" else str(prefix / "bin/oshcc")
                subprocess.run([cc, "-O2", "-o", str(prog), str(HERE / f"osb_{p}.c")],
                               check=True, timeout=300)
                # --help: the options and the output format, no OpenSHMEM call (no
                # launcher).
                r = subprocess.run([str(prog), "--help"], capture_output=True, text=True,
                                   timeout=60)
                self.assertEqual(r.returncode, 0, p + r.stdout + r.stderr)
                self.assertIn("usage: ", r.stdout)
                self.assertIn("OSB benchmark family size-bytes pes unit median min max",
                              r.stdout)
                r = subprocess.run([str(prog), "--bogus"], capture_output=True, text=True,
                                   timeout=60)
                self.assertEqual(r.returncode, 2, p + r.stdout + r.stderr)
                self.assertIn("unknown option --bogus", r.stderr)
                # A run: the OSU-style header first, then the figures.
                run = [str(prog)] if p == "udp" else [str(prefix / "bin/oshrun"), "-n", "2",
                                                       str(prog)]
                r = subprocess.run(run + ["--quick"] + args, capture_output=True, text=True,
                                   timeout=300)
                self.assertEqual(r.returncode, 0, p + r.stdout + r.stderr)
                lines = r.stdout.splitlines()
                first = ("# osb_udp: raw UDP on loopback, 2 processes, quick run" if p == "udp"
                         else f"# osb_{p}: gsas, OpenSHMEM 1.6, 2 PEs, quick run")
                self.assertTrue(lines[0].startswith(first), r.stdout)
                self.assertEqual(lines[1], "# OSB\tbenchmark\tfamily\tsize-bytes\tpes\tunit\t"
                                           "median\tmin\tmax", r.stdout)
                rows = [osb.parse_line(l) for l in lines[2:]]
                self.assertTrue(any(x and x[0] == "row" for x in rows), r.stdout)
                self.assertEqual(sum(1 for l in lines if l.startswith("# ")), 2, r.stdout)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_ctrl_c_keeps_results_and_leaves_nothing(self):
        out = Path(tempfile.mkdtemp(prefix="osb-int-"))
        try:
            p = subprocess.Popen([sys.executable, str(HERE / "osb.py"), "--out", str(out),
                                  "--target", "gsas-shm", "--prefix",
                                  os.environ["OSB_TEST_PREFIX"], "--rounds", "1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 # Ctrl-C as a terminal delivers it, also when this test
                                 # was started with SIGINT ignored (a background job of a
                                 # non-interactive shell): Python then ignores it too.
                                 preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                  signal.SIG_DFL))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until the first figures are in
                raw = out / "raw.csv"
                if raw.exists() and len(raw.read_text().splitlines()) > 5:
                    break
                self.assertIsNone(p.poll(), "the run ended before it could be interrupted")
                time.sleep(0.1)
            p.send_signal(signal.SIGINT)
            # Ending the jobs takes seconds; drawing the figures of what was kept can take a
            # minute or more on a loaded 2-core machine.
            text, _ = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 130, text)
            self.assertIn("interrupted", text)
            left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
            self.assertEqual(left.stdout.strip(), "", "processes of the run are still alive")
            with open(out / "results.csv") as f:
                self.assertGreater(len(list(csv.DictReader(f))), 0)
            self.assertIn("Interrupted", (out / "summary.md").read_text())
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def test_failing_jobs_are_reported_not_hidden(self):
        out = Path(tempfile.mkdtemp(prefix="osb-fail-"))
        try:
            oshcc = Path(os.environ["OSB_TEST_PREFIX"]) / "bin/oshcc"
            r = subprocess.run([sys.executable, str(HERE / "osb.py"), "--quick", "--out", str(out),
                                "--target", f"peer:broken:{oshcc}:false"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("FAILED broken osb_p2p on 2 PEs: exit status 1", r.stderr)
            self.assertIn("**FAILED** broken: osb_coll on 4 PEs", (out / "summary.md").read_text())
            probs = "\n".join(report.check(out, ["broken"]))
            self.assertIn("failure recorded", probs)
            self.assertIn("expected rows missing", probs)
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()

//! Teams with several PEs, on one node (1, 2, 3, 4 and 8 PEs) and on two and three nodes:
//! `SHMEM_TEAM_SHARED` is exactly the PEs `shmem_ptr` reaches; strided splits (positive and
//! negative strides, one PE), 2-D splits (clamped `xrange`), nested splits, with
//! `translate_pe`, `num_contexts`, and collectives on the new teams in team numbering;
//! contexts of a split team numbering PEs in the team; `Team::ptr` (`shmem_team_ptr`) equal
//! to `shmem_ptr` of the member and usable for loads; refused splits (the same on every
//! PE) and non-members getting `SHMEM_TEAM_INVALID`; the C ABI of splits, destroy and
//! queries; many splits and destroys in a row (blocks reused), and splits until no block is
//! left.

mod rust_common;

use std::ffi::{c_int, c_long, c_void};
use std::ptr::null;

use rust_common::{run_expect, topologies, world};
use shmem::{CtxOptions, Shmem, SymVec, Team, TeamConfig, op};

#[repr(C)]
struct Config {
    num_contexts: c_int,
}

unsafe extern "C" {
    static gsas_shmem_team_shared: u8;
    fn shmem_team_split_strided(
        parent: *const c_void,
        start: c_int,
        stride: c_int,
        size: c_int,
        config: *const Config,
        mask: c_long,
        new_team: *mut *const c_void,
    ) -> c_int;
    fn shmem_team_split_2d(
        parent: *const c_void,
        xrange: c_int,
        xconfig: *const Config,
        xmask: c_long,
        xteam: *mut *const c_void,
        yconfig: *const Config,
        ymask: c_long,
        yteam: *mut *const c_void,
    ) -> c_int;
    fn shmem_team_destroy(team: *const c_void);
    fn pshmem_team_destroy(team: *const c_void);
    fn shmem_team_my_pe(team: *const c_void) -> c_int;
    fn shmem_team_n_pes(team: *const c_void) -> c_int;
    fn shmem_team_get_config(team: *const c_void, mask: c_long, config: *mut Config) -> c_int;
    fn shmem_team_translate_pe(src: *const c_void, pe: c_int, dest: *const c_void) -> c_int;
    fn shmem_team_sync(team: *const c_void) -> c_int;
    fn shmem_int_sum_reduce(team: *const c_void, d: *mut c_int, s: *const c_int, n: usize)
    -> c_int;
}

const NUM_CONTEXTS: c_long = 1;

fn shared() -> *const c_void {
    (&raw const gsas_shmem_team_shared).cast()
}

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "split" => split(shmem),
        "cabi" => cabi(shmem),
        "churn" => churn(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

/// Buffers of `n` elements for [`exercise`], allocated by every PE (allocations are world
/// collectives, team collectives are not).
struct Bufs<'a> {
    v: SymVec<'a, u64>,
    s: SymVec<'a, u64>,
    t: SymVec<'a, u64>,
    all: SymVec<'a, u64>,
    slots: SymVec<'a, u64>,
}

impl<'a> Bufs<'a> {
    fn new(shmem: &'a Shmem) -> Bufs<'a> {
        let n = shmem.n_pes();
        Bufs {
            v: shmem.alloc_vec(1).unwrap(),
            s: shmem.alloc_vec(1).unwrap(),
            t: shmem.alloc_vec(1).unwrap(),
            all: shmem.alloc_vec(n).unwrap(),
            slots: shmem.alloc_vec(n).unwrap(),
        }
    }
}

/// Checks numbering, translation and collectives of `team`, whose members are world PEs
/// `members` in team order.
fn exercise(shmem: &Shmem, b: &Bufs<'_>, team: Team<'_>, members: &[usize]) {
    let me = shmem.my_pe();
    let world = shmem.team_world();
    let mine = members.iter().position(|&w| w == me).expect("a member");
    assert_eq!(team.my_pe(), Some(mine));
    assert_eq!(team.n_pes(), members.len());
    for (t, &w) in members.iter().enumerate() {
        assert_eq!(team.translate_pe(t, &world), Some(w));
        assert_eq!(world.translate_pe(w, &team), Some(t));
    }
    assert_eq!(team.translate_pe(members.len(), &world), None);
    let k = members.len();
    // Sum of the members' world numbers; broadcast from team PE k-1; fcollect of world
    // numbers in team order; each into its own buffer (a broadcast's root may write my
    // `dest` as soon as it is done with the reduction).
    team.sync().unwrap();
    b.v.write(0, me as u64);
    team.sync().unwrap();
    // shmem_team_ptr: the world pointer of the member (same node: usable for loads, which
    // see the member's own value), nothing past the team.
    for (t, &w) in members.iter().enumerate() {
        let p = team.ptr(b.v.at(0), t);
        assert_eq!(p, shmem.ptr(b.v.at(0), w), "team PE {t} (world {w})");
        if let Some(p) = p {
            // SAFETY: a pointer into the member's symmetric heap, mapped here; the member
            // wrote the value before the sync and changes it only after the next one.
            assert_eq!(unsafe { p.as_ptr().read_volatile() }, w as u64);
        }
    }
    assert_eq!(team.ptr(b.v.at(0), k), None);
    team.reduce(op::Sum, &b.s, &b.v).unwrap();
    assert_eq!(b.s.read(0), members.iter().sum::<usize>() as u64);
    team.broadcast(&b.t, &b.v, k - 1).unwrap();
    assert_eq!(b.t.read(0), members[k - 1] as u64);
    team.fcollect(&b.all, &b.v).unwrap();
    assert_eq!(
        b.all.to_vec()[..k],
        members.iter().map(|&w| w as u64).collect::<Vec<_>>()[..]
    );
    // A context of the team numbers PEs in the team: put my world number to the next team
    // PE.
    team.sync().unwrap();
    {
        let ctx = team.create_ctx(CtxOptions::NONE).unwrap();
        ctx.put(b.slots.at(mine), &[me as u64 + 1000], (mine + 1) % k);
        ctx.quiet();
    }
    team.sync().unwrap();
    let left = (mine + k - 1) % k;
    assert_eq!(b.slots.read(left), members[left] as u64 + 1000);
    team.sync().unwrap();
}

fn split(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let world = shmem.team_world();
    let b = Bufs::new(shmem);
    let mut checked = 0;
    // SHMEM_TEAM_SHARED: exactly the PEs whose memory shmem_ptr reaches.
    let sh = shmem.team_shared();
    let reachable: Vec<usize> = (0..n)
        .filter(|&p| shmem.ptr(b.v.at(0), p).is_some())
        .collect();
    assert!(reachable.contains(&me));
    let members: Vec<usize> = (0..sh.n_pes())
        .map(|t| sh.translate_pe(t, &world).unwrap())
        .collect();
    assert_eq!(members, reachable, "SHMEM_TEAM_SHARED");
    exercise(shmem, &b, sh, &members);
    // Strided: the even PEs with 3 contexts configured.
    let evens: Vec<usize> = (0..n).step_by(2).collect();
    let cfg = TeamConfig { num_contexts: 3 };
    let t = world.split_strided(0, 2, evens.len(), cfg).unwrap();
    assert_eq!(t.is_some(), me % 2 == 0);
    // Negative stride: every PE in reverse order.
    let rev = world
        .split_strided(n - 1, -1, n, TeamConfig::default())
        .unwrap()
        .unwrap();
    let reversed: Vec<usize> = (0..n).rev().collect();
    if let Some(t) = &t {
        assert_eq!(t.team().num_contexts(), 3);
        exercise(shmem, &b, t.team(), &evens);
        checked += 1;
        // Nested: every other even PE.
        let fours: Vec<usize> = evens.iter().copied().step_by(2).collect();
        let f = t
            .team()
            .split_strided(0, 2, fours.len(), TeamConfig::default())
            .unwrap();
        assert_eq!(f.is_some(), me % 4 == 0);
        if let Some(f) = &f {
            assert_eq!(
                f.team().translate_pe(f.team().n_pes() - 1, &world),
                fours.last().copied()
            );
            exercise(shmem, &b, f.team(), &fours);
            checked += 1;
        }
    }
    exercise(shmem, &b, rev.team(), &reversed);
    checked += 1;
    drop(t);
    drop(rev);
    // One PE (stride 0 allowed with size 1): the last.
    let one = world
        .split_strided(n - 1, 0, 1, TeamConfig::default())
        .unwrap();
    assert_eq!(one.is_some(), me == n - 1);
    if let Some(o) = &one {
        assert_eq!((o.team().my_pe(), o.team().n_pes()), (Some(0), 1));
        o.team().sync().unwrap();
    }
    drop(one);
    // 2-D: rows of 2 and columns, then xrange beyond N (one row, singleton columns).
    let (x, y) = world
        .split_2d(2, TeamConfig::default(), TeamConfig { num_contexts: 1 })
        .unwrap();
    let row: Vec<usize> = (me / 2 * 2..(me / 2 * 2 + 2).min(n)).collect();
    let column: Vec<usize> = (me % 2..n).step_by(2).collect();
    assert_eq!(y.team().num_contexts(), 1);
    exercise(shmem, &b, x.team(), &row);
    exercise(shmem, &b, y.team(), &column);
    drop((x, y));
    let (x, y) = world
        .split_2d(n + 5, TeamConfig::default(), TeamConfig::default())
        .unwrap();
    assert_eq!((x.team().n_pes(), x.team().my_pe()), (n, Some(me)));
    assert_eq!((y.team().n_pes(), y.team().my_pe()), (1, Some(0)));
    x.team().sync().unwrap();
    y.team().sync().unwrap();
    drop((x, y));
    checked += 2;
    // Refused splits: the same on every PE, and the library stays usable.
    for (start, stride, size) in [(0, 1, n + 1), (n, 1, 1), (0, 0, 2), (n - 1, 1, 2)] {
        let e = world.split_strided(start, stride, size, TeamConfig::default());
        assert!(e.is_err(), "start {start} stride {stride} size {size}");
    }
    assert!(
        world
            .split_2d(0, TeamConfig::default(), TeamConfig::default())
            .is_err()
    );
    world.sync().unwrap();
    shmem.barrier_all();
    format!("split ok: {checked}")
}

fn cabi(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe() as c_int, shmem.n_pes() as c_int);
    let mut t: *const c_void = null();
    let cfg = Config { num_contexts: 2 };
    // SAFETY: valid handles and out-pointers; every PE calls the collectives.
    unsafe {
        assert_eq!(
            shmem_team_split_strided(world(), 0, 1, n, &cfg, NUM_CONTEXTS, &mut t),
            0
        );
        assert!(!t.is_null());
        assert_eq!((shmem_team_my_pe(t), shmem_team_n_pes(t)), (me, n));
        let mut got = Config { num_contexts: -1 };
        assert_eq!(shmem_team_get_config(t, NUM_CONTEXTS, &mut got), 0);
        assert_eq!(got.num_contexts, 2);
        assert_eq!(shmem_team_translate_pe(t, n - 1, world()), n - 1);
        assert_eq!(
            shmem_team_translate_pe(world(), me, shared()),
            shmem_team_my_pe(shared())
        );
        assert_eq!(shmem_team_sync(t), 0);
        let v = shmem.alloc_vec::<c_int>(1).unwrap();
        v.write(0, me);
        assert_eq!(
            shmem_int_sum_reduce(t, v.as_ptr().cast_mut(), v.as_ptr(), 1),
            0
        );
        assert_eq!(v.read(0), n * (n - 1) / 2);
        shmem_team_destroy(t);
        // Refusals: an invalid parent, a NULL config with its mask bit, bad arguments.
        let mut u: *const c_void = world();
        assert_ne!(
            shmem_team_split_strided(null(), 0, 1, 1, null(), 0, &mut u),
            0
        );
        assert!(u.is_null());
        u = world();
        assert_ne!(
            shmem_team_split_strided(world(), 0, 1, n, null(), NUM_CONTEXTS, &mut u),
            0
        );
        assert!(u.is_null());
        assert_ne!(
            shmem_team_split_strided(world(), 0, 1, 0, null(), 0, &mut u),
            0
        );
        let (mut x, mut y) = (world(), world());
        assert_ne!(
            shmem_team_split_2d(world(), 0, null(), 0, &mut x, null(), 0, &mut y),
            0
        );
        assert!(x.is_null() && y.is_null());
        assert_eq!(shmem_team_my_pe(null()), -1);
        assert_eq!(shmem_team_n_pes(null()), -1);
        assert_eq!(shmem_team_sync(null()), 1, "SHMEM_TEAM_INVALID");
        shmem_team_destroy(null());
        // 2-D through the C ABI, destroyed with the profiling twin.
        assert_eq!(
            shmem_team_split_2d(world(), 1, &cfg, NUM_CONTEXTS, &mut x, null(), 0, &mut y),
            0
        );
        assert_eq!((shmem_team_n_pes(x), shmem_team_my_pe(x)), (1, 0));
        assert_eq!((shmem_team_n_pes(y), shmem_team_my_pe(y)), (n, me));
        // A split of which this PE is not a member: the odd PEs get SHMEM_TEAM_INVALID.
        let mut e: *const c_void = world();
        assert_eq!(
            shmem_team_split_strided(y, 0, 2, (n + 1) / 2, null(), 0, &mut e),
            0
        );
        assert_eq!(e.is_null(), me % 2 == 1);
        pshmem_team_destroy(e);
        pshmem_team_destroy(x);
        pshmem_team_destroy(y);
    }
    shmem.barrier_all();
    "cabi ok".into()
}

/// Many splits in a row, several alive at once, and splits until no block is left.
fn churn(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let world = shmem.team_world();
    let v = shmem.alloc_vec::<u64>(1).unwrap();
    let s = shmem.alloc_vec::<u64>(1).unwrap();
    v.write(0, me as u64);
    shmem.barrier_all();
    let sum = (n * (n - 1) / 2) as u64;
    for round in 0..100 {
        let t = world
            .split_strided(0, 1, n, TeamConfig::default())
            .unwrap()
            .unwrap();
        let team = t.team();
        for _ in 0..round % 3 {
            team.sync().unwrap();
        }
        team.reduce(op::Sum, &s, &v).unwrap();
        assert_eq!(s.read(0), sum, "round {round}");
    }
    let mut alive = Vec::new();
    loop {
        match world.split_strided(0, 1, n, TeamConfig::default()) {
            Ok(t) => alive.push(t.unwrap()),
            Err(e) => {
                assert!(e.to_string().contains("no team block"), "{e}");
                break;
            }
        }
    }
    let most = alive.len();
    for t in &alive {
        t.team().sync().unwrap();
    }
    let last = alive.last().unwrap().team();
    last.reduce(op::Max, &s, &v).unwrap();
    assert_eq!(s.read(0), n as u64 - 1);
    drop(alive);
    let again = world
        .split_strided(0, 1, n, TeamConfig::default())
        .unwrap()
        .unwrap();
    again.team().reduce(op::Sum, &s, &v).unwrap();
    assert_eq!(s.read(0), sum);
    drop(again);
    shmem.barrier_all();
    format!("churn ok: {most} teams at once")
}

fn split_checked(pe: usize, _n: usize) -> String {
    let evens = usize::from(pe % 2 == 0);
    let fours = usize::from(pe % 4 == 0);
    format!("split ok: {}", evens + fours + 1 + 2)
}

#[test]
fn split_one_node() {
    run_expect(
        "split",
        &topologies(1, &[1, 2, 3, 4, 8]),
        &[],
        split_checked,
    );
}

#[test]
fn split_several_nodes() {
    run_expect("split", &topologies(2, &[1, 2, 4]), &[], split_checked);
    run_expect("split", &topologies(3, &[1, 2]), &[], split_checked);
}

#[test]
fn cabi_one_and_two_nodes() {
    run_expect("cabi", &topologies(1, &[1, 3, 4]), &[], |_, _| {
        "cabi ok".into()
    });
    run_expect("cabi", &topologies(2, &[2]), &[], |_, _| "cabi ok".into());
}

#[test]
fn churn_one_and_two_nodes() {
    // 63 blocks, two of them the predefined teams'.
    let want = |_: usize, _: usize| "churn ok: 61 teams at once".to_string();
    run_expect("churn", &topologies(1, &[1, 4, 8]), &[], want);
    run_expect("churn", &topologies(2, &[2]), &[], want);
}

//! Shared parts of the PMI integration tests: the child roles (what a rank process does
//! when a test binary is re-executed in child mode) and the parent-side job runner.
//!
//! A rank is the test binary again, started through [`child_command`] (or a launcher given
//! `self_test_argv("child_pe")`) with [`ROLE`] set; the binary's `child_pe` calls
//! [`child_entry`], which plays that role and exits with the role's status.

use std::os::fd::FromRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::launch;
use gsas_launch::pmi::{Client, ClientConfig, Connection, Event, PmiError, Server, Stop};

/// Selects child mode and the role.
pub const ROLE: &str = "GSAS_PMI_TEST_ROLE";
/// Comma-separated node of every rank, checked by the `exchange` role.
pub const EXPECT_NODES: &str = "GSAS_PMI_TEST_NODES";
/// The rank that misbehaves in the `abort` and `die` roles.
pub const BAD_RANK: &str = "GSAS_PMI_TEST_BAD_RANK";
/// A second misbehaving rank in the `die` role (sends half a line, then exits).
pub const HALF_LINE_RANK: &str = "GSAS_PMI_TEST_HALF_LINE_RANK";
/// Exit code used by the aborting rank.
pub const ABORT_CODE: i32 = 7;
/// When set, the aborting rank does not exit with [`ABORT_CODE`] itself but waits to be
/// killed (at most 120 s, then exits with 99), so that a launcher's exit status of
/// [`ABORT_CODE`] can only come from the abort request.
pub const WAIT_AFTER_ABORT: &str = "GSAS_PMI_TEST_WAIT_AFTER_ABORT";

/// Generous timeouts: ranks may start slowly under qemu on a loaded two-core machine.
pub fn child_config() -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_secs(60),
        barrier_timeout: Duration::from_secs(180),
        connect_timeout: Duration::from_secs(60),
        ..ClientConfig::default()
    }
}

/// The bytes rank `rank` publishes under a key of `len` bytes: every byte value occurs.
pub fn value_for(rank: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(rank * 7) as u8)
        .collect()
}

/// In child mode, plays the role and exits; otherwise returns.
pub fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        assert!(
            std::env::var_os("PMI_FD").is_none() && std::env::var_os("PMI_PORT").is_none(),
            "started by a PMI launcher without {ROLE}: refusing to run the parent test \
             inside a job"
        );
        return;
    };
    let code = match play(&role) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("pmi-child role {role}: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn play(role: &str) -> Result<(), String> {
    match role {
        "exchange" => exchange(),
        "abort" => abort(),
        "die" => die(),
        "singleton" => singleton(),
        "pmix" => match Client::from_env_with(child_config()) {
            Err(e @ PmiError::PmixLauncher { .. }) => {
                println!("pmi-child refused: {e}");
                Ok(())
            }
            other => Err(format!("expected a PMIx refusal, got {other:?}")),
        },
        other => Err(format!("unknown role {other:?}")),
    }
}

fn connect() -> Result<Client, String> {
    let c = Client::from_env_with(child_config()).map_err(|e| e.to_string())?;
    let expect = if std::env::var_os("PMI_FD").is_some() {
        Connection::Fd
    } else if std::env::var_os("PMI_PORT").is_some() {
        Connection::Port
    } else {
        Connection::Singleton
    };
    if c.connection() != expect {
        return Err(format!(
            "connected via {:?}, expected {expect:?}",
            c.connection()
        ));
    }
    Ok(c)
}

fn bad_rank(var: &str) -> Option<u32> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

/// put (a short and a multi-chunk value) / barrier / get everyone's / missing key /
/// process mapping / barrier / finalize.
fn exchange() -> Result<(), String> {
    let mut c = connect()?;
    let (r, n) = (c.rank(), c.size());
    let e = |e: PmiError| e.to_string();
    c.kvs_put(&format!("short-{r}"), &value_for(r, 16))
        .map_err(e)?;
    c.kvs_put(&format!("long-{r}"), &value_for(r, 3000 + r as usize))
        .map_err(e)?;
    c.kvs_put("empty", &[]).map_err(e)?;
    c.barrier().map_err(e)?;
    for p in 0..n {
        let short = c.kvs_get(&format!("short-{p}")).map_err(e)?;
        if short != Some(value_for(p, 16)) {
            return Err(format!("short-{p}: got {short:?}"));
        }
        let long = c.kvs_get(&format!("long-{p}")).map_err(e)?;
        if long != Some(value_for(p, 3000 + p as usize)) {
            return Err(format!("long-{p}: got {:?} bytes", long.map(|v| v.len())));
        }
    }
    if c.kvs_get("empty").map_err(e)? != Some(Vec::new()) {
        return Err("empty value not read back".into());
    }
    let missing = c.kvs_get("never-published").map_err(e)?;
    if missing.is_some() {
        return Err(format!("missing key returned {missing:?}"));
    }
    let nodes = c.node_of_rank().map_err(e)?;
    let expected: Option<Vec<u32>> = std::env::var(EXPECT_NODES)
        .ok()
        .map(|s| s.split(',').map(|x| x.parse().unwrap()).collect());
    if nodes != expected {
        return Err(format!("node_of_rank {nodes:?}, expected {expected:?}"));
    }
    c.barrier().map_err(e)?;
    c.finalize().map_err(e)?;
    println!("pmi-child rank {r} of {n} ok");
    Ok(())
}

/// The bad rank aborts; the others expect their barrier to fail (gsas server) or get
/// killed (Hydra), then finalize.
fn abort() -> Result<(), String> {
    let mut c = connect()?;
    let r = c.rank();
    if Some(r) == bad_rank(BAD_RANK) {
        println!("pmi-child rank {r} aborting");
        c.abort(ABORT_CODE, &format!("rank {r} gives up"))
            .map_err(|e| e.to_string())?;
        if std::env::var_os(WAIT_AFTER_ABORT).is_some() {
            std::thread::sleep(Duration::from_secs(120));
            std::process::exit(99);
        }
        std::process::exit(ABORT_CODE);
    }
    expect_failed_barrier(c, "aborted")
}

/// The bad rank exits without finalize after a put; the half-line rank sends half a
/// request and exits; the others expect their barrier to fail, then finalize.
fn die() -> Result<(), String> {
    if let (Some(h), Ok(rank)) = (bad_rank(HALF_LINE_RANK), std::env::var("PMI_RANK")) {
        if rank == h.to_string() {
            let fd: i32 = std::env::var("PMI_FD").unwrap().parse().unwrap();
            // SAFETY: the launcher gave this process the descriptor named in PMI_FD for
            // its PMI connection, and no Client was created in this process, so nothing
            // else owns it.
            let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
            use std::io::Write;
            f.write_all(b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=")
                .map_err(|e| e.to_string())?;
            std::process::exit(4);
        }
    }
    let mut c = connect()?;
    let r = c.rank();
    if Some(r) == bad_rank(BAD_RANK) {
        c.kvs_put("doomed", b"x").map_err(|e| e.to_string())?;
        std::process::exit(3);
    }
    expect_failed_barrier(c, "lost")
}

fn expect_failed_barrier(mut c: Client, why: &str) -> Result<(), String> {
    let r = c.rank();
    c.kvs_put(&format!("short-{r}"), b"v")
        .map_err(|e| e.to_string())?;
    match c.barrier() {
        Err(PmiError::Refused { msg, .. }) if msg.contains(why) => {
            println!("pmi-child rank {r} barrier failed as expected: {msg}");
        }
        other => {
            return Err(format!(
                "barrier: expected a refusal mentioning {why:?}, got {other:?}"
            ));
        }
    }
    c.finalize().map_err(|e| e.to_string())
}

fn singleton() -> Result<(), String> {
    let mut c = connect()?;
    let e = |e: PmiError| e.to_string();
    if (c.rank(), c.size()) != (0, 1) {
        return Err(format!("singleton is rank {} of {}", c.rank(), c.size()));
    }
    c.kvs_put("long-0", &value_for(0, 5000)).map_err(e)?;
    c.barrier().map_err(e)?;
    if c.kvs_get("long-0").map_err(e)? != Some(value_for(0, 5000)) {
        return Err("value not read back".into());
    }
    if c.kvs_get("absent").map_err(e)?.is_some() {
        return Err("absent key found".into());
    }
    if c.node_of_rank().map_err(e)? != Some(vec![0]) {
        return Err("bad singleton node map".into());
    }
    c.finalize().map_err(e)?;
    println!("pmi-child singleton ok");
    Ok(())
}

/// A `Command` re-running this binary's `child_pe` as a rank with role `role`,
/// output captured, PMI variables of the parent's own environment removed.
pub fn child_command(role: &str) -> Command {
    let mut cmd = launch::self_test("child_pe").expect("current_exe");
    cmd.env(ROLE, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "PMI_FD",
        "PMI_PORT",
        "PMI_ID",
        "PMI_RANK",
        "PMI_SIZE",
        "PMIX_VERSION",
        "PMIX_RANK",
        "PRTE_LAUNCHED",
    ] {
        cmd.env_remove(v);
    }
    cmd
}

/// What a job run under our server produced.
#[derive(Debug)]
pub struct Outcome {
    /// Why the server stopped.
    pub stop: Stop,
    /// The server's events, in order.
    pub events: Vec<Event>,
    /// Each rank's exit status and output.
    pub outputs: Vec<(u32, Output)>,
}

impl Outcome {
    /// Every rank's output, for assertion messages.
    pub fn transcript(&self) -> String {
        let mut s = format!("events: {:#?}\n", self.events);
        for (r, o) in &self.outputs {
            s.push_str(&format!(
                "--- rank {r}: {}\nstdout: {}\nstderr: {}\n",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        s
    }

    /// Rank `rank`'s output (panics when the rank did not run).
    pub fn output(&self, rank: u32) -> &Output {
        &self.outputs.iter().find(|(r, _)| *r == rank).unwrap().1
    }
}

/// Serves `server` until the job is over (at most `limit`), then collects the children.
pub fn run_job(mut server: Server, children: Vec<(u32, Child)>, limit: Duration) -> Outcome {
    let deadline = Instant::now() + limit;
    let mut events = Vec::new();
    let stop = loop {
        if let Some(stop) = server
            .step(Duration::from_millis(200), |e| events.push(e))
            .expect("server step")
        {
            break Some(stop);
        }
        if Instant::now() >= deadline {
            break None;
        }
    };
    let mut outputs = Vec::new();
    for (r, mut child) in children {
        if stop.is_none() {
            let _ = child.kill();
        }
        let out = launch::collect_output(child, Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("rank {r}: {e}"));
        outputs.push((r, out));
    }
    let outcome = Outcome {
        stop: stop.unwrap_or(Stop::Shutdown),
        events,
        outputs,
    };
    assert!(
        stop.is_some(),
        "job did not finish within {limit:?}\n{}",
        outcome.transcript()
    );
    outcome
}

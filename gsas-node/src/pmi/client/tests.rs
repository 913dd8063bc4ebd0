use super::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

/// A scripted server: for each expected request prefix, the raw bytes to answer
/// (possibly several lines, possibly none). Returns every request line it saw. After
/// the script it closes the connection, or with `hold` waits for the client to close.
fn fake(script: Vec<(&'static str, &'static str)>) -> (OwnedFd, JoinHandle<Vec<String>>) {
    fake_with(script, false)
}

fn fake_with(
    script: Vec<(&'static str, &'static str)>,
    hold: bool,
) -> (OwnedFd, JoinHandle<Vec<String>>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut w = ours.try_clone().unwrap();
        let mut r = BufReader::new(ours);
        for (expect, answer) in script {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap() == 0 {
                break;
            }
            assert!(
                line.starts_with(expect),
                "expected {expect:?}, got {line:?}"
            );
            seen.push(line.trim_end().to_owned());
            w.write_all(answer.as_bytes()).unwrap();
        }
        let mut rest = String::new();
        while hold && r.read_line(&mut rest).unwrap_or(0) > 0 {}
        seen
    });
    (OwnedFd::from(theirs), h)
}

const NEW_STYLE_INIT: [(&str, &str); 5] = [
    (
        "cmd=init pmi_version=1 pmi_subversion=1\n",
        "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n",
    ),
    (
        "cmd=get_maxes\n",
        "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
    ),
    ("cmd=get_appnum\n", "cmd=appnum rc=0 appnum=3\n"),
    (
        "cmd=get_my_kvsname\n",
        "cmd=my_kvsname rc=0 kvsname=kvs_7\n",
    ),
    (
        "cmd=get_universe_size\n",
        "cmd=universe_size rc=0 size=-1\n",
    ),
];

fn quick() -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_secs(20),
        barrier_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(20),
        pmix: false,
    }
}

#[test]
fn mpich_4_1_token_order() {
    let mut script = NEW_STYLE_INIT.to_vec();
    script.extend([
        (
            "cmd=get kvsname=kvs_7 key=absent\n",
            "cmd=get_result rc=1\n",
        ),
        (
            "cmd=put kvsname=kvs_7 key=k value=1:0102\n",
            "cmd=put_result rc=0\n",
        ),
        (
            "cmd=barrier_in\n",
            "cmd=barrier_out rc=0 group=WORLD tag=0\n",
        ),
        (
            "cmd=get kvsname=kvs_7 key=k\n",
            "cmd=get_result rc=0 value=1:0102 extra=ignored\n",
        ),
        (
            "cmd=get kvsname=kvs_7 key=PMI_process_mapping\n",
            "cmd=get_result rc=0 value=(vector,(0,2,1))\n",
        ),
        ("cmd=finalize\n", "cmd=finalize_ack rc=0\n"),
    ]);
    let (fd, h) = fake(script);
    let mut c = Client::from_fd(fd, 1, 2, quick()).unwrap();
    assert_eq!((c.rank(), c.size(), c.appnum()), (1, 2, 3));
    assert_eq!(c.kvsname(), "kvs_7");
    assert_eq!(c.universe_size(), None);
    assert_eq!(c.connection(), Connection::Fd);
    assert_eq!(c.kvs_get("absent").unwrap(), None);
    c.kvs_put("k", &[1, 2]).unwrap();
    c.barrier().unwrap();
    assert_eq!(c.kvs_get("k").unwrap(), Some(vec![1, 2]));
    assert_eq!(c.node_of_rank().unwrap(), Some(vec![0, 1]));
    c.finalize().unwrap();
    assert!(matches!(
        c.barrier(),
        Err(PmiError::Finished { op: "barrier" })
    ));
    assert_eq!(h.join().unwrap().len(), 11);
}

#[test]
fn failed_put_and_barrier_are_errors() {
    let mut script = NEW_STYLE_INIT.to_vec();
    script.extend([
        (
            "cmd=put kvsname=kvs_7 key=k value=1:\n",
            "cmd=put_result rc=-1 msg=no_room\n",
        ),
        (
            "cmd=barrier_in\n",
            "cmd=barrier_out rc=-1 msg=rank_0_lost\n",
        ),
    ]);
    let (fd, h) = fake(script);
    let mut c = Client::from_fd(fd, 0, 2, quick()).unwrap();
    let e = c.kvs_put("k", &[]).unwrap_err();
    assert!(
        matches!(&e, PmiError::Refused { rc: -1, msg, .. } if msg == "no_room"),
        "{e}"
    );
    let e = c.barrier().unwrap_err().to_string();
    assert!(e.contains("barrier_in") && e.contains("rank_0_lost"), "{e}");
    h.join().unwrap();
}

#[test]
fn timeout_names_command_and_partial_response() {
    let mut script = NEW_STYLE_INIT.to_vec();
    script.push(("cmd=get kvsname=kvs_7 key=slow\n", "cmd=get_res"));
    script.push(("cmd=abort exitcode=2 message=timed_out\n", ""));
    let (fd, h) = fake_with(script, true);
    let mut c = Client::from_fd(fd, 0, 1, quick()).unwrap();
    c.config.timeout = Duration::from_millis(200);
    let e = c.kvs_get("slow").unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, PmiError::Timeout { .. }), "{text}");
    assert!(
        text.contains("cmd=get key=slow") && text.contains("cmd=get_res"),
        "{text}"
    );
    assert!(matches!(
        c.barrier(),
        Err(PmiError::Unusable { op: "barrier" })
    ));
    c.abort(2, "timed out").unwrap();
    drop(c);
    let seen = h.join().unwrap();
    assert_eq!(
        seen.last().map(String::as_str),
        Some("cmd=abort exitcode=2 message=timed_out")
    );
}

#[test]
fn closed_connection_and_wrong_reply() {
    let (fd, h) = fake(vec![NEW_STYLE_INIT[0]]);
    let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err();
    assert!(
        matches!(e, PmiError::Closed { ref command, .. } if command == "cmd=get_maxes"),
        "{e}"
    );
    h.join().unwrap();

    let (fd, h) = fake(vec![("cmd=init", "cmd=maxes kvsname_max=1\n")]);
    let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err().to_string();
    assert!(e.contains("expected cmd=response_to_init"), "{e}");
    h.join().unwrap();

    let (fd, h) = fake(vec![(
        "cmd=init",
        "cmd=response_to_init pmi_version=2 rc=0\n",
    )]);
    let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err().to_string();
    assert!(e.contains("version 1"), "{e}");
    h.join().unwrap();

    let (fd, h) = fake(vec![("cmd=init", "\u{1}garbage\n")]);
    let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err();
    assert!(matches!(e, PmiError::Protocol { .. }), "{e}");
    h.join().unwrap();
}

fn tcp_fake(answer: &'static str) -> (String, JoinHandle<String>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut first = String::new();
        r.read_line(&mut first).unwrap();
        w.write_all(answer.as_bytes()).unwrap();
        for (expect, reply) in NEW_STYLE_INIT {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert_eq!(line, expect);
            w.write_all(reply.as_bytes()).unwrap();
        }
        first
    });
    (addr, h)
}

#[test]
fn initack_hydra_style_and_single_line_style() {
    let (addr, h) = tcp_fake("cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=1\n");
    let c = Client::connect(&addr, 2, quick()).unwrap();
    assert_eq!((c.rank(), c.size(), c.debug()), (2, 4, true));
    assert_eq!(c.connection(), Connection::Port);
    assert_eq!(h.join().unwrap(), "cmd=initack pmiid=2\n");

    let (addr, h) = tcp_fake("cmd=initack rc=0 size=3 rank=1\n");
    let c = Client::connect(&addr, 1, quick()).unwrap();
    assert_eq!((c.rank(), c.size(), c.debug()), (1, 3, false));
    h.join().unwrap();

    let (addr, h) = tcp_fake("cmd=initack\ncmd=set size=2\ncmd=set rank=5\ncmd=set debug=0\n");
    let e = Client::connect(&addr, 5, quick()).unwrap_err().to_string();
    assert!(e.contains("rank 5 is not below the job size 2"), "{e}");
    drop(h);
}

/// A variable lookup over fixed pairs.
fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
    move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| OsString::from(v))
    }
}

#[test]
fn environment_is_validated() {
    let cfg = quick();
    let e = Client::from_vars(cfg, env(&[("PMIX_RANK", "0")])).unwrap_err();
    assert!(matches!(
        e,
        PmiError::PmixLauncher {
            var: "PMIX_RANK",
            ..
        }
    ));
    assert!(
        e.to_string().contains("PMIx launcher") && e.to_string().contains("switched off"),
        "{e}"
    );
    let e = Client::from_vars(cfg, env(&[("PRTE_LAUNCHED", "1")])).unwrap_err();
    assert!(matches!(
        e,
        PmiError::PmixLauncher {
            var: "PRTE_LAUNCHED",
            ..
        }
    ));

    let e = Client::from_vars(cfg, env(&[("PMI_FD", "x7")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("PMI_FD") && e.contains("x7"), "{e}");
    let e = Client::from_vars(
        cfg,
        env(&[("PMI_FD", "1"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("stdout"), "{e}");
    let e = Client::from_vars(cfg, env(&[("PMI_FD", "900"), ("PMI_SIZE", "2")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("PMI_RANK") && e.contains("not set"), "{e}");
    let e = Client::from_vars(
        cfg,
        env(&[("PMI_FD", "900"), ("PMI_RANK", "2"), ("PMI_SIZE", "2")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("rank 2 is not below"), "{e}");
    let e = Client::from_vars(cfg, env(&[("PMI_PORT", "nohostport"), ("PMI_ID", "0")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("host:port"), "{e}");
    let e = Client::from_vars(cfg, env(&[("PMI_PORT", "localhost:1")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("PMI_ID"), "{e}");
}

#[test]
fn unopened_pmi_fd_is_refused_and_releases_the_claim() {
    // Descriptor 1000 is not open in the test process (no test opens that many).
    let env = |k: &str| match k {
        "PMI_FD" => Some(OsString::from("1000")),
        "PMI_RANK" => Some(OsString::from("0")),
        "PMI_SIZE" => Some(OsString::from("1")),
        _ => None,
    };
    let e = Client::from_vars(ClientConfig::default(), env)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an open file descriptor"), "{e}");
    assert!(!ENV_FD_CLAIMED.load(Ordering::Acquire));
}

/// A fake of Slurm's `mpi/pmi2` server, written independently of the client's
/// framing code: the init line, then frames; one thread per connection; puts become
/// visible at the `kvs-fence` every rank joins; job and node attributes (a
/// `wait=TRUE` node get blocks until the attribute exists). Records every body.
#[derive(Default)]
struct Pmi2State {
    size: u32,
    mapping: String,
    pending: HashMap<String, String>,
    kvs: HashMap<String, String>,
    node: HashMap<String, String>,
    fenced: u32,
    generation: u64,
    bodies: Vec<String>,
}

type Shared = std::sync::Arc<(std::sync::Mutex<Pmi2State>, std::sync::Condvar)>;

fn pmi2_fake(size: u32, mapping: &str) -> (Shared, Vec<(OwnedFd, JoinHandle<()>)>) {
    let shared: Shared = Default::default();
    {
        let mut st = shared.0.lock().unwrap();
        st.size = size;
        st.mapping = mapping.to_owned();
    }
    let conns = (0..size)
        .map(|rank| {
            let (ours, theirs) = UnixStream::pair().unwrap();
            let sh = shared.clone();
            let h = std::thread::spawn(move || serve_pmi2(ours, rank, &sh));
            (OwnedFd::from(theirs), h)
        })
        .collect();
    (shared, conns)
}

fn serve_pmi2(s: UnixStream, rank: u32, sh: &Shared) {
    use std::io::Read;
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut init = String::new();
    if r.read_line(&mut init).unwrap_or(0) == 0 {
        return; // the client never started
    }
    assert_eq!(init, "cmd=init pmi_version=2 pmi_subversion=0\n");
    w.write_all(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")
        .unwrap();
    let reply = |w: &mut UnixStream, body: String| {
        w.write_all(format!("{:<6}{body}", body.len()).as_bytes())
            .unwrap();
    };
    loop {
        let mut head = [0u8; 6];
        if r.read_exact(&mut head).is_err() {
            return;
        }
        let len: usize = std::str::from_utf8(&head).unwrap().trim().parse().unwrap();
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        let body = String::from_utf8(body).unwrap();
        let kv: HashMap<&str, &str> = body
            .split(';')
            .filter(|t| !t.is_empty())
            .map(|t| t.split_once('=').expect("key=value"))
            .collect();
        let (lock, cv) = &**sh;
        let mut st = lock.lock().unwrap();
        st.bodies.push(body.clone());
        let found = |v: Option<&String>, cmd: &str| match v {
            Some(v) => format!("cmd={cmd};rc=0;found=TRUE;value={v};"),
            None => format!("cmd={cmd};rc=0;found=FALSE;"),
        };
        let answer = match kv["cmd"] {
            "fullinit" => {
                // The server's own idea of the rank: a mismatch is the client's to find.
                assert!(kv["pmirank"].parse::<u32>().is_ok(), "{body}");
                assert_eq!(kv["threaded"], "FALSE");
                format!(
                    "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size={};appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
                    st.size
                )
            }
            "info-getjobattr" => {
                let v = match kv["key"] {
                    "universeSize" => Some(st.size.to_string()),
                    "PMI_process_mapping" => Some(st.mapping.clone()),
                    _ => None,
                };
                found(v.as_ref(), "info-getjobattr-response")
            }
            "kvs-put" => {
                assert!(kv["key"].len() < 64 && kv["value"].len() < 1024, "{body}");
                st.pending.insert(kv["key"].into(), kv["value"].into());
                "cmd=kvs-put-response;rc=0;".into()
            }
            "kvs-fence" => {
                let generation = st.generation;
                st.fenced += 1;
                if st.fenced == st.size {
                    let p = std::mem::take(&mut st.pending);
                    st.kvs.extend(p);
                    st.fenced = 0;
                    st.generation += 1;
                    cv.notify_all();
                }
                while st.generation == generation {
                    st = cv.wait(st).unwrap();
                }
                "cmd=kvs-fence-response;rc=0;".into()
            }
            "kvs-get" => {
                assert_eq!(kv["srcid"], "-1");
                found(st.kvs.get(kv["key"]), "kvs-get-response")
            }
            "info-putnodeattr" => {
                st.node.insert(kv["key"].into(), kv["value"].into());
                cv.notify_all();
                "cmd=info-putnodeattr-response;rc=0;".into()
            }
            "info-getnodeattr" => {
                while kv["wait"] == "TRUE" && !st.node.contains_key(kv["key"]) {
                    st = cv.wait(st).unwrap();
                }
                found(st.node.get(kv["key"]), "info-getnodeattr-response")
            }
            "abort" => continue,
            "finalize" => {
                reply(&mut w, "cmd=finalize-response;rc=0;".into());
                return;
            }
            other => panic!("unexpected command {other} in {body}"),
        };
        drop(st);
        reply(&mut w, answer);
    }
}

#[test]
fn pmi2_job_of_three_ranks() {
    let (shared, conns) = pmi2_fake(3, "(vector,(0,2,1))");
    let handles: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(rank, (fd, server))| {
            std::thread::spawn(move || {
                let rank = rank as u32;
                let mut c = Client::from_fd_pmi2(fd, rank, 3, "77.0", quick()).unwrap();
                assert_eq!(c.protocol(), Protocol::Pmi2);
                assert_eq!((c.rank(), c.size(), c.universe_size()), (rank, 3, Some(3)));
                let mine: Vec<u8> = (0..2000u32).map(|i| (i * (rank + 1)) as u8).collect();
                c.kvs_put(&format!("gsas-r{rank}"), &mine).unwrap();
                assert_eq!(
                    c.kvs_get("gsas-r0").unwrap(),
                    None,
                    "visible before the fence"
                );
                if rank == 0 {
                    c.node_put("leader", b"/run/x;y.sock").unwrap();
                } else {
                    assert_eq!(
                        c.node_get("leader", true).unwrap().unwrap(),
                        b"/run/x;y.sock"
                    );
                }
                c.barrier().unwrap();
                for r in 0..3u32 {
                    let want: Vec<u8> = (0..2000u32).map(|i| (i * (r + 1)) as u8).collect();
                    assert_eq!(c.kvs_get(&format!("gsas-r{r}")).unwrap(), Some(want));
                }
                assert_eq!(c.kvs_get("never").unwrap(), None);
                assert_eq!(c.node_get("absent", false).unwrap(), None);
                assert_eq!(c.node_of_rank().unwrap(), Some(vec![0, 1, 0]));
                assert_eq!(c.get_raw("PMI_nothing").unwrap(), None);
                c.finalize().unwrap();
                assert!(matches!(c.barrier(), Err(PmiError::Finished { .. })));
                server.join().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let st = shared.0.lock().unwrap();
    // 2000 bytes are 4000 hex characters: several kvs-put chunks per rank.
    let puts = st
        .bodies
        .iter()
        .filter(|b| b.starts_with("cmd=kvs-put;"))
        .count();
    assert!(puts >= 3 * 5, "{puts} puts");
    assert!(st.bodies.iter().any(|b| b == "cmd=kvs-fence;"));
    assert!(
        st.bodies
            .iter()
            .any(|b| b.starts_with("cmd=kvs-get;jobid=77.0;srcid=-1;key=gsas-r2;"))
    );
}

#[test]
fn pmi2_abort_and_mismatches() {
    // abort: world abort, message without ';', no response awaited.
    let (shared, mut conns) = pmi2_fake(1, "(vector,(0,1,1))");
    let (fd, server) = conns.pop().unwrap();
    let mut c = Client::from_fd_pmi2(fd, 0, 1, "5.2", quick()).unwrap();
    assert!(matches!(
        c.node_put("k", &[0; 600]),
        Err(PmiError::ValueTooLarge { max: 511, .. })
    ));
    assert!(matches!(
        c.kvs_put(&"k".repeat(59), b""),
        Err(PmiError::InvalidKey { .. })
    ));
    c.abort(3, "bad; input = here").unwrap();
    drop(c);
    server.join().unwrap();
    let last = shared.0.lock().unwrap().bodies.last().cloned().unwrap();
    assert_eq!(
        last,
        "cmd=abort;isworldabort=TRUE;msg=exit code 3: bad__input___here;"
    );

    // A server that answers PMI-1 to the version 2 handshake.
    let (fd, h) = fake(vec![(
        "cmd=init pmi_version=2 pmi_subversion=0\n",
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
    )]);
    let e = Client::from_fd_pmi2(fd, 0, 1, "1.0", quick())
        .unwrap_err()
        .to_string();
    assert!(e.contains("PMI version 2"), "{e}");
    h.join().unwrap();

    // The environment's rank differs from the server's.
    let (_shared, mut conns) = pmi2_fake(2, "(vector,(0,1,2))");
    let (fd1, s1) = conns.pop().unwrap();
    let e = Client::from_fd_pmi2(fd1, 0, 2, "1.0", quick())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("says rank 1 of 2, the environment rank 0 of 2"),
        "{e}"
    );
    drop(conns);
    s1.join().unwrap();

    let (fd, h) = fake(vec![]);
    let e = Client::from_fd_pmi2(fd, 0, 1, "a;b", quick())
        .unwrap_err()
        .to_string();
    assert!(e.contains("PMI_JOBID"), "{e}");
    drop(h);
}

#[test]
fn pmi1_has_no_node_attributes() {
    let (fd, h) = fake(NEW_STYLE_INIT.to_vec());
    let mut c = Client::from_fd(fd, 0, 1, quick()).unwrap();
    assert_eq!(c.protocol(), Protocol::Pmi1);
    let e = c.node_put("k", b"v").unwrap_err().to_string();
    assert!(e.contains("need PMI-2"), "{e}");
    drop(c);
    h.join().unwrap();
    let mut s = Client::singleton(quick());
    s.node_put("k", b"v").unwrap();
    assert_eq!(s.node_get("k", false).unwrap(), Some(b"v".to_vec()));
    assert_eq!(s.kvs_get("k").unwrap(), None);
}

#[test]
fn srun_without_pmi_is_refused() {
    let cfg = ClientConfig::default();
    let e = Client::from_vars(
        cfg,
        env(&[("SLURM_STEP_NUM_TASKS", "2"), ("SLURM_NTASKS", "2")]),
    )
    .unwrap_err();
    assert!(
        matches!(e, PmiError::SrunWithoutPmi { tasks: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("`srun --mpi=pmi2`"), "{e}");
    let e =
        Client::from_vars(cfg, env(&[("SLURM_NTASKS", "4"), ("SLURM_STEPID", "0")])).unwrap_err();
    assert!(
        matches!(
            e,
            PmiError::SrunWithoutPmi {
                var: "SLURM_NTASKS",
                tasks: 4
            }
        ),
        "{e}"
    );
    // One task, or a batch script of a many-task job (no step): a singleton.
    for vars in [
        &[("SLURM_STEP_NUM_TASKS", "1"), ("SLURM_STEPID", "0")][..],
        &[("SLURM_NTASKS", "8"), ("SLURM_JOB_ID", "12")][..],
    ] {
        let vars: &'static [(&'static str, &'static str)] = vars;
        let c = Client::from_vars(cfg, env(vars)).unwrap();
        assert_eq!(c.connection(), Connection::Singleton);
    }
}

#[test]
fn singleton_kvs_and_limits() {
    let mut c = Client::from_vars(ClientConfig::default(), |_| None).unwrap();
    assert_eq!(c.connection(), Connection::Singleton);
    assert_eq!((c.rank(), c.size()), (0, 1));
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    c.kvs_put("big", &big).unwrap();
    c.barrier().unwrap();
    assert_eq!(c.kvs_get("big").unwrap().unwrap(), big);
    c.kvs_put("big", b"small now").unwrap();
    assert_eq!(c.kvs_get("big").unwrap().unwrap(), b"small now");
    assert!(matches!(
        c.kvs_put("PMI_x", b""),
        Err(PmiError::InvalidKey { .. })
    ));
    assert!(matches!(
        c.kvs_put("a b", b""),
        Err(PmiError::InvalidKey { .. })
    ));
    assert!(matches!(c.kvs_get("k#1"), Err(PmiError::InvalidKey { .. })));
    assert_eq!(
        c.get_raw(PROCESS_MAPPING_KEY).unwrap().as_deref(),
        Some("(vector,(0,1,1))")
    );
    let huge = vec![0u8; 5_000_000];
    assert!(matches!(
        c.kvs_put("huge", &huge),
        Err(PmiError::ValueTooLarge { .. })
    ));
    c.abort(3, "bye").unwrap();
    assert!(matches!(c.kvs_get("big"), Err(PmiError::Finished { .. })));
}

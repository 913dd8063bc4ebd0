//! `netns-cluster`: N nodes on this machine for experiments by hand, built from the test
//! kit's own pieces (the sixteen-node test's namespaces, cluster file and daemons), so that
//! the figures in `docs/runtime.md` and `docs/scaling.md` can be measured again.
//!
//! ```sh
//! cargo run --release -p gsas-tests --bin netns-cluster -- 16
//! ```
//!
//! makes N network namespaces on one bridge (node `i` at `10.201.0.(i+1)`), writes a
//! cluster file (1472-byte datagrams, remote FORK allowed, the relaxed service deadline, a
//! 32 MiB heap: `--mtu` and the PEs' `SHMEM_SYMMETRIC_SIZE` change them), starts one
//! `gsas-atomicd` per node in its namespace (logs beside the control sockets), prints the
//! command that runs a job from node 0's namespace, and waits. SIGINT or SIGTERM (or the end
//! of its standard input, with `--stdin`) stops the daemons and deletes the namespaces;
//! namespaces left by one that was killed are deleted by the next. Needs root.

use std::path::PathBuf;
use std::time::Instant;

use gsas_tests::multinode::{SECRET, secret_file};
use gsas_tests::netns::{Cluster, address, cluster_file};

const USAGE: &str = "\
usage: netns-cluster NODES [--mtu BYTES] [--max-peers N] [--dir DIR] [--stdin]

Makes NODES (1..=250) network namespaces on one bridge with one gsas-atomicd each, prints
how to run a job across them, and waits; SIGINT or SIGTERM (with --stdin also the end of
standard input) stops the daemons and deletes the namespaces. Needs root.

  --mtu BYTES   UDP payload bytes per datagram (default 1472, an Ethernet frame)
  --max-peers N each service's network peers (default: the cluster file's default,
                1024; a job takes its PE count + 4, so 1,024 PEs need more)
  --dir DIR     where the cluster file, secret, control sockets and daemon logs go
                (default: a new directory under the system's temporary directory)
  --stdin       also stop at the end of standard input
";

struct Args {
    nodes: usize,
    mtu: u32,
    max_peers: Option<u32>,
    dir: Option<PathBuf>,
    stdin: bool,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        nodes: 0,
        mtu: 1472,
        max_peers: None,
        dir: None,
        stdin: false,
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--mtu" => {
                let v = it.next().ok_or("--mtu needs a number of bytes")?;
                a.mtu = v
                    .parse()
                    .ok()
                    .filter(|m| (576..=65_507).contains(m))
                    .ok_or(format!("--mtu {v:?}: not a payload size in 576..=65507"))?;
            }
            "--max-peers" => {
                let v = it.next().ok_or("--max-peers needs a number")?;
                a.max_peers = Some(v.parse().ok().filter(|&n| n >= 16).ok_or(format!(
                    "--max-peers {v:?}: not a number of peers of at least 16"
                ))?);
            }
            "--dir" => a.dir = Some(it.next().ok_or("--dir needs a directory")?.into()),
            "--stdin" => a.stdin = true,
            n if a.nodes == 0 && !n.starts_with('-') => {
                a.nodes = n
                    .parse()
                    .ok()
                    .filter(|n| (1..=250).contains(n))
                    .ok_or(format!("{n:?}: not a node count in 1..=250"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.nodes == 0 {
        return Err("how many nodes?".into());
    }
    Ok(a)
}

/// Blocks SIGINT and SIGTERM in every thread to come, so that [`wait_for_end`] takes them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is initialized by sigemptyset before use; the calls only
    // touch that set and this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_end(set: libc::sigset_t, stdin: bool) -> String {
    if stdin {
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            // SAFETY: kill has no memory arguments; the signal is taken by sigwait below.
            unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGTERM) };
        });
    }
    let mut sig = 0;
    // SAFETY: `set` is an initialized signal set, `sig` a valid out-pointer.
    unsafe { libc::sigwait(&set, &mut sig) };
    gsas_sys::process::describe_signal(sig)
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprint!("netns-cluster: {e}\n\n{USAGE}");
        std::process::exit(2);
    });
    if !gsas_tests::skip::is_root() {
        eprintln!("netns-cluster: network namespaces need root (CAP_SYS_ADMIN)");
        std::process::exit(1);
    }
    let set = block_signals();
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("gsas-netns-cluster-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| {
        eprintln!("netns-cluster: {}: {e}", dir.display());
        std::process::exit(1);
    });
    let t0 = Instant::now();
    let ns = Cluster::new("c", args.nodes).unwrap_or_else(|e| {
        eprintln!("netns-cluster: {e}");
        std::process::exit(1);
    });
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let file = cluster_file(&dir, args.nodes, args.mtu, &secret);
    if let Some(n) = args.max_peers {
        // Every node's table: the kit's file sets none, so the key is added to each node.
        let text = std::fs::read_to_string(&file).expect("the cluster file just written");
        let text = text.replace(
            "udp_port = 7470\n",
            &format!("udp_port = 7470\nmax_peers = {n}\n"),
        );
        std::fs::write(&file, text).expect("rewriting the cluster file");
    }
    eprintln!(
        "netns-cluster: starting {} daemons (program {})",
        args.nodes,
        gsas_tests::launch::program("gsas-atomicd").display()
    );
    let daemons = ns.daemons(&file, &dir);
    let oshrun = gsas_tests::launch::program("oshrun");
    println!(
        "netns-cluster: {} nodes up in {:.1} s: namespaces {} .. {}, addresses {} .. {}\n\
         cluster file {}; daemon logs {}/node<i>.log\n\
         run a job from node 0's namespace, e.g. 512 PEs started through the daemons:\n\
         \n  ip netns exec {} {} --config {} -n 512 --fork PROGRAM\n\n\
         SIGINT (Ctrl-C) or SIGTERM to pid {} stops the daemons and deletes the namespaces.",
        args.nodes,
        t0.elapsed().as_secs_f64(),
        ns.nodes[0],
        ns.nodes[args.nodes - 1],
        address(0),
        address(args.nodes - 1),
        file.display(),
        dir.display(),
        ns.nodes[0],
        oshrun.display(),
        file.display(),
        std::process::id()
    );
    let why = wait_for_end(set, args.stdin);
    eprintln!("netns-cluster: {why}: stopping the daemons, deleting the namespaces");
    drop(daemons);
    drop(ns);
}

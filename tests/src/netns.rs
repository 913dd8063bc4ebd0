//! Nodes in network namespaces: a bridge in a namespace of its own, one namespace per node
//! joined to it by a veth pair, addresses only inside them (`10.201.0.(i+1)/24`), a cluster
//! file for them, and packet loss and duplication with nftables.
//!
//! Needs root and `ip netns` (CI runs as root); [`Cluster::or_skip`] prints
//! `SKIPPED: <test>: <reason>` otherwise, a failure with `GSAS_REQUIRE_NETNS=1`. The
//! namespaces are deleted by [`Cluster`]'s `Drop`, also when a test fails, and namespaces
//! left by test processes that died are removed first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Prefix of every namespace these helpers make.
pub const PREFIX: &str = "gsas-t";

/// Runs `cmd args...`; its standard error on failure.
pub fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

/// The address of node `i`.
pub fn address(i: usize) -> String {
    format!("10.201.0.{}", i + 1)
}

/// The namespaces of one test; deleted when dropped.
pub struct Cluster {
    /// The node namespaces, node `i` at `nodes[i]`.
    pub nodes: Vec<String>,
    /// The bridge's namespace.
    pub bridge: String,
    /// The veth device inside each node namespace.
    pub devices: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain(std::iter::once(&self.bridge)) {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

impl Cluster {
    /// Node namespaces `0..n` named after `tag` (short: interface names are at most 15
    /// bytes), each with [`address`]`(i)/24` on a veth whose peer is on the bridge.
    pub fn new(tag: &str, n: usize) -> Result<Cluster, String> {
        crate::launch::remove_stale_namespaces(PREFIX);
        let pid = std::process::id();
        let mut c = Cluster {
            nodes: Vec::new(),
            bridge: format!("{PREFIX}{pid}-{tag}-br"),
            devices: Vec::new(),
        };
        ip(&["netns", "add", &c.bridge])?;
        ip(&["-n", &c.bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &c.bridge, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let name = format!("{PREFIX}{pid}-{tag}-{i}");
            ip(&["netns", "add", &name])?;
            c.nodes.push(name.clone());
            // Interface names are created in the root namespace first: keep them unique.
            let (inner, outer) = (format!("gv{pid}{tag}{i}"), format!("gp{pid}{tag}{i}"));
            ip(&[
                "link", "add", &inner, "netns", &name, "type", "veth", "peer", "name", &outer,
                "netns", &c.bridge,
            ])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            let addr = format!("{}/24", address(i));
            ip(&["-n", &name, "addr", "add", &addr, "dev", &inner])?;
            ip(&["-n", &name, "link", "set", &inner, "up"])?;
            ip(&["-n", &c.bridge, "link", "set", &outer, "master", "br0"])?;
            ip(&["-n", &c.bridge, "link", "set", &outer, "up"])?;
            c.devices.push(inner);
        }
        Ok(c)
    }

    /// The namespaces, or `None` after a loud skip naming `test` (not root, or the
    /// namespaces could not be made).
    pub fn or_skip(test: &str, tag: &str, n: usize) -> Option<Cluster> {
        let reason = if !crate::skip::is_root() {
            "not running as root (network namespaces need CAP_SYS_ADMIN)".to_owned()
        } else {
            match Cluster::new(tag, n) {
                Ok(c) => return Some(c),
                Err(e) => format!("cannot create network namespaces: {e}"),
            }
        };
        crate::skip::skip(test, crate::skip::REQUIRE_NETNS, &reason);
        None
    }

    /// The prefix of a command run in node `i`'s namespace.
    pub fn exec(&self, i: usize) -> [&str; 4] {
        ["ip", "netns", "exec", &self.nodes[i]]
    }

    /// One `gsas-atomicd` per node in its namespace, node `i` serving `--node i` of the
    /// cluster file `file` with its control socket `dir/node<i>.sock`.
    pub fn daemons(&self, file: &Path, dir: &Path) -> Vec<crate::multinode::Daemon> {
        (0..self.nodes.len())
            .map(|i| {
                let sock = dir.join(format!("node{i}.sock"));
                crate::multinode::Daemon::start_with(&self.exec(i), file, i as u16, &sock)
            })
            .collect()
    }

    /// In every node namespace, nftables drops `drop_pct` and duplicates `dup_pct` percent
    /// of the UDP datagrams it sends to the other nodes (the services' and the PEs'
    /// traffic; PMI and output streams are TCP and stay whole).
    pub fn lossy(&self, drop_pct: u32, dup_pct: u32) -> Result<(), String> {
        self.lossy_matching(&["meta l4proto udp"], drop_pct, dup_pct)
    }

    /// In every node namespace, nftables drops `drop_pct` and duplicates `dup_pct` percent
    /// of the datagrams it sends to the other nodes that match one of `matches` (nftables
    /// match expressions, e.g. `udp dport 7470`); counted, see [`Cluster::loss_counts`].
    pub fn lossy_matching(
        &self,
        matches: &[&str],
        drop_pct: u32,
        dup_pct: u32,
    ) -> Result<(), String> {
        for (ns, dev) in self.nodes.iter().zip(&self.devices) {
            let nft = |rule: &str| run("ip", &["netns", "exec", ns, "nft", rule]);
            nft("add table ip gsas_loss")?;
            nft("add chain ip gsas_loss out { type filter hook output priority 0; }")?;
            for m in matches {
                let m = format!("oifname \"{dev}\" ip daddr 10.201.0.0/24 {m}");
                nft(&format!(
                    "add rule ip gsas_loss out {m} numgen random mod 100 < {drop_pct} counter drop"
                ))?;
                nft(&format!(
                    "add rule ip gsas_loss out {m} numgen random mod 100 < {dup_pct} counter dup to ip daddr device \"{dev}\""
                ))?;
            }
        }
        Ok(())
    }

    /// The datagrams nftables dropped and duplicated so far, over all node namespaces
    /// (from the rules' counters).
    pub fn loss_counts(&self) -> Result<(u64, u64), String> {
        let (mut dropped, mut duplicated) = (0, 0);
        for ns in &self.nodes {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns,
                    "nft",
                    "list",
                    "table",
                    "ip",
                    "gsas_loss",
                ])
                .output()
                .map_err(|e| format!("nft list: {e}"))?;
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let packets = line
                    .split_whitespace()
                    .skip_while(|w| *w != "packets")
                    .nth(1)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                if line.contains(" drop") {
                    dropped += packets;
                } else if line.contains(" dup ") {
                    duplicated += packets;
                }
            }
        }
        Ok((dropped, duplicated))
    }
}

/// Asserts what a job over the namespaces leaves in each node's daemon (`daemons[i]` is
/// node `i`'s): nothing refused, and PEs started through FORK on every node but node 0,
/// whose PEs the launcher starts itself.
pub fn assert_nodes_served(daemons: &[crate::multinode::Daemon]) {
    for (i, d) in daemons.iter().enumerate() {
        let st = d.stats();
        assert_eq!(st.get("refused.total"), Some(0), "node {i}: {st}");
        let forked = st.get("fork.pes_started").unwrap_or(0);
        if i == 0 {
            assert_eq!(forked, 0, "node 0: {st}");
        } else {
            assert!(forked > 0, "node {i}: {st}");
        }
    }
}

/// A cluster file for `n` nodes at [`address`]`(i)`, port 7470, control sockets in `dir`,
/// UDP payloads of `mtu` bytes, remote FORK with the secret file `secret`, the relaxed
/// service deadline, and a 32 MiB heap.
pub fn cluster_file(dir: &Path, n: usize, mtu: u32, secret: &Path) -> PathBuf {
    let mut text = format!(
        "[cluster]\nname = \"netns\"\n\n[defaults]\nsymmetric_size = \"32m\"\n\
         service_timeout_ms = {}\nudp_mtu = {mtu}\nfork_allowed = true\n\
         fork_secret_file = \"{}\"\n",
        crate::multinode::RELAXED_DEADLINE_MS,
        secret.display()
    );
    for i in 0..n {
        text.push_str(&format!(
            "\n[[nodes]]\nid = {i}\nname = \"ns{i}\"\nhost = \"{}\"\nudp_port = 7470\n\
             control_socket = \"{}\"\n",
            address(i),
            dir.join(format!("node{i}.sock")).display()
        ));
    }
    let file = dir.join("cluster.toml");
    std::fs::write(&file, text).unwrap();
    file
}

//! Connecting every pair of ranks of a job through a key-value exchange (PMI's put, fence
//! and get): the bootstrap of the verbs transport.
//!
//! Each rank creates one endpoint per remote peer, publishes one record per peer
//! (`verbs-qp-<peer>`: the endpoint's [`Address`]) and one for its memory (`verbs-mr`: the
//! [`RemoteKey`]s of its regions, in order, comma-separated), fences, reads what every peer published for
//! it, connects, and fences again so that no request reaches a queue pair that is not
//! ready yet. One record per peer keeps every value short (PMI-1 limits values to about
//! a kilobyte).

use crate::{Address, Endpoint, Error, Nic, Region, RemoteKey, Timing};

/// A key-value exchange between the ranks of a job. Keys are per rank: an implementation
/// over one flat key space (PMI-1, PMI-2) adds the rank to the key it stores (`key@rank`),
/// one over PMIx reads the publishing rank's value. Keys are short printable ASCII without
/// space, `=` or `#`; values are printable ASCII without space.
pub trait Exchange {
    /// Publishes `value` under `key` for this rank.
    fn put(&mut self, key: &str, value: &str) -> Result<(), String>;
    /// Returns when every rank's earlier puts are visible to every rank.
    fn fence(&mut self) -> Result<(), String>;
    /// What `rank` published under `key`.
    fn get(&mut self, rank: u32, key: &str) -> Result<String, String>;
}

/// The connected endpoints and the peers' memory keys of one rank.
pub struct Mesh {
    /// The endpoint to each rank (None: this rank, or a peer reached otherwise).
    pub endpoints: Vec<Option<Endpoint>>,
    /// Each connected rank's regions, in the order it registered them.
    pub keys: Vec<Vec<RemoteKey>>,
}

/// The ranks of a job as one rank sees them.
pub struct Job<'a> {
    /// This rank.
    pub me: u32,
    /// Number of ranks.
    pub n: u32,
    /// Whether a rank is reached over verbs (false: same node, reached otherwise).
    pub remote: &'a dyn Fn(u32) -> bool,
    /// How messages name a rank (`"PE 3 on node n1"`).
    pub name: &'a dyn Fn(u32) -> String,
}

/// Connects this rank to every rank that `job.remote` selects, publishing `regions` for
/// them. Every rank of the job must call it, with the same relation seen from its side.
pub fn connect_all(
    nic: &Nic,
    job: &Job<'_>,
    regions: &[&Region],
    depth: u32,
    timing: Timing,
    ex: &mut impl Exchange,
) -> Result<Mesh, Error> {
    let (me, n) = (job.me, job.n);
    let exchange = |what: &str, e: String| Error::BadRecord(format!("exchange ({what}): {e}"));
    let peers: Vec<u32> = (0..n).filter(|&r| r != me && (job.remote)(r)).collect();
    let mut endpoints: Vec<Option<Endpoint>> = (0..n).map(|_| None).collect();
    for &r in &peers {
        let ep = nic.endpoint(&(job.name)(r), depth)?;
        ex.put(&format!("verbs-qp-{r}"), &ep.address().encode())
            .map_err(|e| exchange("put", e))?;
        endpoints[r as usize] = Some(ep);
    }
    let mr: Vec<String> = regions.iter().map(|g| g.remote_key().encode()).collect();
    ex.put("verbs-mr", &mr.join(","))
        .map_err(|e| exchange("put", e))?;
    ex.fence().map_err(|e| exchange("fence", e))?;
    let mut keys = vec![Vec::new(); n as usize];
    for &r in &peers {
        let addr = ex
            .get(r, &format!("verbs-qp-{me}"))
            .map_err(|e| exchange("get", e))?;
        let addr = Address::decode(&addr)?;
        let ep = endpoints[r as usize].as_mut().expect("created above");
        ep.connect(&addr, timing)?;
        let mr = ex.get(r, "verbs-mr").map_err(|e| exchange("get", e))?;
        keys[r as usize] = mr
            .split(',')
            .filter(|k| !k.is_empty())
            .map(RemoteKey::decode)
            .collect::<Result<_, _>>()?;
    }
    ex.fence().map_err(|e| exchange("fence", e))?;
    Ok(Mesh { endpoints, keys })
}

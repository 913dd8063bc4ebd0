//! Remote FORK: starting a job's PEs on other machines through their `gsas-atomicd`, with
//! authentication.
//!
//! **What it is.** A multi-node `oshrun` starts the PEs of nodes that are not on its own
//! machine by sending each node's daemon one FORK request ([`request`]): job id and key,
//! a fresh nonce, a timestamp, the node id, and the launch specification (program and
//! arguments, environment, working directory, ranks, the launcher's PMI and stream
//! addresses), signed with HMAC-SHA256 under the **cluster secret**. The daemon
//! ([`server::ForkServer`]) checks the MAC in constant time, refuses replays (timestamp
//! window and nonce cache, [`replay`]), starts the PEs, connects back to the launcher and
//! streams their output and exit statuses ([`stream`]); the launcher
//! ([`launcher::RemoteJob`]) treats them like local PEs: the first failure ends the whole
//! job, and the daemons end their PEs when told to or when the launcher's connection ends.
//!
//! **Security model.**
//!
//! * Off unless configured: a daemon serves FORK only when its cluster file says
//!   `defaults.fork_allowed = true` and names `defaults.fork_secret_file` (or
//!   `gsas-atomicd --listen ... --fork-secret FILE`). Otherwise every FORK is refused with
//!   ERROR(NotSupported), counted and logged with the sender's address.
//! * The secret file must be a regular file, owned by the daemon's user, with no access
//!   for group or others (mode 0600 or stricter), at least 16 bytes; otherwise the daemon
//!   refuses to start and says which check failed ([`secret`]). The launcher reads the
//!   same file (owned by its user) to sign.
//! * A request is accepted only if its MAC matches (a different secret, or any changed
//!   byte, fails), its job key equals the key in the datagrams' gsas header, its timestamp
//!   is within 120 s of the daemon's clock, its nonce is new, and it names this daemon's
//!   node. Refusals are answered with ERROR, counted (`fork.refused.<reason>` in
//!   `gsas-atomicd --stats`) and logged with the sender's address.
//! * The daemon's connection back to the launcher starts with a Hello that carries an HMAC
//!   over the job and the request's nonce, so the launcher accepts output and exit
//!   statuses only from the daemons it asked.
//! * The PEs run with the daemon's user id. Run a daemon with FORK enabled as the job's
//!   user or as a dedicated unprivileged user, never as root for other people: whoever can
//!   read the secret can run commands as that user on every node. The request itself
//!   (environment, job key) is authenticated but not encrypted.
//!
//! **What it is not.** Not a general remote shell: it starts only gsas PEs (with PMI
//! pointing at the launcher) and ends them with the job. Not a replacement for the node's
//! access control: run it on a cluster network.
//!
//! **Thread safety.** [`server::ForkServer`] lives in the service loop (`Send`) and runs
//! every accepted job on a thread of its own; [`launcher::RemoteJob`] is used by the job
//! loop's thread; the rest is plain data.
//!
//! ```
//! use gsas_launch::fork::request::{ForkRequest, LaunchSpec};
//! use gsas_launch::fork::secret::Secret;
//!
//! let secret = Secret::from_bytes(b"an example cluster secret")?;
//! let request = ForkRequest {
//!     node: 1,
//!     job_id: 7,
//!     job_key: 0x5eed,
//!     nonce: [9; 16],
//!     timestamp_ms: 1_700_000_000_000,
//!     spec: LaunchSpec {
//!         size: 2,
//!         ranks: vec![1],
//!         grace_ms: 500,
//!         pmi: "10.0.0.1:4000".parse()?,
//!         stream: "10.0.0.1:4001".parse()?,
//!         cwd: "/home/me".into(),
//!         argv: vec!["./ring".into()],
//!         env: vec![("GSAS_LOG".into(), "info".into())],
//!     },
//! };
//! let bytes = request.emit(&secret)?;
//! assert_eq!(ForkRequest::parse(&bytes, &secret)?, request);
//! let other = Secret::from_bytes(b"somebody else's secret")?;
//! assert!(ForkRequest::parse(&bytes, &other).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod launcher;
pub mod replay;
pub mod request;
pub mod secret;
pub mod server;
pub mod stream;

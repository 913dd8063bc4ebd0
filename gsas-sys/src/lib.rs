//! gsas-sys: the system-call layer of the gsas std runtime.
//!
//! **What it is.** The wrappers over libc that the service, the node client, the launcher
//! and the PMI code share, each call wrapped once with its safety argument:
//!
//! * [`socket`]: named Unix `SOCK_SEQPACKET` sockets (listen, accept, connect, peer
//!   credentials, non-blocking mode) and the per-user runtime directory;
//! * [`fd`]: `ppoll`/`poll`, `send` without `SIGPIPE`, `read`, `socketpair`, `pipe`,
//!   descriptor flags;
//! * [`fdpass`]: descriptors with a message (`SCM_RIGHTS`), the one encoding (the runtime's
//!   segment passing and the Exanet emulator's registration both use it);
//! * [`event`]: `signalfd` ([`event::SignalFd`]), `eventfd` ([`event::EventFd`]) and a
//!   termination-signal flag;
//! * [`process`]: `PR_SET_PDEATHSIG`, `kill`, `getrandom`, `gethostname`, the online CPUs,
//!   the user id and signal names for messages.
//!
//! **What it is not.** Not a portable OS layer (Linux only), and no protocol: messages and
//! descriptors over these sockets are `gsas_transport::shm::send_fds`/`recv_fds`.
//!
//! **Thread safety.** Stateless functions over owned or borrowed descriptors;
//! [`event::EventFd`] may be signalled from any thread.

pub mod event;
pub mod fd;
pub mod fdpass;
pub mod process;
pub mod socket;

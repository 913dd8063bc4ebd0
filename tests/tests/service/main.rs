//! The atomic service as its users meet it: the control protocol and the data plane of an
//! in-process service under attack, the `gsas-atomicd` daemon, the shared-memory path
//! between a PE and its node's service, and progress on the remote path.
//!
//! * [`control`]: joins, segments, leaves, limits, floods and a wire fuzzer;
//! * [`daemon`]: `gsas-atomicd` as a process (options, signals, stale sockets);
//! * [`job_end`]: the end of a job while its last datagrams are lost (TIME_WAIT);
//! * [`shm`]: segments passed over a socket and served from shared memory;
//! * [`progress`]: PEs that stop calling the node client still see their operations done.
//!
//! The PEs of [`progress`] are this binary again: [`child_pe`] runs their scenario.

mod control;
mod daemon;
mod job_end;
mod progress;
mod shm;

/// The child entry point: a PE started by [`progress`] runs its scenario and exits; run as
/// an ordinary test it does nothing.
#[test]
fn child_pe() {
    progress::child();
}

/// The attacker of `control::a_second_local_user_cannot_take_the_node`, run as another
/// user; run as an ordinary test it does nothing.
#[test]
fn attacker() {
    control::attacker();
}

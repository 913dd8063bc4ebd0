//! The error type of the PMI client and server.
//!
//! Every variant carries enough context to be printed on its own: which environment
//! variable, which command, what was received. Thread-safety: plain data, `Send + Sync`.

use std::fmt;
use std::io;
use std::time::Duration;

/// An error of the PMI client or server.
#[derive(Debug)]
#[non_exhaustive]
pub enum PmiError {
    /// An environment variable of the launcher protocol is malformed or missing.
    Env {
        /// The variable (`PMI_FD`, `PMI_RANK`, ...).
        var: &'static str,
        /// Its value, or `<unset>`.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The process was started by a PMIx launcher (Open MPI's `mpirun`, `prterun`, Slurm
    /// with `--mpi=pmix`), but PMIx is not usable (library missing, or switched off).
    PmixLauncher {
        /// The variable that revealed the PMIx launcher.
        var: &'static str,
        /// Why PMIx cannot be used.
        reason: String,
    },
    /// This process is one task of a multi-task Slurm step that srun started without a
    /// PMI plugin: alone it would run as PE 0 of 1, silently.
    SrunWithoutPmi {
        /// The variable that gave the task count.
        var: &'static str,
        /// The number of tasks of the step.
        tasks: u32,
    },
    /// A system call failed.
    Io {
        /// What was being done.
        context: String,
        /// The operating-system error.
        source: io::Error,
    },
    /// No complete response arrived in time.
    Timeout {
        /// The request that was waiting (`cmd=barrier_in`, ...).
        command: String,
        /// How long it waited.
        waited: Duration,
        /// What had been received of the response, if anything.
        received: String,
    },
    /// The peer closed the connection.
    Closed {
        /// The request that was waiting for a response.
        command: String,
        /// What had been received of the response, if anything.
        received: String,
    },
    /// The peer sent something that is not a valid response to the request.
    Protocol {
        /// The request.
        command: String,
        /// The offending line (shortened).
        line: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server answered with a non-zero `rc`.
    Refused {
        /// The request.
        command: String,
        /// The server's return code.
        rc: i64,
        /// The server's `msg`, if it sent one.
        msg: String,
    },
    /// A key that cannot be used (empty, bad characters, reserved prefix, too long).
    InvalidKey {
        /// The key.
        key: String,
        /// Why it is refused.
        reason: String,
    },
    /// A value that does not fit in the key-value space.
    ValueTooLarge {
        /// The key it was meant for.
        key: String,
        /// Its length in bytes.
        len: usize,
        /// The largest value accepted, in bytes.
        max: usize,
    },
    /// A stored value that this client cannot decode (not written by it, or incomplete).
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The client was used after `finalize` or `abort`.
    Finished {
        /// The operation attempted.
        op: &'static str,
    },
    /// The client was used after one of its requests timed out or got a malformed
    /// response; only `abort` is still allowed.
    Unusable {
        /// The operation attempted.
        op: &'static str,
    },
    /// Invalid configuration or arguments given by the program (not by the peer).
    Invalid(String),
}

impl PmiError {
    /// An I/O error of `context`.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        PmiError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for PmiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmiError::Env { var, value, reason } => {
                write!(f, "PMI: environment variable {var}={value:?}: {reason}")
            }
            PmiError::PmixLauncher { var, reason } => write!(
                f,
                "PMI: {var} is set: this process was started by a PMIx launcher (Open MPI \
                 mpirun/oshrun, prterun, or srun --mpi=pmix), but {reason}; start it with \
                 gsas's oshrun, MPICH's mpiexec.hydra, or srun --mpi=pmi2"
            ),
            PmiError::SrunWithoutPmi { var, tasks } => write!(
                f,
                "PMI: srun started this process as one of {tasks} tasks ({var}={tasks}) but \
                 gave it no PMI connection (srun --mpi=none, or the site's MpiDefault), so \
                 every task would run alone as PE 0 of 1; start the job with \
                 `srun --mpi=pmi2`"
            ),
            PmiError::Io { context, source } => write!(f, "PMI: {context}: {source}"),
            PmiError::Timeout {
                command,
                waited,
                received,
            } => write!(
                f,
                "PMI: no response to {command:?} within {:.1} s (received so far: {received})",
                waited.as_secs_f64()
            ),
            PmiError::Closed { command, received } => write!(
                f,
                "PMI: connection closed by the process manager while waiting for the \
                 response to {command:?} (received so far: {received})"
            ),
            PmiError::Protocol {
                command,
                line,
                reason,
            } => write!(
                f,
                "PMI: bad response to {command:?}: {reason} (received {line:?})"
            ),
            PmiError::Refused { command, rc, msg } => {
                write!(
                    f,
                    "PMI: {command:?} refused by the server: rc={rc} msg={msg}"
                )
            }
            PmiError::InvalidKey { key, reason } => write!(f, "PMI: key {key:?}: {reason}"),
            PmiError::ValueTooLarge { key, len, max } => write!(
                f,
                "PMI: value for key {key:?} is {len} bytes, more than the {max} bytes the \
                 key-value space can hold"
            ),
            PmiError::Corrupt { key, reason } => {
                write!(
                    f,
                    "PMI: value stored under key {key:?} is unusable: {reason}"
                )
            }
            PmiError::Finished { op } => write!(
                f,
                "PMI: {op} called after finalize or abort; the PMI connection is gone"
            ),
            PmiError::Unusable { op } => write!(
                f,
                "PMI: {op} refused: an earlier PMI request timed out or got a malformed \
                 response, so the connection may be out of step (only abort is still allowed)"
            ),
            PmiError::Invalid(what) => write!(f, "PMI: {what}"),
        }
    }
}

impl std::error::Error for PmiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PmiError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

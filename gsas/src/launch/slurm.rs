//! `oshrun` inside a Slurm allocation (`salloc`, `sbatch`): the PEs go to the allocated
//! nodes through `srun`, as Open MPI's and Hydra's launchers do.
//!
//! **What it is.** [`Allocation::detect`] recognises an allocation from the variables
//! Slurm sets for `salloc` shells and batch scripts (`SLURM_JOB_ID`, and no
//! `SLURM_STEP_ID`: inside a step, `oshrun` stays on its machine). [`srun_command`] turns
//! the `oshrun` command line into `srun --mpi=pmi2 --kill-on-bad-exit=1 -n N ...
//! PROGRAM ARGS`, which `oshrun` then executes in its own place (`exec`), so that srun
//! receives the user's signals and its exit status is the job's:
//!
//! * `-n N` → `-n N`; `--ppn K` → `--ntasks-per-node=K`; `--tag-output` → `--label`;
//!   `--timeout S` → `--time=M:SS` (rounded up to whole seconds);
//! * `--kill-on-bad-exit=1` (`srun -K`): the first PE that fails ends the job, as under
//!   `oshrun` on one machine;
//! * the PEs bootstrap through PMI-2 and take their nodes from `PMI_process_mapping`;
//!   each node's first PE hosts the node's atomic service for the job, so nothing has to
//!   run on the nodes beforehand.
//!
//! `oshrun --no-srun` runs on this machine even inside an allocation, and
//! `oshrun --config FILE` always uses the cluster file's daemons.
//!
//! **What it is not.** A node-service step: no per-node `gsas-atomicd` is started for
//! the job (the PEs' embedded services play that part); sites that run persistent
//! daemons use `--config`. Thread-safety: pure functions.

use std::ffi::OsString;
use std::path::Path;

use super::args::RunArgs;

/// A Slurm allocation `oshrun` runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job_id: String,
    /// `SLURM_JOB_NUM_NODES` (or `SLURM_NNODES`), when set.
    pub nodes: Option<u32>,
}

impl Allocation {
    /// The allocation this process runs in, from the variables `lookup` returns; `None`
    /// outside Slurm and inside a job step (`SLURM_STEP_ID` set).
    pub fn detect(lookup: impl Fn(&str) -> Option<OsString>) -> Option<Allocation> {
        let job_id = lookup("SLURM_JOB_ID")?.to_string_lossy().trim().to_owned();
        if job_id.is_empty() || lookup("SLURM_STEP_ID").is_some() {
            return None;
        }
        let nodes = ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"]
            .iter()
            .find_map(|v| lookup(v)?.to_string_lossy().trim().parse().ok());
        Some(Allocation { job_id, nodes })
    }
}

/// `--timeout` as srun's `--time` (`minutes:seconds`, rounded up).
fn srun_time(limit: std::time::Duration) -> String {
    let secs = limit.as_secs() + u64::from(limit.subsec_nanos() > 0);
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// The srun command line (without `srun` itself) that runs `run` in the allocation.
pub fn srun_args(run: &RunArgs, program: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "--mpi=pmi2".into(),
        "--kill-on-bad-exit=1".into(),
        "-n".into(),
        run.n.to_string().into(),
    ];
    if let Some(k) = run.ppn {
        a.push(format!("--ntasks-per-node={k}").into());
    }
    if run.tag_output {
        a.push("--label".into());
    }
    if let Some(t) = run.timeout {
        a.push(format!("--time={}", srun_time(t)).into());
    }
    a.push(program.as_os_str().to_owned());
    a.extend(run.args.iter().cloned());
    a
}

/// The `srun` command for `run` (see [`srun_args`]).
pub fn srun_command(run: &RunArgs, program: &Path) -> std::process::Command {
    let mut c = std::process::Command::new("srun");
    c.args(srun_args(run, program));
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn allocations_are_recognised_outside_steps_only() {
        assert_eq!(
            Allocation::detect(vars(&[
                ("SLURM_JOB_ID", "42"),
                ("SLURM_JOB_NUM_NODES", "4")
            ])),
            Some(Allocation {
                job_id: "42".into(),
                nodes: Some(4)
            })
        );
        assert_eq!(
            Allocation::detect(vars(&[("SLURM_JOB_ID", "42"), ("SLURM_NNODES", "2")]))
                .and_then(|a| a.nodes),
            Some(2)
        );
        assert_eq!(Allocation::detect(vars(&[])), None);
        assert_eq!(
            Allocation::detect(vars(&[("SLURM_JOB_ID", "42"), ("SLURM_STEP_ID", "0")])),
            None
        );
    }

    #[test]
    fn oshrun_options_become_srun_options() {
        let mut run = match super::super::args::parse(
            [
                "-n",
                "8",
                "--ppn",
                "2",
                "--tag-output",
                "--timeout",
                "90.5",
                "./app",
                "-v",
            ]
            .map(OsString::from),
        ) {
            Ok(super::super::args::Invocation::Run(r)) => r,
            other => panic!("{other:?}"),
        };
        let words = |run: &RunArgs| -> Vec<String> {
            srun_args(run, Path::new("/bin/app"))
                .iter()
                .map(|w| w.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            words(&run),
            [
                "--mpi=pmi2",
                "--kill-on-bad-exit=1",
                "-n",
                "8",
                "--ntasks-per-node=2",
                "--label",
                "--time=1:31",
                "/bin/app",
                "-v"
            ]
        );
        run.ppn = None;
        run.tag_output = false;
        run.timeout = Some(Duration::from_secs(3600));
        assert_eq!(words(&run)[4..], ["--time=60:00", "/bin/app", "-v"]);
    }
}

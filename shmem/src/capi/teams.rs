//! C ABI of the team splits and `shmem_team_destroy` (OpenSHMEM 1.5 §9.4.5, §9.4.6,
//! §9.4.9); the team queries are in `setup.rs`. Every body reads the configuration
//! argument and calls `crate::team::split`.

use std::ffi::{c_int, c_long};

use super::setup::{TEAM_NUM_CONTEXTS, TeamConfig};
use crate::ctx_table::debug;
use crate::fatal::fatal;
use crate::team::{RawTeam, split};

/// The `num_contexts` a configuration argument asks for (0 unless its mask bit is set).
///
/// # Safety
///
/// `config` readable or NULL.
unsafe fn contexts(config: *const TeamConfig, mask: c_long) -> Result<c_int, String> {
    if mask & TEAM_NUM_CONTEXTS == 0 {
        return Ok(0);
    }
    if config.is_null() {
        return Err("config is NULL but config_mask has SHMEM_TEAM_NUM_CONTEXTS".into());
    }
    // SAFETY: non-null and readable by the caller's contract.
    Ok(unsafe { (*config).num_contexts })
}

/// Writes `team` to `out` (checked non-NULL by the caller).
///
/// # Safety
///
/// `out` writable.
unsafe fn store(out: *mut RawTeam, team: RawTeam) {
    // SAFETY: the caller's contract.
    unsafe { out.write(team) };
}

fn need(out: *mut RawTeam, what: &str, call: &str) {
    if out.is_null() {
        fatal(call, format_args!("{what} is NULL"));
    }
}

/// `shmem_team_split_strided`.
///
/// # Safety
///
/// Team handles from the library; `config` readable or NULL; `new_team` writable.
#[allow(clippy::too_many_arguments)]
unsafe fn split_strided(
    parent: RawTeam,
    start: c_int,
    stride: c_int,
    size: c_int,
    config: *const TeamConfig,
    mask: c_long,
    new_team: *mut RawTeam,
    call: &str,
) -> c_int {
    need(new_team, "new_team", call);
    // SAFETY: forwarded.
    let outcome = unsafe { contexts(config, mask) }
        .and_then(|nc| split::split_strided(parent, start, stride, size, nc, call));
    let (team, rc) = match outcome {
        Ok(t) => (t.unwrap_or(std::ptr::null()), 0),
        Err(why) => {
            debug(call, why);
            (std::ptr::null(), 1)
        }
    };
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { store(new_team, team) };
    rc
}

/// `shmem_team_split_2d`.
///
/// # Safety
///
/// As [`split_strided`], for both axes.
#[allow(clippy::too_many_arguments)]
unsafe fn split_2d(
    parent: RawTeam,
    xrange: c_int,
    xconfig: *const TeamConfig,
    xmask: c_long,
    xteam: *mut RawTeam,
    yconfig: *const TeamConfig,
    ymask: c_long,
    yteam: *mut RawTeam,
    call: &str,
) -> c_int {
    need(xteam, "xaxis_team", call);
    need(yteam, "yaxis_team", call);
    // SAFETY: forwarded.
    let outcome = unsafe { contexts(xconfig, xmask) }
        .and_then(|x| Ok((x, unsafe { contexts(yconfig, ymask) }?)))
        .and_then(|(x, y)| split::split_2d(parent, xrange, x, y, call));
    let ((x, y), rc) = match outcome {
        Ok(teams) => (teams, 0),
        Err(why) => {
            debug(call, why);
            ((std::ptr::null(), std::ptr::null()), 1)
        }
    };
    // SAFETY: both checked non-null; writable by the caller's contract.
    unsafe {
        store(xteam, x);
        store(yteam, y);
    }
    rc
}

abi! {
    const TEAMS;
    plain [team_split_strided]
        (parent_team: RawTeam, start: c_int, stride: c_int, size: c_int,
         config: *const TeamConfig, config_mask: c_long, new_team: *mut RawTeam) -> c_int
        => |call| split_strided(
            parent_team, start, stride, size, config, config_mask, new_team, call);
    plain [team_split_2d]
        (parent_team: RawTeam, xrange: c_int, xaxis_config: *const TeamConfig,
         xaxis_mask: c_long, xaxis_team: *mut RawTeam, yaxis_config: *const TeamConfig,
         yaxis_mask: c_long, yaxis_team: *mut RawTeam) -> c_int
        => |call| split_2d(
            parent_team, xrange, xaxis_config, xaxis_mask, xaxis_team, yaxis_config,
            yaxis_mask, yaxis_team, call);
    plain [team_destroy] (team: RawTeam) => |call| split::destroy(team, call);
}

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(out, &[TEAMS]);
}

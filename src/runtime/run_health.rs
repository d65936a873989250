//! Layer: runtime (imports `client`, `plugin`, the generated `sys`
//! bindings and `error`). What the plugins of a multi-process run are told
//! about its processes, and what an execution that failed while one of
//! them was dead says.
//!
//! A collective that waits on a dead process waits inside the plugin,
//! where Rust cannot reach it. XLA's GPU client can abort it: created with
//! `abort_collectives_on_failure`, it aborts every collective clique that
//! includes a process reported as not connected through
//! `PJRT_Client_UpdateGlobalProcessInfo`, and the blocked execution
//! returns an error. The distributed layer watches the run's store and
//! calls [`report_dead_process`]; each multi-process client of this
//! process is told every process's state (with the per-process
//! *incarnation* all processes agreed on at `initialize`, which is how XLA
//! tells a restarted process from the one its cliques were built with) at
//! its creation and after each death.

use super::client::Client;
use super::sys;
use crate::error::{Error, ErrorCode, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The run as this process knows it.
#[derive(Default)]
struct Health {
    /// Per process id, the incarnation it drew at `initialize`.
    incarnations: Vec<u64>,
    /// The processes found dead, with why.
    dead: BTreeMap<usize, String>,
    /// The multi-process clients to tell.
    clients: Vec<Weak<Client>>,
}

static HEALTH: Mutex<Option<Health>> = Mutex::new(None);

fn health() -> MutexGuard<'static, Option<Health>> {
    HEALTH.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts tracking a run whose processes drew `incarnations` (index =
/// process id).
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
pub(crate) fn begin_run(incarnations: Vec<u64>) {
    *health() = Some(Health {
        incarnations,
        ..Health::default()
    });
}

/// Forgets the run (at `shutdown`).
pub(crate) fn end_run() {
    health().take();
}

/// Records that process `id` is dead (`why`) and tells every live
/// multi-process client, so its collectives that wait on the process are
/// aborted. A second report of one process changes nothing.
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
pub(crate) fn report_dead_process(id: usize, why: &str) {
    let clients = {
        let mut guard = health();
        let Some(run) = guard.as_mut() else { return };
        if run.dead.insert(id, why.to_string()).is_some() {
            return;
        }
        run.clients.retain(|c| c.strong_count() > 0);
        run.clients.clone()
    };
    tracing::warn!(process = id, reason = why, "a process of the run is dead");
    for client in clients.iter().filter_map(Weak::upgrade) {
        tell(&client);
    }
}

/// Registers a multi-process client of the run and tells it the states
/// known so far (every process connected, but for the dead).
pub(super) fn register(client: &Arc<Client>) {
    match health().as_mut() {
        Some(run) => run.clients.push(Arc::downgrade(client)),
        None => return,
    }
    tell(client);
}

/// `message` of a failed execution, with the dead processes of the run
/// named, if there are any: a collective that waited on one of them was
/// aborted, and that is the failure the user needs to see.
pub(super) fn name_the_dead(e: Error) -> Error {
    let dead = match health().as_ref() {
        Some(run) if !run.dead.is_empty() => run.dead.clone(),
        _ => return e,
    };
    let names: Vec<String> = dead
        .iter()
        .map(|(id, why)| format!("process {id} is dead: {why}"))
        .collect();
    Error::distributed(
        ErrorCode::Unavailable,
        format!(
            "a program over the run's processes failed because {}; the plugin said: {e}",
            names.join("; ")
        ),
    )
}

/// What one process is, as `PJRT_Client_UpdateGlobalProcessInfo` says it.
struct ProcessState {
    id: usize,
    incarnation: u64,
    connected: bool,
    why: String,
}

/// Tells `client` every process's state; a plugin without the call, or
/// one that refuses it, is logged, not an error: its collectives simply
/// are not aborted.
fn tell(client: &Client) {
    let states: Vec<ProcessState> = match health().as_ref() {
        Some(run) => (0..run.incarnations.len())
            .map(|id| ProcessState {
                id,
                incarnation: run.incarnations[id],
                connected: !run.dead.contains_key(&id),
                why: run.dead.get(&id).cloned().unwrap_or_default(),
            })
            .collect(),
        None => return,
    };
    if let Err(e) = update_global_process_info(client, &states) {
        tracing::debug!(error = %e, "the plugin was not told the run's process states");
    }
}

fn update_global_process_info(client: &Client, states: &[ProcessState]) -> Result<()> {
    let plugin = client.plugin();
    let f = plugin.func(
        plugin.api().PJRT_Client_UpdateGlobalProcessInfo,
        "PJRT_Client_UpdateGlobalProcessInfo",
    )?;
    let mut infos: Vec<sys::PJRT_ProcessInfo> = states
        .iter()
        .map(|s| sys::PJRT_ProcessInfo {
            struct_size: sys::PJRT_ProcessInfo_STRUCT_SIZE as usize,
            task_id: i32::try_from(s.id).unwrap_or(i32::MAX),
            incarnation_id: s.incarnation,
            state: match s.connected {
                true => sys::PJRT_ProcessState_kConnected,
                false => sys::PJRT_ProcessState_kError,
            },
            error_code: match s.connected {
                true => 0,
                false => ErrorCode::Unavailable.raw() as i32,
            },
            error_message: s.why.as_ptr().cast(),
            error_message_size: s.why.len(),
        })
        .collect();
    let mut args = sys::PJRT_Client_UpdateGlobalProcessInfo_Args {
        struct_size: sys::PJRT_Client_UpdateGlobalProcessInfo_Args_STRUCT_SIZE as usize,
        client: client.raw(),
        process_infos: infos.as_mut_ptr(),
        num_process_infos: infos.len(),
        ..Default::default()
    };
    // SAFETY: `client` is live for the call; `infos` and the messages it
    // points into (borrowed from `states`) outlive it, and the plugin only
    // reads them during the call.
    plugin.check(
        unsafe { f(&mut args) },
        "PJRT_Client_UpdateGlobalProcessInfo",
    )
}

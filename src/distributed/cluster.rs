//! Layer: distributed. Which run this process belongs to, read from the
//! launcher that started it, as `jax.distributed.initialize()` does with no
//! arguments. Imports `environment` (every variable read here is declared
//! there) and `error`.
//!
//! Detectors, first that fires wins:
//! 1. **explicit**: `XLAFN_COORDINATOR`, `XLAFN_NUM_PROCESSES` and
//!    `XLAFN_PROCESS_ID` all set.
//! 2. **torchrun** (and launchers that set its variables): `MASTER_ADDR`,
//!    `MASTER_PORT`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`. Under torchrun
//!    itself (`TORCHELASTIC_RUN_ID` set) its agent's store already listens
//!    on `MASTER_PORT`, so the coordinator takes the next port. It comes
//!    before SLURM: `srun torchrun ...` sets both, and torchrun's ranks are
//!    the processes.
//! 3. **SLURM**: `SLURM_JOB_ID`, `SLURM_PROCID`, `SLURM_NTASKS`,
//!    `SLURM_LOCALID`; the coordinator is the first host of
//!    `SLURM_STEP_NODELIST` (else `SLURM_JOB_NODELIST`) at a port drawn
//!    from the job id in 61440..=65535, JAX's choice, so every task
//!    computes the same one.
//! 4. **Open MPI**: `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_RANK`,
//!    `OMPI_COMM_WORLD_LOCAL_RANK`; the coordinator is the host in
//!    `OMPI_MCA_orte_hnp_uri` (where `mpirun` runs, Open MPI 4) at a port
//!    drawn from its job id. Open MPI 5 (PRRTE, PMIx) no longer says where
//!    `mpirun` runs: set `XLAFN_COORDINATOR`.
//! 5. **Kubernetes** Indexed Jobs and JobSets: `JOB_COMPLETION_INDEX` is
//!    the process id and `XLAFN_NUM_PROCESSES` the count (Kubernetes puts
//!    the completion count in no variable). The coordinator is process 0's
//!    pod on port 8476: in a JobSet (`JOBSET_NAME`,
//!    `REPLICATED_JOB_NAME`, one job: `JOB_INDEX` 0)
//!    `<jobset>-<replicated job>-0-0.<jobset>`, its default subdomain; in
//!    an Indexed Job whose pods have a subdomain (a headless service) the
//!    pod name `<job>-<index>` (`HOSTNAME`) with index 0, in the domain
//!    that `/etc/hosts` gives this pod's name.
//!
//! `XLAFN_COORDINATOR` set alone replaces the coordinator any detector
//! found. A detector whose variables are there but malformed is an error
//! naming the variable and its value, never a quiet single-process run.

use crate::environment::{self, Variable};
use crate::error::{Error, ErrorCode, Result};

/// The launchers [`detect`] knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// `XLAFN_COORDINATOR`, `XLAFN_NUM_PROCESSES` and `XLAFN_PROCESS_ID`.
    Explicit,
    /// torchrun, or anything that sets its variables.
    Torchrun,
    /// SLURM's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// A Kubernetes Indexed Job or JobSet.
    Kubernetes,
}

impl Launcher {
    /// The detector's name, as the log line and errors say it.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Explicit => "explicit (XLAFN_COORDINATOR)",
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "SLURM",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Kubernetes => "Kubernetes",
        }
    }
}

/// This process's place in a run, as its launcher describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The detector that fired.
    pub launcher: Launcher,
    /// `host:port` of the coordination service (process 0 serves it).
    pub coordinator: String,
    /// How many processes the run has.
    pub num_processes: usize,
    /// This process's id, in `0..num_processes`.
    pub process_id: usize,
    /// This process's index among those on its machine, where the
    /// launcher says it (the GPU a one-process-per-GPU launch gives it).
    pub local_rank: Option<usize>,
}

/// The port a Kubernetes coordinator listens on.
pub const KUBERNETES_PORT: u16 = 8476;

/// Which run this process belongs to, from the environment its launcher
/// set (see the module docs); `Ok(None)` when no launcher is detected.
pub fn detect() -> Result<Option<Cluster>> {
    let hosts = || {
        crate::files::read_limited(std::path::Path::new("/etc/hosts"), 1 << 20, true)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    detect_from(&|name| registered(name).and_then(Variable::get), &hosts)
}

/// The registry's entry for `name`: every variable read here is declared
/// in `environment` (a unit test checks the detectors' names).
fn registered(name: &str) -> Option<&'static Variable> {
    let found = environment::ALL.iter().copied().find(|v| v.name == name);
    debug_assert!(found.is_some(), "{name} is not declared in environment.rs");
    found
}

/// [`detect`] over another environment: `var(name)` is a variable's value,
/// `hosts()` the text of `/etc/hosts` (read only by the Kubernetes
/// detector). For tests, and for checking a launch script.
pub fn detect_from(
    var: &dyn Fn(&str) -> Option<String>,
    hosts: &dyn Fn() -> Option<String>,
) -> Result<Option<Cluster>> {
    let get = |name: &str| var(name).filter(|v| !v.is_empty());
    let found = if let Some(c) = explicit(&get)? {
        Some(c)
    } else if let Some(c) = torchrun(&get)? {
        Some(c)
    } else if let Some(c) = slurm(&get)? {
        Some(c)
    } else if let Some(c) = open_mpi(&get)? {
        Some(c)
    } else {
        kubernetes(&get, hosts)?
    };
    Ok(found.map(|mut c| {
        if let Some(addr) = get(environment::COORDINATOR.name) {
            c.coordinator = addr;
        }
        c
    }))
}

type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;

fn invalid(launcher: Launcher, message: String) -> Error {
    Error::distributed(
        ErrorCode::InvalidArgument,
        format!("{} launch detected, but {message}", launcher.name()),
    )
}

/// `name`'s value as a number, or an error naming it.
fn number(get: &Get, launcher: Launcher, name: &str) -> Result<usize> {
    let text = get(name).ok_or_else(|| invalid(launcher, format!("{name} is not set")))?;
    text.trim().parse().map_err(|_| {
        invalid(
            launcher,
            format!("{name}={text:?} is not a non-negative integer"),
        )
    })
}

fn optional_number(get: &Get, launcher: Launcher, name: &str) -> Result<Option<usize>> {
    get(name).map(|_| number(get, launcher, name)).transpose()
}

fn explicit(get: &Get) -> Result<Option<Cluster>> {
    let names = [
        environment::COORDINATOR.name,
        environment::NUM_PROCESSES.name,
        environment::PROCESS_ID.name,
    ];
    if !names.iter().all(|n| get(n).is_some()) {
        return Ok(None);
    }
    let l = Launcher::Explicit;
    Ok(Some(Cluster {
        launcher: l,
        coordinator: get(names[0]).unwrap_or_default(),
        num_processes: number(get, l, names[1])?,
        process_id: number(get, l, names[2])?,
        local_rank: None,
    }))
}

fn torchrun(get: &Get) -> Result<Option<Cluster>> {
    if get("MASTER_ADDR").is_none() || get("RANK").is_none() || get("WORLD_SIZE").is_none() {
        return Ok(None);
    }
    let l = Launcher::Torchrun;
    let port = number(get, l, "MASTER_PORT")?;
    let port = port + usize::from(get("TORCHELASTIC_RUN_ID").is_some());
    let port = u16::try_from(port)
        .map_err(|_| invalid(l, format!("the coordinator's port {port} is above 65535")))?;
    Ok(Some(Cluster {
        launcher: l,
        coordinator: with_port(&get("MASTER_ADDR").unwrap_or_default(), port),
        num_processes: number(get, l, "WORLD_SIZE")?,
        process_id: number(get, l, "RANK")?,
        local_rank: optional_number(get, l, "LOCAL_RANK")?,
    }))
}

/// `host:port`, bracketing an IPv6 address.
fn with_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// JAX's port for a job: one in the top 4096, the same for every task.
fn job_port(job_id: u64) -> u16 {
    (job_id % 4096 + 61440) as u16
}

fn slurm(get: &Get) -> Result<Option<Cluster>> {
    if get("SLURM_JOB_ID").is_none() || get("SLURM_PROCID").is_none() {
        return Ok(None);
    }
    let l = Launcher::Slurm;
    let job = get("SLURM_JOB_ID").unwrap_or_default();
    let job_id: u64 = job
        .trim()
        .parse()
        .map_err(|_| invalid(l, format!("SLURM_JOB_ID={job:?} is not a job number")))?;
    let (name, list) = ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"]
        .iter()
        .find_map(|n| get(n).map(|v| (*n, v)))
        .ok_or_else(|| {
            invalid(
                l,
                "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set".into(),
            )
        })?;
    let host = first_slurm_host(&list)
        .ok_or_else(|| invalid(l, format!("{name}={list:?} names no host")))?;
    Ok(Some(Cluster {
        launcher: l,
        coordinator: with_port(&host, job_port(job_id)),
        num_processes: number(get, l, "SLURM_NTASKS")?,
        process_id: number(get, l, "SLURM_PROCID")?,
        local_rank: optional_number(get, l, "SLURM_LOCALID")?,
    }))
}

/// The first host of a SLURM host list: `node07`, `node07,gpu2`,
/// `node[07-12],gpu2` and `node[07,09-12]` all give `node07`.
pub fn first_slurm_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list.find([',', '[']).unwrap_or(list.len());
    let prefix = &list[..end];
    let host = match list[end..].strip_prefix('[') {
        Some(range) => {
            let first = range.split([',', '-', ']']).next().unwrap_or("");
            if first.is_empty() || !range.contains(']') {
                return None;
            }
            format!("{prefix}{first}")
        }
        None => prefix.to_string(),
    };
    (!host.is_empty()).then_some(host)
}

fn open_mpi(get: &Get) -> Result<Option<Cluster>> {
    if get("OMPI_COMM_WORLD_SIZE").is_none() || get("OMPI_COMM_WORLD_RANK").is_none() {
        return Ok(None);
    }
    let l = Launcher::OpenMpi;
    let coordinator = match get("OMPI_MCA_orte_hnp_uri") {
        Some(uri) => hnp_coordinator(&uri).ok_or_else(|| {
            invalid(
                l,
                format!("OMPI_MCA_orte_hnp_uri={uri:?} is not `<job>.<n>;tcp://<host>:<port>`"),
            )
        })?,
        None if get(environment::COORDINATOR.name).is_some() => String::new(),
        None => {
            return Err(invalid(
                l,
                "OMPI_MCA_orte_hnp_uri is not set (Open MPI 5 does not say where mpirun runs): \
                 set XLAFN_COORDINATOR to host:port of process 0's machine"
                    .into(),
            ));
        }
    };
    Ok(Some(Cluster {
        launcher: l,
        coordinator,
        num_processes: number(get, l, "OMPI_COMM_WORLD_SIZE")?,
        process_id: number(get, l, "OMPI_COMM_WORLD_RANK")?,
        local_rank: optional_number(get, l, "OMPI_COMM_WORLD_LOCAL_RANK")?,
    }))
}

/// The coordinator an Open MPI 4 HNP URI implies:
/// `"2596339712.0;tcp://10.0.0.1,172.17.0.1:45435"` gives the first
/// address, `10.0.0.1`, at the job's port.
fn hnp_coordinator(uri: &str) -> Option<String> {
    let job: u64 = uri.split('.').next()?.trim().parse().ok()?;
    let port = job_port(job);
    if let Some(rest) = uri.split("tcp6://[").nth(1) {
        let host = rest.split([']', ',']).next()?;
        return (!host.is_empty()).then(|| with_port(host, port));
    }
    let rest = uri.split("tcp://").nth(1)?;
    let host = rest.split([',', ':']).next()?;
    (!host.is_empty()).then(|| with_port(host, port))
}

fn kubernetes(get: &Get, hosts: &dyn Fn() -> Option<String>) -> Result<Option<Cluster>> {
    if get("JOB_COMPLETION_INDEX").is_none() {
        return Ok(None);
    }
    let l = Launcher::Kubernetes;
    let process_id = number(get, l, "JOB_COMPLETION_INDEX")?;
    let num_processes = number(get, l, environment::NUM_PROCESSES.name).map_err(|_| {
        invalid(
            l,
            "XLAFN_NUM_PROCESSES is not set to the job's completion count (Kubernetes does not \
             put it in a variable)"
                .into(),
        )
    })?;
    if optional_number(get, l, "JOB_INDEX")?.is_some_and(|j| j != 0) {
        return Err(invalid(
            l,
            "JOB_INDEX is not 0: a JobSet of several jobs numbers its pods per job; set \
             XLAFN_PROCESS_ID and XLAFN_COORDINATOR"
                .into(),
        ));
    }
    let coordinator = if get(environment::COORDINATOR.name).is_some() {
        String::new()
    } else if let (Some(set), Some(job)) = (get("JOBSET_NAME"), get("REPLICATED_JOB_NAME")) {
        with_port(&format!("{set}-{job}-0-0.{set}"), KUBERNETES_PORT)
    } else {
        indexed_job_coordinator(get, hosts, process_id).ok_or_else(|| {
            invalid(
                l,
                "process 0's address is unknown: this pod's name (HOSTNAME) is not \
                 `<job>-<index>` with a subdomain in /etc/hosts (give the pods a headless \
                 service as subdomain), or set XLAFN_COORDINATOR"
                    .into(),
            )
        })?
    };
    Ok(Some(Cluster {
        launcher: l,
        coordinator,
        num_processes,
        process_id,
        local_rank: None,
    }))
}

/// Process 0's pod in an Indexed Job: this pod's name `<job>-<index>`
/// with index 0, in the domain `/etc/hosts` gives this pod's full name.
fn indexed_job_coordinator(
    get: &Get,
    hosts: &dyn Fn() -> Option<String>,
    index: usize,
) -> Option<String> {
    let name = get("HOSTNAME")?;
    let job = name.strip_suffix(&format!("-{index}"))?;
    let hosts = hosts()?;
    let full = hosts
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace().skip(1))
        .find(|h| {
            h.strip_prefix(name.as_str())
                .is_some_and(|r| r.starts_with('.'))
        })?;
    let domain = &full[name.len() + 1..];
    (!job.is_empty()).then(|| with_port(&format!("{job}-0.{domain}"), KUBERNETES_PORT))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variable a detector reads, in a full environment of each.
    #[test]
    fn every_variable_the_detectors_read_is_declared() {
        let seen = std::cell::RefCell::new(Vec::new());
        let var = |name: &str| {
            seen.borrow_mut().push(name.to_string());
            None
        };
        let _ = detect_from(&var, &|| None);
        for name in seen.borrow().iter() {
            assert!(registered(name).is_some(), "{name}");
        }
        // And those read only once a detector fires.
        for name in [
            "MASTER_PORT",
            "LOCAL_RANK",
            "TORCHELASTIC_RUN_ID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            "SLURM_STEP_NODELIST",
            "SLURM_JOB_NODELIST",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_MCA_orte_hnp_uri",
            "JOB_INDEX",
            "JOBSET_NAME",
            "REPLICATED_JOB_NAME",
            "HOSTNAME",
        ] {
            assert!(registered(name).is_some(), "{name}");
        }
    }
}

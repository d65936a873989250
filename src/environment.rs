//! Layer: base (settings); imports nothing of the crate. Every environment
//! variable xlafn reads is declared here once, with its type, default and
//! meaning, and read only through [`Variable::get`] or [`Variable::get_os`],
//! so that `xlafn env` (and [`report`]) can list them with their current
//! values and the book's table (`book/src/reference/environment.md`) is
//! generated from the same list
//! ([`markdown_table`]; a test keeps the two equal).
//!
//! Parsing stays with the code that uses a value, since what a bad value
//! means (an error at the first compile, a warning and the default) is
//! that code's decision. The library never sets a variable: changing the
//! environment of a process whose other threads may read it is unsound.

use std::ffi::OsString;

/// When a variable is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAt {
    /// By the running program (most of them, each once per process).
    Run,
    /// By xlafn's build script: changing it rebuilds xlafn.
    Build,
}

/// One environment variable xlafn reads.
#[derive(Debug)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What its value is (a path, an integer, a size, ...).
    pub kind: &'static str,
    /// What applies when it is unset.
    pub default: &'static str,
    /// What it does, as the book's table says it.
    pub doc: &'static str,
    /// When it is read.
    pub read_at: ReadAt,
}

impl Variable {
    /// Its value as text (`None` when unset or not UTF-8).
    pub fn get(&self) -> Option<String> {
        std::env::var(self.name).ok()
    }

    /// Its value as the OS holds it (`None` when unset).
    pub fn get_os(&self) -> Option<OsString> {
        std::env::var_os(self.name)
    }
}

macro_rules! variables {
    ($($(#[$m:meta])* $id:ident = $name:literal, $kind:literal, $default:literal, $at:ident, $doc:literal;)*) => {
        $(
            $(#[$m])*
            pub const $id: Variable = Variable {
                name: $name,
                kind: $kind,
                default: $default,
                doc: $doc,
                read_at: ReadAt::$at,
            };
        )*
        /// Every variable, in the book's table's order.
        pub const ALL: &[&Variable] = &[$(&$id),*];
    };
}

variables! {
    /// The CPU plugin to load.
    PJRT_PLUGIN = "XLAFN_PJRT_PLUGIN", "path", "the plugin store's (beside the program, then the cache)", Run,
        "use this PJRT plugin `.so` instead of the pinned wheel";
    /// Forbid fetching the plugin.
    OFFLINE = "XLAFN_OFFLINE", "boolean", "off", Run,
        "`1`: never fetch the plugin; a missing one is an error that lists every way to provide it";
    /// The header bindgen reads.
    PJRT_HEADER = "XLAFN_PJRT_HEADER", "path", "the shipped 0.81 bindings", Build,
        "with the `bindgen` feature: the `pjrt_c_api.h` of another plugin to generate bindings from";
    /// The CUDA plugin.
    CUDA_PLUGIN = "XLAFN_CUDA_PLUGIN", "path", "the plugin store's (beside the program, then the cache)", Run,
        "a CUDA PJRT plugin for `XLAFN_DEVICE=cuda`, used as it is; at build time it enables the ignored CUDA tests (`cargo test -- --ignored`)";
    /// The CUDA plugin package the store fetches.
    CUDA_PACKAGE = "XLAFN_CUDA_PACKAGE", "package", "jax-cuda13-pjrt", Run,
        "which pinned CUDA plugin `XLAFN_DEVICE=cuda` fetches and loads from the cache: `jax-cuda13-pjrt` (CUDA 13, driver 580+), `jax-cuda12-pjrt` (CUDA 12.9, driver 575+), or OpenXLA's `xla-cuda13-pjrt` / `xla-cuda12-pjrt`";
    /// The default client's platform.
    DEVICE = "XLAFN_DEVICE", "cpu or cuda", "cpu", Run,
        "`cpu` or `cuda`: with a CUDA plugin, the default client is CUDA; without a usable plugin it is an error, never a fall back to the CPU";
    /// The CPU client's device count.
    CPU_DEVICES = "XLAFN_CPU_DEVICES", "integer", "the plugin's (4)", Run,
        "how many devices the CPU client has (1 to 1024)";
    /// The default matmul precision.
    DEFAULT_MATMUL_PRECISION = "XLAFN_DEFAULT_MATMUL_PRECISION", "precision", "default", Run,
        "the precision every `dot_general` and `convolution` asks for, as JAX's `jax_default_matmul_precision`: `default` (on CUDA, f32 products use TF32), `high`, or `highest` (full f32); JAX's names `bfloat16`, `tensorfloat32`, `float32` too. Read once; another value is an error at the first compile";
    /// The wait's polling budget.
    SPIN_WAIT_US = "XLAFN_SPIN_WAIT_US", "microseconds", "200", Run,
        "how long a wait for a result polls before it sleeps (0: never poll)";
    /// Extra XLA flags.
    XLA_FLAGS = "XLAFN_XLA_FLAGS", "flags", "none", Run,
        "extra XLA compile options, `name=value` separated by spaces or commas (e.g. `xla_dump_to=/tmp/dump`); they override xlafn's choices. Values known to abort or hang XLA are refused at the first compile (`xla_cpu_parallel_codegen_split_count` must be in `0..=1024`); xlafn's own tuning flags that a plugin does not know are dropped for that plugin, with an info log line";
    /// The on-disk compile cache switch.
    COMPILE_CACHE = "XLAFN_COMPILE_CACHE", "on or off", "on", Run,
        "`off` (or `0`, `false`): no on-disk compile cache";
    /// Where the compile cache lives.
    COMPILE_CACHE_DIR = "XLAFN_COMPILE_CACHE_DIR", "path", "$XDG_CACHE_HOME/xlafn/executables", Run,
        "the on-disk compile cache's folder";
    /// The compile cache's bound.
    COMPILE_CACHE_MAX_BYTES = "XLAFN_COMPILE_CACHE_MAX_BYTES", "size", "1G", Run,
        "the on-disk compile cache's bound (bytes, or with `K`, `M`, `G`; 0 turns it off); least recently used entries go first";
    /// The eager op cache's bound.
    EAGER_CACHE_ENTRIES = "XLAFN_EAGER_CACHE_ENTRIES", "integer", "1024", Run,
        "how many compiled eager ops are kept (least recently used go first)";
    /// The export shape cache's bound.
    EXPORT_SHAPE_CACHE_ENTRIES = "XLAFN_EXPORT_SHAPE_CACHE_ENTRIES", "integer", "64", Run,
        "how many shape-specialized programs a loaded export keeps";
    /// The memory programs are measured against.
    PROGRAM_MEMORY_BYTES = "XLAFN_PROGRAM_MEMORY_BYTES", "size", "the machine's physical memory", Run,
        "the memory a program's arrays are checked against before they reach XLA (`512M`, `2T`)";
    /// The process profile.
    PROFILE = "XLAFN_PROFILE", "path", "none", Run,
        "write a Chrome trace event file of the whole process to this path at exit (`xlafn::runtime::profile`)";
    /// xlafn's own tests' program check.
    CHECK_LOWERED_PROGRAMS = "XLAFN_CHECK_LOWERED_PROGRAMS", "boolean", "off", Run,
        "`1`: debug builds check every lowered program against the export check's vocabulary and panic on a word it does not know. For xlafn's own tests, whose `.cargo/config.toml` sets it";
    /// xlafn's checkpoint test's exchange folder.
    TF_BUNDLE_DIR = "XLAFN_TF_BUNDLE_DIR", "path", "none", Run,
        "for `scripts/tf_bundle_check.py`: the folder in which xlafn's unit test `tensorflow_interop_files` exchanges checkpoint files with TensorFlow; unset, that test does nothing";
    /// The user cache's base.
    XDG_CACHE_HOME = "XDG_CACHE_HOME", "path", "$HOME/.cache", Run,
        "xlafn's cache (the plugin store, the compile cache) is its `xlafn/` folder; an unset or relative value means `$HOME/.cache`";
    /// The home folder.
    HOME = "HOME", "path", "none", Run,
        "the cache is `$HOME/.cache/xlafn` when `XDG_CACHE_HOME` is unset";
    /// This machine's name, for event file names.
    HOSTNAME = "HOSTNAME", "text", "/etc/hostname, else localhost", Run,
        "the machine name in TensorBoard event file names when /etc/hostname is unreadable; in a Kubernetes Indexed Job, the pod's name `<job>-<index>`, from which process 0's address is found";
    /// The coordinator of a multi-process run.
    COORDINATOR = "XLAFN_COORDINATOR", "host:port", "the launcher's (see `distributed::cluster`)", Run,
        "`distributed::initialize_from_env`: the coordination service's address; with `XLAFN_NUM_PROCESSES` and `XLAFN_PROCESS_ID` it describes the run itself, alone it replaces the address a launcher's detector found";
    /// The etcd cluster a multi-process run coordinates through.
    ETCD_ENDPOINTS = "XLAFN_ETCD_ENDPOINTS", "list", "none", Run,
        "`distributed::initialize_from_env`: comma-separated `host:port` (or `http://host:port`) of an etcd cluster to use as the run's store instead of process 0's coordination service; with `XLAFN_RUN_ID`";
    /// The run id of a run coordinated through etcd.
    RUN_ID = "XLAFN_RUN_ID", "text", "the coordinator address", Run,
        "`distributed::initialize_from_env` with `XLAFN_ETCD_ENDPOINTS`: the run's keys live under `xlafn/runs/<run id>/` in etcd";
    /// The process count of a multi-process run.
    NUM_PROCESSES = "XLAFN_NUM_PROCESSES", "integer", "the launcher's", Run,
        "`distributed::initialize_from_env`: how many processes the run has (needed under Kubernetes, which does not say)";
    /// This process's id in a multi-process run.
    PROCESS_ID = "XLAFN_PROCESS_ID", "integer", "the launcher's", Run,
        "`distributed::initialize_from_env`: this process's id, with `XLAFN_COORDINATOR` and `XLAFN_NUM_PROCESSES`";
    /// torchrun's coordinator host.
    MASTER_ADDR = "MASTER_ADDR", "host", "none", Run,
        "torchrun-style launches (with `MASTER_PORT`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`): process 0's host, where `initialize_from_env` puts the coordinator";
    /// torchrun's coordinator port.
    MASTER_PORT = "MASTER_PORT", "port", "none", Run,
        "torchrun-style launches: the coordinator's port (the next one under torchrun itself, whose agent holds this one)";
    /// torchrun's process id.
    RANK = "RANK", "integer", "none", Run,
        "torchrun-style launches: this process's id";
    /// torchrun's process count.
    WORLD_SIZE = "WORLD_SIZE", "integer", "none", Run,
        "torchrun-style launches: the process count";
    /// torchrun's per-machine index.
    LOCAL_RANK = "LOCAL_RANK", "integer", "none", Run,
        "torchrun-style launches: this process's index on its machine (`Cluster::local_rank`)";
    /// Set by torchrun's agent.
    TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID", "text", "none", Run,
        "set by torchrun itself: its agent's store holds `MASTER_PORT`, so the coordinator takes `MASTER_PORT + 1`";
    /// SLURM's job.
    SLURM_JOB_ID = "SLURM_JOB_ID", "integer", "none", Run,
        "SLURM launches (with `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`): the coordinator's port is drawn from it (61440-65535, as JAX draws it)";
    /// SLURM's task id.
    SLURM_PROCID = "SLURM_PROCID", "integer", "none", Run,
        "SLURM launches: this process's id";
    /// SLURM's task count.
    SLURM_NTASKS = "SLURM_NTASKS", "integer", "none", Run,
        "SLURM launches: the process count";
    /// SLURM's per-node task index.
    SLURM_LOCALID = "SLURM_LOCALID", "integer", "none", Run,
        "SLURM launches: this process's index on its node";
    /// The step's nodes.
    SLURM_STEP_NODELIST = "SLURM_STEP_NODELIST", "host list", "none", Run,
        "SLURM launches: its first host runs the coordinator";
    /// The job's nodes.
    SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST", "host list", "none", Run,
        "SLURM launches without a step's list (`sbatch` scripts): its first host runs the coordinator";
    /// Open MPI's process count.
    OMPI_COMM_WORLD_SIZE = "OMPI_COMM_WORLD_SIZE", "integer", "none", Run,
        "Open MPI launches (with `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`): the process count";
    /// Open MPI's process id.
    OMPI_COMM_WORLD_RANK = "OMPI_COMM_WORLD_RANK", "integer", "none", Run,
        "Open MPI launches: this process's id";
    /// Open MPI's per-node index.
    OMPI_COMM_WORLD_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK", "integer", "none", Run,
        "Open MPI launches: this process's index on its node";
    /// Where Open MPI 4's mpirun runs.
    OMPI_MCA_ORTE_HNP_URI = "OMPI_MCA_orte_hnp_uri", "uri", "none", Run,
        "Open MPI 4 launches: `mpirun`'s host runs the coordinator, at a port drawn from the job id (Open MPI 5 has no such variable: set `XLAFN_COORDINATOR`)";
    /// A Kubernetes Indexed Job's index.
    JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX", "integer", "none", Run,
        "Kubernetes Indexed Jobs and JobSets: this process's id (the count comes from `XLAFN_NUM_PROCESSES`)";
    /// A JobSet's job index.
    JOB_INDEX = "JOB_INDEX", "integer", "none", Run,
        "JobSets: must be 0 (one job); pods of several jobs need `XLAFN_PROCESS_ID` and `XLAFN_COORDINATOR`";
    /// A JobSet's name.
    JOBSET_NAME = "JOBSET_NAME", "text", "none", Run,
        "JobSets (with `REPLICATED_JOB_NAME`): process 0 is `<jobset>-<replicated job>-0-0.<jobset>`, port 8476";
    /// A JobSet's replicated job.
    REPLICATED_JOB_NAME = "REPLICATED_JOB_NAME", "text", "none", Run,
        "JobSets: the replicated job's name, in process 0's address";
    /// The plugin's own log level.
    TF_CPP_MIN_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL", "integer", "0", Run,
        "read by the plugin, not by xlafn: `1` hides its INFO lines (such as `cpu_device_count set via create_options`). xlafn never sets it";
}

/// xlafn's cache folder: `$XDG_CACHE_HOME/xlafn` when that is an absolute
/// path (the XDG rule: a relative one is ignored), else
/// `$HOME/.cache/xlafn`; `None` when neither gives an absolute path.
pub fn cache_root() -> Option<std::path::PathBuf> {
    let absolute = |v: OsString| {
        let p = std::path::PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    if let Some(base) = XDG_CACHE_HOME.get_os().and_then(absolute) {
        return Some(base.join("xlafn"));
    }
    HOME.get_os()
        .and_then(absolute)
        .map(|home| home.join(".cache/xlafn"))
}

/// Every variable with its current value (`None`: unset), for `xlafn env`.
pub fn report() -> Vec<(&'static Variable, Option<String>)> {
    ALL.iter()
        .map(|v| (*v, v.get_os().map(|s| s.to_string_lossy().into_owned())))
        .collect()
}

/// The book's table of variables (`book/src/reference/environment.md`).
pub fn markdown_table() -> String {
    let mut table = String::from("| variable | read | default | effect |\n|---|---|---|---|\n");
    for v in ALL {
        let at = match v.read_at {
            ReadAt::Run => "run time",
            ReadAt::Build => "build time",
        };
        table.push_str(&format!(
            "| `{}` | {at} | {} | {} |\n",
            v.name, v.default, v.doc
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_has_one_entry_and_a_doc() {
        let mut names: Vec<&str> = ALL.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a variable is listed twice");
        assert!(
            ALL.iter()
                .all(|v| !v.doc.is_empty() && !v.default.is_empty())
        );
        assert!(markdown_table().lines().count() == n + 2);
    }
}

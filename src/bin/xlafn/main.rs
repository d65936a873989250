//! Layer: the `xlafn` tool. Inspect and run exported functions without
//! their Rust source, as TensorFlow's `saved_model_cli` does for
//! SavedModels:
//!
//! ```text
//! xlafn show DIR [--json] [--cost]
//! xlafn run DIR [--input NAME=FILE.npy]... [--inputs FILE.npz]...
//!               [--input-expr NAME=EXPR]... [--output-dir OUT [--overwrite]] [--json]
//! xlafn stablehlo DIR [--program N]
//! xlafn bench DIR [--quick] [--json FILE] [--plot FILE.svg]
//! xlafn fetch [--wheel FILE.whl|FOLDER] [--verify]
//! xlafn env [--markdown]
//! ```
//!
//! Imports clap (the command line), `xlafn::export` (`inspect`, which
//! reads an export without compiling, and `load`), `xlafn::io`'s codec for
//! tensor files, and this tool's `expr` (input expressions), `values` and
//! `print` (output text). The folder may come from anyone: `inspect` and
//! `load` check it (see `xlafn::export`), text from its manifest is
//! printed with control characters escaped so it cannot rewrite the
//! terminal, and outputs are written only as new files unless
//! `--overwrite` says otherwise (`bench`'s `--json` and `--plot` files
//! replace what is there; a link there is replaced, never written
//! through). Exit status: 0 on success (also for `--help` and
//! `--version`), 2 for a malformed command line (clap's convention), 141
//! when stdout is a pipe its reader closed (`| head`), 1 for any other
//! error, with a message naming it.

// Before the modules, so that theirs are these too.
/// `std`'s `println!`, through [`write_stdout`]: a closed pipe ends the
/// tool quietly instead of panicking.
macro_rules! println {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// `std`'s `print!`, through [`write_stdout`].
macro_rules! print {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!($($t)*))
    };
}

mod expr;
mod print;
mod values;

/// The exit status when stdout is a closed pipe (`xlafn run ... | head`):
/// 141, what a shell reports for a tool that SIGPIPE ended (128 + 13),
/// the way such a tool ends without Rust's ignored SIGPIPE.
const CLOSED_PIPE_STATUS: i32 = 141;

/// Writes to stdout. Rust ignores SIGPIPE, so a reader that went away
/// (`head`) shows as an `EPIPE` error, on which `std`'s `println!`
/// panics: here it ends the tool at once with [`CLOSED_PIPE_STATUS`] and
/// no message (nothing is left to say to a reader that left); any other
/// failure to write is an error message and status 1.
fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(CLOSED_PIPE_STATUS);
        }
        eprintln!("xlafn: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

use clap::{Args, Parser, Subcommand};
use print::{array_json, array_text, p, printable};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use xlafn::export::{ExportInfo, SpecJson, npy, npz};
use xlafn::runtime::HostArray;
use xlafn::{DType, Error, LoadedFunction, Result, Tensor};

#[derive(Parser)]
#[command(
    name = "xlafn",
    version,
    about = "Inspect and run functions exported with xlafn (ConcreteFunction::export)",
    after_help = "Tensor files are NumPy .npy/.npz (any byte order, C or Fortran order; \
                  bf16 as ml_dtypes writes it)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The formats `xlafn export` writes.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    /// A TensorFlow SavedModel.
    #[value(name = "saved_model")]
    SavedModel,
}

/// The TensorFlow platforms a SavedModel may be written for.
#[derive(Clone, Copy, clap::ValueEnum)]
enum TfPlatformArg {
    Cpu,
    Cuda,
}

#[derive(Subcommand)]
enum Command {
    /// Print the signature (inputs, outputs, variables, programs) without compiling.
    Show {
        /// The export folder.
        dir: PathBuf,
        /// Print JSON for scripts instead of text.
        #[arg(long)]
        json: bool,
        /// Also compile each program and print XLA's cost analysis (flops,
        /// transcendentals, bytes accessed) and memory analysis.
        #[arg(long)]
        cost: bool,
    },
    /// Time each program of the export on zero inputs (`xlafn::bench`).
    Bench {
        /// The export folder.
        dir: PathBuf,
        /// Short runs (20 ms blocks) instead of the report's 0.2 s ones.
        #[arg(long)]
        quick: bool,
        /// Also write the figures as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Also draw them as an SVG bar chart in this file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
    /// Run the function on the given inputs and print (or save) its outputs.
    Run(RunArgs),
    /// Print the StableHLO program text of the export.
    Stablehlo {
        /// The export folder.
        dir: PathBuf,
        /// Print only program N (as `show` numbers them); default: all.
        #[arg(long, value_name = "N")]
        program: Option<usize>,
    },
    /// Write the export in another format: `saved_model`, a TensorFlow
    /// SavedModel (`tf.saved_model.load` runs it).
    Export {
        /// The export folder.
        dir: PathBuf,
        /// The format to write.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// The new folder to write it in (it must not exist).
        #[arg(long, short, value_name = "DIR")]
        out: PathBuf,
        /// The TensorFlow platform the SavedModel runs on.
        #[arg(long, value_enum, default_value = "cpu")]
        platform: TfPlatformArg,
        /// Freeze the variables into the graph as constants (a frozen
        /// graph) instead of writing TensorFlow variables.
        #[arg(long)]
        freeze_variables: bool,
    },
    /// Print every environment variable xlafn reads, with its current
    /// value, default and meaning.
    Env {
        /// Print the Markdown table of the book's environment page instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Put the pinned XLA CPU plugin (or, with --cuda, a CUDA plugin and
    /// its CUDA libraries) into xlafn's cache, fetched with pip or from
    /// wheel files you have, and print its path; for CI, containers and
    /// machines that later run offline.
    Fetch {
        /// Install from this wheel file, or a folder holding the pinned
        /// wheels, instead of fetching (needs no Python and no network).
        #[arg(long, value_name = "PATH")]
        wheel: Option<PathBuf>,
        /// A CUDA plugin instead of the CPU one: jax-cuda13-pjrt (the
        /// default), jax-cuda12-pjrt, xla-cuda13-pjrt or xla-cuda12-pjrt.
        #[arg(long, value_name = "PACKAGE", num_args = 0..=1,
              default_missing_value = "jax-cuda13-pjrt")]
        cuda: Option<String>,
        /// Rehash every cached file against the wheel's RECORD (not just
        /// sizes and times), repairing what differs.
        #[arg(long, conflicts_with = "wheel")]
        verify: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The export folder.
    dir: PathBuf,
    /// An input from a .npy file.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Inputs from a .npz file: each array feeds the input of its name.
    #[arg(long = "inputs", value_name = "FILE.npz")]
    archives: Vec<PathBuf>,
    /// An input typed in: a number, nested lists such as [[1,2],[3,4]],
    /// or zeros(SHAPE), ones(SHAPE), full(SHAPE, VALUE) (NumPy's names,
    /// `np.` optional); `:DTYPE` at the end picks a dtype (default: the
    /// input's own), e.g. 'x=[1, 2.5]:f64'.
    #[arg(long = "input-expr", value_name = "NAME=EXPR")]
    exprs: Vec<String>,
    /// Write each output as OUT/output_K.npy and each updated variable as
    /// OUT/variable_K.npy (K as `show` numbers them).
    #[arg(long, value_name = "OUT")]
    output_dir: Option<PathBuf>,
    /// Replace files already in the output folder (otherwise an error).
    #[arg(long, requires = "output_dir")]
    overwrite: bool,
    /// Print JSON for scripts instead of text.
    #[arg(long)]
    json: bool,
}

fn shape_text(shape: &Option<Vec<Option<i64>>>) -> String {
    match shape {
        None => xlafn::ir::Shape::unknown_rank().to_string(),
        Some(d) => xlafn::ir::Shape::from_dims(d.clone()).to_string(),
    }
}

fn spec_line(s: &SpecJson) -> String {
    format!(
        "    {}: TensorSpec(shape={}, dtype={})",
        p(&s.name),
        shape_text(&s.shape),
        p(&s.dtype)
    )
}

fn show_text(info: &ExportInfo) {
    println!("function '{}'", p(&info.name));
    if let Some(op) = &info.implements {
        println!("  implements: {}", p(op));
    }
    println!("  inputs:");
    info.inputs
        .iter()
        .for_each(|s| println!("{}", spec_line(s)));
    println!("  outputs:");
    info.outputs
        .iter()
        .for_each(|s| println!("{}", spec_line(s)));
    for (k, v) in info.variables.iter().enumerate() {
        let updated = if v.updated { " (updated by calls)" } else { "" };
        println!(
            "  variable {k} '{}': dtype={} shape={:?}{updated}",
            p(&v.name),
            v.dtype,
            v.dims
        );
    }
    for (k, prog) in info.programs.iter().enumerate() {
        println!("  program {k} for input shapes {:?}", prog.input_shapes);
    }
    if info.has_graph {
        println!("  other input shapes: compiled on demand from the saved graph");
    }
}

fn show_json(info: &ExportInfo) -> serde_json::Value {
    let variables: Vec<_> = info
        .variables
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v.name, "dtype": v.dtype.name(), "shape": v.dims, "updated": v.updated,
            })
        })
        .collect();
    let programs: Vec<_> = info
        .programs
        .iter()
        .map(|prog| serde_json::json!({"file": prog.file, "input_shapes": prog.input_shapes}))
        .collect();
    serde_json::json!({
        "name": info.name,
        "implements": info.implements,
        "inputs": info.inputs,
        "outputs": info.outputs,
        "variables": variables,
        "programs": programs,
        "has_graph": info.has_graph,
    })
}

fn show(dir: &Path, json: bool, cost: bool) -> Result<()> {
    let info = xlafn::export::inspect(dir)?;
    let costs = if cost {
        program_costs(dir)?
    } else {
        Vec::new()
    };
    if json {
        let mut doc = show_json(&info);
        if cost {
            doc["costs"] = serde_json::Value::Array(costs.iter().map(|c| c.json()).collect());
        }
        println!("{doc}");
    } else {
        show_text(&info);
        for c in &costs {
            c.print();
        }
    }
    Ok(())
}

/// XLA's analyses of one compiled program of an export.
struct ProgramCost {
    input_shapes: Vec<Vec<i64>>,
    cost: xlafn::runtime::CostAnalysis,
    memory: xlafn::runtime::MemoryStats,
}

impl ProgramCost {
    fn print(&self) {
        let m = &self.memory;
        println!("\nprogram for input shapes {:?}:", self.input_shapes);
        let n = |v: Option<f64>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
        println!(
            "  cost: {} flops, {} transcendentals, {} bytes accessed",
            n(self.cost.flops()),
            n(self.cost.transcendentals()),
            n(self.cost.bytes_accessed())
        );
        println!(
            "  memory: arguments {} B, outputs {} B, aliased {} B, temporaries {} B, code {} B",
            m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes, m.generated_code_bytes
        );
    }

    fn json(&self) -> serde_json::Value {
        let m = &self.memory;
        serde_json::json!({
            "input_shapes": self.input_shapes,
            "flops": self.cost.flops(),
            "transcendentals": self.cost.transcendentals(),
            "bytes_accessed": self.cost.bytes_accessed(),
            "argument_bytes": m.argument_bytes,
            "output_bytes": m.output_bytes,
            "alias_bytes": m.alias_bytes,
            "temp_bytes": m.temp_bytes,
            "generated_code_bytes": m.generated_code_bytes,
        })
    }
}

/// Loads (and so compiles) the export and asks XLA about each program.
fn program_costs(dir: &Path) -> Result<Vec<ProgramCost>> {
    let loaded = xlafn::load(dir)?;
    loaded
        .programs()
        .into_iter()
        .map(|(input_shapes, exe)| {
            Ok(ProgramCost {
                input_shapes,
                cost: exe.cost_analysis()?,
                memory: exe.memory_stats()?,
            })
        })
        .collect()
}

/// Times each program of the export on zero inputs of its shapes.
fn bench(dir: &Path, quick: bool, json: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    use xlafn::bench::{BenchOptions, Comparison, Mode, Row, measure};
    let options = if quick {
        BenchOptions::quick()
    } else {
        BenchOptions::default()
    };
    let began = std::time::Instant::now();
    let loaded = xlafn::load(dir)?;
    let load_ms = began.elapsed().as_secs_f64() * 1e3;
    let dtypes: Vec<DType> = loaded
        .inputs()
        .iter()
        .map(|s| DType::from_name(&s.dtype))
        .collect::<Result<_>>()?;
    let mut comparisons = Vec::new();
    for (shapes, exe) in loaded.programs() {
        let inputs: Vec<Tensor> = shapes
            .iter()
            .zip(&dtypes)
            .map(|(dims, &dtype)| Tensor::try_zeros(dims, dtype))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let run = || -> Result<()> {
            for out in loaded.call(&refs)? {
                out.block_until_ready()?;
            }
            Ok(())
        };
        let first = std::time::Instant::now();
        run()?;
        let first_call_ms = load_ms + first.elapsed().as_secs_f64() * 1e3;
        let steady = measure(&options, run)?;
        let cost = exe.cost_analysis()?;
        let rate = |amount: f64| (amount > 0.0).then(|| amount / (steady.median_us * 1e-6) / 1e9);
        comparisons.push(Comparison {
            name: format!("{} {shapes:?}", loaded.name()),
            rows: vec![Row {
                mode: Mode::Compiled,
                first_call_ms,
                gflops: cost.flops().and_then(rate),
                gbps: cost.bytes_accessed().and_then(rate),
                steady,
            }],
            flops: cost.flops().filter(|&f| f > 0.0),
            bytes_accessed: cost.bytes_accessed().filter(|&b| b > 0.0),
        });
    }
    for c in &comparisons {
        println!("{c}");
    }
    println!("(first call: loading and compiling the export, then one call)");
    if let Some(path) = json {
        let doc = serde_json::Value::Array(comparisons.iter().map(Comparison::to_json).collect());
        // As every file the crate writes: a new file renamed over `path`
        // (a link there is replaced, not written through).
        xlafn::export::replace_file(path, doc.to_string().as_bytes())?;
    }
    if let Some(path) = plot {
        xlafn::bench::write_chart(&comparisons, path)?;
    }
    Ok(())
}

fn stablehlo(dir: &Path, program: Option<usize>) -> Result<()> {
    let info = xlafn::export::inspect(dir)?;
    let chosen: Vec<usize> = match program {
        Some(k) => vec![k],
        None => (0..info.programs.len()).collect(),
    };
    for k in chosen {
        let text = info.program_text(k)?;
        if program.is_none() && info.programs.len() > 1 {
            // MLIR tools' own separator between modules in one file.
            println!(
                "// ----- program {k} for input shapes {:?}",
                info.programs[k].input_shapes
            );
        }
        print!("{}", printable(&text, true));
    }
    Ok(())
}

/// The largest `--input` or `--inputs` file read: inputs are the user's
/// own files, but a FIFO or `/dev/zero` named by mistake must not hang or
/// fill memory.
const MAX_INPUT_BYTES: u64 = 1 << 40;

/// The inputs of one `run`, gathered by name from every source.
struct Inputs<'a> {
    specs: &'a [SpecJson],
    function: &'a str,
    values: Vec<Option<HostArray>>,
}

impl Inputs<'_> {
    fn index(&self, name: &str) -> Result<usize> {
        self.specs
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| {
                let valid: Vec<String> = self
                    .specs
                    .iter()
                    .map(|s| format!("'{}'", p(&s.name)))
                    .collect();
                Error::Value(format!(
                    "'{}' has no input named {:?}; its inputs are {}",
                    p(self.function),
                    p(name),
                    if valid.is_empty() {
                        "none".into()
                    } else {
                        valid.join(", ")
                    }
                ))
            })
    }

    fn set(&mut self, name: &str, value: HostArray) -> Result<()> {
        let k = self.index(name)?;
        if self.values[k].replace(value).is_some() {
            return Err(Error::Value(format!("input '{}' is given twice", p(name))));
        }
        Ok(())
    }

    fn declared_dtype(&self, name: &str) -> Result<DType> {
        DType::from_name(&self.specs[self.index(name)?].dtype)
    }
}

/// Splits `NAME=VALUE` for the option `flag`.
fn name_value<'a>(flag: &str, arg: &'a str) -> Result<(&'a str, &'a str)> {
    arg.split_once('=')
        .filter(|(name, _)| !name.is_empty())
        .ok_or_else(|| Error::Value(format!("{flag} {arg:?}: expected NAME=...")))
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    xlafn::export::read_regular_file(path, MAX_INPUT_BYTES)
}

fn in_file(path: &Path, e: Error) -> Error {
    Error::Value(format!("{}: {e}", path.display()))
}

/// The input arrays of `run`, one per input of `info`, from every source
/// on the command line; read before anything is compiled, so a mistake
/// in them is reported at once.
fn gather(args: &RunArgs, info: &ExportInfo) -> Result<Vec<HostArray>> {
    let mut inputs = Inputs {
        specs: &info.inputs,
        function: &info.name,
        values: vec![None; info.inputs.len()],
    };
    for arg in &args.inputs {
        let (name, file) = name_value("--input", arg)?;
        inputs.index(name)?;
        let path = Path::new(file);
        let a = npy::decode(&read_file(path)?).map_err(|e| in_file(path, e))?;
        inputs.set(name, a)?;
    }
    for path in &args.archives {
        let arrays =
            npz::decode(&read_file(path)?, npz::DEFAULT_MAX_BYTES).map_err(|e| in_file(path, e))?;
        for (name, a) in arrays {
            inputs.set(&name, a).map_err(|e| in_file(path, e))?;
        }
    }
    for arg in &args.exprs {
        let (name, text) = name_value("--input-expr", arg)?;
        let a = expr::evaluate(text, inputs.declared_dtype(name)?)?;
        inputs.set(name, a)?;
    }
    inputs
        .values
        .into_iter()
        .zip(&info.inputs)
        .map(|(a, spec)| {
            a.ok_or_else(|| {
                Error::Value(format!(
                    "input '{0}' ({1}{2}) is missing; give it with --input {0}=FILE.npy, \
                     --inputs FILE.npz or --input-expr '{0}=EXPR'",
                    p(&spec.name),
                    p(&spec.dtype),
                    shape_text(&spec.shape)
                ))
            })
        })
        .collect()
}

/// One printed (and possibly saved) result of a run: an output or an
/// updated variable.
struct Printed {
    /// The manifest's name for it (unescaped; printing escapes it).
    name: String,
    /// `Some(k)` for variable `k`.
    variable: Option<usize>,
    /// The file it is saved as (see `result_files`).
    file: String,
    array: HostArray,
}

impl Printed {
    fn label(&self) -> String {
        match self.variable {
            Some(k) => format!("variable {k} '{}' (updated)", p(&self.name)),
            None => p(&self.name),
        }
    }
}

/// The files `run --output-dir` writes for `info`: one per output, then
/// one per variable calls update, named by index (manifest names are not
/// trusted as file names).
fn result_files(info: &ExportInfo) -> Vec<String> {
    let outputs = (0..info.outputs.len()).map(|k| format!("output_{k}.npy"));
    let variables = info.variables.iter().enumerate();
    let updated = variables.filter(|(_, v)| v.updated);
    outputs
        .chain(updated.map(|(k, _)| format!("variable_{k}.npy")))
        .collect()
}

/// Errors if one of `files` exists in `dir` (or a link stands there).
fn refuse_existing(dir: &Path, files: &[String]) -> Result<()> {
    match files
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.symlink_metadata().is_ok())
    {
        Some(taken) => Err(Error::Value(format!(
            "{}: already exists; xlafn writes only new files (choose an empty folder, or pass \
             --overwrite)",
            taken.display()
        ))),
        None => Ok(()),
    }
}

/// Calls the loaded function and collects its outputs, then the new
/// values of the variables it updated.
fn call(f: &LoadedFunction, inputs: &[HostArray], files: &[String]) -> Result<Vec<Printed>> {
    let tensors: Vec<Tensor> = inputs
        .iter()
        .map(|a| Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes))
        .collect::<Result<_>>()?;
    let outputs = f.call(&tensors.iter().collect::<Vec<_>>())?;
    let mut results = Vec::new();
    for (k, t) in outputs.iter().enumerate() {
        let name = f
            .outputs()
            .get(k)
            .map_or_else(|| format!("output_{k}"), |s| s.name.clone());
        results.push((name, None, t.to_host_array()?));
    }
    for k in f.updated_variables() {
        let v = &f.variables()[k];
        results.push((
            v.name().to_string(),
            Some(k),
            v.try_read()?.to_host_array()?,
        ));
    }
    if results.len() != files.len() {
        return Err(Error::Value(
            "the export changed while it was run (its results no longer match its manifest)".into(),
        ));
    }
    Ok(results
        .into_iter()
        .zip(files)
        .map(|((name, variable, array), file)| Printed {
            name,
            variable,
            file: file.clone(),
            array,
        })
        .collect())
}

fn run(args: &RunArgs) -> Result<()> {
    let info = xlafn::export::inspect(&args.dir)?;
    let inputs = gather(args, &info)?;
    let files = result_files(&info);
    if let (Some(dir), false) = (&args.output_dir, args.overwrite) {
        refuse_existing(dir, &files)?;
    }
    let f = xlafn::load(&args.dir)?;
    let results = call(&f, &inputs, &files)?;
    let written = match &args.output_dir {
        Some(dir) => save(dir, &results, args.overwrite)?,
        None => vec![None; results.len()],
    };
    if args.json {
        let variables = results.iter().filter(|r| r.variable.is_some()).count();
        println!("{}", run_json(&results, &written, variables));
    } else {
        for (r, path) in results.iter().zip(&written) {
            print_result(r, path.as_deref());
        }
    }
    Ok(())
}

fn print_result(r: &Printed, saved: Option<&Path>) {
    let saved = saved.map(|p| format!(" -> {}", p.display()));
    println!(
        "{}: {}{}{}",
        r.label(),
        r.array.dtype,
        shape_of(&r.array),
        saved.unwrap_or_default()
    );
    println!("{}", array_text(&r.array));
}

fn shape_of(a: &HostArray) -> String {
    xlafn::ir::Shape::known(&a.dims).to_string()
}

/// Writes every result into `dir` (`run` checked beforehand that none of
/// the files exists, unless `overwrite`).
fn save(dir: &Path, results: &[Printed], overwrite: bool) -> Result<Vec<Option<PathBuf>>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("cannot create the folder", dir, e))?;
    let paths: Vec<PathBuf> = results.iter().map(|r| dir.join(&r.file)).collect();
    for (r, path) in results.iter().zip(&paths) {
        let bytes = npy::encode(&r.array)?;
        if overwrite {
            xlafn::export::replace_file(path, &bytes)?;
        } else {
            // Still a new file only: something created meanwhile is an
            // error rather than overwritten or followed.
            xlafn::export::write_new_file(path, &bytes)?;
        }
    }
    Ok(paths.into_iter().map(Some).collect())
}

fn run_json(
    results: &[Printed],
    written: &[Option<PathBuf>],
    variables: usize,
) -> serde_json::Value {
    let entry = |(r, path): (&Printed, &Option<PathBuf>)| {
        serde_json::json!({
            "name": r.name,
            "variable": r.variable,
            "dtype": r.array.dtype.name(),
            "shape": r.array.dims,
            "values": array_json(&r.array),
            "file": path.as_ref().map(|p| p.display().to_string()),
        })
    };
    let all: Vec<_> = results.iter().zip(written).map(entry).collect();
    let (outputs, updated) = all.split_at(all.len() - variables);
    serde_json::json!({"outputs": outputs, "variables": updated})
}

/// The arguments as UTF-8: the tool's options are text, and a path that
/// is not UTF-8 is reported rather than guessed at.
fn args() -> Result<Vec<String>> {
    std::env::args_os()
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|a| {
                Error::Value(format!(
                    "argument {i} ({}) is not valid UTF-8",
                    a.to_string_lossy()
                ))
            })
        })
        .collect()
}

fn execute(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Show { dir, json, cost } => show(dir, *json, *cost),
        Command::Bench {
            dir,
            quick,
            json,
            plot,
        } => bench(dir, *quick, json.as_deref(), plot.as_deref()),
        Command::Run(args) => run(args),
        Command::Stablehlo { dir, program } => stablehlo(dir, *program),
        Command::Export {
            dir,
            format: ExportFormat::SavedModel,
            out,
            platform,
            freeze_variables,
        } => {
            use xlafn::export::saved_model::{SavedModelOptions, TfPlatform, from_export_with};
            let options = SavedModelOptions {
                platform: match platform {
                    TfPlatformArg::Cpu => TfPlatform::Cpu,
                    TfPlatformArg::Cuda => TfPlatform::Cuda,
                },
                freeze_variables: *freeze_variables,
            };
            from_export_with(dir, out, &options)?;
            println!("wrote the SavedModel {}", out.display());
            Ok(())
        }
        Command::Fetch {
            wheel,
            cuda,
            verify,
        } => fetch(wheel.as_deref(), cuda.as_deref(), *verify),
        Command::Env { markdown } => {
            environment(*markdown);
            Ok(())
        }
    }
}

fn fail(e: &Error) -> ExitCode {
    eprintln!("xlafn: {}", printable(&e.with_sources(), true));
    ExitCode::FAILURE
}

/// `xlafn env`: the registry of variables (`xlafn::environment`) with
/// each one's value here and now.
fn environment(markdown: bool) {
    if markdown {
        print!("{}", xlafn::environment::markdown_table());
        return;
    }
    for (var, value) in xlafn::environment::report() {
        let value = match value {
            Some(v) => format!("= {}", printable(&v, false)),
            None => format!("unset (default: {})", var.default),
        };
        let at = match var.read_at {
            xlafn::environment::ReadAt::Run => "",
            xlafn::environment::ReadAt::Build => " [build time]",
        };
        println!("{} {value}{at}\n    {}", var.name, var.doc);
    }
}

/// `xlafn fetch`: the plugin store's entry points, one per flag, for the
/// CPU plugin or (`--cuda`) a CUDA one.
fn fetch(wheel: Option<&Path>, cuda: Option<&str>, verify: bool) -> Result<()> {
    use xlafn::runtime::{self, CudaPackage};
    let cuda = cuda.map(str::parse::<CudaPackage>).transpose()?;
    let path = match (cuda, wheel, verify) {
        (None, Some(wheel), _) => runtime::install_cpu_plugin(wheel)?,
        (None, None, true) => runtime::verify_cpu_plugin()?,
        (None, None, false) => runtime::fetch_cpu_plugin()?,
        (Some(package), Some(wheel), _) => runtime::install_cuda_plugin(package, wheel)?,
        (Some(package), None, true) => runtime::verify_cuda_plugin(package)?,
        (Some(package), None, false) => runtime::fetch_cuda_plugin(package)?,
    };
    println!("{}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => return fail(&e),
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors to
            // stderr with status 2.
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    match execute(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

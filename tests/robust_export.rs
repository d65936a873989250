//! Hostile export folders: every way a crafted or damaged export crashed,
//! hung or misled the loader and the `xlafn` tool (issue 13) ends in an
//! error here. Cases that aborted or hung the process run in a child
//! process with a timeout (the test binary re-run on one test, or the
//! `xlafn` binary), so a regression fails one test instead of the run.
//!
//! Crafted folders are re-signed with `xlafn::export::testing::resign`, so
//! the damage reaches the checks behind the digests. The `.npy`, file and
//! CLI cases are in robust_export_files.rs; the helpers both use are in
//! common/export_helpers.rs.

#[path = "common/child.rs"]
mod child;
#[path = "common/export_helpers.rs"]
mod export_helpers;
#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/tool.rs"]
mod tool;

use export_helpers::{add_export, edit, insert_op, isolated, load_err, temp_dir, train_export};
use xlafn::export::npy;
use xlafn::export::testing::{mutable_files, mutate, resign};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

// ------------------------------------------------------- programs (XLA)

#[test]
fn huge_types_in_programs_are_refused_before_xla() {
    isolated("huge_types_in_programs_are_refused_before_xla", 120, || {
        let dir = temp_dir("huge");
        add_export(&dir);
        let huge = "tensor<2305843009213693952xf32>";
        insert_op(
            &dir,
            &format!(
                "%big = \"stablehlo.constant\"() {{value = dense<0x00000000> : {huge}}} : () -> {huge}"
            ),
        );
        let e = load_err(&dir);
        assert!(
            e.contains("too large") && e.contains("program_0.mlir"),
            "{e}"
        );
        // The same type in the signature, manifest unchanged.
        let dir = temp_dir("huge-sig");
        add_export(&dir);
        edit(
            &dir,
            "program_0.mlir",
            "%arg0: tensor<3xf32>",
            &format!("%arg0: {huge}"),
        );
        assert!(load_err(&dir).contains("too large"));
        // And in the manifest's own shapes.
        let dir = temp_dir("huge-manifest");
        add_export(&dir);
        edit(
            &dir,
            "xlafn_export.json",
            "[\n        3\n      ]",
            "[2305843009213693952]",
        );
        let e = load_err(&dir);
        assert!(e.contains("too large"), "{e}");
    });
}

/// Listed programs meet the memory bound every lowered program does
/// (`dtype::check_program_memory`): types within XLA's size limit that no
/// machine holds, one array or many, are refused before XLA allocates.
#[test]
fn programs_that_cannot_fit_in_memory_are_refused_before_xla() {
    isolated(
        "programs_that_cannot_fit_in_memory_are_refused_before_xla",
        120,
        || {
            let dir = temp_dir("memory");
            add_export(&dir);
            let huge = "tensor<1099511627776xf32>"; // 4 TiB
            insert_op(
                &dir,
                &format!(
                    "%big = \"stablehlo.constant\"() {{value = dense<0x00000000> : {huge}}} : () -> {huge}"
                ),
            );
            let e = load_err(&dir);
            assert!(
                e.contains("program_0.mlir: cannot compile the program")
                    && e.contains("needs an array of 4398046511104 bytes"),
                "{e}"
            );
            // Many arrays, none alone over the bound, together over 16 times it.
            let dir = temp_dir("memory-sum");
            add_export(&dir);
            let memory = xlafn::dtype::program_memory_bytes();
            let elements = memory / 4 / 2;
            let ty = format!("tensor<{elements}xf32>");
            let lines: Vec<String> = (0..40)
                .map(|k| {
                    format!(
                        "%m{k} = \"stablehlo.constant\"() {{value = dense<0x00000000> : {ty}}} : () -> {ty}"
                    )
                })
                .collect();
            insert_op(&dir, &lines.join("\n  "));
            let e = load_err(&dir);
            assert!(e.contains("together, more than 16 times"), "{e}");
        },
    );
}

#[test]
fn custom_calls_to_xla_targets_are_refused() {
    isolated("custom_calls_to_xla_targets_are_refused", 120, || {
        for target in ["TopK", "SliceToDynamic"] {
            let dir = temp_dir(target);
            add_export(&dir);
            insert_op(
                &dir,
                &format!(
                    "%cc:2 = \"stablehlo.custom_call\"(%arg0) {{call_target_name = \"{target}\", \
                     api_version = 4 : i32, has_side_effect = false, backend_config = \
                     {{callback_id = 0 : i64}}}} : (tensor<3xf32>) -> (tensor<1xf32>, tensor<1xi32>)"
                ),
            );
            let e = load_err(&dir);
            assert!(
                e.contains("custom_call target") && e.contains(target),
                "{e}"
            );
        }
    });
}

#[test]
fn infeed_and_outfeed_are_refused() {
    isolated("infeed_and_outfeed_are_refused", 120, || {
        for (op, named) in [
            (
                "%t = \"stablehlo.create_token\"() : () -> !stablehlo.token",
                "op \"stablehlo.create_token\"",
            ),
            (
                "%i:2 = \"stablehlo.infeed\"(%t) : (!stablehlo.token) -> (tensor<3xf32>, !stablehlo.token)",
                "op \"stablehlo.infeed\"",
            ),
            (
                "%o = \"stablehlo.outfeed\"(%arg0, %t) : (tensor<3xf32>, !stablehlo.token) -> !stablehlo.token",
                "op \"stablehlo.outfeed\"",
            ),
            (
                "%o = stablehlo.outfeed %arg0, %t : (tensor<3xf32>, !stablehlo.token) -> !stablehlo.token",
                "'stablehlo.outfeed'",
            ),
        ] {
            let dir = temp_dir("feed");
            add_export(&dir);
            insert_op(&dir, op);
            let e = load_err(&dir);
            assert!(
                e.contains(named) && e.contains("xlafn loads only the StableHLO it writes"),
                "{e}"
            );
        }
    });
}

#[test]
fn deep_nesting_is_refused() {
    isolated("deep_nesting_is_refused", 120, || {
        let dir = temp_dir("nest");
        add_export(&dir);
        let path = dir.join("program_0.mlir");
        let text = std::fs::read_to_string(&path).unwrap();
        let nested = format!(
            "{}{text}{}",
            "module {\n".repeat(20_000),
            "}\n".repeat(20_000)
        );
        std::fs::write(&path, nested).unwrap();
        resign(&dir).unwrap();
        let e = load_err(&dir);
        assert!(e.contains("'module'"), "{e}");
        // Nesting inside @main.
        let dir = temp_dir("nest-body");
        add_export(&dir);
        let region = format!(
            "%n = \"stablehlo.if\"(%c) {} : (tensor<i1>) -> tensor<f32>",
            "({".repeat(10_000) + &"})".repeat(10_000)
        );
        insert_op(&dir, &region);
        assert!(load_err(&dir).contains("nest deeper"));
    });
}

// ----------------------------------------- signatures against the manifest

#[test]
fn a_manifest_dtype_edit_is_refused() {
    isolated("a_manifest_dtype_edit_is_refused", 120, || {
        let dir = temp_dir("dtype");
        add_export(&dir);
        edit(
            &dir,
            "xlafn_export.json",
            "\"dtype\": \"f32\"",
            "\"dtype\": \"i32\"",
        );
        let e = load_err(&dir);
        assert!(
            e.contains("parameter 0 of @main is f32[3]") && e.contains("i32[3]"),
            "{e}"
        );
    });
}

#[test]
fn a_constant_of_another_dtype_is_refused() {
    isolated("a_constant_of_another_dtype_is_refused", 120, || {
        let dir = temp_dir("const-dtype");
        add_export(&dir);
        let ints = HostArray::from_vec(vec![10i32, 20, 30], &[3]);
        std::fs::write(dir.join("constant_0.npy"), npy::encode(&ints).unwrap()).unwrap();
        resign(&dir).unwrap();
        let e = load_err(&dir);
        assert!(
            e.contains("parameter 1 of @main is f32[3]") && e.contains("i32[3]"),
            "{e}"
        );
    });
}

#[test]
fn a_program_for_another_shape_is_refused() {
    isolated("a_program_for_another_shape_is_refused", 120, || {
        // The program takes [3, 1] where the manifest says [3].
        let dir = temp_dir("shape");
        add_export(&dir);
        let path = dir.join("program_0.mlir");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("tensor<3xf32>", "tensor<3x1xf32>");
        std::fs::write(&path, text).unwrap();
        resign(&dir).unwrap();
        let e = load_err(&dir);
        assert!(e.contains("parameter 0 of @main is f32[3,1]"), "{e}");
        // A manifest whose program shapes do not fit its input specs.
        let dir = temp_dir("shape-manifest");
        add_export(&dir);
        edit(
            &dir,
            "xlafn_export.json",
            "\"input_shapes\": [\n        [\n          3\n        ]",
            "\"input_shapes\": [[4]",
        );
        let e = load_err(&dir);
        assert!(e.contains("declared (3,)"), "{e}");
    });
}

#[test]
fn results_must_match_outputs_and_updates() {
    isolated("results_must_match_outputs_and_updates", 120, || {
        let dir = temp_dir("out-dtype");
        add_export(&dir);
        let path = dir.join("xlafn_export.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let at = text.find("\"outputs\"").unwrap();
        let edited = format!(
            "{}{}",
            &text[..at],
            text[at..].replacen("\"dtype\": \"f32\"", "\"dtype\": \"i32\"", 1)
        );
        std::fs::write(&path, edited).unwrap();
        resign(&dir).unwrap();
        let e = load_err(&dir);
        assert!(e.contains("result 0 of @main is f32[3]"), "{e}");
    });
}

// ------------------------------------------------------------ the manifest

#[test]
fn any_unsigned_change_is_refused() {
    let dir = temp_dir("unsigned");
    train_export(&dir);
    xlafn::load(&dir).unwrap();
    for file in mutable_files(&dir).unwrap() {
        let original = std::fs::read(&file).unwrap();
        let mut flipped = original.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        std::fs::write(&file, &flipped).unwrap();
        let e = load_err(&dir);
        assert!(
            e.contains("sha256") || e.contains("bytes"),
            "{}: {e}",
            file.display()
        );
        std::fs::write(&file, &original).unwrap();
    }
    std::fs::remove_file(dir.join("xlafn_export.json.sha256")).unwrap();
    assert!(load_err(&dir).contains("xlafn_export.json.sha256"));
}

#[test]
fn a_flipped_update_index_is_refused() {
    isolated("a_flipped_update_index_is_refused", 120, || {
        let dir = temp_dir("update");
        train_export(&dir);
        let x = Tensor::vector(&[1f32, 2.0]).unwrap();
        let y = Tensor::scalar(3f32);
        let loaded = xlafn::load(&dir).unwrap();
        assert_eq!(loaded.call(&[&x, &y]).unwrap().len(), 1);
        let path = dir.join("xlafn_export.json");
        let good = std::fs::read_to_string(&path).unwrap();
        assert!(good.contains("\"result\": 1"), "{good}");
        // Unsigned, the flip fails the digest; signed again, the index check.
        std::fs::write(&path, good.replace("\"result\": 1", "\"result\": 4")).unwrap();
        assert!(load_err(&dir).contains("sha256"));
        for (bad, why) in [
            ("\"result\": 4", "outside the update results"),
            ("\"result\": 0", "outside the update results"),
            (
                "\"result\": 18446744073709551615",
                "outside the update results",
            ),
        ] {
            std::fs::write(&path, good.replace("\"result\": 1", bad)).unwrap();
            resign(&dir).unwrap();
            let e = load_err(&dir);
            assert!(e.contains(why), "{bad}: {e}");
        }
        // Two updates of one variable.
        let twice = good.replace(
            "\"updates\": [",
            "\"updates\": [{\"variable\": 0, \"result\": 2},",
        );
        std::fs::write(&path, twice).unwrap();
        resign(&dir).unwrap();
        assert!(load_err(&dir).contains("updated twice"));
        // An index of a variable that does not exist, and a capture of one.
        std::fs::write(&path, good.replace("\"variable\": 0", "\"variable\": 7")).unwrap();
        resign(&dir).unwrap();
        assert!(load_err(&dir).contains("unknown variable 7"));
        std::fs::write(&path, good.replace("\"index\": 0", "\"index\": 9")).unwrap();
        resign(&dir).unwrap();
        assert!(load_err(&dir).contains("out of range"));
    });
}

#[test]
fn older_and_newer_versions_are_refused_by_name() {
    let dir = temp_dir("versions");
    add_export(&dir);
    let path = dir.join("xlafn_export.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let v = format!("\"version\": {}", xlafn::export::VERSION);
    std::fs::write(&path, good.replace(&v, "\"version\": 1")).unwrap();
    std::fs::remove_file(dir.join("xlafn_export.json.sha256")).unwrap();
    assert!(load_err(&dir).contains("version 1 exports"));
    std::fs::write(&path, good.replace(&v, "\"version\": 3")).unwrap();
    resign(&dir).unwrap();
    assert!(load_err(&dir).contains("version 3 cannot be loaded"));
}

// ------------------------------------------- mutations past the digests

#[test]
fn re_signed_mutations_reach_the_program_check_and_xla() {
    isolated(
        "re_signed_mutations_reach_the_program_check_and_xla",
        120,
        || {
            let dir = temp_dir("reach");
            add_export(&dir);
            let program = std::fs::read_to_string(dir.join("program_0.mlir")).unwrap();
            // Past the digest into the program check...
            edit(
                &dir,
                "program_0.mlir",
                "\"stablehlo.add\"",
                "\"stablehlo.frobnicate\"",
            );
            let e = load_err(&dir);
            assert!(e.contains("op \"stablehlo.frobnicate\""), "{e}");
            // ...and past the check into XLA's compiler, which reports (not
            // aborts on) a type error in an op it accepts.
            let dir = temp_dir("reach-xla");
            add_export(&dir);
            let add = program
                .lines()
                .find(|l| l.contains("\"stablehlo.add\""))
                .unwrap();
            let (head, _) = add.rsplit_once("->").unwrap();
            edit(
                &dir,
                "program_0.mlir",
                add,
                &format!("{head}-> tensor<3xi32>"),
            );
            match xlafn::load(&dir) {
                Err(Error::Xla { call, .. }) => assert_eq!(call, "PJRT_Client_Compile"),
                Err(e) => panic!("expected a compile error, got {e}"),
                Ok(_) => panic!("loaded"),
            }
        },
    );
}

/// A deterministic stand-in for the fuzz target (fuzz/): a few hundred
/// re-signed byte edits of a real export with a variable, a constant and a
/// loop; each load and call ends in a value or an error.
#[test]
fn mutated_re_signed_exports_end_in_values_or_errors() {
    isolated(
        "mutated_re_signed_exports_end_in_values_or_errors",
        500,
        || {
            let base = temp_dir("mutate-base");
            train_export(&base);
            let files = mutable_files(&base).unwrap();
            let position = |name: &str| files.iter().position(|f| f.ends_with(name)).unwrap();
            let (program, manifest) = (position("program_0.mlir"), position("xlafn_export.json"));
            let x = Tensor::vector(&[1f32, 2.0]).unwrap();
            let y = Tensor::scalar(3f32);
            // Longer runs for hunting: XLAFN_MUTATION_ROUNDS, XLAFN_MUTATION_SEED.
            let env = |name: &str, default: u64| {
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default)
            };
            let rounds = env("XLAFN_MUTATION_ROUNDS", 300);
            let mut seed = env("XLAFN_MUTATION_SEED", 0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let (mut loaded, mut checked, mut compiled) = (0, 0, 0);
            for round in 0..rounds {
                let dir = temp_dir("mutate");
                for f in &files {
                    std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
                }
                std::fs::copy(
                    base.join("xlafn_export.json.sha256"),
                    dir.join("xlafn_export.json.sha256"),
                )
                .unwrap();
                let mut data = Vec::new();
                for _ in 0..1 + next() % 3 {
                    let r = next();
                    // Half the edits go to the program, the rest to the
                    // manifest and the `.npy` files; mostly with bytes the
                    // text already uses, so that edits reach the later checks.
                    let target = match r % 10 {
                        0..=4 => program,
                        5..=6 => manifest,
                        k => k as usize % files.len(),
                    };
                    let byte = if r & 0x30 != 0 {
                        b" 0123456789x,<>()%\"abcfi="[(r >> 8) as usize % 25]
                    } else {
                        (r >> 16) as u8
                    };
                    data.extend([target as u8, (r >> 32) as u8, (r >> 40) as u8, byte]);
                }
                if round % 10 == 9 {
                    data.push(next() as u8);
                }
                mutate(&dir, &data).unwrap();
                match xlafn::load(&dir) {
                    Ok(f) => {
                        loaded += 1;
                        let _ = f.call(&[&x, &y]);
                    }
                    Err(e) => {
                        let e = e.to_string();
                        if std::env::var_os("XLAFN_ROBUST_VERBOSE").is_some() {
                            eprintln!("refused: {e}");
                        }
                        assert!(!e.contains("sha256 does not match"), "{e}");
                        if e.contains("xlafn loads only") || e.contains("@main") {
                            checked += 1;
                        }
                        if e.contains("PJRT_Client_Compile") {
                            compiled += 1;
                        }
                    }
                }
            }
            eprintln!("loaded {loaded}, refused by the program check {checked}, by XLA {compiled}");
            assert!(
                loaded > 0 && checked > 0 && compiled > 0,
                "{loaded} {checked} {compiled}"
            );
        },
    );
}

/// The program check accepts what xlafn writes: a function using many
/// kinds of ops (nested control flow, reductions, gathers, matmul, random
/// bits, casts, a host callback) exports, loads, and computes what the
/// original computes.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn functions_using_many_ops_load_and_agree_with_the_original() {
    isolated(
        "functions_using_many_ops_load_and_agree_with_the_original",
        300,
        || {
            let m = Tensor::from_vec((0..8).map(|i| i as f32 * 0.25).collect(), &[4, 2]).unwrap();
            let f = FunctionOptions::new()
                .name("many")
                .build(move |x: Tensor| -> Result<Tensor> {
                    let y = x.matmul(&m)?.softmax(1)?.transpose(&[1, 0])?;
                    let picked = y.gather(&Tensor::vector(&[1i32, 0]).unwrap(), 0)?;
                    let big = Tensor::concat(&[picked.clone(), picked.square()?], 0)?;
                    let s = big.strided_slice(&[0, 0], &[4, 3], &[2, 1])?;
                    let noise = Tensor::random_normal(&[2, 3], 7, DType::F32)?;
                    let z = s.add(&noise.mul_scalar(0.0)?)?.maximum(&s.neg()?)?;
                    let n = Tensor::scalar(4i32);
                    let z = for_range(0, &n, 1, z, |i, z: Tensor| -> Result<Tensor> {
                        let odd = i.floormod_scalar(2.0)?.eq_scalar(1.0)?;
                        cond(&odd, || z.tanh(), || z.mul_scalar(1.5))
                    })?;
                    let k = z.argmax(1)?.cast(DType::F32)?;
                    xlafn::print("z", &[&z])?;
                    let total = z.reduce_max(&[1], false)?.add(&k)?;
                    total.abs()?.sqrt()?.exp()?.log()
                });
            let x = Tensor::from_vec((0..12).map(|i| i as f32 * 0.1).collect(), &[3, 4]).unwrap();
            let expected = f.call((&x,)).unwrap().to_vec::<f32>().unwrap();
            let dir = temp_dir("many");
            f.get_concrete_function((&x,))
                .unwrap()
                .export(&dir, &[])
                .unwrap();
            let loaded = xlafn::load(&dir).unwrap();
            let got = loaded.call(&[&x]).unwrap()[0].to_vec::<f32>().unwrap();
            assert_eq!(got, expected);
        },
    );
}

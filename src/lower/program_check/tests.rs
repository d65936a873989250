//! Unit tests of the export program check.

use super::*;

const ADD: &str = "func.func public @main(%arg0: tensor<2xf32>, %arg1: tensor<2xf32> \
    {tf.aliasing_output = 1 : i32}) -> (tensor<2xf32>, tensor<2xf32>) {\n\
    \x20 %v0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n\
    \x20 %v1 = \"stablehlo.constant\"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>\n\
    \x20 \"func.return\"(%v0, %v0) : (tensor<2xf32>, tensor<2xf32>) -> ()\n}\n";

#[test]
fn the_signature_is_read_from_the_header() {
    let s = check_program("p", ADD).unwrap();
    let t = ArraySpec::new(DType::F32, &[2]);
    assert_eq!(s.params, vec![(t.clone(), None), (t.clone(), Some(1))]);
    assert_eq!(s.results, vec![t.clone(), t]);
}

#[test]
fn what_xlafn_does_not_write_is_refused_by_name() {
    for (from, to, named) in [
        (
            "\"stablehlo.add\"",
            "\"stablehlo.infeed\"",
            "stablehlo.infeed",
        ),
        ("\"stablehlo.add\"", "stablehlo.outfeed", "outfeed"),
        (
            "tensor<f32>}",
            "tensor<2305843009213693952xf32>}",
            "too large",
        ),
        ("tensor<f32>}", "tensor<?xf32>}", "tensor<?xf32>"),
        ("tensor<f32>}", "tensor<f32, #x>}", "tensor<f32, #x>"),
        ("dense<0x3F800000>", "dense<1.5>", "'.'"),
        ("public", "private", "public"),
        ("@main", "@other", "main"),
        ("value", "mhlo.sharding", "mhlo.sharding"),
        ("}\n", "}\nfunc.func", "after the end"),
        ("%v1 =", "// comment\n %v1 =", "'/'"),
        ("\"func.return\"", "\"func.call\"", "func.call"),
    ] {
        let text = ADD.replacen(from, to, 1);
        assert_ne!(text, ADD);
        let e = check_program("program_0.mlir", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(named) && e.contains("program_0.mlir"),
            "{to}: {e}"
        );
    }
}

#[test]
fn complex_tensor_types_are_read_exactly() {
    let complex = ADD.replace("2xf32", "2xcomplex<f32>");
    let s = check_program("p", &complex).unwrap();
    assert_eq!(s.results[0], ArraySpec::new(DType::C64, &[2]));
    let scalar = ADD.replace("tensor<2xf32>", "tensor<complex<f64>>");
    assert_eq!(
        check_program("p", &scalar).unwrap().results[0].dtype,
        DType::C128
    );
    for bad in [
        "xcomplex<f32>",
        "2complex<f32>",
        "2xcomplex<f16>",
        "2xcomplex<f32",
    ] {
        let text = ADD.replacen("2xf32", bad, 1);
        assert!(check_program("p", &text).is_err(), "{bad}");
    }
}

#[test]
fn custom_calls_go_only_to_the_host_callback() {
    let call = |target: &str, version: u32| {
        ADD.replacen(
            "%v1 =",
            &format!(
                "%v9 = \"stablehlo.custom_call\"(%arg0) {{call_target_name = \"{target}\", \
                 api_version = {version} : i32, has_side_effect = true, backend_config = \
                 {{callback_id = 0 : i64}}}} : (tensor<2xf32>) -> tensor<2xf32>\n %v1 ="
            ),
            1,
        )
    };
    check_program("p", &call(HOST_CALLBACK_TARGET, 4)).unwrap();
    for target in ["TopK", "SliceToDynamic"] {
        let e = check_program("p", &call(target, 4))
            .unwrap_err()
            .to_string();
        assert!(e.contains(target), "{e}");
    }
    let e = check_program("p", &call(HOST_CALLBACK_TARGET, 1)).unwrap_err();
    assert!(e.to_string().contains("api_version"), "{e}");
}

#[test]
fn the_vocabulary_check_skips_the_bounds_but_not_the_words() {
    let deep = ADD.replacen(
        "%v1 =",
        &format!("{}{} %v1 =", "(".repeat(200), ")".repeat(200)),
        1,
    );
    assert!(check_program("p", &deep).is_err());
    assert_eq!(
        check_vocabulary(&deep).unwrap(),
        check_program("p", ADD).unwrap()
    );
    let infeed = deep.replacen("stablehlo.add", "stablehlo.infeed", 1);
    let e = check_vocabulary(&infeed).unwrap_err().to_string();
    assert!(e.contains("stablehlo.infeed"), "{e}");
    assert!(check_vocabulary(&ADD.replacen("()", "(]", 1)).is_err());
}

#[test]
fn nesting_and_balance_are_bounded() {
    let deep = ADD.replacen(
        "%v1 =",
        &format!("{}{} %v1 =", "(".repeat(20_000), ")".repeat(20_000)),
        1,
    );
    let e = check_program("p", &deep).unwrap_err().to_string();
    assert!(e.contains("nest deeper"), "{e}");
    let modules = format!("{}{}", "module {\n".repeat(20_000), "}\n".repeat(20_000));
    assert!(check_program("p", &modules).is_err());
    assert!(check_program("p", &ADD.replacen("}\n", "", 1)).is_err());
    assert!(check_program("p", &ADD.replacen("()", "(]", 1)).is_err());
    assert!(check_program("p", "").is_err());
}

#[test]
fn every_op_the_emitter_writes_is_allowed() {
    // Scans the op catalog's source for the names it hands the
    // emitter, so a new op fails here rather than in users' exports.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut names = Vec::new();
    let mut files = vec![
        root.join("lower/emitter.rs"),
        root.join("lower/emitter/structured.rs"),
    ];
    for dir in ["ops", "control"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            files.extend(entries.flatten().map(|e| e.path()));
        }
    }
    for f in files {
        let Ok(src) = std::fs::read_to_string(&f) else {
            continue;
        };
        for (i, _) in src.match_indices("\"stablehlo.") {
            let rest = &src[i + 1..];
            let name = rest[..rest.find('"').unwrap()].trim_end_matches('\\');
            if !name.ends_with('.') && !name.contains('{') {
                names.push(name.to_string());
            }
        }
        for (call, dialect) in [
            (".unary(\"", "stablehlo"),
            (".unary_to(\"", "stablehlo"),
            (".binary(\"", "stablehlo"),
            (".binary_to(\"", "stablehlo"),
            ("propagating(cx, \"", "stablehlo"),
            (".chlo(\"", "chlo"),
            (".chlo_binary(\"", "chlo"),
        ] {
            for (i, _) in src.match_indices(call) {
                let rest = &src[i + call.len()..];
                names.push(format!("{dialect}.{}", &rest[..rest.find('"').unwrap()]));
            }
        }
    }
    assert!(names.len() > 40, "{names:?}");
    for n in names {
        assert!(OPS.contains(&n.as_str()), "{n} is emitted but not allowed");
    }
}

//! The layer map, enforced: every `crate::<module>` path in `src/` points
//! down the order below, except for the back edges listed in `KNOWN`. A new
//! import that points up fails here, naming the file and the module; a
//! listed edge that is gone fails too, so the list stays the truth (delete
//! its line). The book's internals chapter "The layer map" explains the
//! order and each remaining edge.
//!
//! Within the knot (`ir`, `ops`, `lower`, `tensor`, `trace`, `variable`)
//! imports go both ways: gradient and batching rules are written in the
//! tensor language, so ops build tensors and tensors apply ops.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The modules of `src/`, bottom first; a module may import those before it.
const ORDER: &[&[&str]] = &[
    &["error"],
    &["environment"],
    &["files"],
    &["dtype"],
    &["single_flight"],
    &["bounded_cache"],
    &["runtime"],
    &["mesh"],
    &["ir", "ops", "lower", "tensor", "trace", "variable"],
    &["function"],
    &["sharding"],
    &["control"],
    &["vmap"],
    &["autograph"],
    &["autodiff"],
    &["debug"],
    &["composite"],
    &["distributed"],
    &["module"],
    &["random"],
    &["initializers"],
    &["nn"],
    &["optimizers"],
    &["export"],
    &["checkpoint"],
    &["weights"],
    &["data"],
    &["summary"],
    &["train"],
    &["bench"],
];

/// The back edges that remain: (file, the module it reaches up to).
const KNOWN: &[(&str, &str)] = &[];

fn rank(module: &str) -> Option<usize> {
    ORDER.iter().position(|tier| tier.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            // Unit-test folders (`program_check/tests.rs`) may import anything.
            if path.file_name().is_some_and(|n| n != "tests" && n != "bin") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The modules `text` names as `crate::<module>`, outside comments and
/// outside a trailing `#[cfg(test)] mod tests`.
fn imported_modules(text: &str) -> BTreeSet<String> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(end) => &text[..end],
        None => text,
    };
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            } else if tail.starts_with('{') {
                // A grouped `use crate::{a, b}` would hide its modules.
                found.insert("{ (write one `use crate::module::...` per module)".into());
            }
            rest = tail;
        }
    }
    found
}

/// The top-level module a file of `src/` belongs to.
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "book" | "main")).then(|| name.to_string())
}

#[test]
fn imports_point_down_the_layer_map_but_for_the_known_back_edges() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut back_edges = BTreeSet::new();
    let mut unranked = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(root).unwrap();
        let Some(module) = module_of(file.strip_prefix(root.join("src")).unwrap()) else {
            continue;
        };
        let Some(own) = rank(&module) else {
            unranked.insert(module);
            continue;
        };
        for target in imported_modules(&std::fs::read_to_string(file).unwrap()) {
            match rank(&target) {
                Some(r) if r > own => {
                    back_edges.insert((relative.display().to_string(), target));
                }
                Some(_) => {}
                None => {
                    unranked.insert(target);
                }
            }
        }
    }
    assert!(
        unranked.is_empty(),
        "modules missing from the layer map (add them to ORDER): {unranked:?}"
    );
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(f, m)| (f.to_string(), m.to_string()))
        .collect();
    let new: Vec<_> = back_edges.difference(&known).collect();
    assert!(
        new.is_empty(),
        "imports that point up the layer map (move the code, or register a hook as \
         tensor::hooks does): {new:?}"
    );
    let gone: Vec<_> = known.difference(&back_edges).collect();
    assert!(
        gone.is_empty(),
        "back edges that no longer exist: delete them from KNOWN: {gone:?}"
    );
}

#[test]
fn the_scanner_finds_paths_and_skips_comments_and_unit_tests() {
    let text = "use crate::tensor::Tensor;\n// crate::autodiff in a comment\n\
                fn f() { crate::ops::x(); }\n#[cfg(test)]\nmod tests { use crate::vmap; }\n";
    let found: Vec<String> = imported_modules(text).into_iter().collect();
    assert_eq!(found, vec!["ops".to_string(), "tensor".to_string()]);
    assert_eq!(rank("tensor"), rank("ops"));
    assert!(rank("runtime") < rank("tensor") && rank("tensor") < rank("function"));
}

//! The book stays whole: every chapter under `book/src` is listed in its
//! `SUMMARY.md`, every listed chapter exists, and `src/book.rs` includes
//! each one (and the README), so `cargo test` runs the Rust blocks of all
//! of them. Links between chapters point at files that exist.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chapters(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            chapters(&path, out);
        } else if path.extension().is_some_and(|e| e == "md")
            && path.file_name().is_some_and(|n| n != "SUMMARY.md")
        {
            out.push(path);
        }
    }
}

/// The relative targets of Markdown links `](target)` in `text`, without
/// anchors, skipping web addresses and pure anchors.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let tail = &rest[at + 2..];
        let Some(end) = tail.find(')') else { break };
        let target = tail[..end].split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            targets.push(target.to_string());
        }
        rest = &tail[end..];
    }
    targets
}

fn book_chapters() -> BTreeSet<String> {
    let src = root().join("book/src");
    let mut files = Vec::new();
    chapters(&src, &mut files);
    files
        .iter()
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect()
}

#[test]
fn every_chapter_is_listed_and_every_listed_chapter_exists() {
    let summary = std::fs::read_to_string(root().join("book/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = link_targets(&summary).into_iter().collect();
    let present = book_chapters();
    let unlisted: Vec<_> = present.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&present).collect();
    assert!(
        unlisted.is_empty(),
        "chapters not in SUMMARY.md: {unlisted:?}"
    );
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists missing files: {missing:?}"
    );
}

#[test]
fn every_chapter_and_the_readme_run_as_doctests() {
    let book_rs = std::fs::read_to_string(root().join("src/book.rs")).unwrap();
    let mut absent: Vec<String> = book_chapters()
        .into_iter()
        .filter(|c| !book_rs.contains(&format!("include_str!(\"../book/src/{c}\")")))
        .collect();
    if !book_rs.contains("include_str!(\"../README.md\")") {
        absent.push("README.md".into());
    }
    assert!(
        absent.is_empty(),
        "src/book.rs does not include: {absent:?}"
    );
}

#[test]
fn links_between_chapters_point_at_files() {
    let src = root().join("book/src");
    let mut broken = Vec::new();
    let mut files = Vec::new();
    chapters(&src, &mut files);
    files.push(root().join("README.md"));
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for target in link_targets(&text) {
            let path = file.parent().unwrap().join(&target);
            if !path.exists() {
                broken.push(format!("{}: {target}", file.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to missing files:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_reader_skips_addresses_and_anchors() {
    let text = "[a](guide/x.md#part) [b](https://example.org/y) [c](#here) [d](../LICENSE)";
    assert_eq!(link_targets(text), vec!["guide/x.md", "../LICENSE"]);
}

//! `Tensor`'s reference is read by section: every `impl Tensor` block in
//! `src/` opens with a doc comment naming, in bold, one of the sections
//! listed in `Tensor`'s own doc comment (its "Methods by section" table),
//! and every listed section holds at least one block. A new block without a
//! section, or with a section the table does not list, fails here.
//!
//! The book's "Tensor methods by section" page is made from the same
//! blocks: each public method with the first sentence of its doc comment.
//! When it falls behind the code, the test writes the page as it should be
//! under the target folder and names the `cp` that brings the book up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The bold names in the first column of the "Methods by section" table.
fn listed_sections(tensor_mod: &str) -> Vec<String> {
    let table = tensor_mod
        .split("/// # Methods by section")
        .nth(1)
        .expect("Tensor's doc comment has a `# Methods by section` heading");
    table
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("///"))
        .filter_map(|l| l.strip_prefix("/// | **"))
        .filter_map(|l| l.split("**").next())
        .map(str::to_string)
        .collect()
}

/// The section a block's doc comment opens with: the text between the
/// first `**` pair of its first line.
fn section_of(doc_first_line: &str) -> Option<&str> {
    let rest = doc_first_line.trim_start().strip_prefix("/// **")?;
    rest.split("**").next()
}

#[test]
fn every_impl_tensor_block_opens_with_a_listed_section() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = listed_sections(&std::fs::read_to_string(root.join("src/tensor/mod.rs")).unwrap());
    assert!(
        (10..=14).contains(&listed.len()),
        "about a dozen sections, found {listed:?}"
    );
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut blocks = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if !(trimmed == "impl Tensor {" || trimmed == "impl Tensor {$(") {
                continue;
            }
            blocks += 1;
            // The doc comment directly above, skipping attributes.
            let mut first = None;
            for above in lines[..at].iter().rev() {
                let above = above.trim_start();
                if above.starts_with("///") {
                    first = Some(above);
                } else if !above.starts_with("#[") {
                    break;
                }
            }
            let place = format!("{}:{}", file.strip_prefix(root).unwrap().display(), at + 1);
            match first.and_then(section_of) {
                Some(name) if listed.iter().any(|s| s == name) => {
                    *used.entry(name.to_string()).or_default() += 1;
                }
                Some(name) => problems.push(format!("{place}: section `{name}` is not listed")),
                None => problems.push(format!(
                    "{place}: no doc comment opening with a **section**"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(blocks > 30, "found only {blocks} `impl Tensor` blocks");
    let unused: BTreeSet<_> = listed.iter().filter(|s| !used.contains_key(*s)).collect();
    assert!(
        unused.is_empty(),
        "listed sections with no block: {unused:?}"
    );
}

/// One `impl Tensor` block: its section and its methods with their
/// one-line summaries, in source order.
struct Block {
    section: String,
    methods: Vec<(String, String)>,
}

/// The first sentence of a doc comment's first paragraph.
fn summary(doc: &[String]) -> String {
    let paragraph: Vec<&str> = doc
        .iter()
        .map(|l| l.trim())
        .take_while(|l| !l.is_empty() && !l.starts_with("```"))
        .collect();
    // Intra-doc links ("[`Pad`]") mean nothing in the book: keep the name.
    let text = paragraph.join(" ").replace("[`", "`").replace("`]", "`");
    let mut in_code = false;
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        match c {
            '`' => in_code = !in_code,
            '.' if !in_code && chars.get(i + 1).is_none_or(|n| *n == ' ') => {
                return chars[..=i].iter().collect();
            }
            _ => {}
        }
    }
    text
}

fn doc_text(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("///")?;
    Some(rest.strip_prefix(' ').unwrap_or(rest).to_string())
}

/// The methods a `name! { ... }` invocation of a method-writing macro
/// makes: entries `/// doc` then `method(, method_scalar)? => Kind,`.
fn macro_methods(lines: &[&str], macro_name: &str) -> Vec<(String, String)> {
    let start = lines
        .iter()
        .position(|l| *l == format!("{macro_name}! {{"))
        .unwrap_or_else(|| panic!("no invocation of {macro_name}!"));
    let mut methods = Vec::new();
    let mut doc = Vec::new();
    for line in &lines[start + 1..] {
        if *line == "}" {
            break;
        }
        if let Some(text) = doc_text(line) {
            doc.push(text);
            continue;
        }
        let Some((names, _)) = line.trim().split_once("=>") else {
            continue;
        };
        let text = summary(&doc);
        let mut names = names.split(',').map(str::trim).filter(|n| !n.is_empty());
        let Some(method) = names.next() else { continue };
        methods.push((method.to_string(), text));
        for scalar_form in names {
            let text = format!("`{method}` with a host number as the second operand.");
            methods.push((scalar_form.to_string(), text));
        }
        doc.clear();
    }
    methods
}

/// The public methods written out in a block starting at `at`.
fn written_methods(lines: &[&str], at: usize) -> Vec<(String, String)> {
    let mut methods = Vec::new();
    let mut doc = Vec::new();
    for line in &lines[at + 1..] {
        if *line == "}" {
            break;
        }
        if let Some(text) = line.strip_prefix("    ").and_then(doc_text) {
            doc.push(text);
        } else if let Some(rest) = line.strip_prefix("    pub fn ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            methods.push((name, summary(&doc)));
            doc.clear();
        } else if !line.starts_with("    #[") && !line.starts_with("        ") {
            doc.clear();
        }
    }
    methods
}

fn blocks(root: &Path) -> Vec<Block> {
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let in_macro = trimmed == "impl Tensor {$(";
            if !(trimmed == "impl Tensor {" || in_macro) {
                continue;
            }
            let first = lines[..at]
                .iter()
                .rev()
                .map(|l| l.trim_start())
                .skip_while(|l| l.starts_with("#["))
                .take_while(|l| l.starts_with("///"))
                .last();
            let Some(section) = first.and_then(section_of) else {
                continue;
            };
            let methods = if in_macro {
                let macro_name = lines[..at]
                    .iter()
                    .rev()
                    .find_map(|l| l.strip_prefix("macro_rules! "))
                    .and_then(|l| l.split_whitespace().next())
                    .expect("a method block inside a macro_rules!");
                macro_methods(&lines, macro_name)
            } else {
                written_methods(&lines, at)
            };
            out.push(Block {
                section: section.to_string(),
                methods,
            });
        }
    }
    out
}

fn methods_page(root: &Path) -> String {
    let listed = listed_sections(&std::fs::read_to_string(root.join("src/tensor/mod.rs")).unwrap());
    let blocks = blocks(root);
    let mut page = String::from(
        "# Tensor methods by section\n\n\
         Every public method of `Tensor`, grouped as the \"Methods by section\" table\n\
         of its rustdoc groups them, each with the first sentence of its doc\n\
         comment. Rustdoc lists the same methods by source file; this page is\n\
         made from those files by `tests/tensor_sections.rs`, which fails when\n\
         it falls behind. The operators (`+ - * / %`, unary `-`) are sugar over\n\
         the elementwise methods.\n",
    );
    for section in &listed {
        page.push_str(&format!("\n## {section}\n\n"));
        for block in blocks.iter().filter(|b| &b.section == section) {
            for (name, text) in &block.methods {
                page.push_str(&format!("- `{name}`: {text}\n"));
            }
        }
    }
    page
}

#[test]
fn the_books_methods_page_lists_every_method_by_section() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = methods_page(root);
    let count = page.lines().filter(|l| l.starts_with("- `")).count();
    assert!(count > 250, "only {count} methods found");
    let path = root.join("book/src/reference/tensor-methods.md");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != page {
        let fresh = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tensor-methods.md");
        std::fs::write(&fresh, &page).unwrap();
        panic!(
            "book/src/reference/tensor-methods.md is behind the code; \
             the page as it should be is written; run\n  cp {} {}",
            fresh.display(),
            path.display()
        );
    }
}

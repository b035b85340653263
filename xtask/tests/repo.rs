//! Checks on the repository itself, run by `cargo test --workspace` like any other test:
//! no import circles between files, every cited kubelet rule ID defined in `docs/rules.md`,
//! ARCHITECTURE.md true of the tree (dependencies, files, type names), and
//! no reference to our tracker or to texts a crate user cannot read (an issue number, the team's
//! style guide, the private spec's section signs) in code or docs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root (this crate is `xtask/` in it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("xtask has no parent directory"))
}

/// Runs one of the Python checks in `.ci/`; fails with its output unless it passes. Python 3
/// is on every machine the suite runs on; without it the test fails, it does not skip.
fn python_check(script: &str) {
    let out = Command::new("python3")
        .arg(root().join(".ci").join(script))
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| {
            panic!("python3 .ci/{script} could not run (is python3 installed?): {e}")
        });
    assert!(
        out.status.success(),
        ".ci/{script} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    python_check("import-circles");
}

#[test]
fn every_cited_rule_id_is_defined_in_docs_rules_md() {
    python_check("rule-ids");
}

#[test]
fn architecture_md_names_only_dependencies_files_and_types_the_tree_has() {
    python_check("architecture");
}

/// The `.rs`, `.md` and `.toml` files of the repository, but build outputs, hidden directories
/// and this file (which spells the patterns it looks for).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                sources(&path, out);
            }
        } else if [".rs", ".md", ".toml"].iter().any(|e| name.ends_with(e))
            && path != Path::new(file!())
            && !path.ends_with("xtask/tests/repo.rs")
        {
            out.push(path);
        }
    }
}

/// What a line says that a reader of the published crates cannot follow: `issue 17`, `STYLE`
/// (the team's private style guide), `spec §` (the private spec's sections).
fn tracker_reference(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    let issue_number = lower.match_indices("issue ").any(|(i, m)| {
        lower[i + m.len()..]
            .trim_start_matches('#')
            .starts_with(|c: char| c.is_ascii_digit())
    });
    if issue_number {
        return Some("an issue number");
    }
    let style = line.match_indices("STYLE").any(|(i, m)| {
        let before = line[..i].chars().next_back();
        let after = line[i + m.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    if style {
        return Some("the style guide");
    }
    line.contains("spec §").then_some("a spec section")
}

#[test]
fn code_and_docs_cite_no_issue_numbers_style_rules_or_spec_sections() {
    let mut files = Vec::new();
    sources(&root(), &mut files);
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = tracker_reference(line) {
                let path = file.strip_prefix(root()).unwrap_or(file);
                found.push(format!(
                    "{}:{}: {what}: {}",
                    path.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "say it in our own words:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_wording_check_finds_what_it_looks_for_and_nothing_else() {
    assert!(tracker_reference("see issue 17 for the figures").is_some());
    assert!(tracker_reference("Issue #3 says").is_some());
    assert!(tracker_reference("as STYLE 12 asks").is_some());
    assert!(tracker_reference("the spec § 7 text").is_some());
    assert!(tracker_reference("an issue with the cache").is_none());
    assert!(tracker_reference("HTML_STYLE_SHEET and STYLES").is_none());
}

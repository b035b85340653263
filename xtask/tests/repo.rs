//! Checks on the repository itself, run by `cargo test --workspace` like any other test:
//! no import circles between files, every cited kubelet rule ID defined in `docs/rules.md`,
//! ARCHITECTURE.md true of the tree (dependencies, files, type names), no function outside
//! tests over 120 lines, the agent crate within its budget of non-test lines and its library
//! exporting nothing only its binary uses, and no reference to our tracker or to texts a crate user cannot read (an issue number, the team's
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

/// The longest a function outside tests may be, in lines from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

/// The workspace's Rust sources that are not tests: every `.rs` file but those under a
/// `tests`, `benches` or `examples` directory, build outputs, hidden directories, and the
/// files of modules declared `#[cfg(test)] mod name;`.
fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
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
            let skip = ["target", "tests", "benches", "examples"].contains(&name);
            if !skip && !name.starts_with('.') {
                rust_sources(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// `text` with comments, string literals and character literals blanked out (newlines kept,
/// so line numbers stay), leaving only code whose braces can be counted.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let close: Vec<char> = close.chars().collect();
            let mut k = j + 1;
            while k < chars.len() && chars[k..].iter().take(close.len()).ne(close.iter()) {
                k += 1;
            }
            let end = (k + close.len()).min(chars.len());
            for &ch in &chars[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if let Some(&ch) = chars.get(i) {
                    blank(&mut out, ch);
                }
                i += 1;
            }
            if i < chars.len() {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime.
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map(|p| i + 2 + p + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &ch in &chars[i..end] {
                        blank(&mut out, ch);
                    }
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the character before `i` continues an identifier (so an `r` at `i` is not a raw
/// string's).
fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The functions of `code` (from [`code_only`]) longer than `max` lines, as `(line, name,
/// lines)`; items under `#[cfg(test)]` (a test module, a test helper) are not looked at, nor
/// are nested functions counted apart from their enclosing one.
fn long_functions(code: &str, max: usize) -> Vec<(usize, String, usize)> {
    let bytes = code.as_bytes();
    let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
    // The end of the block opening at `open` (a `{`), or the end of the text.
    let block_end = |open: usize| {
        let mut depth = 0usize;
        for (k, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return k;
                    }
                }
                _ => {}
            }
        }
        bytes.len()
    };
    // The first `{` or `;` from `from` on outside parentheses and brackets.
    let item_body = |from: usize| {
        let mut depth = 0i32;
        for (k, &b) in bytes.iter().enumerate().skip(from) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' | b';' if depth == 0 => return Some((k, b)),
                _ => {}
            }
        }
        None
    };
    let is_word = |k: usize, w: &str| {
        code[k..].starts_with(w)
            && (k == 0 || !(bytes[k - 1].is_ascii_alphanumeric() || bytes[k - 1] == b'_'))
            && bytes
                .get(k + w.len())
                .is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if code[i..].starts_with("#[cfg(test)]") {
            // Skip the item the attribute is on.
            i = match item_body(i + "#[cfg(test)]".len()) {
                Some((k, b'{')) => block_end(k) + 1,
                Some((k, _)) => k + 1,
                None => bytes.len(),
            };
            continue;
        }
        if is_word(i, "fn") {
            let name: String = code[i + 2..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Some((k, b'{')) = item_body(i + 2) {
                let end = block_end(k);
                let lines = line_of(end) - line_of(i) + 1;
                if lines > max {
                    found.push((line_of(i), name, lines));
                }
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    found
}

#[test]
fn no_function_outside_tests_is_over_120_lines() {
    let mut files = Vec::new();
    rust_sources(&root(), &mut files);
    assert!(files.len() > 100, "found only {} files", files.len());
    // Modules declared `#[cfg(test)] mod name;` live in files of their own.
    let declared = regex_free_test_modules(&files);
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !declared.contains(f)) {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (line, name, lines) in long_functions(&code_only(&text), MAX_FUNCTION_LINES) {
            let path = file.strip_prefix(root()).unwrap_or(file);
            found.push(format!(
                "{}:{line}: fn {name}: {lines} lines",
                path.display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "split these into named steps, each a function (at most {MAX_FUNCTION_LINES} lines):\n{}",
        found.join("\n")
    );
}

/// The files of the modules `files` declare as `#[cfg(test)] mod name;` (`name.rs` or
/// `name/mod.rs` beside a `lib.rs`, `main.rs` or `mod.rs`, else in the folder named after the
/// declaring file), and everything under such a folder.
fn regex_free_test_modules(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = code_only(&text);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let Some(decl) = item.strip_prefix("mod ") else {
                continue;
            };
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !decl[name.len()..].trim_start().starts_with(';') {
                continue;
            }
            let stem = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let Some(parent) = file.parent() else {
                continue;
            };
            let base = if ["lib", "main", "mod"].contains(&stem) {
                parent.to_path_buf()
            } else {
                parent.join(stem)
            };
            out.push(base.join(format!("{name}.rs")));
            dirs.push(base.join(&name));
        }
    }
    out.extend(
        files
            .iter()
            .filter(|f| dirs.iter().any(|d| f.starts_with(d)))
            .cloned(),
    );
    out
}

#[test]
fn the_function_length_check_finds_a_long_function_and_skips_tests_and_literals() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    // 2 lines of signature and brace + 119 = 121 lines.
    let long = format!("pub fn too_long(a: u8) -> u8 {{\n{}}}\n", body(119));
    assert_eq!(
        long_functions(&code_only(&long), 120),
        [(1, "too_long".to_owned(), 121)]
    );
    let just = format!("fn fits() {{\n{}}}\n", body(118));
    assert!(long_functions(&code_only(&just), 120).is_empty());
    // Braces in strings, characters and comments do not count; a test module is skipped; a
    // trait method without a body is not a function body.
    let tricky = format!(
        "trait T {{ fn f(&self); }}\nfn short() {{\n    let s = \"}}\"; let c = '{{'; // }}\n    let r = r#\"}}\"#; let l: &'static str = s;\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\nfn after() {{\n{}}}\n",
        body(200),
        body(130)
    );
    assert_eq!(
        long_functions(&code_only(&tricky), 120),
        [(211, "after".to_owned(), 132)]
    );
}

/// The most non-test lines the agent crate (the root package `nodelet`: its library and its
/// binary, every `src/**/*.rs`) may have. The agent wires the crates; a subsystem of its own
/// (configuration, metrics, a protocol) belongs in a crate under `crates/`.
const AGENT_LINE_BUDGET: usize = 4_000;

/// The non-test lines of one `.rs` file: every line before its test module — the first
/// `#[cfg(test)]` line followed by `mod NAME {` or `mod NAME;`, which unit tests at the bottom
/// of the file put last — or all of them when it has none. A `#[cfg(test)]` on anything else
/// (an import, a helper) does not end the count.
fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1].trim_start().starts_with("mod ")
                && !w[0].starts_with(' ')
        })
        .unwrap_or(lines.len())
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `Err` naming the total and the largest files when `files` (path, non-test lines) exceed
/// `budget`.
fn within_budget(files: &[(String, usize)], budget: usize) -> Result<usize, String> {
    let total: usize = files.iter().map(|(_, n)| n).sum();
    if total <= budget {
        return Ok(total);
    }
    let mut largest = files.to_vec();
    largest.sort_by_key(|f| std::cmp::Reverse(f.1));
    let list: Vec<String> = largest
        .iter()
        .take(10)
        .map(|(path, n)| format!("  {n:>5} {path}"))
        .collect();
    Err(format!(
        "the agent crate has {total} non-test lines, over its budget of {budget}: move what \
         is not wiring into a crate. Largest files:\n{}",
        list.join("\n")
    ))
}

#[test]
fn the_agent_crate_stays_wiring_within_its_line_budget() {
    let mut paths = Vec::new();
    rust_files(&root().join("src"), &mut paths);
    assert!(paths.len() > 10, "found only {} files in src/", paths.len());
    let files: Vec<(String, usize)> = paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let path = p.strip_prefix(root()).unwrap_or(p);
            (path.display().to_string(), non_test_lines(&text))
        })
        .collect();
    if let Err(message) = within_budget(&files, AGENT_LINE_BUDGET) {
        panic!("{message}");
    }
}

#[test]
fn the_line_budget_counts_up_to_the_test_module_and_fails_when_over() {
    let text = "//! A file.\n#[cfg(test)]\nuse std::fmt;\nfn f() {}\n\n#[cfg(test)]\nmod tests {\n    #[cfg(test)]\n    mod inner {}\n}\n";
    assert_eq!(
        non_test_lines(text),
        5,
        "a cfg(test) import does not end the count"
    );
    assert_eq!(non_test_lines("fn f() {}\nfn g() {}\n"), 2);
    let files = [("a.rs".to_owned(), 3_000), ("b.rs".to_owned(), 1_001)];
    let err = within_budget(&files, 4_000).unwrap_err();
    assert!(
        err.contains("4001 non-test lines") && err.contains("b.rs"),
        "{err}"
    );
    assert_eq!(within_budget(&files[..1], 4_000), Ok(3_000));
}

/// The names the agent's library exports from its root (`src/lib.rs`): each `pub use` (the
/// last segment, or each name of a `{..}` group, `as` names included) and each top-level
/// `pub` item.
fn exported_names(lib: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = lib;
    while let Some(i) = rest.find("\npub use ") {
        let tail = &rest[i + 9..];
        let end = tail.find(';').unwrap_or(tail.len());
        let stmt = &tail[..end];
        let group = match (stmt.find('{'), stmt.rfind('}')) {
            (Some(a), Some(b)) => &stmt[a + 1..b],
            _ => stmt.rsplit("::").next().unwrap_or(stmt),
        };
        for item in group.split(',') {
            if let Some(name) = item.split_whitespace().last() {
                names.push(name.rsplit("::").next().unwrap_or(name).to_owned());
            }
        }
        rest = &tail[end..];
    }
    for line in lib.lines() {
        let Some(item) = line.strip_prefix("pub ") else {
            continue;
        };
        let item = item.strip_prefix("async ").unwrap_or(item);
        for kind in [
            "fn ", "struct ", "enum ", "const ", "static ", "trait ", "type ", "mod ",
        ] {
            if let Some(name) = item.strip_prefix(kind) {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.push(name);
            }
        }
    }
    names
}

/// The names `text` takes from the agent's library: `nodelet::NAME` paths and the names of
/// `use nodelet::{..}` groups.
fn names_from_agent_library(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (i, _) in text.match_indices("nodelet::") {
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue; // `nodelet_core::`, `my_nodelet::`
        }
        let after = &text[i + "nodelet::".len()..];
        let group = match after.strip_prefix('{') {
            Some(g) => &g[..g.find('}').unwrap_or(g.len())],
            None => after,
        };
        for item in group.split(',') {
            let name: String = item
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
            if after.starts_with('{') {
                continue;
            }
            break;
        }
    }
    names
}

/// The words of the public signatures in `text`: each `pub fn` up to its body and each `pub`
/// field's type. An exported type a public function takes or returns, or a public field
/// holds, is part of the library's interface whoever uses it.
fn public_signature_words(text: &str) -> std::collections::BTreeSet<String> {
    let mut words = std::collections::BTreeSet::new();
    let mut add = |s: &str| {
        for w in s.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !w.is_empty() {
                words.insert(w.to_owned());
            }
        }
    };
    for (i, _) in text.match_indices("pub ") {
        let rest = &text[i + 4..];
        let rest = rest.strip_prefix("async ").unwrap_or(rest);
        if rest.starts_with("fn ") {
            // From the generics or the parameters on: the function's own name is no use of it.
            let start = rest.find(['<', '(']).unwrap_or(rest.len());
            let end = rest.find(['{', ';']).unwrap_or(rest.len()).max(start);
            add(&rest[start..end]);
        } else if let Some(colon) = rest.find(':')
            && rest[..colon]
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_')
            && !rest[colon..].starts_with("::")
        {
            let end = rest.find(['\n', ',']).unwrap_or(rest.len());
            add(&rest[colon..end]);
        }
    }
    words
}

/// Exported names of `lib` that the binary's files use and nothing else outside the library
/// does (`others`), and that no public signature of the library (`signatures`) names.
fn exported_only_for_the_binary(
    lib: &str,
    binary: &std::collections::BTreeSet<String>,
    others: &std::collections::BTreeSet<String>,
    signatures: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    exported_names(lib)
        .into_iter()
        .filter(|n| binary.contains(n) && !others.contains(n) && !signatures.contains(n))
        .collect()
}

#[test]
fn the_agent_library_exports_nothing_only_its_binary_uses() {
    let root = root();
    let lib = std::fs::read_to_string(root.join("src/lib.rs"))
        .unwrap_or_else(|e| panic!("reading src/lib.rs: {e}"));
    let (mut binary, mut others, mut signatures) = Default::default();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for dir in ["tests", "benches", "examples", "xtask", "crates"] {
        rust_files(&root.join(dir), &mut files);
    }
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let rel = path.strip_prefix(&root).unwrap_or(path);
        let in_binary = rel == Path::new("src/main.rs") || rel.starts_with("src/main");
        if in_binary {
            binary = names_from_agent_library(&text)
                .union(&binary)
                .cloned()
                .collect();
        } else if rel.starts_with("src") {
            signatures = public_signature_words(&text)
                .union(&signatures)
                .cloned()
                .collect();
        } else if !rel.starts_with("target") {
            others = names_from_agent_library(&text)
                .union(&others)
                .cloned()
                .collect();
        }
    }
    let found = exported_only_for_the_binary(&lib, &binary, &others, &signatures);
    assert!(
        found.is_empty(),
        "src/lib.rs exports what only the binary uses (keep it in src/main/ or in the crate \
         it belongs to): {found:?}"
    );
}

#[test]
fn the_export_scan_finds_an_item_only_the_binary_uses() {
    let lib = "//! x\npub use a::{Agent, Only as Renamed};\npub use b::Shown;\npub fn run() {}\npub struct Holder {\n    pub view: Shown,\n}\n";
    assert_eq!(
        exported_names(lib),
        ["Agent", "Renamed", "Shown", "run", "Holder"]
    );
    let binary = names_from_agent_library(
        "use nodelet::{Agent, Renamed};\nnodelet::run(); nodelet_core::Shown; nodelet::Shown",
    );
    assert_eq!(
        binary.iter().map(String::as_str).collect::<Vec<_>>(),
        ["Agent", "Renamed", "Shown", "run"]
    );
    let others = names_from_agent_library("let a = nodelet::Agent::start();");
    let signatures = public_signature_words(lib);
    assert_eq!(
        exported_only_for_the_binary(lib, &binary, &others, &signatures),
        ["Renamed", "run"],
        "Shown is a public field's type"
    );
}

//! Env files for `env[].valueFrom.fileKeyRef` (spec PW-10; Kubernetes' `EnvFiles`, beta and on by
//! default since 1.35): the file's format, and the secure join of the path into the volume.
//!
//! Format, as the kubelet's strict parser reads it, line by line:
//! 1. leading blanks (spaces, tabs) are skipped; blank lines and lines starting with `#` are
//!    ignored;
//! 2. `NAME='value'`: no blank before `=`; the value in mandatory single quotes, kept literally
//!    (no escapes, no expansion), running over several lines until the closing quote (lines
//!    joined with `\n`); after the closing quote only blanks and an optional `# comment`;
//! 3. a blank right after `=` (`NAME= 'value'`) assigns the empty string, as a shell would;
//! 4. the first line that names the key decides; lines after it are not read, lines before it
//!    must be well-formed;
//! 5. a line of 64 KiB or more is an error (Go's default line limit).

use std::path::{Component, Path, PathBuf};

/// Go's `bufio.MaxScanTokenSize`: a line and its newline must fit in it, so the longest line
/// the kubelet's parser reads is one byte shorter.
const MAX_LINE: usize = 64 * 1024;

/// Why an env file could not be read. The kubelet reports every one of these as
/// `couldn't parse env file`; the detail is for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum EnvFileError {
    /// Line `line` does not follow the format (`what` says how).
    #[error("line {line}: {what}")]
    Malformed {
        /// 1-based line number (of the opening line, for an unclosed quote).
        line: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// The value `key` has in env file `content` (steps (1)–(5) of the module docs): `Ok(None)` when
/// no line names it; `Ok(Some(empty))` for an empty value.
pub(crate) fn lookup(content: &[u8], key: &str) -> Result<Option<Vec<u8>>, EnvFileError> {
    let malformed = |line, what| EnvFileError::Malformed { line, what };
    let mut lines = split_lines(content).enumerate().map(|(i, l)| (i + 1, l));
    while let Some((n, raw)) = lines.next() {
        if raw.len() >= MAX_LINE {
            return Err(malformed(n, "line longer than 64 KiB"));
        }
        // (1)
        let line = trim_start(raw);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        // (2)
        let eq = line
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| malformed(n, "missing '='"))?;
        let name = &line[..eq];
        let trimmed = trim_end(name);
        if trimmed.is_empty() {
            return Err(malformed(n, "empty variable name"));
        }
        if trimmed.len() != name.len() {
            return Err(malformed(n, "whitespace before '=' is not allowed"));
        }
        let matches = name == key.as_bytes();
        let value = &line[eq + 1..];
        // (3)
        if trim_start(value).len() != value.len() {
            if matches {
                return Ok(Some(Vec::new()));
            }
            continue;
        }
        let Some(mut rest) = value.strip_prefix(b"'") else {
            return Err(malformed(n, "value must be enclosed in single quotes"));
        };
        let start = n;
        let mut out = Vec::new();
        loop {
            if let Some(close) = rest.iter().position(|&b| b == b'\'') {
                out.extend_from_slice(&rest[..close]);
                let after = trim_start(&rest[close + 1..]);
                if !after.is_empty() && after[0] != b'#' {
                    return Err(malformed(n, "unexpected content after closing quote"));
                }
                break;
            }
            out.extend_from_slice(rest);
            out.push(b'\n');
            let Some((m, next)) = lines.next() else {
                return Err(malformed(start, "unclosed single quote"));
            };
            if next.len() >= MAX_LINE {
                return Err(malformed(m, "line longer than 64 KiB"));
            }
            rest = next;
        }
        // (4)
        if matches {
            return Ok(Some(out));
        }
    }
    Ok(None)
}

/// Lines without their `\n` (and a `\r` before it), as Go's `bufio.ScanLines` yields them.
fn split_lines(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let empty = content.is_empty();
    body.split(|&b| b == b'\n')
        .filter(move |_| !empty)
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

fn trim_end(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .rev()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    &s[..s.len() - n]
}

/// Most symbolic links followed while joining (as filepath-securejoin, which the kubelet uses).
const MAX_LINKS: usize = 255;

/// `root` joined with `unsafe_path` so that the result stays inside `root`: `..` stops at
/// `root`, and symbolic links met on the way are resolved as if `root` were `/` (an absolute
/// target restarts at `root`). Components that do not exist are kept as they are.
///
/// # Errors
/// More than 255 links followed (a loop).
pub(crate) fn secure_join(root: &Path, unsafe_path: &Path) -> std::io::Result<PathBuf> {
    let mut resolved: Vec<std::ffi::OsString> = Vec::new();
    let mut pending: Vec<std::ffi::OsString> = components(unsafe_path);
    pending.reverse();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        if part == "." || part.is_empty() {
            continue;
        }
        let mut candidate = root.to_path_buf();
        candidate.extend(&resolved);
        candidate.push(&part);
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(std::io::Error::other("too many symbolic links"));
                }
                let target = std::fs::read_link(&candidate)?;
                if target.is_absolute() {
                    resolved.clear();
                }
                let mut more = components(&target);
                more.reverse();
                pending.extend(more);
            }
            _ => resolved.push(part),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(&resolved);
    Ok(out)
}

/// The path's parts, `..` and `.` kept, the root dropped.
fn components(path: &Path) -> Vec<std::ffi::OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_owned()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(content: &str, key: &str) -> Result<Option<String>, EnvFileError> {
        lookup(content.as_bytes(), key).map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    fn bad(content: &str, key: &str) -> &'static str {
        match get(content, key) {
            Err(EnvFileError::Malformed { what, .. }) => what,
            other => panic!("{content:?}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn pw10_values_are_single_quoted_literal_and_may_span_lines() {
        let file = "# written by init\n\n  \tHOST='db.internal'\nMOTD='two\nlines' # note\nRAW='$(X) \\n \"q\"'\n";
        assert_eq!(get(file, "HOST"), Ok(Some("db.internal".into())));
        assert_eq!(get(file, "MOTD"), Ok(Some("two\nlines".into())));
        assert_eq!(get(file, "RAW"), Ok(Some("$(X) \\n \"q\"".into())));
        assert_eq!(get(file, "ABSENT"), Ok(None));
        assert_eq!(get("", "A"), Ok(None));
        assert_eq!(get("A='x'\r\nB='y'\r\n", "B"), Ok(Some("y".into())));
    }

    #[test]
    fn pw10_the_first_line_naming_the_key_wins_and_later_lines_are_not_read() {
        assert_eq!(get("A='1'\nA='2'\n", "A"), Ok(Some("1".into())));
        assert_eq!(get("A='1'\nnot a line\n", "A"), Ok(Some("1".into())));
        assert_eq!(bad("not a line\nA='1'\n", "A"), "missing '='");
    }

    #[test]
    fn pw10_a_blank_after_the_equals_sign_assigns_the_empty_string() {
        assert_eq!(get("A= 'x'\n", "A"), Ok(Some(String::new())));
        assert_eq!(get("B= 'x'\nA='y'\n", "A"), Ok(Some("y".into())));
        assert_eq!(get("A=''\n", "A"), Ok(Some(String::new())));
    }

    #[test]
    fn pw10_malformed_lines_are_errors() {
        assert_eq!(
            bad("A = 'x'\n", "A"),
            "whitespace before '=' is not allowed"
        );
        assert_eq!(
            bad("A\t='x'\n", "A"),
            "whitespace before '=' is not allowed"
        );
        assert_eq!(bad("='x'\n", "A"), "empty variable name");
        assert_eq!(bad("A=x\n", "A"), "value must be enclosed in single quotes");
        assert_eq!(
            bad("A=\"x\"\n", "A"),
            "value must be enclosed in single quotes"
        );
        assert_eq!(bad("A=\n", "A"), "value must be enclosed in single quotes");
        assert_eq!(
            bad("A='x' y\n", "A"),
            "unexpected content after closing quote"
        );
        assert_eq!(
            bad("A='x'y\n", "A"),
            "unexpected content after closing quote"
        );
        assert_eq!(bad("A='x\ny\n", "A"), "unclosed single quote");
        assert_eq!(bad("FOO\n", "A"), "missing '='");
    }

    #[test]
    fn pw10_a_line_longer_than_64_kib_is_an_error() {
        // A='…' is 4 bytes more than its value: 65,535 bytes pass, 65,536 do not.
        let ok = format!("A='{}'\n", "x".repeat(MAX_LINE - 5));
        assert_eq!(
            get(&ok, "A").map(|v| v.map(|v| v.len())),
            Ok(Some(MAX_LINE - 5))
        );
        let long = format!("A='{}'\n", "x".repeat(MAX_LINE - 4));
        assert_eq!(bad(&long, "A"), "line longer than 64 KiB");
    }

    proptest::proptest! {
        #[test]
        fn well_formed_files_give_back_every_value(
            vars in proptest::collection::btree_map("[A-Z_][A-Z0-9_]{0,8}", "[^'\r]{0,40}", 1..8),
            comments in proptest::bool::ANY,
        ) {
            let mut file = String::new();
            for (name, value) in &vars {
                if comments {
                    file.push_str("# a comment\n\n");
                }
                file.push_str(&format!("  {name}='{value}'{}\n", if comments { " # c" } else { "" }));
            }
            for (name, value) in &vars {
                // A value ending in a newline loses nothing: the quote closes on the next line.
                proptest::prop_assert_eq!(get(&file, name), Ok(Some(value.clone())));
            }
        }
    }

    #[test]
    fn pw10_the_path_never_leaves_the_volume() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = tmp.path().join("vol");
        std::fs::create_dir_all(root.join("sub")).unwrap_or_else(|e| panic!("{e}"));
        let j = |p: &str| secure_join(&root, Path::new(p)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j("a.env"), root.join("a.env"));
        assert_eq!(j("../../etc/passwd"), root.join("etc/passwd"));
        assert_eq!(j("/abs.env"), root.join("abs.env"));
        assert_eq!(j("sub/../b.env"), root.join("b.env"));
        std::os::unix::fs::symlink("/../outside.env", root.join("abs-link"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j("abs-link"), root.join("outside.env"));
        std::os::unix::fs::symlink("../../x.env", root.join("sub/rel-link"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j("sub/rel-link"), root.join("x.env"));
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap_or_else(|e| panic!("{e}"));
        assert!(secure_join(&root, Path::new("loop")).is_err());
    }
}

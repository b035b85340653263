//! Step (1): validation (AW-3) and lexical cleaning (AW-4) of payload keys.

use std::collections::BTreeMap;

use crate::error::{Error, InvalidPath};
use crate::payload::{FileProjection, Payload};

/// Maximum length of a payload key in bytes (AW-3).
pub const MAX_PATH_LEN: usize = 4096;
/// Maximum length of one element of a payload key in bytes (AW-3).
pub const MAX_FILE_NAME_LEN: usize = 255;
/// Highest permission bits a [`FileProjection::mode`] may carry.
pub const MAX_MODE: u32 = 0o7777;

/// Checks one payload key against the kubelet's rules (AW-3), in the kubelet's order, and
/// returns the first failure with the kubelet's exact text.
///
/// Accepted keys may still be unclean (`foo//bar`, `./bar`); the writer cleans them (AW-4).
/// [`AtomicWriter::write`](crate::AtomicWriter::write) applies two more checks to the cleaned
/// key (it must not start with `..` nor be `.`), see [`InvalidPath`].
///
/// ```
/// use nodelet_atomic_writer::validate_path;
/// assert!(validate_path("a/..b").is_ok());
/// assert!(validate_path(".dotfile").is_ok());
/// let err = validate_path("foo/../../etc/passwd").unwrap_err();
/// assert_eq!(err.to_string(), "invalid path: must not contain '..': foo/../../etc/passwd");
/// ```
///
/// # Errors
///
/// [`Error::InvalidPath`] describing the first rule the key breaks.
pub fn validate_path(path: &str) -> Result<(), Error> {
    check_raw(path).map_err(Error::InvalidPath)
}

/// Lexically cleans a key that passed [`validate_path`] (AW-4): repeated `/` collapse,
/// `.` elements and a trailing `/` disappear. Returns `.` for a key with no element left.
///
/// ```
/// use nodelet_atomic_writer::clean_path;
/// assert_eq!(clean_path("bar///bar/zab.txt"), "bar/bar/zab.txt");
/// assert_eq!(clean_path("./bar"), "bar");
/// ```
pub fn clean_path(path: &str) -> String {
    let cleaned: Vec<&str> = path
        .split('/')
        .filter(|element| !element.is_empty() && *element != ".")
        .collect();
    if cleaned.is_empty() {
        ".".to_owned()
    } else {
        cleaned.join("/")
    }
}

/// AW-3 on a raw key.
fn check_raw(path: &str) -> Result<(), InvalidPath> {
    let owned = || path.to_owned();
    if path.is_empty() {
        return Err(InvalidPath::Empty);
    }
    if path.starts_with('/') {
        return Err(InvalidPath::Absolute { path: owned() });
    }
    if path.len() > MAX_PATH_LEN {
        return Err(InvalidPath::TooLong { path: owned() });
    }
    for element in path.split('/') {
        if element == ".." {
            return Err(InvalidPath::ContainsDoubleDot { path: owned() });
        }
        if element.len() > MAX_FILE_NAME_LEN {
            return Err(InvalidPath::FileNameTooLong { path: owned() });
        }
    }
    let first = path.split('/').next().unwrap_or_default();
    if first.len() > 2 && first.starts_with("..") {
        return Err(InvalidPath::StartsWithDoubleDot { path: owned() });
    }
    if path.contains('\0') {
        return Err(InvalidPath::ContainsNul { path: owned() });
    }
    Ok(())
}

/// Step (1) for a whole payload: every key validated (AW-3, in byte order of the raw keys),
/// cleaned (AW-4), its mode checked, and the cleaned set checked for file/directory conflicts.
///
/// Raw keys that clean to the same path collide; the one greatest in byte order wins (upstream
/// leaves this unspecified).
pub(crate) fn validate_payload(
    payload: &Payload,
) -> Result<BTreeMap<String, &FileProjection>, Error> {
    let mut cleaned = BTreeMap::new();
    for (raw, file) in payload.iter() {
        check_raw(raw)?;
        let clean = clean_path(raw);
        if clean == "." {
            return Err(InvalidPath::NotAFile {
                path: raw.to_owned(),
            }
            .into());
        }
        if clean.starts_with("..") {
            return Err(InvalidPath::StartsWithDoubleDot {
                path: raw.to_owned(),
            }
            .into());
        }
        if file.mode > MAX_MODE {
            return Err(Error::InvalidMode {
                path: raw.to_owned(),
                mode: file.mode,
            });
        }
        cleaned.insert(clean, file);
    }
    for path in cleaned.keys() {
        for (index, _) in path.match_indices('/') {
            let ancestor = &path[..index];
            if cleaned.contains_key(ancestor) {
                return Err(Error::PathConflict {
                    file: ancestor.to_owned(),
                    nested: path.clone(),
                });
            }
        }
    }
    Ok(cleaned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(path: &str) -> Option<String> {
        validate_path(path).err().map(|e| e.to_string())
    }

    // AW-12 `TestValidatePath`, one test per upstream case.

    #[test]
    fn valid_1_a_nested_path_is_accepted() {
        assert_eq!(message("i/am/well/behaved.txt"), None);
    }

    #[test]
    fn valid_2_a_dotted_file_name_is_accepted() {
        assert_eq!(message("keepyourheaddown.doingwork"), None);
    }

    #[test]
    fn max_path_length_of_4096_bytes_is_accepted_and_4097_rejected() {
        let exact = format!(
            "{}{}",
            format!("{}/", "a".repeat(254)).repeat(16),
            "b".repeat(16)
        );
        assert_eq!(exact.len(), 4096);
        assert_eq!(message(&exact), None);
        let over = format!("{exact}c");
        assert_eq!(
            message(&over).as_deref(),
            Some("invalid path: must be less than or equal to 4096 characters")
        );
    }

    #[test]
    fn max_file_length_of_255_bytes_is_accepted_and_256_rejected() {
        assert_eq!(message(&"a".repeat(255)), None);
        assert_eq!(
            message(&format!("dir/{}", "a".repeat(256))).as_deref(),
            Some("invalid path: filenames must be less than or equal to 255 characters")
        );
    }

    #[test]
    fn absolute_failure_reports_the_path() {
        assert_eq!(
            message("/dev/null").as_deref(),
            Some("invalid path: must be relative path: /dev/null")
        );
    }

    #[test]
    fn reserved_path_starting_with_two_dots_is_rejected() {
        assert_eq!(
            message("..sneaky.txt").as_deref(),
            Some("invalid path: must not start with '..': ..sneaky.txt")
        );
        assert!(message("...").is_some());
        assert!(message("..data").is_some());
    }

    #[test]
    fn contains_doubledot_1_rejects_a_leading_dotdot_element() {
        assert_eq!(
            message("hello/there/../../../../../../etc/passwd").as_deref(),
            Some("invalid path: must not contain '..': hello/there/../../../../../../etc/passwd")
        );
    }

    #[test]
    fn contains_doubledot_2_rejects_an_inner_dotdot_element() {
        assert_eq!(
            message("hello/../etc/somethingbad").as_deref(),
            Some("invalid path: must not contain '..': hello/../etc/somethingbad")
        );
    }

    #[test]
    fn empty_path_is_rejected_with_a_quoted_empty_string() {
        assert_eq!(
            message("").as_deref(),
            Some("invalid path: must not be empty: \"\"")
        );
    }

    #[test]
    fn rules_apply_in_kubelet_order() {
        // Absolute wins over '..' (AW-3 order: 2 before 4).
        assert!(message("/../x").is_some_and(|m| m.contains("must be relative path")));
        // '..' element wins over the reserved prefix (4 before 5).
        assert!(message("..a/../b").is_some_and(|m| m.contains("must not contain '..'")));
        // Length wins over '..' (3 before 4).
        let long = format!("../{}", "a".repeat(4096));
        assert!(message(&long).is_some_and(|m| m.contains("4096")));
    }

    #[test]
    fn only_the_first_element_is_checked_for_the_reserved_prefix() {
        assert_eq!(message("a/..b"), None);
        assert_eq!(message(".dotfile"), None);
        assert_eq!(message("foo//bar"), None);
    }

    #[test]
    fn clean_path_collapses_slashes_and_dot_elements() {
        assert_eq!(clean_path("foo////bar"), "foo/bar");
        assert_eq!(clean_path("./bar"), "bar");
        assert_eq!(clean_path("bar///bar/zab.txt"), "bar/bar/zab.txt");
        assert_eq!(clean_path("a/./b/"), "a/b");
        assert_eq!(clean_path("./"), ".");
    }

    // AW-12 `TestValidatePayload`.

    fn payload(keys: &[&str]) -> Payload {
        keys.iter()
            .map(|k| (*k, FileProjection::new(b"x".to_vec(), 0o644)))
            .collect()
    }

    #[test]
    fn payload_with_unclean_path_should_be_cleaned() {
        let p = payload(&["foo////bar", "./baz", "qux/"]);
        let cleaned = validate_payload(&p).map(|m| m.keys().cloned().collect::<Vec<_>>());
        assert_eq!(
            cleaned.ok(),
            Some(vec!["baz".into(), "foo/bar".into(), "qux".into()])
        );
    }

    #[test]
    fn payload_with_one_invalid_key_is_rejected_as_a_whole() {
        let p = payload(&["good", "../bad"]);
        assert_eq!(
            validate_payload(&p).err().map(|e| e.to_string()).as_deref(),
            Some("invalid path: must not contain '..': ../bad")
        );
    }

    #[test]
    fn a_key_that_cleans_to_a_reserved_name_is_rejected() {
        let p = payload(&["./..data"]);
        assert!(matches!(
            validate_payload(&p),
            Err(Error::InvalidPath(InvalidPath::StartsWithDoubleDot { .. }))
        ));
    }

    #[test]
    fn a_key_that_cleans_to_the_directory_itself_is_rejected() {
        let p = payload(&["./"]);
        assert!(matches!(
            validate_payload(&p),
            Err(Error::InvalidPath(InvalidPath::NotAFile { .. }))
        ));
    }

    #[test]
    fn a_key_with_a_nul_byte_is_rejected() {
        assert!(matches!(
            validate_payload(&payload(&["a\0b"])),
            Err(Error::InvalidPath(InvalidPath::ContainsNul { .. }))
        ));
    }

    #[test]
    fn a_file_that_is_also_a_parent_directory_is_a_conflict() {
        let err = validate_payload(&payload(&["a", "a//b/c"])).err();
        assert!(
            matches!(&err, Some(Error::PathConflict { file, nested }) if file == "a" && nested == "a/b/c"),
            "{err:?}"
        );
    }

    #[test]
    fn a_mode_beyond_0o7777_is_rejected() {
        let p: Payload = [("a", FileProjection::new(b"x".to_vec(), 0o10644))]
            .into_iter()
            .collect();
        assert!(matches!(
            validate_payload(&p),
            Err(Error::InvalidMode { mode: 0o10644, .. })
        ));
    }

    #[test]
    fn colliding_keys_resolve_to_the_greatest_raw_key() {
        let p: Payload = [
            ("a/b", FileProjection::new(b"first".to_vec(), 0o644)),
            ("a//b", FileProjection::new(b"second".to_vec(), 0o644)),
        ]
        .into_iter()
        .collect();
        let cleaned = validate_payload(&p).ok();
        // "a/b" > "a//b" in byte order ('b' > '/'), so "a/b" is inserted last and wins.
        assert_eq!(
            cleaned.and_then(|m| m.get("a/b").map(|f| f.data.clone())),
            Some(b"first".to_vec())
        );
    }
}

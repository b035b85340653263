//! Property test (AW-6, AW-7, AW-11): random payload sequences against a model of the tree.

use std::collections::BTreeSet;

use nodelet_atomic_writer::{FileProjection, Payload, WriteOutcome, clean_path};
use proptest::prelude::*;

use crate::support::{assert_layout, data_link, expected, writer};

/// A raw key: 1-4 elements from a small alphabet (so sequences overlap), sometimes unclean.
fn key() -> impl Strategy<Value = String> {
    let element = prop::sample::select(vec!["a", "b", "dir", ".hidden", "x.txt", "sub.d", "z z"]);
    (prop::collection::vec(element, 1..=4), 0u8..6).prop_map(|(elements, style)| {
        let joined = elements.join("/");
        match style {
            0 => format!("./{joined}"),
            1 => joined.replace('/', "//"),
            2 => format!("{joined}/"),
            _ => joined,
        }
    })
}

fn file() -> impl Strategy<Value = FileProjection> {
    let mode = prop::sample::select(vec![0o400, 0o444, 0o600, 0o640, 0o644, 0o700, 0o755, 0o777]);
    (prop::collection::vec(any::<u8>(), 0..48), mode)
        .prop_map(|(data, mode)| FileProjection::new(data, mode))
}

/// Drops every path that is an ancestor directory of another one: file/directory conflicts
/// are rejected by validation, which is tested separately.
fn without_conflicts(entries: Vec<(String, FileProjection)>) -> Payload {
    let cleaned: BTreeSet<String> = entries.iter().map(|(k, _)| clean_path(k)).collect();
    let is_parent = |path: &str| {
        cleaned
            .iter()
            .any(|other| other.starts_with(&format!("{path}/")))
    };
    entries
        .into_iter()
        .filter(|(k, _)| !is_parent(&clean_path(k)))
        .collect()
}

fn payload() -> impl Strategy<Value = Payload> {
    prop::collection::vec((key(), file()), 0..8).prop_map(without_conflicts)
}

/// How the next payload of a sequence is made: fresh, or an edit of the previous one (so that
/// mode-only changes, single deletions and no-ops are frequent, not just possible).
#[derive(Debug, Clone)]
enum Step {
    Fresh(Payload),
    Same,
    Mode(usize, u32),
    Data(usize, Vec<u8>),
    Delete(usize),
    Add(String, FileProjection),
}

fn step() -> impl Strategy<Value = Step> {
    let mode = prop::sample::select(vec![0o400, 0o600, 0o644, 0o755]);
    prop_oneof![
        payload().prop_map(Step::Fresh),
        Just(Step::Same),
        (any::<usize>(), mode).prop_map(|(i, m)| Step::Mode(i, m)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(i, d)| Step::Data(i, d)),
        any::<usize>().prop_map(Step::Delete),
        (key(), file()).prop_map(|(k, f)| Step::Add(k, f)),
    ]
}

fn apply(previous: &Payload, step: Step) -> Payload {
    let mut entries: Vec<(String, FileProjection)> = previous
        .iter()
        .map(|(k, f)| (k.to_owned(), f.clone()))
        .collect();
    let len = entries.len().max(1);
    match step {
        Step::Fresh(p) => return p,
        Step::Same => {}
        Step::Mode(i, mode) => {
            if let Some((_, f)) = entries.get_mut(i % len) {
                f.mode = mode;
            }
        }
        Step::Data(i, data) => {
            if let Some((_, f)) = entries.get_mut(i % len) {
                f.data = data;
            }
        }
        Step::Delete(i) => {
            if i % len < entries.len() {
                entries.remove(i % len);
            }
        }
        Step::Add(k, f) => entries.push((k, f)),
    }
    without_conflicts(entries)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_write_leaves_exactly_the_payload_visible(
        first in payload(),
        steps in prop::collection::vec(step(), 0..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path());
        let mut previous: Option<Payload> = None;
        for step in std::iter::once(Step::Fresh(first)).chain(steps) {
            let p = apply(previous.as_ref().unwrap_or(&Payload::new()), step);
            let before = data_link(dir.path());
            let outcome = w.write(&p, None).unwrap();
            // `..data` changes exactly once per real update (AW-6).
            prop_assert_eq!(data_link(dir.path()) != before, outcome == WriteOutcome::Written);
            // Written exactly when the visible tree (bytes and modes) changes, or on first write.
            let unchanged = previous.as_ref().is_some_and(|old| expected(old) == expected(&p));
            let want = if unchanged { WriteOutcome::Unchanged } else { WriteOutcome::Written };
            prop_assert_eq!(outcome, want);
            assert_layout(dir.path(), &p);
            previous = Some(p);
        }
    }
}

//! Crash consistency (AW-6): a failure or an abort injected at every disk mutation.
//!
//! The hidden `fault_hook` seam is called before each mutation. Returning `Err` exercises the
//! writer's error handling; panicking stops it on the spot like a crash (we catch the unwind
//! and look at what is left). After either, readers must see the complete old or the complete
//! new data, and the next write must converge.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nodelet_atomic_writer::fault::FaultPoint;
use nodelet_atomic_writer::{AtomicWriter, Payload, WriterConfig, read_visible};

use crate::support::{Tree, assert_layout, data_tree, expected, payload, text};

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The mutation fails with an I/O error.
    Error,
    /// The process "dies" right before the mutation.
    Crash,
}

fn config(fsync: bool) -> WriterConfig {
    WriterConfig::default().fsync(fsync)
}

/// Writes `old` (if any) without faults; returns the directory.
fn prepared(old: Option<&Payload>, fsync: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if let Some(old) = old {
        AtomicWriter::new(dir.path(), config(fsync))
            .unwrap()
            .write(old, None)
            .unwrap();
    }
    dir
}

/// The fault points a clean write of `new` into `dir` passes, in order.
fn recorded_points(dir: &Path, new: &Payload, fsync: bool) -> Vec<FaultPoint> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let hook = Arc::new(move |point| {
        record.lock().unwrap().push(point);
        Ok(())
    });
    let mut w = AtomicWriter::new(dir, config(fsync).fault_hook(hook)).unwrap();
    w.write(new, None).unwrap();
    seen.lock().unwrap().clone()
}

/// The fault points a clean `old -> new` write passes, in order.
fn fault_points(old: Option<&Payload>, new: &Payload, fsync: bool) -> Vec<FaultPoint> {
    let dir = prepared(old, fsync);
    recorded_points(dir.path(), new, fsync)
}

/// Injects `fault` at the `nth` fault point of an `old -> new` write and checks the outcome.
fn inject(old: Option<&Payload>, new: &Payload, fsync: bool, nth: usize, fault: Fault) {
    let dir = prepared(old, fsync);
    // A stale `..data_tmp` makes the recovery point (2) reachable too.
    std::os::unix::fs::symlink("..2020_01_01_00_00_00.1", dir.path().join("..data_tmp")).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let hook = Arc::new(move |point: FaultPoint| {
        if counter.fetch_add(1, Ordering::SeqCst) != nth {
            return Ok(());
        }
        match fault {
            Fault::Error => Err(std::io::Error::other(format!("injected at {point:?}"))),
            Fault::Crash => panic!("simulated crash at {point:?}"),
        }
    });
    let mut w = AtomicWriter::new(dir.path(), config(fsync).fault_hook(hook)).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| w.write(new, None)));
    let context = format!("{fault:?} at point #{nth}");
    match (fault, &result) {
        (Fault::Error, Ok(Err(_))) | (Fault::Crash, Err(_)) => {}
        _ => panic!(
            "{context}: fault not observed ({:?})",
            result.as_ref().map(|r| r.is_ok())
        ),
    }

    let old_tree = old.map(expected).unwrap_or_default();
    let new_tree = expected(new);
    assert_consistent(dir.path(), &old_tree, &new_tree, &context);

    // The next write (a fresh writer, as after a restart) converges.
    let mut again = AtomicWriter::new(dir.path(), config(fsync)).unwrap();
    again
        .write(new, None)
        .unwrap_or_else(|e| panic!("{context}: next write failed: {e}"));
    assert_layout(dir.path(), new);
}

/// The data behind `..data` is exactly the old or the new payload; every visible file is that
/// data (no mix, no torn file); and while the data is still the old one, the visible tree is
/// exactly the old one.
fn assert_consistent(dir: &Path, old: &Tree, new: &Tree, context: &str) {
    let data = data_tree(dir);
    assert!(
        data == *old || data == *new,
        "{context}: data is neither old nor new: {data:?}"
    );
    let visible = read_visible(dir).unwrap();
    for (path, entry) in &visible {
        assert_eq!(
            data.get(path),
            Some(entry),
            "{context}: visible {path} is not from ..data"
        );
    }
    if data == *old && data != *new {
        assert_eq!(
            visible, *old,
            "{context}: old data but visible tree changed"
        );
    }
}

fn every_point(old: Option<&Payload>, new: &Payload, fsync: bool) {
    let points = fault_points(old, new, fsync);
    assert!(points.len() >= 5, "{points:?}");
    for nth in 0..points.len() + 1 {
        // `+ 1`: one more point than the clean run because of the planted `..data_tmp`.
        for fault in [Fault::Error, Fault::Crash] {
            inject(old, new, fsync, nth, fault);
        }
    }
}

fn old_payload() -> Payload {
    payload(&[
        ("keep", b"same", 0o644),
        ("changed", b"old contents", 0o644),
        ("gone", b"removed by the update", 0o600),
        ("dir/nested/deep", b"old deep", 0o400),
        ("dir/also", b"also old", 0o644),
    ])
}

fn new_payload() -> Payload {
    payload(&[
        ("keep", b"same", 0o644),
        ("changed", b"new contents, longer", 0o644),
        ("added", b"new file", 0o640),
        ("dir/nested/deep", b"new deep", 0o400),
        ("dir/fresh/leaf", b"new leaf", 0o644),
    ])
}

#[test]
fn a_fault_at_any_step_of_an_update_keeps_old_or_new_and_the_next_write_converges() {
    every_point(Some(&old_payload()), &new_payload(), false);
}

#[test]
fn a_fault_at_any_step_of_a_synced_update_including_the_fsyncs_is_consistent() {
    every_point(Some(&old_payload()), &new_payload(), true);
}

#[test]
fn a_fault_at_any_step_of_a_first_write_is_consistent() {
    every_point(None, &new_payload(), false);
}

#[test]
fn a_fault_at_any_step_of_deleting_everything_is_consistent() {
    every_point(Some(&old_payload()), &Payload::new(), false);
}

#[test]
fn a_fault_at_any_step_of_a_mode_only_change_is_consistent() {
    let old = text(&[("a", "x"), ("b/c", "y")]);
    let new = payload(&[("a", b"x", 0o600), ("b/c", b"y", 0o644)]);
    every_point(Some(&old), &new, false);
}

#[test]
fn every_fault_point_is_reached_by_some_write() {
    let mut points = fault_points(Some(&old_payload()), &new_payload(), true);
    // The stale `..data_tmp` point only occurs with one planted.
    let dir = prepared(Some(&old_payload()), false);
    std::os::unix::fs::symlink("..2020_01_01_00_00_00.1", dir.path().join("..data_tmp")).unwrap();
    points.extend(recorded_points(dir.path(), &new_payload(), false));
    for point in [
        FaultPoint::RemoveStaleDataTmp,
        FaultPoint::CreateDataDir,
        FaultPoint::WriteFile,
        FaultPoint::SyncDataDir,
        FaultPoint::SyncTarget,
        FaultPoint::CreateDataTmp,
        FaultPoint::SwapData,
        FaultPoint::CreateVisibleLink,
        FaultPoint::RemoveVisibleLink,
        FaultPoint::RemoveOldDataDir,
    ] {
        assert!(
            points.contains(&point),
            "{point:?} never reached: {points:?}"
        );
    }
}

// A first write leaves its `..data` and visible names to the next journal commit (a power loss
// before it leaves the volume empty as before, or with names missing, which the next write
// completes); an update may only switch once those entries and its own are durable: its
// `fsync` of the target comes before its rename, and a removal of old data only after the
// last one.
#[test]
fn a_first_write_never_syncs_the_target_and_an_update_syncs_it_before_its_switch() {
    let first = fault_points(None, &new_payload(), true);
    assert!(
        !first.contains(&FaultPoint::SyncTarget),
        "a first write synced the target: {first:?}"
    );
    let update = fault_points(Some(&old_payload()), &new_payload(), true);
    let at = |point| update.iter().position(|p| *p == point).unwrap();
    let last_sync = update
        .iter()
        .rposition(|p| *p == FaultPoint::SyncTarget)
        .unwrap();
    assert!(
        at(FaultPoint::SyncTarget) < at(FaultPoint::SwapData),
        "{update:?}"
    );
    assert!(last_sync < at(FaultPoint::RemoveOldDataDir), "{update:?}");
}

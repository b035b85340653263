//! Benchmarks of the atomic writer: first write, update and unchanged payloads of 10 × 4 KiB,
//! an update of one 1 MiB file, and a first write into 1,000 fresh volumes (a node's cold
//! start), each with fsync on and off.
//!
//! Run: `cargo bench -p nodelet-atomic-writer --bench write -- --warm-up-time 1 --measurement-time 3`.
//! Directories are created under the system temp dir (set `TMPDIR` to measure another disk),
//! except the 1,000 volumes: they go under the current directory (cargo runs benches in
//! `crates/atomic-writer`), the file system a node's root directory usually shares.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriteOutcome, WriterConfig};

/// `count` files of `size` bytes each, contents varying with `seed`.
fn payload(count: usize, size: usize, seed: u8) -> Payload {
    (0..count)
        .map(|i| {
            let data: Vec<u8> = (0..size)
                .map(|b| (b as u8).wrapping_add(seed).wrapping_add(i as u8))
                .collect();
            (
                format!("dir{}/file-{i}.conf", i % 3),
                FileProjection::new(data, 0o644),
            )
        })
        .collect()
}

fn config(fsync: bool) -> WriterConfig {
    WriterConfig::default().fsync(fsync)
}

fn fresh_writer(fsync: bool) -> (tempfile::TempDir, AtomicWriter) {
    let dir = tempfile::tempdir().unwrap();
    let writer = AtomicWriter::new(dir.path(), config(fsync)).unwrap();
    (dir, writer)
}

fn label(fsync: bool) -> &'static str {
    if fsync { "fsync" } else { "no-fsync" }
}

fn first_write(c: &mut Criterion) {
    let mut group = c.benchmark_group("first-write-10x4KiB");
    let p = payload(10, 4096, 0);
    for fsync in [true, false] {
        group.bench_function(BenchmarkId::from_parameter(label(fsync)), |b| {
            b.iter_batched(
                || fresh_writer(fsync),
                |(dir, mut writer)| {
                    assert_eq!(
                        writer.write(black_box(&p), None).unwrap(),
                        WriteOutcome::Written
                    );
                    dir
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// Alternates between two payloads so that every measured write is a real update.
fn updates(c: &mut Criterion, name: &str, a: &Payload, b_payload: &Payload) {
    let mut group = c.benchmark_group(name);
    for fsync in [true, false] {
        let (_dir, mut writer) = fresh_writer(fsync);
        writer.write(a, None).unwrap();
        let mut flip = false;
        group.bench_function(BenchmarkId::from_parameter(label(fsync)), |b| {
            b.iter(|| {
                flip = !flip;
                let next = if flip { b_payload } else { a };
                assert_eq!(
                    writer.write(black_box(next), None).unwrap(),
                    WriteOutcome::Written
                );
            });
        });
    }
    group.finish();
}

fn update_small(c: &mut Criterion) {
    updates(
        c,
        "update-10x4KiB",
        &payload(10, 4096, 0),
        &payload(10, 4096, 1),
    );
}

fn update_large(c: &mut Criterion) {
    updates(
        c,
        "update-1x1MiB",
        &payload(1, 1 << 20, 0),
        &payload(1, 1 << 20, 1),
    );
}

fn unchanged(c: &mut Criterion) {
    let mut group = c.benchmark_group("unchanged-10x4KiB");
    let p = payload(10, 4096, 0);
    for fsync in [true, false] {
        let (_dir, mut writer) = fresh_writer(fsync);
        writer.write(&p, None).unwrap();
        group.bench_function(BenchmarkId::from_parameter(label(fsync)), |b| {
            b.iter(|| {
                assert_eq!(
                    writer.write(black_box(&p), None).unwrap(),
                    WriteOutcome::Unchanged
                )
            });
        });
    }
    group.finish();
}

/// The payload of a service-account volume: a token, the CA bundle and the namespace.
fn api_access(seed: u8) -> Payload {
    [
        ("token", vec![b'a' + seed; 900]),
        ("ca.crt", vec![b'c' + seed; 1200]),
        ("namespace", b"default".to_vec()),
    ]
    .into_iter()
    .map(|(k, v)| (k, FileProjection::new(v, 0o644)))
    .collect()
}

/// A node's cold start: 1,000 fresh volume directories (created beforehand, not measured), one
/// three-key payload written into each, one after the other.
fn first_write_1000_volumes(c: &mut Criterion) {
    const VOLUMES: usize = 1000;
    let mut group = c.benchmark_group("first-write-1000-volumes-3-keys");
    group.sample_size(10);
    let p = api_access(0);
    for fsync in [true, false] {
        group.bench_function(BenchmarkId::from_parameter(label(fsync)), |b| {
            b.iter_batched(
                || {
                    let root = tempfile::tempdir_in(".").unwrap();
                    let writers: Vec<AtomicWriter> = (0..VOLUMES)
                        .map(|i| {
                            let dir = root.path().join(format!("v{i}"));
                            std::fs::create_dir(&dir).unwrap();
                            AtomicWriter::new(&dir, config(fsync)).unwrap()
                        })
                        .collect();
                    (root, writers)
                },
                |(root, mut writers)| {
                    for writer in &mut writers {
                        assert_eq!(
                            writer.write(black_box(&p), None).unwrap(),
                            WriteOutcome::Written
                        );
                    }
                    root
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = first_write, update_small, unchanged, update_large, first_write_1000_volumes
}
criterion_main!(benches);

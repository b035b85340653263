//! Measurement aid: writes the same payload shape into COUNT fresh volume directories and
//! prints the file system's free-inode delta (statvfs), for counting inodes and, under
//! `strace -f -c`, syscalls per volume.
//!
//! ```text
//! cargo run --release -p nodelet-atomic-writer --example volume-ops -- DIR SHAPE COUNT [--no-fsync] [--update|--unchanged] [--setup-only] [--threads N]
//! ```
//!
//! SHAPE: `cm1` (configMap, 1 key), `cm3` (3 keys), `secret` (3 keys, mode 0o400 each),
//! `projected` (token, `certs/ca.crt`, `namespace`). `DIR/v<i>` are created first (not
//! counted); with `--update` every volume is written once, then measured while written with
//! other bytes; with `--unchanged`, written again with the same bytes; `--setup-only` skips the
//! measured writes (the baseline to subtract); `--threads N` shares the volumes among N
//! threads, as the agent's blocking pool does.

use std::path::PathBuf;
use std::process::ExitCode;

use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriterConfig};

fn shape(name: &str, seed: u8) -> Option<Payload> {
    let file = |len: usize, mode: u32| FileProjection::new(vec![b'a' + seed; len], mode);
    let keys: Vec<(&str, FileProjection)> = match name {
        "cm1" => vec![("app.conf", file(512, 0o644))],
        "cm3" => vec![
            ("app.conf", file(512, 0o644)),
            ("log.conf", file(256, 0o644)),
            ("extra.yaml", file(1024, 0o644)),
        ],
        "secret" => vec![
            ("tls.crt", file(1200, 0o400)),
            ("tls.key", file(1700, 0o400)),
            ("ca.crt", file(1200, 0o400)),
        ],
        "projected" => vec![
            ("token", file(900, 0o644)),
            ("certs/ca.crt", file(1200, 0o644)),
            ("namespace", file(7, 0o644)),
        ],
        _ => return None,
    };
    Some(keys.into_iter().collect())
}

fn free_inodes(dir: &std::path::Path) -> u64 {
    nix::sys::statvfs::statvfs(dir).map_or(0, |s| s.files_free())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let (Some(dir), Some(name), Some(count)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: volume-ops DIR SHAPE COUNT [--no-fsync] [--update|--unchanged]");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    let count: usize = count.parse().unwrap_or(0);
    let (Some(first), Some(second)) = (shape(name, 0), shape(name, 1)) else {
        eprintln!("unknown shape {name}");
        return ExitCode::from(2);
    };
    let config = WriterConfig::default().fsync(!flag("--no-fsync"));
    let mut writers = Vec::new();
    for i in 0..count {
        let target = dir.join(format!("v{i}"));
        if let Err(e) = std::fs::create_dir(&target) {
            eprintln!("{}: {e}", target.display());
            return ExitCode::FAILURE;
        }
        match AtomicWriter::new(&target, config.clone()) {
            Ok(w) => writers.push(w),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let measured = if flag("--update") { &second } else { &first };
    if flag("--update") || flag("--unchanged") {
        for w in &mut writers {
            if let Err(e) = w.write(&first, None) {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let before = free_inodes(&dir);
    let start = std::time::Instant::now();
    if !flag("--setup-only") {
        // Like the agent's blocking pool: the volumes shared among `--threads N` (default 1).
        let threads: usize = args
            .iter()
            .position(|a| a == "--threads")
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(1);
        let chunk = writers.len().div_ceil(threads.max(1)).max(1);
        let failed = std::thread::scope(|scope| {
            let workers: Vec<_> = writers
                .chunks_mut(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter_mut()
                            .map(|w| w.write(measured, None))
                            .find_map(Result::err)
                    })
                })
                .collect();
            workers.into_iter().find_map(|w| w.join().ok().flatten())
        });
        if let Some(e) = failed {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    let elapsed = start.elapsed();
    let after = free_inodes(&dir);
    println!(
        "{name} x{count}: inodes {} ({:.2}/volume), {:.3} ms total",
        before as i64 - after as i64,
        (before as i64 - after as i64) as f64 / count.max(1) as f64,
        elapsed.as_secs_f64() * 1e3
    );
    ExitCode::SUCCESS
}

//! Command-line entry: atomically replace a directory's contents with a JSON payload from stdin.
//!
//! ```text
//! cargo run -p nodelet-atomic-writer --example atomic-write -- TARGET_DIR [--no-fsync] < payload.json
//! ```
//!
//! The payload is `{"files": {"<path>": {"data": "<base64>", "mode": <int, optional, default 420>}}}`
//! (420 = 0o644). Prints `written` or `unchanged` and exits 0; on any error prints the error
//! text to stderr and exits 1 (2 for bad usage).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use base64::Engine;
use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriteOutcome, WriterConfig};

const USAGE: &str = "usage: atomic-write TARGET_DIR [--no-fsync] < payload.json";

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    files: BTreeMap<String, InputFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InputFile {
    data: String,
    #[serde(default = "default_mode")]
    mode: u32,
}

fn default_mode() -> u32 {
    0o644
}

fn main() -> ExitCode {
    let mut target = None;
    let mut fsync = true;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--no-fsync") => fsync = false,
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if target.is_none() => target = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("unexpected argument {}\n{USAGE}", arg.to_string_lossy());
                return ExitCode::from(2);
            }
        }
    }
    let Some(target) = target else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(target, fsync) {
        Ok(WriteOutcome::Written) => {
            println!("written");
            ExitCode::SUCCESS
        }
        Ok(WriteOutcome::Unchanged) => {
            println!("unchanged");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run(target: PathBuf, fsync: bool) -> Result<WriteOutcome, String> {
    let mut json = String::new();
    std::io::stdin()
        .read_to_string(&mut json)
        .map_err(|e| format!("read payload from stdin: {e}"))?;
    let input: Input =
        serde_json::from_str(&json).map_err(|e| format!("parse payload JSON: {e}"))?;
    let mut payload = Payload::new();
    for (path, file) in input.files {
        let data = base64::engine::general_purpose::STANDARD
            .decode(file.data.as_bytes())
            .map_err(|e| format!("decode base64 data of {path}: {e}"))?;
        payload.insert(path, FileProjection::new(data, file.mode));
    }
    let mut writer = AtomicWriter::new(&target, WriterConfig::default().fsync(fsync))
        .map_err(|e| e.to_string())?;
    writer.write(&payload, None).map_err(|e| e.to_string())
}

//! Link settings of the `nodelet` binary.
//!
//! On Linux with glibc, the binary's relative relocations are packed (`DT_RELR`; glibc 2.36,
//! binutils 2.38). A position-independent executable otherwise carries 24 bytes of
//! `.rela.dyn` per pointer the loader relocates — 1.15 MB in this binary, every page of it
//! read at start-up and then left mapped — where the packed form takes 11 KB. ASLR is kept.
//! The linker records a `GLIBC_ABI_DT_RELR` version dependency, so an older glibc refuses
//! the binary with a clear error instead of running it wrongly. The option is used only for a
//! native build, and only when the C compiler rustc links with (`cc`) links a test program
//! with it without a warning.

use std::path::Path;
use std::process::{Command, Stdio};

const PACK: &str = "-Wl,-z,pack-relative-relocs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let out = std::env::var("OUT_DIR").unwrap_or_default();
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    if os == "linux" && env == "gnu" && native && !out.is_empty() && links_packed(Path::new(&out)) {
        println!("cargo:rustc-link-arg-bins={PACK}");
    }
}

/// Whether `cc` links a position-independent program with packed relocations, warnings
/// treated as errors (an older GNU ld only warns that it ignores the option).
fn links_packed(out: &Path) -> bool {
    let source = out.join("relr-probe.c");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return false;
    }
    Command::new("cc")
        .args(["-fPIE", "-pie", PACK, "-Wl,--fatal-warnings", "-o"])
        .arg(out.join("relr-probe"))
        .arg(&source)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

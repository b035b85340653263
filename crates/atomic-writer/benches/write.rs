//! Benchmarks of the atomic writer (filled in with the writer).
fn main() {}

//! Benchmarks of the volume manager (filled in below).
fn main() {}

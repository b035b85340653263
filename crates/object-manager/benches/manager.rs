//! Benchmarks (placeholder until written).
fn main() {}

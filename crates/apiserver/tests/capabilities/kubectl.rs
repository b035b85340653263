//! Placeholder until the binary lands.

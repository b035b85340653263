//! Integration tests of the atomic writer, one module per topic; helpers live in `support`.

// Shared helpers: payload builders, the visible-tree oracle, layout invariants, snapshots.
mod support;

// Ports of the kubelet's own unit tests (AW-12): new writer, write once, update, multiple
// updates, user-visible files.
mod upstream;

// Where we go beyond the kubelet: recovery, mode changes, hostile target contents, set_perms,
// ownership, durability option.
mod beyond;

// Property test: random payload sequences checked against a model of the visible tree.
mod model;

// Crash consistency: a failure or an abort injected at every disk mutation.
mod crash;

// Inodes and file-system calls per first write, update and unchanged write, pinned.
mod counts;

// The `atomic-write` example, as users and scripts run it.
mod cli;

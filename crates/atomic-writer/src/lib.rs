//! Atomic projection of a payload of files into a volume directory (work in progress).

//! An in-memory Kubernetes API server for tests and offline mode (work in progress).

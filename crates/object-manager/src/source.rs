//! The seam between the managers and the API server: [`ObjectSource`] and what it returns.
//!
//! Two implementations: [`KubeSource`] (a real `kube::Client`) and, with the `test-util`
//! feature, `FakeSource` (in memory, with request counters and fault injection). The
//! managers' TTL, registration, reference-count and idle logic is written against this trait
//! only, so it is unit-testable on paused tokio time.

mod api;
mod kube;
mod lines;
mod slim;
pub use self::kube::KubeSource;

#[cfg(any(test, feature = "test-util"))]
mod fake;
#[cfg(any(test, feature = "test-util"))]
pub use self::fake::{FakeSource, Verb};

pub use self::api::{
    Listed, ObjectSource, ReadFrom, SourceError, WatchEvent, WatchStream, is_no_relationship,
};

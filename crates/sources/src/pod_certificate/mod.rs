//! The `podCertificate` projected source (PL-21, PL-22; gate `PodCertificateRequest`, cargo
//! feature `pod-certificates`): a key pair made on the node, a PodCertificateRequest for it,
//! and the issued chain projected into the pod's volume — kept fresh while the pod runs.
//!
//! # Pieces
//!
//! * [`keys`] — the six key types ([`KeyType`]) and the stub PKCS#10 request that carries the
//!   public key (rcgen on aws-lc-rs: the reason for the cargo feature); private keys are
//!   PKCS#8 PEM ([`PrivateKeyPem`](crate::PrivateKeyPem), redacted in `Debug`).
//! * [`PodCertificateSource`] — the API seam: create a request, read the node's and the service
//!   account's UIDs, see requests through one node-wide watch. [`KubePodCertificateSource`]
//!   is the real one (`FakePodCertificateSource` under the `test-util` feature).
//! * [`PodCertificateManager`] — one state machine per (pod, volume, source index), stepped by
//!   the projected plugin's SetUp; its [`subscribe`](PodCertificateManager::subscribe) sends a
//!   [`SourceChange::PodCertificate`](nodelet_core::SourceChange) when the watch sees one of a
//!   pod's requests change, and the volume manager sets that pod's certificate volumes up
//!   again, as at the instant the state machine asks for.
//!
//! # Steps (`manager.rs` carries the `// (n)` markers)
//!
//! 1. **First SetUp**: generate the key (`keyType`), read the service account's and the node's
//!    UIDs, create a request named `req-<random>` in the pod's namespace, owned by the pod
//!    (`apiVersion: v1`, `kind: Pod`), with `signerName`, pod name and UID, service account
//!    name and UID, node name and UID, `maxExpirationSeconds`, `stubPKCS10Request` and
//!    `unverifiedUserAnnotations` (= `userAnnotations`). The SetUp fails with
//!    `credential bundle is not issued yet`: the pod does not start.
//! 2. **Waiting**: each SetUp (retries back off; a change of the request seen by the watch
//!    retries at once) looks the request up in the watch's cache. Issued → step 3. Still not
//!    seen 10 min (+ 0–5 min jitter) after it was created → it was deleted: a new one is made.
//! 3. **Issued**: the key and the cleaned chain are projected; the volume is set up again at
//!    `beginRefreshAt` + 0–5 min jitter, when a refresh request is made (as in step 1).
//! 4. **Refreshing**: the old key and chain stay projected until the new request is issued,
//!    then both are replaced in one atomic write. A refresh request not seen for 10 min is
//!    made again. 10 min after `beginRefreshAt` a `CertificateOverdueForRefresh` Warning
//!    event, after `notAfter` a `CertificateExpired` one, each once per credential.
//! 5. **Denied / Failed** (first request or refresh): one Warning event (reason `Denied` /
//!    `Failed`) and, from then on, every SetUp of the volume fails with
//!    `PodCertificateRequest was permanently denied: reason="…" message="…"`. No new request.
//!
//! Files: `credentialBundlePath` (the key, then the chain), `keyPath`, `certificateChainPath`;
//! mode 0600 when the pod has an fsUser or fsGroup (fsGroup then adds group read), else the
//! volume's `defaultMode`. State lives in memory: after a restart every source starts at
//! step 1 (as in the kubelet).

mod error;
pub mod keys;
mod manager;
mod source;

pub use error::{ApiError, PodCertificateError};
pub use keys::{KeyError, KeyType};
pub use manager::MAX_JITTER;
pub use manager::PodCertificateManager;
#[cfg(any(test, feature = "test-util"))]
pub use source::FakePodCertificateSource;
pub use source::{KubePodCertificateSource, PodCertificateSource};

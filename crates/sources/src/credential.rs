//! What the `podCertificate` source hands a volume: [`CredentialBundle`] and its redacted
//! [`PrivateKeyPem`] (always compiled: the volume side needs no crypto library).

use std::fmt;

use tokio::time::Instant;

/// A private key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`). `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKeyPem(Vec<u8>);

impl PrivateKeyPem {
    /// Wraps PEM text (the key generator's).
    #[cfg(feature = "pod-certificates")]
    pub(crate) fn new(pem: Vec<u8>) -> Self {
        Self(pem)
    }

    /// The PEM text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateKeyPem(<{} bytes>)", self.0.len())
    }
}

/// An issued pod credential, as a projected volume writes it (PL-21): `credentialBundlePath`
/// gets the key then the chain, `keyPath` the key, `certificateChainPath` the chain.
#[derive(Debug, Clone)]
pub struct CredentialBundle {
    /// The private key (PKCS#8 PEM).
    pub private_key: PrivateKeyPem,
    /// The certificate chain, PEM `CERTIFICATE` blocks only.
    pub chain: Vec<u8>,
    /// When the volume must be set up again even if nothing changes (refresh, events).
    pub refresh_at: Instant,
}

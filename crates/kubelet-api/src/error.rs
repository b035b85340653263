//! [`Error`]: why the kubelet API could not start serving.

use std::net::SocketAddr;
use std::path::PathBuf;

/// A boxed error of a TLS or certificate library, kept as the source of an [`Error`].
type Source = Box<dyn std::error::Error + Send + Sync>;

/// Why [`serve`](crate::serve) failed. Files are named by the kubelet's flags for them
/// (`--tls-cert-file`, `--tls-private-key-file`, `--client-ca-file`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Only one of the serving certificate and key files was given.
    #[error("--tls-cert-file and --tls-private-key-file must be given together")]
    CertificateWithoutKey,
    /// A PEM file could not be read or parsed.
    #[error("reading {flag} {}", path.display())]
    ReadPem {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What the PEM reader said.
        #[source]
        source: Source,
    },
    /// A certificate file holds no certificate.
    #[error("{flag} {} holds no certificate", path.display())]
    NoCertificate {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The client CA file's certificates cannot verify client certificates.
    #[error("--client-ca-file {}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        #[source]
        source: Source,
    },
    /// The serving certificate made at start could not be made.
    #[error("making the serving certificate: {step}")]
    MakeCertificate {
        /// The step that failed.
        step: String,
        /// What rcgen said.
        #[source]
        source: Source,
    },
    /// The TLS configuration was refused (a key that does not go with its certificate).
    #[error("{step}")]
    Tls {
        /// The step that failed.
        step: &'static str,
        /// What rustls said.
        #[source]
        source: Source,
    },
    /// The address could not be bound.
    #[error("binding the kubelet API address {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The bound socket's address could not be read.
    #[error("reading the kubelet API's bound address")]
    LocalAddr(#[source] std::io::Error),
}

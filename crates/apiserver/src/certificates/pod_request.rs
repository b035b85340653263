//! PodCertificateRequest validation (filled in with the PodCertificateRequest API).

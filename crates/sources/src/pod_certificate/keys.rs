//! Key pairs for PodCertificateRequests (PL-21): the six key types a kubelet generates, the
//! private key as PKCS#8 PEM (`PRIVATE KEY`), and the stub PKCS#10 request that carries the
//! public key and proves possession of the private one.

use std::fmt;
use std::str::FromStr;

use rcgen::{CertificateParams, DistinguishedName, KeyPair, RsaKeySize, SignatureAlgorithm};

use crate::credential::PrivateKeyPem;

/// `podCertificate.keyType`: the key types a v1.36 kubelet generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyType {
    /// `RSA3072`: RSA, 3072 bits (the stub request is signed with SHA-256).
    Rsa3072,
    /// `RSA4096`: RSA, 4096 bits.
    Rsa4096,
    /// `ECDSAP256`: ECDSA on P-256 with SHA-256.
    EcdsaP256,
    /// `ECDSAP384`: ECDSA on P-384 with SHA-384.
    EcdsaP384,
    /// `ECDSAP521`: ECDSA on P-521 with SHA-512.
    EcdsaP521,
    /// `ED25519`: Ed25519.
    Ed25519,
}

impl KeyType {
    /// Every key type, in the API's order.
    pub const ALL: [KeyType; 6] = [
        KeyType::Rsa3072,
        KeyType::Rsa4096,
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::EcdsaP521,
        KeyType::Ed25519,
    ];

    /// The API spelling (`RSA3072`, …, `ED25519`).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::Rsa3072 => "RSA3072",
            KeyType::Rsa4096 => "RSA4096",
            KeyType::EcdsaP256 => "ECDSAP256",
            KeyType::EcdsaP384 => "ECDSAP384",
            KeyType::EcdsaP521 => "ECDSAP521",
            KeyType::Ed25519 => "ED25519",
        }
    }

    /// The signature algorithm of the stub request (what Go's x509 picks for the key).
    fn algorithm(self) -> &'static SignatureAlgorithm {
        match self {
            KeyType::Rsa3072 | KeyType::Rsa4096 => &rcgen::PKCS_RSA_SHA256,
            KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyType::EcdsaP521 => &rcgen::PKCS_ECDSA_P521_SHA512,
            KeyType::Ed25519 => &rcgen::PKCS_ED25519,
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyType {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KeyType::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| KeyError::UnknownKeyType { key_type: s.into() })
    }
}

/// Why a key pair could not be made. `Display` follows the kubelet's texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// `keyType` names no key type the kubelet knows.
    #[error("unknown key type {key_type:?}")]
    UnknownKeyType {
        /// The `keyType` asked for.
        key_type: String,
    },
    /// The crypto library could not generate the key.
    #[error("while generating {key_type} key: {message}")]
    Generate {
        /// The key type.
        key_type: KeyType,
        /// The library's message.
        message: String,
    },
    /// The stub PKCS#10 request could not be signed.
    #[error("while generating stub PKCS#10 request: {message}")]
    StubRequest {
        /// The library's message.
        message: String,
    },
}

/// A new key pair for one PodCertificateRequest.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// The private key (PKCS#8 PEM).
    pub private_key: PrivateKeyPem,
    /// `spec.stubPKCS10Request`: a DER PKCS#10 request with an empty subject, no attributes,
    /// signed with the new key.
    pub stub_pkcs10_request: Vec<u8>,
}

/// Generates a key pair of `key_type` and its stub PKCS#10 request. CPU-bound (RSA 4096 takes
/// a moment): call it on the blocking pool.
///
/// # Errors
/// [`KeyError::Generate`] or [`KeyError::StubRequest`] when the crypto library fails.
pub fn generate_key(key_type: KeyType) -> Result<NewKey, KeyError> {
    let alg = key_type.algorithm();
    let generated = match key_type {
        KeyType::Rsa3072 => KeyPair::generate_rsa_for(alg, RsaKeySize::_3072),
        KeyType::Rsa4096 => KeyPair::generate_rsa_for(alg, RsaKeySize::_4096),
        _ => KeyPair::generate_for(alg),
    };
    let key_pair = generated.map_err(|e| KeyError::Generate {
        key_type,
        message: e.to_string(),
    })?;
    let mut params = CertificateParams::default();
    // The kubelet's request is "completely empty": no subject, no extensions.
    params.distinguished_name = DistinguishedName::new();
    let request = params
        .serialize_request(&key_pair)
        .map_err(|e| KeyError::StubRequest {
            message: e.to_string(),
        })?;
    Ok(NewKey {
        private_key: PrivateKeyPem::new(key_pair.serialize_pem().into_bytes()),
        stub_pkcs10_request: request.der().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use rcgen::PublicKeyData as _;
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    use x509_parser::public_key::PublicKey;

    use super::*;

    #[test]
    fn key_types_parse_from_their_api_spelling_only() {
        for k in KeyType::ALL {
            assert_eq!(k.as_str().parse::<KeyType>(), Ok(k));
        }
        assert_eq!(
            "RSA2048".parse::<KeyType>().unwrap_err().to_string(),
            "unknown key type \"RSA2048\""
        );
    }

    #[test]
    fn every_key_type_makes_a_pkcs8_pem_key_that_parses_back_and_a_verified_empty_stub_request() {
        for key_type in KeyType::ALL {
            let key = generate_key(key_type).unwrap();
            let pem = std::str::from_utf8(key.private_key.as_bytes()).unwrap();
            assert!(
                pem.starts_with("-----BEGIN PRIVATE KEY-----\n"),
                "{key_type}"
            );
            assert!(pem.trim_end().ends_with("-----END PRIVATE KEY-----"));
            let parsed = KeyPair::from_pem(pem).unwrap();

            let (rest, csr) = X509CertificationRequest::from_der(&key.stub_pkcs10_request).unwrap();
            assert!(rest.is_empty());
            // x509-parser verifies every algorithm but ECDSA with SHA-512 (P-521).
            if key_type != KeyType::EcdsaP521 {
                csr.verify_signature().unwrap();
            }
            let info = &csr.certification_request_info;
            assert_eq!(info.subject.iter().count(), 0, "{key_type}: empty subject");
            assert!(info.iter_attributes().next().is_none());
            // The request carries the generated key's public half.
            assert_eq!(
                info.subject_pki.raw,
                parsed.subject_public_key_info().as_slice()
            );
            let bits = match info.subject_pki.parsed().unwrap() {
                PublicKey::RSA(rsa) => rsa.key_size(),
                PublicKey::EC(ec) => ec.key_size(),
                PublicKey::Unknown(raw) => raw.len() * 8,
                other => panic!("{key_type}: unexpected key {other:?}"),
            };
            let expected = match key_type {
                KeyType::Rsa3072 => 3072,
                KeyType::Rsa4096 => 4096,
                KeyType::EcdsaP256 => 256,
                KeyType::EcdsaP384 => 384,
                KeyType::EcdsaP521 => 528, // 66 bytes per coordinate
                KeyType::Ed25519 => 256,
            };
            assert_eq!(bits, expected, "{key_type}");
        }
    }

    #[test]
    fn a_private_key_never_shows_in_debug() {
        let key = generate_key(KeyType::EcdsaP256).unwrap();
        let shown = format!("{key:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("bytes>"));
    }
}

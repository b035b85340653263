//! Subject public keys of PodCertificateRequests: parsing a PKIX `SubjectPublicKeyInfo` or a
//! PKCS#10 stub request, the key types upstream accepts, and the signature checks (proof of
//! possession over the pod UID, the CSR's own signature) on ring.

use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_NIST_EC_P521,
    OID_PKCS1_RSAENCRYPTION, OID_SIG_ED25519,
};
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::SubjectPublicKeyInfo;

/// The kinds of subject key, as Go's `crypto` types tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// RSA with a modulus of this many bits.
    Rsa(usize),
    /// ECDSA on this curve (`P-256`, `P-384`, `P-521`, or another name).
    Ec(&'static str),
    /// Ed25519.
    Ed25519,
    /// A key Go parses but upstream does not accept (DSA).
    Other,
}

/// A parsed subject public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubjectKey {
    pub(crate) kind: KeyKind,
    /// The `subjectPublicKey` bits (for RSA the `RSAPublicKey` DER, for EC the point, for
    /// Ed25519 the 32 bytes): what two equal keys share.
    pub(crate) bits: Vec<u8>,
}

/// Parses a DER `SubjectPublicKeyInfo`; `None` when it is not one or its algorithm is unknown
/// (Go's `x509.ParsePKIXPublicKey` fails).
pub(crate) fn parse_spki(der: &[u8]) -> Option<SubjectKey> {
    let (rest, spki) = SubjectPublicKeyInfo::from_der(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    key_of(&spki)
}

/// The key of a parsed `SubjectPublicKeyInfo`; `None` for an algorithm Go does not know.
pub(crate) fn key_of(spki: &SubjectPublicKeyInfo<'_>) -> Option<SubjectKey> {
    let alg = &spki.algorithm.algorithm;
    let bits = spki.subject_public_key.data.to_vec();
    let kind = if *alg == OID_PKCS1_RSAENCRYPTION {
        let x509_parser::public_key::PublicKey::RSA(rsa) = spki.parsed().ok()? else {
            return None;
        };
        let modulus = rsa.modulus;
        let significant = modulus
            .iter()
            .position(|b| *b != 0)
            .unwrap_or(modulus.len());
        KeyKind::Rsa((modulus.len() - significant) * 8)
    } else if *alg == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())?;
        KeyKind::Ec(if curve == OID_EC_P256 {
            "P-256"
        } else if curve == OID_NIST_EC_P384 {
            "P-384"
        } else if curve == OID_NIST_EC_P521 {
            "P-521"
        } else {
            return None;
        })
    } else if *alg == OID_SIG_ED25519 {
        KeyKind::Ed25519
    } else if spki.algorithm.algorithm.to_id_string() == "1.2.840.10040.4.1" {
        KeyKind::Other
    } else {
        return None;
    };
    Some(SubjectKey { kind, bits })
}

/// A parsed PKCS#10 request: its subject key (`None`: a key type Go does not know) and whether
/// its self-signature verifies.
#[derive(Debug, Clone)]
pub(crate) struct StubRequest {
    pub(crate) key: Option<SubjectKey>,
    pub(crate) signature_ok: bool,
}

/// Parses a DER PKCS#10 certification request; `None` when it is not one.
pub(crate) fn parse_csr(der: &[u8]) -> Option<StubRequest> {
    let (rest, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    Some(StubRequest {
        key: key_of(&csr.certification_request_info.subject_pki),
        signature_ok: csr.verify_signature().is_ok(),
    })
}

/// Whether `signature` proves possession of `key` over `pod_uid`, as upstream checks it:
/// Ed25519 over the UID; ECDSA (ASN.1) and RSA-PSS over its SHA-256 digest.
///
/// ring does not verify P-521 (always `false` here), and checks RSA-PSS with a salt as long as
/// the digest (Go's verifier accepts any salt length).
pub(crate) fn proves_possession(key: &SubjectKey, pod_uid: &str, signature: &[u8]) -> bool {
    use ring::signature as sig;
    let alg: &dyn sig::VerificationAlgorithm = match key.kind {
        KeyKind::Ed25519 => &sig::ED25519,
        KeyKind::Ec("P-256") => &sig::ECDSA_P256_SHA256_ASN1,
        KeyKind::Ec("P-384") => &sig::ECDSA_P384_SHA256_ASN1,
        KeyKind::Rsa(_) => &sig::RSA_PSS_2048_8192_SHA256,
        _ => return false,
    };
    sig::UnparsedPublicKey::new(alg, &key.bits)
        .verify(pod_uid.as_bytes(), signature)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData as _;

    #[test]
    fn keys_parse_with_their_kind_and_a_possession_proof_verifies_only_for_the_uid() {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &rng,
        )
        .unwrap();
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .unwrap();
        let signature = pair.sign(&rng, b"uid-1").unwrap();
        let rc = rcgen::KeyPair::try_from(pkcs8.as_ref()).unwrap();
        let key = parse_spki(&rc.subject_public_key_info()).unwrap();
        assert_eq!(key.kind, KeyKind::Ec("P-256"));
        assert!(proves_possession(&key, "uid-1", signature.as_ref()));
        assert!(!proves_possession(&key, "uid-2", signature.as_ref()));
        assert!(parse_spki(b"junk").is_none());
    }

    #[test]
    fn a_stub_request_from_rcgen_parses_and_its_signature_verifies() {
        let rc = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let csr = rcgen::CertificateParams::default()
            .serialize_request(&rc)
            .unwrap();
        let parsed = parse_csr(csr.der()).unwrap();
        assert_eq!(parsed.key.map(|k| k.kind), Some(KeyKind::Ed25519));
        assert!(parsed.signature_ok);
    }
}

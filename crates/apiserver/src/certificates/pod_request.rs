//! PodCertificateRequest strategy and validation (upstream `podcertificaterequest` strategy,
//! `ValidatePodCertificateRequest{Create,Update,StatusUpdate}`), with upstream's texts.
//!
//! # Create
//! 1. Defaults: `spec.maxExpirationSeconds` 86400; the status is dropped.
//! 2. Metadata (name a DNS subdomain), `spec.signerName`, `spec.unverifiedUserAnnotations`
//!    (domain-prefixed keys, 256 KiB in all), `spec.podName`,
//!    `spec.serviceAccountName`, `spec.nodeName` (DNS subdomains), `spec.podUID`,
//!    `spec.serviceAccountUID`, `spec.nodeUID` (non-empty, at most 128 bytes).
//! 3. `spec.maxExpirationSeconds` in [3600, 86400] for `kubernetes.io` signers, else
//!    [3600, 7862400].
//! 4. Exactly one of `stubPKCS10Request` (v1.36 kubelets) or the deprecated pair
//!    `pkixPublicKey` + `proofOfPossession`: the CSR parses, its key is accepted and its
//!    signature verifies; or the key parses, is accepted, and the proof (a signature over the
//!    pod UID) verifies. Accepted keys: RSA 3072/4096, ECDSA P-256/P-384/P-521, Ed25519.
//!
//! # Update
//! The spec never changes; the main resource keeps the stored status, and `status` keeps the
//! stored spec and metadata.
//!
//! # Status
//! The rules of a `status` update are in `pod_status.rs`.

use base64::Engine as _;
use serde_json::{Value, json};

use super::keys::{self, KeyKind, SubjectKey};
use super::{is_kubernetes_signer, signer_name};
use crate::objects::validation::{dns1123_subdomain, object_meta};
use crate::status::{FieldError, FieldErrorKind};

/// `spec.maxExpirationSeconds` when a request leaves it out: 24 hours.
pub(crate) const DEFAULT_MAX_EXPIRATION_SECONDS: i64 = 86_400;
const MIN_MAX_EXPIRATION: i64 = 3_600;
const KUBERNETES_MAX_MAX_EXPIRATION: i64 = 86_400;
const MAX_MAX_EXPIRATION: i64 = 91 * 86_400;
const MAX_KEY_FIELD: usize = 10 * 1024;
const MAX_UID: usize = 128;

/// (1) Defaulting, on every body (create, update, status), as upstream defaults on decode.
pub(crate) fn default(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && spec.get("maxExpirationSeconds").is_none_or(Value::is_null)
    {
        spec.insert(
            "maxExpirationSeconds".into(),
            json!(DEFAULT_MAX_EXPIRATION_SECONDS),
        );
    }
}

/// (1) Create: defaults, and no status.
pub(crate) fn prepare_for_create(obj: &mut Value) {
    default(obj);
    if let Some(map) = obj.as_object_mut() {
        map.remove("status");
    }
}

/// Update of `sub` (`None`: the main resource, `Some("status")`): the main resource keeps the
/// stored status; `status` keeps the stored spec and metadata.
pub(crate) fn prepare_for_update(sub: Option<&str>, new: &mut Value, old: &Value) {
    default(new);
    let Some(map) = new.as_object_mut() else {
        return;
    };
    let keep: &[&str] = if sub == Some("status") {
        &["spec", "metadata"]
    } else {
        &["status"]
    };
    for field in keep {
        match old.get(*field) {
            Some(v) => map.insert((*field).into(), v.clone()),
            None => map.remove(*field),
        };
    }
}

fn spec_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn spec_bytes(obj: &Value, field: &str) -> Vec<u8> {
    obj.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// The requested key: from the stub CSR if there is one, else the PKIX key.
pub(crate) fn requested_key(obj: &Value) -> Option<SubjectKey> {
    let stub = spec_bytes(obj, "stubPKCS10Request");
    if stub.is_empty() {
        keys::parse_spki(&spec_bytes(obj, "pkixPublicKey"))
    } else {
        keys::parse_csr(&stub).and_then(|c| c.key)
    }
}

/// (2)–(4) Validation on create.
pub(crate) fn validate_create(obj: &Value) -> Vec<FieldError> {
    // (2)
    let mut errs = object_meta(obj, crate::objects::validation::NameRule::Subdomain);
    let signer = spec_str(obj, "signerName");
    errs.extend(signer_name("spec.signerName", signer));
    errs.extend(user_annotations(obj));
    for (field, value) in [
        ("podName", spec_str(obj, "podName")),
        ("serviceAccountName", spec_str(obj, "serviceAccountName")),
        ("nodeName", spec_str(obj, "nodeName")),
    ] {
        for m in dns1123_subdomain(value) {
            errs.push(FieldError::invalid(format!("spec.{field}"), value, m));
        }
    }
    for field in ["podUID", "serviceAccountUID", "nodeUID"] {
        let value = spec_str(obj, field);
        if value.is_empty() {
            errs.push(FieldError::invalid(
                format!("spec.{field}"),
                value,
                "must not be empty",
            ));
        }
        if value.len() > MAX_UID {
            errs.push(FieldError::too_long(format!("spec.{field}"), MAX_UID));
        }
    }
    // (3)
    let Some(max) = obj
        .pointer("/spec/maxExpirationSeconds")
        .and_then(Value::as_i64)
    else {
        errs.push(FieldError::required(
            "spec.maxExpirationSeconds",
            "must be set",
        ));
        return errs;
    };
    let upper = if is_kubernetes_signer(signer) {
        KUBERNETES_MAX_MAX_EXPIRATION
    } else {
        MAX_MAX_EXPIRATION
    };
    if !(MIN_MAX_EXPIRATION..=upper).contains(&max) {
        errs.push(FieldError::invalid_raw(
            "spec.maxExpirationSeconds",
            max.to_string(),
            format!("must be in the range [{MIN_MAX_EXPIRATION}, {upper}]"),
        ));
    }
    // (4)
    let stub = spec_bytes(obj, "stubPKCS10Request");
    let pkix = spec_bytes(obj, "pkixPublicKey");
    let proof = spec_bytes(obj, "proofOfPossession");
    match (stub.is_empty(), pkix.is_empty(), proof.is_empty()) {
        (false, true, true) => errs.extend(stub_request(&stub)),
        (true, false, false) => errs.extend(pkix_key(obj, &pkix, &proof)),
        _ => errs.push(omitted(
            "spec",
            "exactly one of (stubPKCS10Request) or (pkixPublicKey, proofOfPossession) must be set",
        )),
    }
    errs
}

/// (2) `spec.unverifiedUserAnnotations`: keys (lower-cased) are domain-prefixed qualified
/// names; keys and values together at most 256 KiB.
fn user_annotations(obj: &Value) -> Vec<FieldError> {
    const FIELD: &str = "spec.unverifiedUserAnnotations";
    const MAX_TOTAL: usize = 256 * 1024;
    let Some(map) = obj
        .pointer("/spec/unverifiedUserAnnotations")
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    let mut total = 0;
    for (k, v) in map {
        total += k.len() + v.as_str().map_or(0, str::len);
        let key = k.to_lowercase();
        if key.is_empty() {
            errs.push(FieldError::required(FIELD, ""));
            continue;
        }
        let msgs = crate::objects::validation::qualified_name(&key);
        if !msgs.is_empty() {
            errs.extend(
                msgs.into_iter()
                    .map(|m| FieldError::invalid(FIELD, &key, m)),
            );
        } else if key.split('/').count() != 2 {
            errs.push(FieldError::invalid(
                FIELD,
                &key,
                "must be a domain-prefixed key (such as \"acme.io/foo\")",
            ));
        }
    }
    if total > MAX_TOTAL {
        errs.push(FieldError::too_long(FIELD, MAX_TOTAL));
    }
    errs
}

/// An `Invalid` error whose value upstream omits.
pub(super) fn omitted(field: &str, detail: impl Into<String>) -> FieldError {
    FieldError {
        kind: FieldErrorKind::Invalid,
        field: field.into(),
        value: None,
        detail: detail.into(),
    }
}

fn b64_value(bytes: &[u8]) -> String {
    format!(
        "{:?}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The key-type rules both forms share; `Some(error)` for a key upstream refuses.
fn key_type_error(field: &str, key: &SubjectKey, curves: &str, raw: &[u8]) -> Option<FieldError> {
    match &key.kind {
        KeyKind::Ed25519 | KeyKind::Ec("P-256" | "P-384" | "P-521") => None,
        KeyKind::Rsa(3072 | 4096) => None,
        KeyKind::Ec(curve) => Some(FieldError::invalid(
            field,
            &format!("curve {curve}"),
            format!("elliptic public keys must use curve {curves}"),
        )),
        KeyKind::Rsa(bits) => Some(FieldError::invalid(
            field,
            &format!("{bits}-bit modulus"),
            "RSA keys must have modulus size 3072 or 4096",
        )),
        KeyKind::Other => Some(if raw.is_empty() {
            omitted(
                field,
                "unknown public key type; supported types are Ed25519, ECDSA, and RSA",
            )
        } else {
            FieldError::invalid_raw(
                field,
                b64_value(raw),
                "unknown public key type; supported types are Ed25519, ECDSA, and RSA",
            )
        }),
    }
}

/// (4) The stub PKCS#10 request.
fn stub_request(stub: &[u8]) -> Vec<FieldError> {
    const FIELD: &str = "spec.stubPKCS10Request";
    if stub.len() > MAX_KEY_FIELD {
        return vec![FieldError::too_long(FIELD, MAX_KEY_FIELD)];
    }
    let Some(csr) = keys::parse_csr(stub) else {
        return vec![omitted(FIELD, "must be a valid PKCS#10 CSR")];
    };
    let Some(key) = csr.key else {
        return vec![omitted(
            FIELD,
            "unknown public key type; supported types are Ed25519, ECDSA, and RSA",
        )];
    };
    if let Some(e) = key_type_error(FIELD, &key, "P256, P384, or P521", &[]) {
        return vec![e];
    }
    if !csr.signature_ok {
        return vec![omitted(FIELD, "invalid signature")];
    }
    Vec::new()
}

/// (4) The deprecated PKIX key and its proof of possession.
fn pkix_key(obj: &Value, pkix: &[u8], proof: &[u8]) -> Vec<FieldError> {
    const FIELD: &str = "spec.pkixPublicKey";
    if pkix.len() > MAX_KEY_FIELD {
        return vec![FieldError::too_long(FIELD, MAX_KEY_FIELD)];
    }
    if proof.len() > MAX_KEY_FIELD {
        return vec![FieldError::too_long(
            "spec.proofOfPossession",
            MAX_KEY_FIELD,
        )];
    }
    let Some(key) = keys::parse_spki(pkix) else {
        return vec![FieldError::invalid_raw(
            FIELD,
            b64_value(pkix),
            "must be a valid PKIX-serialized public key",
        )];
    };
    if let Some(e) = key_type_error(FIELD, &key, "P256 or P384", pkix) {
        return vec![e];
    }
    if !keys::proves_possession(&key, spec_str(obj, "podUID"), proof) {
        return vec![omitted(
            "spec.proofOfPossession",
            "could not verify proof-of-possession signature",
        )];
    }
    Vec::new()
}

/// Validation of an update of the main resource: the spec is immutable.
pub(crate) fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = object_meta(new, crate::objects::validation::NameRule::Subdomain);
    let spec = |o: &Value| o.get("spec").cloned().unwrap_or(Value::Null);
    if spec(new) != spec(old) {
        errs.push(FieldError::invalid_raw(
            "spec",
            spec(new).to_string(),
            "field is immutable",
        ));
    }
    errs
}

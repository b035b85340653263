//! PodCertificateRequest strategy and validation (upstream `podcertificaterequest` strategy,
//! `ValidatePodCertificateRequest{Create,Update,StatusUpdate}`), with upstream's texts.
//!
//! # Create
//! 1. Defaults: `spec.maxExpirationSeconds` 86400; the status is dropped.
//! 2. Metadata (name a DNS subdomain), `spec.signerName`, `spec.podName`,
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
//! 5. Conditions: at most one of `Issued`/`Denied`/`Failed`, always `True`; no other type;
//!    the generic condition rules (unique types, reason, lastTransitionTime, sizes).
//! 6. A request already issued, denied or failed keeps its status for good.
//! 7. Denied or failed: only conditions.
//! 8. Issued: a PEM chain (at most 100 KiB) whose leaf parses, was issued for the requested
//!    key, lives at least an hour and at most `maxExpirationSeconds`; `notBefore` and
//!    `notAfter` equal the leaf's, `notBefore` within 5 minutes of now, and `beginRefreshAt`
//!    at least 10 minutes after `notBefore` and before `notAfter`; further blocks parse.
//! 9. Otherwise the status may not change at all.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use x509_parser::prelude::FromDer as _;

use super::keys::{self, KeyKind, SubjectKey};
use super::{is_kubernetes_signer, pem_blocks, signer_name};
use crate::status::{FieldError, FieldErrorKind};
use crate::validation::{dns1123_subdomain, object_meta};

/// `spec.maxExpirationSeconds` when a request leaves it out: 24 hours.
pub(crate) const DEFAULT_MAX_EXPIRATION_SECONDS: i64 = 86_400;
const MIN_MAX_EXPIRATION: i64 = 3_600;
const KUBERNETES_MAX_MAX_EXPIRATION: i64 = 86_400;
const MAX_MAX_EXPIRATION: i64 = 91 * 86_400;
const MAX_KEY_FIELD: usize = 10 * 1024;
const MAX_CHAIN: usize = 100 * 1024;
const MAX_UID: usize = 128;

const CONDITION_TYPES: [&str; 3] = ["Issued", "Denied", "Failed"];

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

fn spec_bytes(obj: &Value, field: &str) -> Vec<u8> {
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
    let mut errs = object_meta(obj, crate::validation::NameRule::Subdomain);
    let signer = spec_str(obj, "signerName");
    errs.extend(signer_name("spec.signerName", signer));
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

/// An `Invalid` error whose value upstream omits.
fn omitted(field: &str, detail: impl Into<String>) -> FieldError {
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
    let mut errs = object_meta(new, crate::validation::NameRule::Subdomain);
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

fn conditions(obj: &Value) -> Vec<Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether a condition of type `ty` with status `True` is present.
pub(crate) fn has_condition(obj: &Value, ty: &str) -> bool {
    conditions(obj)
        .iter()
        .any(|c| c["type"] == ty && c["status"] == "True")
}

fn terminal(obj: &Value) -> bool {
    CONDITION_TYPES.iter().any(|t| has_condition(obj, t))
}

/// The status with empty fields dropped, for semantic comparison.
fn normalized_status(obj: &Value) -> Map<String, Value> {
    obj.get("status")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, v)| {
            !(v.is_null() || v.as_str() == Some("") || v.as_array().is_some_and(Vec::is_empty))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

const REASON_MSG: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')";

fn valid_reason(r: &str) -> bool {
    let b = r.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
        && b.last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// (5) The condition rules.
fn condition_errors(conds: &[Value]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut known = 0;
    for (i, c) in conds.iter().enumerate() {
        let ty = c["type"].as_str().unwrap_or("");
        let status = c["status"].as_str().unwrap_or("");
        if CONDITION_TYPES.contains(&ty) {
            known += 1;
            if known > 1 {
                errs.push(FieldError::invalid(
                    format!("status.conditions[{i}].type"),
                    ty,
                    "There may be at most one condition with type \"Issued\", \"Denied\", or \"Failed\"",
                ));
            }
            if status != "True" {
                errs.push(FieldError::not_supported(
                    format!("status.conditions[{i}].status"),
                    status,
                    &["True"],
                ));
            }
        } else {
            errs.push(FieldError::not_supported(
                format!("status.conditions[{i}].type"),
                ty,
                &CONDITION_TYPES,
            ));
        }
    }
    for (i, c) in conds.iter().enumerate() {
        let at = |f: &str| format!("status.conditions[{i}].{f}");
        let ty = c["type"].as_str().unwrap_or("");
        if conds[..i]
            .iter()
            .any(|p| p["type"].as_str().unwrap_or("") == ty)
        {
            errs.push(FieldError {
                kind: FieldErrorKind::Duplicate,
                field: at("type"),
                value: Some(format!("{ty:?}")),
                detail: String::new(),
            });
        }
        for m in crate::validation::qualified_name(ty) {
            errs.push(FieldError::invalid(at("type"), ty, m));
        }
        let status = c["status"].as_str().unwrap_or("");
        if !matches!(status, "True" | "False" | "Unknown") {
            errs.push(FieldError::not_supported(
                at("status"),
                status,
                &["False", "True", "Unknown"],
            ));
        }
        if let Some(g) = c["observedGeneration"].as_i64()
            && g < 0
        {
            errs.push(FieldError::invalid_raw(
                at("observedGeneration"),
                g.to_string(),
                "must be greater than or equal to zero",
            ));
        }
        if c["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required(at("lastTransitionTime"), ""));
        }
        let reason = c["reason"].as_str().unwrap_or("");
        if reason.is_empty() {
            errs.push(FieldError::required(at("reason"), ""));
        } else {
            if !valid_reason(reason) {
                errs.push(FieldError::invalid(at("reason"), reason, REASON_MSG));
            }
            if reason.len() > 1024 {
                errs.push(FieldError::too_long(at("reason"), 1024));
            }
        }
        if c["message"].as_str().is_some_and(|m| m.len() > 32 * 1024) {
            errs.push(FieldError::too_long(at("message"), 32 * 1024));
        }
    }
    errs
}

/// (5)–(9) Validation of a `status` update (`new` prepared: spec and metadata are the stored
/// ones) at time `now`.
pub(crate) fn validate_status(new: &Value, old: &Value, now: DateTime<Utc>) -> Vec<FieldError> {
    // (5)
    let errs = condition_errors(&conditions(new));
    if !errs.is_empty() {
        return errs;
    }
    // (6)
    if terminal(old) {
        if normalized_status(new) != normalized_status(old) {
            return vec![omitted(
                "status",
                "immutable after PodCertificateRequest is issued, denied, or failed",
            )];
        }
        return Vec::new();
    }
    // (7)
    if has_condition(new, "Denied") || has_condition(new, "Failed") {
        let status = normalized_status(new);
        if status.keys().any(|k| k != "conditions") {
            return vec![omitted(
                "status",
                "non-condition status fields must be empty when denying or failing the PodCertificateRequest",
            )];
        }
        return Vec::new();
    }
    // (8)
    if has_condition(new, "Issued") {
        return issued(new, old, now);
    }
    // (9)
    if normalized_status(new) != normalized_status(old) {
        return vec![omitted(
            "status",
            "status is immutable unless transitioning to \"Issued\", \"Denied\", or \"Failed\"",
        )];
    }
    Vec::new()
}

fn parse_time(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// (8) An `Issued` status.
fn issued(new: &Value, old: &Value, now: DateTime<Utc>) -> Vec<FieldError> {
    const CHAIN: &str = "status.certificateChain";
    let chain = new
        .pointer("/status/certificateChain")
        .and_then(Value::as_str)
        .unwrap_or("");
    if chain.len() > MAX_CHAIN {
        return vec![FieldError::too_long(CHAIN, MAX_CHAIN)];
    }
    let bad_chain = |why: &str| vec![FieldError::invalid(CHAIN, chain, why)];
    let blocks = pem_blocks(chain);
    let Some(leaf_block) = blocks.first() else {
        return bad_chain("issued certificate chain must contain at least one certificate");
    };
    if leaf_block.label != "CERTIFICATE" {
        return bad_chain(
            "issued certificate chain must consist entirely of CERTIFICATE PEM blocks",
        );
    }
    let Ok((_, leaf)) = x509_parser::certificate::X509Certificate::from_der(&leaf_block.der) else {
        return bad_chain("leaf certificate does not parse as valid X.509");
    };
    let mut errs = Vec::new();
    if let Ok(Some(san)) = leaf.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => {
                    if dns.is_empty() {
                        errs.push(FieldError::invalid(
                            CHAIN,
                            dns,
                            "leaf certificate should not contain empty DNSName",
                        ));
                    }
                    if dns.contains("..") {
                        errs.push(FieldError::invalid(
                            CHAIN,
                            dns,
                            "leaf certificate's DNSName should not contain '..'",
                        ));
                    }
                    if dns.starts_with('.') || dns.ends_with('.') {
                        errs.push(FieldError::invalid(
                            CHAIN,
                            dns,
                            "leaf certificate's DNSName should not start or end with '.'",
                        ));
                    }
                }
                x509_parser::extensions::GeneralName::RFC822Name(mail) => {
                    let ok = mail
                        .split_once('@')
                        .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty() && !d.contains('@'));
                    if !ok {
                        errs.push(FieldError::invalid(
                            CHAIN,
                            mail,
                            "leaf certificate should not contain invalid EmailAddress",
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    // Was the certificate issued to the requested key? (The spec is the stored one.)
    let wanted = requested_key(old);
    let Some(wanted) = wanted else {
        let stub = !spec_bytes(old, "stubPKCS10Request").is_empty();
        return vec![if stub {
            omitted("spec.stubPKCS10Request", "must be a valid PKCS#10 CSR")
        } else {
            omitted(
                "spec.pkixPublicKey",
                "must be a valid PKIX-serialized public key",
            )
        }];
    };
    if keys::key_of(leaf.public_key()).as_ref() != Some(&wanted) {
        return bad_chain("leaf certificate was not issued to the requested public key");
    }
    let status = &new["status"];
    let not_before = parse_time(&status["notBefore"]);
    let not_after = parse_time(&status["notAfter"]);
    let refresh = parse_time(&status["beginRefreshAt"]);
    if not_before.is_none() {
        errs.push(FieldError::required(
            "status.notBefore",
            "must be present and consistent with the issued certificate",
        ));
    }
    if not_after.is_none() {
        errs.push(FieldError::required(
            "status.notAfter",
            "must be present and consistent with the issued certificate",
        ));
    }
    if refresh.is_none() {
        errs.push(FieldError::required(
            "status.beginRefreshAt",
            "must be present and in the range [notbefore+10min, notafter-10min]",
        ));
    }
    let (Some(not_before), Some(not_after), Some(refresh)) = (not_before, not_after, refresh)
    else {
        return errs;
    };
    if !errs.is_empty() {
        return errs;
    }
    let shown = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let leaf_nb = leaf.validity().not_before.timestamp();
    let leaf_na = leaf.validity().not_after.timestamp();
    if not_before.timestamp() != leaf_nb {
        return vec![FieldError::invalid(
            "status.notBefore",
            &shown(not_before),
            "must be set to the NotBefore time encoded in the leaf certificate",
        )];
    }
    let skew = chrono::Duration::minutes(5);
    if !(not_before > now - skew && not_before < now + skew) {
        return vec![FieldError::invalid(
            "status.notBefore",
            &shown(not_before),
            "must be set to within 5 minutes of kube-apiserver's current time",
        )];
    }
    if not_after.timestamp() != leaf_na {
        return vec![FieldError::invalid(
            "status.notAfter",
            &shown(not_after),
            "must be set to the NotAfter time encoded in the leaf certificate",
        )];
    }
    let lifetime = leaf_na - leaf_nb;
    // Go prints a time.Duration as JSON: nanoseconds.
    let lifetime_ns = (lifetime * 1_000_000_000).to_string();
    if lifetime < 3600 {
        return vec![FieldError::invalid_raw(
            CHAIN,
            lifetime_ns,
            "leaf certificate lifetime must be >= 1 hour",
        )];
    }
    let max = old
        .pointer("/spec/maxExpirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_MAX_EXPIRATION_SECONDS);
    if lifetime > max {
        return vec![FieldError::invalid_raw(
            CHAIN,
            lifetime_ns,
            format!("leaf certificate lifetime must be <= spec.maxExpirationSeconds ({max})"),
        )];
    }
    let ten = chrono::Duration::minutes(10);
    if refresh < not_before + ten {
        return vec![FieldError::invalid(
            "status.beginRefreshAt",
            &shown(refresh),
            "must be at least 10 minutes after status.notBefore",
        )];
    }
    if refresh > not_after - ten {
        return vec![FieldError::invalid(
            "status.beginRefreshAt",
            &shown(refresh),
            "must be at least 10 minutes before status.notAfter",
        )];
    }
    for block in &blocks[1..] {
        if block.label != "CERTIFICATE" {
            // Upstream's text has this typo.
            return bad_chain(
                "issued certificate chain must consist entirely of CERTFICATE PEM blocks",
            );
        }
        if x509_parser::certificate::X509Certificate::from_der(&block.der).is_err() {
            return bad_chain("intermediate certificate does not parse as valid X.509");
        }
    }
    errs
}

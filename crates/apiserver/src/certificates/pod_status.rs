//! PodCertificateRequest `status` updates (upstream `ValidatePodCertificateRequestStatusUpdate`),
//! with upstream's texts; `new` is already prepared (spec and metadata are the stored ones).
//!
//! 5. Conditions: at most one of `Issued`/`Denied`/`Failed`, always `True`; no other type;
//!    the generic condition rules (unique types, reason, lastTransitionTime, sizes).
//! 6. A request already issued, denied or failed keeps its status for good.
//! 7. Denied or failed: only conditions.
//! 8. Issued: a PEM chain (at most 100 KiB) whose leaf parses, was issued for the requested
//!    key, lives at least an hour and at most `maxExpirationSeconds`; `notBefore` and
//!    `notAfter` equal the leaf's, `notBefore` within 5 minutes of now, and `beginRefreshAt`
//!    at least 10 minutes after `notBefore` and before `notAfter`; further blocks parse.
//! 9. Otherwise the status may not change at all.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use x509_parser::prelude::FromDer as _;

use super::keys;
use super::pem_blocks;
use super::pod_request::{DEFAULT_MAX_EXPIRATION_SECONDS, omitted, requested_key, spec_bytes};
use crate::status::{FieldError, FieldErrorKind};

const CONDITION_TYPES: [&str; 3] = ["Issued", "Denied", "Failed"];
const MAX_CHAIN: usize = 100 * 1024;

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
        for m in crate::objects::validation::qualified_name(ty) {
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

/// The field an issued chain is in.
const CHAIN: &str = "status.certificateChain";

/// (8) An `Issued` status.
fn issued(new: &Value, old: &Value, now: DateTime<Utc>) -> Vec<FieldError> {
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
    let mut errs = leaf_name_errors(&leaf);
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
    if let Some(errs) = validity_errors(&leaf, old, (not_before, not_after, refresh), now) {
        return errs;
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

/// (8) The leaf certificate's DNS names and email addresses, as upstream checks them.
fn leaf_name_errors(leaf: &x509_parser::certificate::X509Certificate<'_>) -> Vec<FieldError> {
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
    errs
}

/// (8) `notBefore`, `notAfter` and `beginRefreshAt` against the leaf certificate, the
/// server's clock and the spec's `maxExpirationSeconds`: the first error, if any.
fn validity_errors(
    leaf: &x509_parser::certificate::X509Certificate<'_>,
    old: &Value,
    (not_before, not_after, refresh): (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>),
    now: DateTime<Utc>,
) -> Option<Vec<FieldError>> {
    let shown = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let leaf_nb = leaf.validity().not_before.timestamp();
    let leaf_na = leaf.validity().not_after.timestamp();
    if not_before.timestamp() != leaf_nb {
        return Some(vec![FieldError::invalid(
            "status.notBefore",
            &shown(not_before),
            "must be set to the NotBefore time encoded in the leaf certificate",
        )]);
    }
    let skew = chrono::Duration::minutes(5);
    if !(not_before > now - skew && not_before < now + skew) {
        return Some(vec![FieldError::invalid(
            "status.notBefore",
            &shown(not_before),
            "must be set to within 5 minutes of kube-apiserver's current time",
        )]);
    }
    if not_after.timestamp() != leaf_na {
        return Some(vec![FieldError::invalid(
            "status.notAfter",
            &shown(not_after),
            "must be set to the NotAfter time encoded in the leaf certificate",
        )]);
    }
    let lifetime = leaf_na - leaf_nb;
    // Go prints a time.Duration as JSON: nanoseconds.
    let lifetime_ns = (lifetime * 1_000_000_000).to_string();
    if lifetime < 3600 {
        return Some(vec![FieldError::invalid_raw(
            CHAIN,
            lifetime_ns,
            "leaf certificate lifetime must be >= 1 hour",
        )]);
    }
    let max = old
        .pointer("/spec/maxExpirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_MAX_EXPIRATION_SECONDS);
    if lifetime > max {
        return Some(vec![FieldError::invalid_raw(
            CHAIN,
            lifetime_ns,
            format!("leaf certificate lifetime must be <= spec.maxExpirationSeconds ({max})"),
        )]);
    }
    let ten = chrono::Duration::minutes(10);
    if refresh < not_before + ten {
        return Some(vec![FieldError::invalid(
            "status.beginRefreshAt",
            &shown(refresh),
            "must be at least 10 minutes after status.notBefore",
        )]);
    }
    if refresh > not_after - ten {
        return Some(vec![FieldError::invalid(
            "status.beginRefreshAt",
            &shown(refresh),
            "must be at least 10 minutes before status.notAfter",
        )]);
    }
    None
}

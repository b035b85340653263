//! ClusterTrustBundle validation (upstream `ValidateClusterTrustBundle`,
//! `ValidateClusterTrustBundleUpdate`):
//! 1. The name: with `spec.signerName`, it must start with the signer name, `/` replaced by
//!    `:`, followed by `:`, and the rest be a DNS subdomain; without one it may not contain `:`.
//! 2. `spec.signerName`, when set, is a valid signer name, and never changes on update.
//! 3. `spec.trustBundle` is at most 1 MiB of PEM holding only `CERTIFICATE` blocks without
//!    headers, each an X.509 CA certificate (CA bit and valid basic constraints), at least one,
//!    none twice. On update it is checked only when it changed.

use serde_json::Value;
use x509_parser::prelude::FromDer as _;

use super::{pem_blocks, signer_name};
use crate::objects::validation::{dns1123_subdomain, object_meta_with};
use crate::status::FieldError;

/// Largest `spec.trustBundle`: 1 MiB.
const MAX_TRUST_BUNDLE: usize = 1024 * 1024;

const TRUST_BUNDLE: &str = "spec.trustBundle";
const OMITTED: &str = "<value omitted>";

fn spec_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Validation on create, and on update with `old` (the stored bundle).
pub(crate) fn validate(new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let signer = spec_str(new, "signerName");
    // (1)
    let mut errs = object_meta_with(new, |name| name_messages(signer, name));
    // (2)
    if !signer.is_empty() {
        errs.extend(signer_name("spec.signerName", signer));
    }
    // (3)
    let bundle = spec_str(new, "trustBundle");
    if old.is_none_or(|o| spec_str(o, "trustBundle") != bundle) {
        errs.extend(trust_bundle(bundle));
    }
    if let Some(old) = old
        && spec_str(old, "signerName") != signer
    {
        errs.push(FieldError::invalid(
            "spec.signerName",
            signer,
            "field is immutable",
        ));
    }
    errs
}

/// (1) `ValidateClusterTrustBundleName`.
fn name_messages(signer: &str, name: &str) -> Vec<String> {
    if signer.is_empty() {
        if name.contains(':') {
            return vec![
                "ClusterTrustBundle without signer name must not have \":\" in its name".into(),
            ];
        }
        return dns1123_subdomain(name);
    }
    let prefix = format!("{}:", signer.replace('/', ":"));
    match name.strip_prefix(&prefix) {
        Some(rest) => dns1123_subdomain(rest),
        None => vec![format!(
            "ClusterTrustBundle for signerName {signer} must be named with prefix {prefix}"
        )],
    }
}

/// (3) `validateTrustBundle`.
fn trust_bundle(bundle: &str) -> Vec<FieldError> {
    if bundle.len() > MAX_TRUST_BUNDLE {
        return vec![FieldError::too_long(TRUST_BUNDLE, MAX_TRUST_BUNDLE)];
    }
    let bad = |why: String| FieldError::invalid(TRUST_BUNDLE, OMITTED, why);
    let mut errs = Vec::new();
    let mut anchors: Vec<(Vec<u8>, Vec<usize>)> = Vec::new();
    for (i, block) in pem_blocks(bundle).into_iter().enumerate() {
        if block.label != "CERTIFICATE" {
            errs.push(bad(format!(
                "entry {i} has bad block type: {}",
                block.label
            )));
            continue;
        }
        if block.has_headers {
            errs.push(bad(format!("entry {i} has PEM block headers")));
            continue;
        }
        let parsed = x509_parser::certificate::X509Certificate::from_der(&block.der)
            .ok()
            .filter(|(rest, _)| rest.is_empty())
            .and_then(|(_, cert)| {
                cert.basic_constraints()
                    .ok()
                    .map(|bc| bc.map(|b| b.value.ca))
            });
        match parsed {
            None => errs.push(bad(format!("entry {i} does not parse as X.509"))),
            Some(None) => errs.push(bad(format!("entry {i} does not have the CA bit set"))),
            Some(Some(false)) => errs.push(bad(format!("entry {i} does not have the CA bit set"))),
            Some(Some(true)) => match anchors.iter_mut().find(|(der, _)| *der == block.der) {
                Some((_, seen)) => seen.push(i),
                None => anchors.push((block.der, vec![i])),
            },
        }
    }
    if !errs.is_empty() {
        return errs;
    }
    if anchors.is_empty() {
        errs.push(bad("at least one trust anchor must be provided".into()));
    }
    for (_, seen) in anchors.iter().filter(|(_, seen)| seen.len() > 1) {
        let list: Vec<String> = seen.iter().map(ToString::to_string).collect();
        errs.push(bad(format!(
            "duplicate trust anchor (indices [{}])",
            list.join(" ")
        )));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn leaf_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    fn bundle(name: &str, signer: Option<&str>, pem: &str) -> Value {
        let mut b = json!({"metadata": {"name": name}, "spec": {"trustBundle": pem}});
        if let Some(s) = signer {
            b["spec"]["signerName"] = json!(s);
        }
        b
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_bundle_of_ca_certificates_is_valid_with_or_without_a_signer() {
        let pem = ca_pem();
        assert!(validate(&bundle("plain", None, &pem), None).is_empty());
        assert!(
            validate(
                &bundle("example.com:foo:x", Some("example.com/foo"), &pem),
                None
            )
            .is_empty()
        );
    }

    #[test]
    fn names_must_carry_the_signer_prefix_and_plain_names_no_colon() {
        let pem = ca_pem();
        assert_eq!(
            messages(&validate(&bundle("x", Some("example.com/foo"), &pem), None)),
            vec![
                "metadata.name: Invalid value: \"x\": ClusterTrustBundle for signerName example.com/foo must be named with prefix example.com:foo:"
            ]
        );
        assert_eq!(
            messages(&validate(&bundle("a:b", None, &pem), None)),
            vec![
                "metadata.name: Invalid value: \"a:b\": ClusterTrustBundle without signer name must not have \":\" in its name"
            ]
        );
    }

    #[test]
    fn leaves_duplicates_headers_and_other_blocks_are_refused_with_their_index() {
        let ca = ca_pem();
        let e = |pem: &str| messages(&validate(&bundle("b", None, pem), None));
        assert_eq!(
            e(&leaf_pem()),
            vec![
                "spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 does not have the CA bit set"
            ]
        );
        assert_eq!(
            e(&format!("{ca}{ca}")),
            vec![
                "spec.trustBundle: Invalid value: \"<value omitted>\": duplicate trust anchor (indices [0 1])"
            ]
        );
        assert_eq!(
            e("-----BEGIN PRIVATE KEY-----\nAQID\n-----END PRIVATE KEY-----\n"),
            vec![
                "spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 has bad block type: PRIVATE KEY"
            ]
        );
        assert_eq!(
            e(""),
            vec![
                "spec.trustBundle: Invalid value: \"<value omitted>\": at least one trust anchor must be provided"
            ]
        );
        let with_header = ca.replacen("-----\n", "-----\nA: b\n", 1);
        assert_eq!(
            e(&with_header),
            vec![
                "spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 has PEM block headers"
            ]
        );
    }

    #[test]
    fn the_signer_name_is_immutable_and_an_unchanged_bundle_is_not_parsed_again() {
        let pem = ca_pem();
        let old = bundle("example.com:foo:x", Some("example.com/foo"), &pem);
        let new = bundle("example.com:foo:x", Some("example.com/bar"), &pem);
        assert!(messages(&validate(&new, Some(&old))).contains(
            &"spec.signerName: Invalid value: \"example.com/bar\": field is immutable".to_string()
        ));
        let junk_old = bundle("j", None, "junk");
        assert!(validate(&bundle("j", None, "junk"), Some(&junk_old)).is_empty());
    }
}

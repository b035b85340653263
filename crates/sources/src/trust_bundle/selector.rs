//! Label selectors of `clusterTrustBundle` projections, as the kubelet reads them (PL-17):
//! no selector matches nothing, an empty one matches everything; `matchLabels` and
//! `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`) must all hold.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::error::TrustBundleError;

/// The longest selector, written out, the kubelet accepts (100 KiB).
pub(crate) const MAX_SELECTOR_LENGTH: usize = 100 * 1024;

/// A parsed label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Selector {
    /// No selector at all (`labelSelector` unset): matches no bundle.
    Nothing,
    /// All requirements must hold; none (an empty selector `{}`) matches every bundle.
    All(Vec<Requirement>),
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Requirement {
    key: String,
    op: Op,
    /// Sorted values (`Equals`: one; `In`/`NotIn`: at least one; else none).
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Equals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    /// The kubelet's `LabelSelectorAsSelector`: `None` → nothing, `{}` → everything.
    ///
    /// # Errors
    /// [`TrustBundleError::InvalidSelector`] for an unknown operator or values that do not fit
    /// it (the kubelet's texts); [`TrustBundleError::SelectorTooLong`] beyond 100 KiB. Key and
    /// value syntax is the API server's validation and is not checked again here.
    pub(crate) fn parse(selector: Option<&LabelSelector>) -> Result<Selector, TrustBundleError> {
        let Some(selector) = selector else {
            return Ok(Selector::Nothing);
        };
        let mut reqs = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            reqs.push(Requirement::new(key, Op::Equals, vec![value.clone()])?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Op::In,
                "NotIn" => Op::NotIn,
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => {
                    return Err(TrustBundleError::InvalidSelector {
                        reason: format!("{other:?} is not a valid label selector operator"),
                    });
                }
            };
            let values = expr.values.clone().unwrap_or_default();
            reqs.push(Requirement::new(&expr.key, op, values)?);
        }
        reqs.sort();
        let parsed = Selector::All(reqs);
        let length = parsed.to_string().len();
        if length > MAX_SELECTOR_LENGTH {
            return Err(TrustBundleError::SelectorTooLong {
                length,
                max: MAX_SELECTOR_LENGTH,
            });
        }
        Ok(parsed)
    }

    /// Whether a bundle with these labels is selected.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::All(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }
}

impl Requirement {
    fn new(key: &str, op: Op, mut values: Vec<String>) -> Result<Requirement, TrustBundleError> {
        let invalid = |detail: &str, values: &[String]| TrustBundleError::InvalidSelector {
            reason: format!("values: Invalid value: {}: {detail}", GoStrings(values)),
        };
        match op {
            Op::In | Op::NotIn if values.is_empty() => {
                return Err(invalid(
                    "for 'in', 'notin' operators, values set can't be empty",
                    &values,
                ));
            }
            Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                return Err(invalid(
                    "values set must be empty for exists and does not exist",
                    &values,
                ));
            }
            _ => {}
        }
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_owned(),
            op,
            values,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            Op::Equals | Op::In => value.is_some_and(|v| self.values.contains(v)),
            Op::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
        }
    }
}

/// The selector written out as the kubelet writes it (`a=b,c in (d,e),!f`), sorted by key:
/// the cache key and what the 100 KiB limit measures. [`Selector::Nothing`] writes as
/// `<nothing>` so it never shares a cache entry with the empty selector.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reqs = match self {
            Selector::Nothing => return f.write_str("<nothing>"),
            Selector::All(reqs) => reqs,
        };
        for (i, r) in reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let values = r.values.join(",");
            match r.op {
                Op::Equals => write!(f, "{}={values}", r.key)?,
                Op::In => write!(f, "{} in ({values})", r.key)?,
                Op::NotIn => write!(f, "{} notin ({values})", r.key)?,
                Op::Exists => f.write_str(&r.key)?,
                Op::DoesNotExist => write!(f, "!{}", r.key)?,
            }
        }
        Ok(())
    }
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
struct GoStrings<'a>(&'a [String]);

impl fmt::Display for GoStrings<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[]string{")?;
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v:?}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_selector_matches_nothing_and_an_empty_one_matches_everything() {
        let nothing = Selector::parse(None).unwrap();
        let everything = Selector::parse(Some(&selector(json!({})))).unwrap();
        for l in [labels(&[]), labels(&[("a", "b")])] {
            assert!(!nothing.matches(&l));
            assert!(everything.matches(&l));
        }
        assert_ne!(nothing.to_string(), everything.to_string(), "cache keys");
        assert_eq!(everything.to_string(), "");
    }

    #[test]
    fn match_labels_and_expressions_must_all_hold() {
        let s = Selector::parse(Some(&selector(json!({
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["x", "y"]},
                {"key": "old", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["z"]},
                {"key": "ca", "operator": "Exists"}]}))))
        .unwrap();
        assert!(s.matches(&labels(&[("team", "a"), ("tier", "y"), ("ca", "")])));
        assert!(!s.matches(&labels(&[("team", "b"), ("tier", "y"), ("ca", "")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("tier", "w"), ("ca", "")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("tier", "x")])));
        assert!(!s.matches(&labels(&[
            ("team", "a"),
            ("tier", "x"),
            ("ca", ""),
            ("old", "1")
        ])));
        assert!(!s.matches(&labels(&[
            ("team", "a"),
            ("tier", "x"),
            ("ca", ""),
            ("zone", "z")
        ])));
        assert_eq!(s.to_string(), "ca,!old,team=a,tier in (x,y),zone notin (z)");
    }

    #[test]
    fn bad_operators_and_values_are_refused_with_the_kubelets_texts() {
        let err = |v| Selector::parse(Some(&selector(v))).unwrap_err().to_string();
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})),
            "while parsing label selector: \"Gt\" is not a valid label selector operator"
        );
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})),
            "while parsing label selector: values: Invalid value: []string{}: \
             for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]})),
            "while parsing label selector: values: Invalid value: []string{\"b\"}: \
             values set must be empty for exists and does not exist"
        );
        let long = "v".repeat(MAX_SELECTOR_LENGTH);
        assert_eq!(
            err(json!({"matchLabels": {"k": long}})),
            format!("label selector length ({}) is larger than 102400", 102_402)
        );
    }
}

//! LIST: snapshots at a resourceVersion, selectors, `limit`/`continue` pagination.

use base64::Engine as _;
use serde_json::{Value, json};

use super::{ListOptions, Registry, parse_rv};
use crate::resources::ResourceId;
use crate::status::{ApiError, FieldError};
use crate::store::Inner;

impl Registry {
    /// LIST objects with selectors, pagination and resourceVersion semantics.
    pub(crate) fn list(
        &self,
        res: ResourceId,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Value, ApiError> {
        let info = res.info();
        let s = self.store.inner.lock();
        // Which snapshot to read, and where to start.
        let (rv, start_after) =
            if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
                if opts
                    .resource_version
                    .as_deref()
                    .is_some_and(|r| !r.is_empty())
                {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, start) = decode_continue(token)?;
                if rv < s.history_start {
                    return Err(ApiError::continue_expired());
                }
                (rv, Some(start))
            } else {
                (read_rv(&s, opts)?, None)
            };
        let mut items = Vec::new();
        let mut next_key = None;
        let mut remaining = 0usize;
        let snapshot = s.snapshot_of(res, ns, opts.fields.exact_name(), rv);
        drop(s);
        // Token positions are `namespace/name`; neither part can contain '/', and they are
        // compared as the (namespace, name) pair the store is sorted by.
        let start_after: Option<(String, String)> =
            start_after.map(|st| match st.split_once('/') {
                Some((n, m)) => (n.to_string(), m.to_string()),
                None => (String::new(), st),
            });
        for (key, obj) in snapshot {
            let pos = format!("{}/{}", key.namespace, key.name);
            if start_after.as_ref().is_some_and(|(sn, sm)| {
                (key.namespace.as_str(), key.name.as_str()) <= (sn.as_str(), sm.as_str())
            }) {
                continue;
            }
            if !opts.labels.matches(&obj) || !opts.fields.matches(info, &obj) {
                continue;
            }
            if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                remaining += 1;
                continue;
            }
            next_key = Some(pos);
            let mut item = (*obj).clone();
            if let Some(m) = item.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            items.push(item);
        }
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if remaining > 0
            && let Some(k) = next_key
        {
            metadata["continue"] = json!(encode_continue(rv, &k));
            if opts.labels.is_empty() && opts.fields.is_empty() {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": info.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }
}

/// The snapshot rv a list without a continue token reads at.
fn read_rv(s: &Inner, opts: &ListOptions) -> Result<u64, ApiError> {
    let rv = opts.resource_version.as_deref().filter(|r| !r.is_empty());
    let rv_match = opts
        .resource_version_match
        .as_deref()
        .filter(|r| !r.is_empty());
    match (rv, rv_match) {
        (None, None) => Ok(s.rv),
        (None, Some(_)) => Err(ApiError::invalid_list_options(&[FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )])),
        (Some(r), Some("Exact")) => {
            let r = parse_rv(r)?;
            if r == 0 {
                return Err(ApiError::invalid_list_options(&[FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                )]));
            }
            if r > s.rv {
                return Err(ApiError::too_large(r, s.rv));
            }
            if r < s.history_start {
                return Err(ApiError::too_old(r, s.history_start));
            }
            Ok(r)
        }
        (Some(r), None | Some("NotOlderThan")) => {
            let r = parse_rv(r)?;
            if r > s.rv {
                return Err(ApiError::too_large(r, s.rv));
            }
            Ok(s.rv)
        }
        (Some(_), Some(other)) => Err(ApiError::invalid_list_options(&[
            FieldError::not_supported(
                "resourceVersionMatch",
                other,
                &["Exact", "NotOlderThan", ""],
            ),
        ])),
    }
}

fn encode_continue(rv: u64, start: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(bad)?
        .to_string();
    Ok((rv, start))
}

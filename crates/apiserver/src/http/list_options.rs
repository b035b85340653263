//! Query parameters of `list` and `watch` requests (`labelSelector`, `fieldSelector`, `limit`,
//! `continue`, `resourceVersion`, `resourceVersionMatch`), shared by the list handler and
//! watches.

use super::request_info::RequestInfo;
use crate::objects::selectors::{FieldSelector, LabelSelector};
use crate::registry::ListOptions;
use crate::resources::ResourceId;
use crate::status::{ApiError, FieldError};

/// The [`ListOptions`] of a `list` or `watch` request for `res`.
pub(crate) fn list_options(info: &RequestInfo, res: ResourceId) -> Result<ListOptions, ApiError> {
    let q = &info.query;
    let limit = match q.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    if q.get("sendInitialEvents").is_some_and(|v| v == "true") {
        return Err(ApiError::invalid_list_options(&[FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        )]));
    }
    Ok(ListOptions {
        labels: LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(
            q.get("fieldSelector").map_or("", String::as_str),
            res.info(),
        )?,
        limit,
        continue_token: q.get("continue").cloned(),
        resource_version: q.get("resourceVersion").cloned(),
        resource_version_match: q.get("resourceVersionMatch").cloned(),
    })
}

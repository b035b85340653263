//! `PodLogOptions` from the query of `GET pods/{name}/log`, as kube-apiserver decodes and
//! validates them: (1) decode (Go's conversion from URL values; a bad number or time is a 400
//! with `strconv.ParseInt` / `time.Parse` text), (2) validate (`ValidatePodLogOptions`: a 422
//! `PodLogOptions "p" is invalid: ...`), (3) the query forwarded to the kubelet's
//! `/containerLogs/...`, keys sorted and escaped as Go's `url.Values.Encode`.
//!
//! The `PodLogsQuerySplitStreams` gate is off in v1.36 (alpha), so `stream` is refused.

use std::collections::HashMap;

use chrono::{DateTime, FixedOffset, NaiveDate, TimeZone as _, Utc};

use crate::status::{ApiError, FieldError};

/// The layout Go names `time.RFC3339`, as its parse errors quote it.
const RFC3339: &str = "2006-01-02T15:04:05Z07:00";

/// Decoded log options (upstream `core.PodLogOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogOptions {
    /// The container asked for; `None` when absent or empty.
    pub(crate) container: Option<String>,
    follow: bool,
    previous: bool,
    since_seconds: Option<i64>,
    since_time: Option<DateTime<Utc>>,
    timestamps: bool,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
    /// Upstream picks a transport that skips verifying the kubelet's certificate; this
    /// server never verifies it, so the flag changes nothing here.
    pub(crate) insecure_skip_tls_verify_backend: bool,
    stream: Option<String>,
}

impl LogOptions {
    /// (1) Decodes the query as Go's conversion from URL values does (fields in struct order,
    /// the first error wins).
    ///
    /// # Errors
    /// A 400 `BadRequest` with Go's text for a value that is not a number or an RFC 3339 time.
    pub(crate) fn decode(query: &HashMap<String, String>) -> Result<LogOptions, ApiError> {
        let q = |k: &str| query.get(k).map(String::as_str);
        let flag = |k: &str| q(k).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        let int = |k: &str| q(k).map(parse_int).transpose();
        Ok(LogOptions {
            container: q("container").filter(|c| !c.is_empty()).map(String::from),
            follow: flag("follow"),
            previous: flag("previous"),
            since_seconds: int("sinceSeconds").map_err(ApiError::bad_request)?,
            since_time: q("sinceTime")
                .map(parse_query_time)
                .transpose()
                .map_err(ApiError::bad_request)?,
            timestamps: flag("timestamps"),
            tail_lines: int("tailLines").map_err(ApiError::bad_request)?,
            limit_bytes: int("limitBytes").map_err(ApiError::bad_request)?,
            insecure_skip_tls_verify_backend: flag("insecureSkipTLSVerifyBackend"),
            stream: q("stream").map(String::from),
        })
    }

    /// (2) `ValidatePodLogOptions` with stream selection off.
    ///
    /// # Errors
    /// A 422 `Invalid` naming kind `PodLogOptions` and the pod `name`.
    pub(crate) fn validate(&self, name: &str) -> Result<(), ApiError> {
        let mut errs = Vec::new();
        if let Some(t) = self.tail_lines.filter(|t| *t < 0) {
            errs.push(FieldError::invalid_raw(
                "tailLines",
                t.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(b) = self.limit_bytes.filter(|b| *b < 1) {
            errs.push(FieldError::invalid_raw(
                "limitBytes",
                b.to_string(),
                "must be greater than 0",
            ));
        }
        match (self.since_seconds, self.since_time) {
            (Some(_), Some(_)) => errs.push(FieldError::forbidden(
                // Go's `field.NewPath("")` prints as `[]`.
                "[]",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(s), None) if s < 1 => errs.push(FieldError::invalid_raw(
                "sinceSeconds",
                s.to_string(),
                "must be greater than 0",
            )),
            _ => {}
        }
        if self.stream.is_some() {
            errs.push(FieldError::forbidden("stream", "may not be specified"));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_options("PodLogOptions", name, &errs))
        }
    }

    /// (3) The kubelet's query: what is set, keys sorted, values escaped (`url.Values.Encode`);
    /// empty when nothing is.
    pub(crate) fn kubelet_query(&self) -> String {
        let mut params: Vec<(&str, String)> = Vec::new();
        if self.follow {
            params.push(("follow", "true".into()));
        }
        if self.previous {
            params.push(("previous", "true".into()));
        }
        if self.timestamps {
            params.push(("timestamps", "true".into()));
        }
        if let Some(s) = self.since_seconds {
            params.push(("sinceSeconds", s.to_string()));
        }
        if let Some(t) = self.since_time {
            params.push((
                "sinceTime",
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ));
        }
        if let Some(t) = self.tail_lines {
            params.push(("tailLines", t.to_string()));
        }
        if let Some(b) = self.limit_bytes {
            params.push(("limitBytes", b.to_string()));
        }
        params.sort_by(|a, b| a.0.cmp(b.0));
        params
            .iter()
            .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`, with its error text.
fn parse_int(s: &str) -> Result<i64, String> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!(
            "strconv.ParseInt: parsing {}: {why}",
            nodelet_core::go::quote(s)
        )
    })
}

/// `metav1.Time.UnmarshalQueryParameter`: empty or `null` is the zero time, else Go's
/// `time.Parse(time.RFC3339, s)`.
fn parse_query_time(s: &str) -> Result<DateTime<Utc>, String> {
    if s.is_empty() || s == "null" {
        return Utc
            .with_ymd_and_hms(1, 1, 1, 0, 0, 0)
            .single()
            .ok_or_else(|| "the zero time".to_string());
    }
    parse_rfc3339(s).map(|t| t.with_timezone(&Utc))
}

/// Go's `time.Parse` with the RFC 3339 layout, element by element, with its error texts:
/// `parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006"`,
/// `parsing time "...": month out of range`, `...: extra text: "..."`.
fn parse_rfc3339(value: &str) -> Result<DateTime<FixedOffset>, String> {
    let cannot = |rest: &str, elem: &str| {
        format!(
            "parsing time {} as {}: cannot parse {} as {}",
            nodelet_core::go::quote(value),
            nodelet_core::go::quote(RFC3339),
            nodelet_core::go::quote(rest),
            nodelet_core::go::quote(elem)
        )
    };
    let out_of_range = |what: &str| {
        format!(
            "parsing time {}: {what} out of range",
            nodelet_core::go::quote(value)
        )
    };
    let mut rest = value;
    let lit = |rest: &mut &str, sep: char| -> Result<(), String> {
        match rest.strip_prefix(sep) {
            Some(r) => {
                *rest = r;
                Ok(())
            }
            None => Err(cannot(rest, &sep.to_string())),
        }
    };
    // "2006": four characters, the first a digit, all of them a number.
    let year = match rest.get(..4) {
        Some(p) if p.starts_with(|c: char| c.is_ascii_digit()) => {
            p.parse::<i32>().map_err(|_| cannot(rest, "2006"))?
        }
        _ => return Err(cannot(rest, "2006")),
    };
    rest = &rest[4..];
    lit(&mut rest, '-')?;
    let month = two_digits(&mut rest).ok_or_else(|| cannot(rest, "01"))?;
    if !(1..=12).contains(&month) {
        return Err(out_of_range("month"));
    }
    lit(&mut rest, '-')?;
    let day = two_digits(&mut rest).ok_or_else(|| cannot(rest, "02"))?;
    lit(&mut rest, 'T')?;
    let hour = one_or_two_digits(&mut rest).ok_or_else(|| cannot(rest, "15"))?;
    if hour >= 24 {
        return Err(out_of_range("hour"));
    }
    lit(&mut rest, ':')?;
    let minute = two_digits(&mut rest).ok_or_else(|| cannot(rest, "04"))?;
    if minute >= 60 {
        return Err(out_of_range("minute"));
    }
    lit(&mut rest, ':')?;
    let second = two_digits(&mut rest).ok_or_else(|| cannot(rest, "05"))?;
    if second >= 60 {
        return Err(out_of_range("second"));
    }
    // A fractional second the layout does not name is still accepted.
    let mut nanos = 0u32;
    if rest.len() >= 2
        && rest.starts_with(['.', ','])
        && rest[1..].starts_with(|c: char| c.is_ascii_digit())
    {
        let digits: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
        rest = &rest[1 + digits.len()..];
        let nine: String = digits
            .chars()
            .chain(std::iter::repeat('0'))
            .take(9)
            .collect();
        nanos = nine.parse().unwrap_or(0);
    }
    // "Z07:00": `Z`, or a sign, two digits, `:`, two digits.
    let offset = if let Some(r) = rest.strip_prefix('Z') {
        rest = r;
        0
    } else {
        let zone = rest;
        let b = zone.as_bytes();
        if b.len() < 6 || b[3] != b':' {
            return Err(cannot(zone, "Z07:00"));
        }
        let mut h = &zone[1..3];
        let mut m = &zone[4..6];
        let (Some(hh), Some(mm)) = (two_digits(&mut h), two_digits(&mut m)) else {
            return Err(cannot(zone, "Z07:00"));
        };
        if hh > 24 {
            return Err(out_of_range("time zone offset hour"));
        }
        if mm > 60 {
            return Err(out_of_range("time zone offset minute"));
        }
        let secs = i32::try_from((hh * 60 + mm) * 60).unwrap_or(0);
        rest = &zone[6..];
        match b[0] {
            b'+' => secs,
            b'-' => -secs,
            _ => return Err(cannot(zone, "Z07:00")),
        }
    };
    if !rest.is_empty() {
        return Err(format!(
            "parsing time {}: extra text: {}",
            nodelet_core::go::quote(value),
            nodelet_core::go::quote(rest)
        ));
    }
    let date = NaiveDate::from_ymd_opt(year, month, day).ok_or_else(|| out_of_range("day"))?;
    let naive = date
        .and_hms_nano_opt(hour, minute, second, nanos)
        .ok_or_else(|| out_of_range("second"))?;
    let zone =
        FixedOffset::east_opt(offset).ok_or_else(|| out_of_range("time zone offset hour"))?;
    zone.from_local_datetime(&naive)
        .single()
        .ok_or_else(|| cannot(value, RFC3339))
}

/// Exactly two ASCII digits (Go's `getnum(s, true)`), consumed from `s`.
fn two_digits(s: &mut &str) -> Option<u32> {
    let b = s.as_bytes();
    if b.len() < 2 || !b[0].is_ascii_digit() || !b[1].is_ascii_digit() {
        return None;
    }
    *s = &s[2..];
    Some(u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0'))
}

/// One or two ASCII digits (Go's `getnum(s, false)`), consumed from `s`.
fn one_or_two_digits(s: &mut &str) -> Option<u32> {
    let b = s.as_bytes();
    match (b.first(), b.get(1)) {
        (Some(d0), Some(d1)) if d0.is_ascii_digit() && d1.is_ascii_digit() => {
            *s = &s[2..];
            Some(u32::from(d0 - b'0') * 10 + u32::from(d1 - b'0'))
        }
        (Some(d0), _) if d0.is_ascii_digit() => {
            *s = &s[1..];
            Some(u32::from(d0 - b'0'))
        }
        _ => None,
    }
}

/// Go's `url.QueryEscape`: unreserved bytes kept, space as `+`, the rest `%XX`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(q: &[(&str, &str)]) -> Result<LogOptions, ApiError> {
        let map = q
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        LogOptions::decode(&map)
    }

    #[test]
    fn the_kubelet_query_holds_what_is_set_sorted_and_escaped_as_go_encodes_it() {
        let o = opts(&[
            ("tailLines", "10"),
            ("follow", "true"),
            ("timestamps", "1"),
            ("previous", "false"),
            ("sinceTime", "2024-05-06T07:08:09+02:00"),
            ("container", "c"),
        ])
        .unwrap();
        assert_eq!(
            o.kubelet_query(),
            "follow=true&sinceTime=2024-05-06T05%3A08%3A09Z&tailLines=10&timestamps=true"
        );
        assert_eq!(o.container.as_deref(), Some("c"));
        assert_eq!(opts(&[]).unwrap().kubelet_query(), "");
    }

    #[test]
    fn a_bad_number_is_a_bad_request_with_go_parse_int_text() {
        let e = opts(&[("tailLines", "ten")]).unwrap_err();
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.message(),
            "strconv.ParseInt: parsing \"ten\": invalid syntax"
        );
        let e = opts(&[("limitBytes", "99999999999999999999")]).unwrap_err();
        assert_eq!(
            e.message(),
            "strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
    }

    #[test]
    fn a_bad_time_is_a_bad_request_with_go_time_parse_text() {
        let e = opts(&[("sinceTime", "yesterday")]).unwrap_err();
        assert_eq!(
            e.message(),
            "parsing time \"yesterday\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"yesterday\" as \"2006\""
        );
        let e = opts(&[("sinceTime", "2024-05-06 07:08:09Z")]).unwrap_err();
        assert_eq!(
            e.message(),
            "parsing time \"2024-05-06 07:08:09Z\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \" 07:08:09Z\" as \"T\""
        );
        let e = opts(&[("sinceTime", "2024-13-06T07:08:09Z")]).unwrap_err();
        assert_eq!(
            e.message(),
            "parsing time \"2024-13-06T07:08:09Z\": month out of range"
        );
        let e = opts(&[("sinceTime", "2024-02-30T07:08:09Z")]).unwrap_err();
        assert_eq!(
            e.message(),
            "parsing time \"2024-02-30T07:08:09Z\": day out of range"
        );
        let e = opts(&[("sinceTime", "2024-02-03T07:08:09Zx")]).unwrap_err();
        assert_eq!(
            e.message(),
            "parsing time \"2024-02-03T07:08:09Zx\": extra text: \"x\""
        );
        assert!(opts(&[("sinceTime", "2024-02-03T07:08:09.123456Z")]).is_ok());
    }

    #[test]
    fn invalid_options_are_unprocessable_with_the_upstream_texts() {
        let o = opts(&[("tailLines", "-1"), ("limitBytes", "0")]).unwrap();
        let e = o.validate("p").unwrap_err();
        assert_eq!(e.code(), 422);
        assert_eq!(
            e.message(),
            "PodLogOptions \"p\" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: 0: must be greater than 0]"
        );
        let o = opts(&[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")]).unwrap();
        assert_eq!(
            o.validate("p").unwrap_err().message(),
            "PodLogOptions \"p\" is invalid: []: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        );
        let o = opts(&[("sinceSeconds", "0")]).unwrap();
        assert_eq!(
            o.validate("p").unwrap_err().message(),
            "PodLogOptions \"p\" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0"
        );
        let o = opts(&[("stream", "Stdout")]).unwrap();
        assert_eq!(
            o.validate("p").unwrap_err().message(),
            "PodLogOptions \"p\" is invalid: stream: Forbidden: may not be specified"
        );
        assert!(opts(&[("tailLines", "0")]).unwrap().validate("p").is_ok());
    }

    #[test]
    fn an_empty_since_time_is_the_zero_time_as_go_decodes_it() {
        let o = opts(&[("sinceTime", "")]).unwrap();
        assert_eq!(o.kubelet_query(), "sinceTime=0001-01-01T00%3A00%3A00Z");
    }
}

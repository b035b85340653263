//! `GET /containerLogs/{namespace}/{pod}/{container}`: a container's log, as the v1.36
//! kubelet serves it (`getContainerLogs`, `GetKubeletContainerLogs`).
//!
//! 1. The query is read as `PodLogOptions` (v1): `follow`, `previous`, `timestamps` (absent,
//!    `0` or `false` in any case is false, any other value true), `sinceSeconds`, `tailLines`,
//!    `limitBytes` (integers), `sinceTime` (RFC 3339), `stream`; `tail=N` stands for
//!    `tailLines=N` (`tail=all` for none). A value that does not parse: `400
//!    {"message": "Unable to decode query."}`.
//! 2. Validated: `tailLines` ≥ 0, `limitBytes` ≥ 1, `sinceSeconds` ≥ 1, not both `sinceSeconds`
//!    and `sinceTime`, `stream` one of `All`, `Stdout`, `Stderr` and not with `tailLines`
//!    unless `All`; else `422 {"message": "Invalid request."}`. A `stream` other than `All`
//!    is `400` (`PodLogsQuerySplitStreams`, alpha and off in v1.36).
//! 3. `404 pod "<name>" does not exist` for a pod the agent does not run, `404 container "<c>"
//!    not found in pod "<name>"` for a container its spec does not have.
//! 4. The instance to read is chosen from the container's status as the kubelet's
//!    `validateContainerLogStatus` does ([`instance`]); a container without one is `400` with
//!    the kubelet's text.
//! 5. From here the answer is `200` and streamed, chunk by chunk, as `read_logs` writes it; a
//!    failure after this point (the log file is gone) ends the body with its text, as the
//!    kubelet's does. With `follow`, the stream ends once that instance has ended and its
//!    log is read to the end, when the client goes away, or when the agent stops.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use chrono::{DateTime, TimeDelta, Utc};
use nodelet_core::runtime::{ContainerState, ContainerStatus};
use nodelet_runtime::logs::{self, LogError, ReadOptions};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use super::state::{ApiState, TEXT_PLAIN, text};

/// The size of the pipe between the log reader and the response body.
const PIPE_SIZE: usize = 64 * 1024;
/// The largest piece of the response body.
const CHUNK_SIZE: usize = 32 * 1024;

/// The kubelet's answer to a query it cannot decode.
const DECODE_ERROR: &str = r#"{"message": "Unable to decode query."}"#;
/// The kubelet's answer to options that do not validate.
const INVALID_ERROR: &str = r#"{"message": "Invalid request."}"#;

/// The `PodLogOptions` of a request, as decoded (step 1).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct LogQuery {
    follow: bool,
    previous: bool,
    timestamps: bool,
    since_seconds: Option<i64>,
    /// `sinceTime`; an empty value or `null` is the zero time (`DateTime::<Utc>::MIN_UTC`).
    since_time: Option<DateTime<Utc>>,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
    stream: Option<String>,
}

/// The handler.
pub(super) async fn container_logs(
    State(state): State<Arc<ApiState>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    // (1), (2)
    let Ok(Query(pairs)) = query else {
        return text(StatusCode::BAD_REQUEST, DECODE_ERROR);
    };
    let options = match LogQuery::parse(&pairs) {
        Ok(options) => options,
        Err((status, message)) => return text(status, message),
    };
    // (3)
    let Some(pod) = state.pods.find(&namespace, &pod_name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {pod_name:?} does not exist"),
        );
    };
    let in_spec = pod.spec.as_ref().is_some_and(|spec| {
        let init = spec.init_containers.iter().flatten().map(|c| &c.name);
        let ephemeral = spec.ephemeral_containers.iter().flatten().map(|c| &c.name);
        spec.containers
            .iter()
            .map(|c| &c.name)
            .chain(init)
            .chain(ephemeral)
            .any(|name| *name == container)
    });
    if !in_spec {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    // (4)
    let statuses = state.pods.statuses_of(&pod);
    let restart_count = match instance(pod.name(), &container, &statuses, options.previous) {
        Ok(n) => n,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    // (5)
    let path = state.pods.log_path(&pod, &container, restart_count);
    let read = options.read_options(Utc::now());
    let ended = state
        .pods
        .instance_ended(pod.uid().clone(), container, restart_count);
    stream(&state, path, read, ended)
}

impl LogQuery {
    /// Decodes and validates `pairs` (steps 1 and 2).
    ///
    /// # Errors
    /// The kubelet's answer: its status and text.
    fn parse(pairs: &[(String, String)]) -> Result<Self, (StatusCode, String)> {
        let decode_error = || (StatusCode::BAD_REQUEST, DECODE_ERROR.to_owned());
        let first = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let flag =
            |key: &str| first(key).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        let integer = |value: Option<&str>| value.map(str::parse::<i64>).transpose();
        let tail_lines = match first("tail").filter(|t| !t.is_empty()) {
            Some("all") => None,
            Some(tail) => Some(tail),
            None => first("tailLines"),
        };
        let since_time = match first("sinceTime") {
            None => None,
            Some("" | "null") => Some(DateTime::<Utc>::MIN_UTC),
            Some(time) => Some(
                DateTime::parse_from_rfc3339(time)
                    .map_err(|_| decode_error())?
                    .with_timezone(&Utc),
            ),
        };
        let query = Self {
            follow: flag("follow"),
            previous: flag("previous"),
            timestamps: flag("timestamps"),
            since_seconds: integer(first("sinceSeconds")).map_err(|_| decode_error())?,
            since_time,
            tail_lines: integer(tail_lines).map_err(|_| decode_error())?,
            limit_bytes: integer(first("limitBytes")).map_err(|_| decode_error())?,
            stream: first("stream").map(str::to_owned),
        };
        if !query.is_valid() {
            return Err((StatusCode::UNPROCESSABLE_ENTITY, INVALID_ERROR.to_owned()));
        }
        match query.stream.as_deref() {
            None | Some("All") => Ok(query),
            Some(stream) => Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "unable to return the given log stream: {stream:?}. Please enable PodLogsQuerySplitStreams feature gate in kubelet"
                ),
            )),
        }
    }

    /// The kubelet's `ValidatePodLogOptions`.
    fn is_valid(&self) -> bool {
        let since = match (self.since_seconds, self.since_time) {
            (Some(_), Some(_)) => false,
            (Some(seconds), None) => seconds >= 1,
            (None, _) => true,
        };
        let stream = match self.stream.as_deref() {
            None => true,
            Some("All") => true,
            Some("Stdout" | "Stderr") => self.tail_lines.is_none(),
            Some(_) => false,
        };
        self.tail_lines.is_none_or(|n| n >= 0)
            && self.limit_bytes.is_none_or(|n| n >= 1)
            && since
            && stream
    }

    /// What to read, `now` being the time of the request: the later of `now - sinceSeconds`
    /// and `sinceTime`.
    fn read_options(&self, now: DateTime<Utc>) -> ReadOptions {
        let after_seconds = self.since_seconds.map(|s| {
            TimeDelta::try_seconds(s)
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        });
        let since = after_seconds
            .into_iter()
            .chain(self.since_time)
            .max()
            .filter(|t| *t > DateTime::<Utc>::MIN_UTC);
        ReadOptions {
            follow: self.follow,
            tail_lines: self
                .tail_lines
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            timestamps: self.timestamps,
            since,
            limit_bytes: self.limit_bytes.and_then(|n| u64::try_from(n).ok()),
            stream: None,
        }
    }
}

/// The restart count of the instance of `container` whose log a request reads (step 4), as
/// the kubelet's `validateContainerLogStatus` chooses it: with `previous` the instance its
/// last termination describes; else a running or terminated current instance, else (waiting
/// for a restart) the last one that ran.
///
/// # Errors
/// The kubelet's text (`pod_name` without its namespace) when there is no such instance.
fn instance(
    pod_name: &str,
    container: &str,
    statuses: &[ContainerStatus],
    previous: bool,
) -> Result<u32, String> {
    let Some(status) = statuses.iter().find(|s| s.name == container) else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    // While waiting for a restart the last termination is of the newest instance; otherwise
    // of the one before it.
    let waiting = matches!(status.state, ContainerState::Waiting { .. });
    let last = status.last_state.as_ref().and(if waiting {
        Some(status.restart_count)
    } else {
        status.restart_count.checked_sub(1)
    });
    if previous {
        return last.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    match &status.state {
        ContainerState::Running { .. } => Ok(status.restart_count),
        ContainerState::Terminated(_) if !status.container_id.is_empty() => {
            Ok(status.restart_count)
        }
        ContainerState::Terminated(_) => {
            last.ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is terminated"))
        }
        ContainerState::Waiting { reason, .. } => last.ok_or_else(|| {
            let why = match reason.as_str() {
                "ErrImagePull" => "image can't be pulled",
                "ImagePullBackOff" => "trying and failing to pull image",
                other => other,
            };
            format!("container {container:?} in pod {pod_name:?} is waiting to start: {why}")
        }),
    }
}

/// A `200` whose body is the log at `path` read with `options` (step 5). The reader is a task
/// of the agent's tracker; it stops when the body is dropped (the client went away) or the
/// agent stops.
fn stream(
    state: &ApiState,
    path: PathBuf,
    options: ReadOptions,
    ended: impl Future<Output = ()> + Send + 'static,
) -> Response {
    let (mut writer, reader) = tokio::io::duplex(PIPE_SIZE);
    let body_dropped = CancellationToken::new();
    let guard = body_dropped.clone().drop_guard();
    let shutdown = state.shutdown.clone();
    state.tracker.spawn(async move {
        let read = logs::read_logs(&path, &options, ended, &mut writer);
        let result = tokio::select! {
            result = read => result,
            () = body_dropped.cancelled() => return,
            () = shutdown.cancelled() => return,
        };
        let failure = match result {
            Ok(_) | Err(LogError::WriteOutput { .. }) => None,
            Err(LogError::Open { path, source }) => Some(format!(
                "failed to open log file {:?}: {source}",
                path.display().to_string()
            )),
            Err(error) => Some(error.to_string()),
        };
        if let Some(failure) = failure {
            tracing::debug!(path = %path.display(), %failure, "container log not read");
            let _ = writer.write_all(failure.as_bytes()).await;
        }
        let _ = writer.shutdown().await;
    });
    let chunks = futures::stream::unfold(
        (reader, guard, vec![0; CHUNK_SIZE]),
        |(mut reader, guard, mut buffer)| async move {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => None,
                Ok(n) => {
                    let chunk = Bytes::copy_from_slice(&buffer[..n]);
                    Some((Ok::<_, std::io::Error>(chunk), (reader, guard, buffer)))
                }
            }
        },
    );
    let mut response = Response::new(Body::from_stream(chunks));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(TEXT_PLAIN),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    use nodelet_core::runtime::Termination;

    fn pairs(query: &str) -> Vec<(String, String)> {
        query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (p.to_owned(), String::new()),
            })
            .collect()
    }

    fn parsed(query: &str) -> LogQuery {
        LogQuery::parse(&pairs(query)).unwrap()
    }

    fn refused(query: &str) -> (StatusCode, String) {
        LogQuery::parse(&pairs(query)).unwrap_err()
    }

    #[test]
    fn flags_are_false_only_when_absent_zero_or_false() {
        assert!(!parsed("").follow);
        assert!(parsed("follow=true").follow);
        assert!(parsed("follow").follow);
        assert!(parsed("follow=yes").follow);
        assert!(!parsed("follow=0").follow);
        assert!(!parsed("follow=FALSE").follow);
        assert!(parsed("previous=1&timestamps=1").previous);
        assert!(parsed("previous=1&timestamps=1").timestamps);
        // The first value counts.
        assert!(!parsed("follow=false&follow=true").follow);
    }

    #[test]
    fn tail_stands_for_tail_lines_and_all_for_none() {
        assert_eq!(parsed("tailLines=3").tail_lines, Some(3));
        assert_eq!(parsed("tail=2&tailLines=3").tail_lines, Some(2));
        assert_eq!(parsed("tail=all&tailLines=3").tail_lines, None);
        assert_eq!(parsed("tail=&tailLines=3").tail_lines, Some(3));
    }

    #[test]
    fn values_that_do_not_decode_are_a_400_with_the_kubelets_text() {
        for query in [
            "tailLines=x",
            "tailLines=",
            "limitBytes=1.5",
            "sinceSeconds=ten",
            "sinceTime=yesterday",
        ] {
            assert_eq!(
                refused(query),
                (StatusCode::BAD_REQUEST, DECODE_ERROR.to_owned()),
                "{query}"
            );
        }
    }

    #[test]
    fn options_that_do_not_validate_are_a_422_with_the_kubelets_text() {
        for query in [
            "tailLines=-1",
            "limitBytes=0",
            "sinceSeconds=0",
            "sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z",
            "sinceSeconds=5&sinceTime=",
            "stream=Both",
            "stream=Stdout&tailLines=1",
        ] {
            assert_eq!(
                refused(query),
                (StatusCode::UNPROCESSABLE_ENTITY, INVALID_ERROR.to_owned()),
                "{query}"
            );
        }
        assert_eq!(parsed("tailLines=0").tail_lines, Some(0));
        assert_eq!(parsed("stream=All&tailLines=1").tail_lines, Some(1));
    }

    #[test]
    fn a_single_stream_needs_the_split_streams_gate() {
        assert_eq!(
            refused("stream=Stderr"),
            (
                StatusCode::BAD_REQUEST,
                "unable to return the given log stream: \"Stderr\". Please enable PodLogsQuerySplitStreams feature gate in kubelet"
                    .to_owned()
            )
        );
    }

    #[test]
    fn since_is_the_later_of_since_seconds_and_since_time() {
        let now = DateTime::parse_from_rfc3339("2024-01-01T00:01:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let since = |query| parsed(query).read_options(now).since;
        assert_eq!(since("sinceSeconds=60"), Some(now - TimeDelta::seconds(60)));
        assert_eq!(
            since("sinceTime=2024-01-01T01:00:00+01:00"),
            Some(now - TimeDelta::seconds(60))
        );
        assert_eq!(since("sinceTime="), None);
        assert_eq!(since("sinceSeconds=9223372036854775807"), None);
        assert_eq!(since(""), None);
        let options = parsed("tailLines=2&limitBytes=5&timestamps&follow").read_options(now);
        assert_eq!(
            options,
            ReadOptions {
                follow: true,
                tail_lines: Some(2),
                timestamps: true,
                since: None,
                limit_bytes: Some(5),
                stream: None,
            }
        );
    }

    fn status(state: ContainerState, last: bool, restart_count: u32) -> ContainerStatus {
        let termination = Termination {
            exit_code: 1,
            signal: None,
            reason: "Error".into(),
            message: None,
            started_at: SystemTime::UNIX_EPOCH,
            finished_at: SystemTime::UNIX_EPOCH,
        };
        ContainerStatus {
            name: "app".into(),
            state,
            last_state: last.then_some(termination),
            restart_count,
            container_id: "nodelet://1".into(),
        }
    }

    #[test]
    fn the_instance_read_follows_the_kubelets_choice() {
        let running = ContainerState::Running {
            started_at: SystemTime::UNIX_EPOCH,
        };
        let back_off = ContainerState::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: None,
        };
        let choose = |s: ContainerStatus, previous| instance("web", "app", &[s], previous);
        assert_eq!(choose(status(running.clone(), false, 0), false), Ok(0));
        assert_eq!(choose(status(running.clone(), true, 2), false), Ok(2));
        assert_eq!(choose(status(running.clone(), true, 2), true), Ok(1));
        assert_eq!(
            choose(status(running, false, 0), true),
            Err(r#"previous terminated container "app" in pod "web" not found"#.into())
        );
        // In a crash loop, current and previous are both the instance that ended last.
        assert_eq!(choose(status(back_off.clone(), true, 3), false), Ok(3));
        assert_eq!(choose(status(back_off, true, 3), true), Ok(3));
        let never_started = ContainerState::Waiting {
            reason: "ErrImageNeverPull".into(),
            message: None,
        };
        assert_eq!(
            choose(status(never_started, false, 0), false),
            Err(r#"container "app" in pod "web" is waiting to start: ErrImageNeverPull"#.into())
        );
        let pulling = ContainerState::Waiting {
            reason: "ErrImagePull".into(),
            message: None,
        };
        assert_eq!(
            choose(status(pulling, false, 0), false),
            Err(
                r#"container "app" in pod "web" is waiting to start: image can't be pulled"#.into()
            )
        );
        assert_eq!(
            instance("web", "other", &[], false),
            Err(r#"container "other" in pod "web" is not available"#.into())
        );
    }
}

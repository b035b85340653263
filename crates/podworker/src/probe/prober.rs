//! One probe run (the kubelet's `prober.probe`): the handler's check, retried on errors, and
//! the events a kubelet records for it (PW-32).

use k8s_openapi::api::core::v1::Container;
use nodelet_core::{AdmittedPod, EventType};
use nodelet_runtime::handlers::{ExecError, HttpError, HttpGet, resolve_container_port};

use super::shared::Shared;
use super::types::{Handler, ProbeKind, ProbeResult, ProbeSpec, Verdict};
use super::{grpc, tcp};

/// How often a check that errs (it could not even be made) is tried in one probe.
const MAX_RETRIES: usize = 3;

/// How much of a command's output a probe keeps (the kubelet's 10 KiB).
const MAX_OUTPUT: usize = 10 * 1024;

/// A check that could not be made; `Display` is the kubelet's text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// The port (or the URL made with it) is not valid.
    #[error(transparent)]
    Http(HttpError),
    /// The port is not valid.
    #[error(transparent)]
    Port(#[from] nodelet_runtime::handlers::PortError),
    /// The command could not be run.
    #[error(transparent)]
    Exec(ExecError),
    /// The probe sets no handler.
    #[error("missing probe handler for {pod}:{container}")]
    MissingHandler { pod: String, container: String },
}

/// Runs `spec`'s check of `container` (up to three times while it errs) and records the
/// kubelet's event: Warning `Unhealthy` `<Kind> probe failed: <output>` on a failure,
/// `ProbeWarning` `<Kind> probe warning: <output>` on a warning (a success), `Unhealthy`
/// `<Kind> probe errored and resulted in unknown state: <error>` when it never could be made.
/// `None` in that last case: the result is thrown away.
pub(crate) async fn probe(
    shared: &Shared,
    kind: ProbeKind,
    pod: &AdmittedPod,
    container: &Container,
    spec: &ProbeSpec,
) -> Option<ProbeResult> {
    let mut outcome = check(shared, pod, container, spec).await;
    for _ in 1..MAX_RETRIES {
        if outcome.is_ok() {
            break;
        }
        outcome = check(shared, pod, container, spec).await;
    }
    let event = |reason: &str, message: String| {
        shared
            .events
            .event(pod, EventType::Warning, reason, message);
    };
    match outcome {
        Ok(Verdict::Success) => Some(ProbeResult::Success),
        Ok(Verdict::Warning(output)) => {
            event(
                reasons::PROBE_WARNING,
                format!("{kind} probe warning: {output}"),
            );
            Some(ProbeResult::Success)
        }
        Ok(Verdict::Failure(output)) => {
            event(reasons::UNHEALTHY, format!("{kind} probe failed: {output}"));
            Some(ProbeResult::Failure)
        }
        Err(error) => {
            event(
                reasons::UNHEALTHY,
                format!("{kind} probe errored and resulted in unknown state: {error}"),
            );
            None
        }
    }
}

/// Event reasons of the prober, as the kubelet spells them.
pub(crate) mod reasons {
    /// A probe failed (or could not be made).
    pub(crate) const UNHEALTHY: &str = "Unhealthy";
    /// A probe passed with a warning.
    pub(crate) const PROBE_WARNING: &str = "ProbeWarning";
}

/// One check by the probe's handler.
async fn check(
    shared: &Shared,
    pod: &AdmittedPod,
    container: &Container,
    spec: &ProbeSpec,
) -> Result<Verdict, CheckError> {
    let timeout = spec.timeout;
    match &spec.handler {
        Handler::Exec(command) => {
            let command = expand_static(command, container);
            match shared
                .target
                .exec_sync(pod.uid(), &container.name, &command, timeout)
                .await
            {
                Ok(result) => {
                    let mut output = result.output();
                    output.truncate(MAX_OUTPUT);
                    let output = String::from_utf8_lossy(&output).into_owned();
                    if result.exit_code == 0 {
                        Ok(Verdict::Success)
                    } else {
                        Ok(Verdict::Failure(output))
                    }
                }
                // A command that outlived its timeout failed (ExecProbeTimeout, on since 1.20).
                Err(error @ ExecError::Timeout { .. }) => Ok(Verdict::Failure(error.to_string())),
                Err(error) => Err(CheckError::Exec(error)),
            }
        }
        Handler::HttpGet(action) => {
            let request = HttpGet::from_action(action, container, &shared.pod_ip, "probe")
                .map_err(CheckError::Http)?;
            Ok(match request.send(Some(timeout)).await {
                Ok(response) => {
                    let body = String::from_utf8_lossy(&response.body).into_owned();
                    match response.status {
                        200..=299 => Verdict::Success,
                        300..=399 => Verdict::Warning(format!(
                            "Probe terminated redirects, Response body: {body}"
                        )),
                        status => {
                            Verdict::Failure(format!("HTTP probe failed with statuscode: {status}"))
                        }
                    }
                }
                // The exchange failed (refused, timed out): a failure with Go's error text.
                Err(error) => Verdict::Failure(error.to_string()),
            })
        }
        Handler::TcpSocket(action) => {
            let port = resolve_container_port(&action.port, container)?;
            let host = match action.host.as_deref() {
                Some(h) if !h.is_empty() => h,
                _ => &shared.pod_ip,
            };
            Ok(tcp::check(host, port, timeout).await)
        }
        Handler::Grpc(action) => {
            let service = action.service.as_deref().unwrap_or_default();
            Ok(grpc::check(&shared.pod_ip, action.port, service, timeout).await)
        }
        Handler::Missing => Err(CheckError::MissingHandler {
            pod: nodelet_runtime::format_pod(pod),
            container: container.name.clone(),
        }),
    }
}

/// `$(VAR)` in an exec probe's command, expanded with the container's literal `env` values
/// only (the kubelet's `ExpandContainerCommandOnlyStatic`: a `valueFrom` variable counts as
/// empty, unknown references stay).
fn expand_static(command: &[String], container: &Container) -> Vec<String> {
    let env = container.env.as_deref().unwrap_or_default();
    command
        .iter()
        .map(|arg| {
            let out = crate::expand::expand(arg.as_bytes(), |name| {
                env.iter()
                    .rev()
                    .find(|v| v.name == name)
                    .map(|v| v.value.clone().unwrap_or_default().into_bytes())
            });
            String::from_utf8_lossy(&out).into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource};

    use super::*;

    #[test]
    fn an_exec_command_sees_only_the_containers_literal_env_values() {
        let container = Container {
            name: "c".into(),
            env: Some(vec![
                EnvVar {
                    name: "FILE".into(),
                    value: Some("/tmp/health".into()),
                    ..EnvVar::default()
                },
                EnvVar {
                    name: "FROM".into(),
                    value_from: Some(EnvVarSource::default()),
                    ..EnvVar::default()
                },
            ]),
            ..Container::default()
        };
        let command = ["cat".to_owned(), "$(FILE)$(FROM)$(NONE)$$".to_owned()];
        assert_eq!(
            expand_static(&command, &container),
            ["cat", "/tmp/health$(NONE)$"]
        );
    }
}

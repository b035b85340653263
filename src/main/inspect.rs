//! `nodelet pods`: what a running agent holds, from its `/pods` endpoint, as a table (or the
//! raw JSON with `-o json`).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use nodelet::{PodsView, VolumeView};

use crate::cli::PodsArgs;

/// How long `nodelet pods` waits for the agent.
const TIMEOUT: Duration = Duration::from_secs(5);

/// `GET /pods` from the agent listening on `addr`.
///
/// # Errors
/// Nothing answers on `addr`, or the answer is not the agent's JSON.
pub(crate) fn fetch_pods(addr: SocketAddr) -> anyhow::Result<PodsView> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .with_context(|| format!("no nodelet answers on {addr} (its --listen address)"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    write!(
        stream,
        "GET /pods HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the answer of {addr}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("not an HTTP answer")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let mut body = raw[split + 4..].to_vec();
    if !head.starts_with("http/1.1 200") {
        anyhow::bail!(
            "{addr} answered {}",
            head.lines().next().unwrap_or_default()
        );
    }
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body).context("a malformed chunked body")?;
    }
    serde_json::from_slice(&body).with_context(|| format!("{addr}/pods is not nodelet's JSON"))
}

/// The body of a chunked HTTP/1.1 message.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// The `/pods` JSON as a table: pod, phase, volumes (mounted of all, failed), the objects they
/// project with their resourceVersions, and the last error of the pod or a volume.
pub(crate) fn render_table(pods: &PodsView) -> String {
    let mut rows = vec![[
        "POD".to_owned(),
        "PHASE".to_owned(),
        "VOLUMES".to_owned(),
        "OBJECTS".to_owned(),
        "LAST ERROR".to_owned(),
    ]];
    for pod in &pods.pods {
        let volumes: &[VolumeView] = &pod.volumes;
        let mounted = volumes.iter().filter(|v| v.state == "Mounted").count();
        let failed = volumes
            .iter()
            .filter(|v| v.last_error.as_deref().is_some_and(|e| !e.is_empty()))
            .count();
        let mut objects: Vec<String> = volumes
            .iter()
            .flat_map(|v| &v.objects)
            .map(|o| {
                format!(
                    "{}/{}@{}",
                    o.kind,
                    o.name,
                    o.resource_version.as_deref().unwrap_or("-")
                )
            })
            .collect();
        objects.sort();
        objects.dedup();
        let error = pod
            .last_error
            .as_deref()
            .filter(|e| !e.is_empty())
            .or_else(|| volumes.iter().find_map(|v| v.last_error.as_deref()))
            .unwrap_or("")
            .replace('\n', " ");
        let mut vols = format!("{mounted}/{}", volumes.len());
        if failed > 0 {
            vols.push_str(&format!(" ({failed} failed)"));
        }
        rows.push([
            format!("{}/{}", pod.namespace, pod.name),
            pod.phase.clone(),
            vols,
            if objects.is_empty() {
                "-".to_owned()
            } else {
                objects.join(",")
            },
            error,
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c == 4 {
                    cell.clone()
                } else {
                    format!("{cell:<width$}", width = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out.push_str(&render_containers(pods));
    out
}

/// FC-8: one row per running container's volume mount (the process runtime only): what it
/// shows, with the resourceVersions, and whether that is current; and one `(env)` row for
/// the ConfigMaps and Secrets its environment was made from. Empty without such rows.
fn render_containers(pods: &PodsView) -> String {
    let mut rows = Vec::new();
    for pod in &pods.pods {
        for c in &pod.containers {
            for m in &c.mounts {
                let how = match (m.sub_path, m.follows) {
                    (false, _) => "volume",
                    (true, true) => "subPath, follows",
                    (true, false) => "subPath",
                };
                let mut objects: Vec<String> = m
                    .objects
                    .iter()
                    .map(|o| {
                        let rv = o.resource_version.as_deref().unwrap_or("-");
                        format!("{}/{}@{rv}", o.kind, o.name)
                    })
                    .collect();
                if objects.is_empty() {
                    objects.push("?".into());
                }
                rows.push([
                    format!("{}/{}/{}", pod.namespace, pod.name, c.name),
                    format!("{} ({how})", m.mount_path),
                    objects.join(","),
                    if m.current { "yes" } else { "no" }.to_owned(),
                ]);
            }
            // FC-15: the objects its environment was made from, one row for all.
            if !c.env.is_empty() {
                let objects: Vec<String> = c
                    .env
                    .iter()
                    .map(|e| {
                        let rv = e.resource_version.as_deref().unwrap_or("-");
                        format!("{}/{}@{rv}", e.kind, e.name)
                    })
                    .collect();
                let current = c.env.iter().all(|e| e.current);
                rows.push([
                    format!("{}/{}/{}", pod.namespace, pod.name, c.name),
                    "(env)".to_owned(),
                    objects.join(","),
                    if current { "yes" } else { "no" }.to_owned(),
                ]);
            }
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    rows.insert(
        0,
        [
            "CONTAINER".to_owned(),
            "MOUNT".to_owned(),
            "SEES".to_owned(),
            "CURRENT".to_owned(),
        ],
    );
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::from("\n");
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// `nodelet pods`: the running agent's `/pods`, as a table or JSON.
pub(crate) fn main(cli: PodsArgs) -> ExitCode {
    match fetch_pods(cli.listen) {
        Ok(pods) if cli.output == "json" => {
            println!(
                "{}",
                serde_json::to_string_pretty(&pods).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Ok(pods) => {
            print!("{}", render_table(&pods));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nodelet pods: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_table_has_a_row_per_pod_with_volumes_objects_and_the_last_error() {
        let pods = json!({"node": "n", "pods": [
            {"namespace": "default", "name": "web", "phase": "Running", "lastError": null,
             "volumes": [
                {"name": "cfg", "state": "Mounted", "lastError": null,
                 "objects": [{"kind": "ConfigMap", "name": "cfg", "resourceVersion": "12"}]},
                {"name": "sec", "state": "Pending", "lastError": "secret \"s\" not found",
                 "objects": [{"kind": "Secret", "name": "s", "resourceVersion": null}]}]},
            {"namespace": "kube-system", "name": "bare", "phase": "Syncing", "volumes": []}
        ]});
        let pods: PodsView = serde_json::from_value(pods).unwrap_or_else(|e| panic!("{e}"));
        let table = render_table(&pods);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("POD"), "{table}");
        assert!(lines[1].starts_with("default/web"), "{table}");
        assert!(lines[1].contains("1/2 (1 failed)"), "{table}");
        assert!(lines[1].contains("ConfigMap/cfg@12,Secret/s@-"), "{table}");
        assert!(lines[1].ends_with("secret \"s\" not found"), "{table}");
        assert!(
            lines[2].contains("0/0") && lines[2].ends_with(" -"),
            "{table}"
        );
    }

    #[test]
    fn running_containers_get_a_row_per_mount_with_what_it_shows_and_whether_it_is_current() {
        let pods = json!({"node": "n", "pods": [
            {"namespace": "default", "name": "web", "phase": "Syncing", "volumes": [],
             "containers": [{"name": "app", "current": false, "mounts": [
                {"volume": "cfg", "mountPath": "/etc/app.conf", "subPath": true,
                 "follows": true, "current": true,
                 "objects": [{"kind": "ConfigMap", "name": "cfg", "resourceVersion": "12"}]},
                {"volume": "cfg", "mountPath": "/etc/old.conf", "subPath": true,
                 "follows": false, "current": false, "objects": []}],
             "env": [{"kind": "ConfigMap", "name": "cfg", "resourceVersion": "12", "current": true},
                {"kind": "Secret", "name": "s", "resourceVersion": "3", "current": false}]}]}
        ]});
        let pods: PodsView = serde_json::from_value(pods).unwrap_or_else(|e| panic!("{e}"));
        let table = render_table(&pods);
        let lines: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("CONTAINER"))
            .collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].starts_with("default/web/app"), "{table}");
        assert!(
            lines[3].contains("(env)")
                && lines[3].contains("ConfigMap/cfg@12,Secret/s@3")
                && lines[3].ends_with("no"),
            "{table}"
        );
        assert!(
            lines[1].contains("/etc/app.conf (subPath, follows)"),
            "{table}"
        );
        assert!(
            lines[1].contains("ConfigMap/cfg@12") && lines[1].ends_with("yes"),
            "{table}"
        );
        assert!(lines[2].contains("/etc/old.conf (subPath)"), "{table}");
        assert!(
            lines[2].contains(" ? ") && lines[2].ends_with("no"),
            "{table}"
        );
        let without = json!({"node": "n", "pods": [
            {"namespace": "default", "name": "web", "phase": "Syncing", "volumes": []}]});
        let without: PodsView = serde_json::from_value(without).unwrap_or_else(|e| panic!("{e}"));
        assert!(!render_table(&without).contains("CONTAINER"));
    }

    // What the agent serves is what `nodelet pods` reads: one set of types, both ends.
    #[test]
    fn the_pods_view_round_trips_through_its_json() {
        let json = json!({"node": "n",
            "api": {"reachable": false, "watches": [
                {"resource": "pods", "running": true, "lastSuccess": null,
                 "failingSince": "2026-01-01T00:00:00.000Z", "failures": 2,
                 "lastError": "refused", "fieldSelector": "spec.nodeName=n"},
                {"resource": "secrets", "running": true, "lastSuccess": null,
                 "failingSince": null, "failures": 0, "lastError": null,
                 "namespace": "default", "name": "s"}]},
            "pods": [{"uid": "u1", "namespace": "default", "name": "web", "phase": "Syncing",
                "syncs": 3, "lastSync": null, "lastError": null,
                "volumes": [{"name": "cfg", "plugin": "kubernetes.io/configmap",
                    "state": "Mounted", "path": "/p", "remountPending": false,
                    "lastError": null,
                    "objects": [{"kind": "ConfigMap", "name": "cfg", "resourceVersion": "7"}]}]}]});
        let view: PodsView = serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            view.pods[0].volumes[0].objects[0]
                .resource_version
                .as_deref(),
            Some("7")
        );
        assert_eq!(
            view.api.watches[0].field_selector.as_deref(),
            Some("spec.nodeName=n")
        );
        assert_eq!(view.api.watches[1].name.as_deref(), Some("s"));
        let back = serde_json::to_value(&view).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, json);
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk(b"4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\n\r\n").as_deref(),
            Some(&b"Wikipedia"[..])
        );
        assert_eq!(dechunk(b"zz\r\n"), None);
    }
}

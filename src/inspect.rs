//! `nodelet pods`: what a running agent holds, from its `/pods` endpoint, as a table (or the
//! raw JSON with `-o json`).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

/// How long `nodelet pods` waits for the agent.
const TIMEOUT: Duration = Duration::from_secs(5);

/// `GET /pods` from the agent listening on `addr`: its JSON.
///
/// # Errors
/// Nothing answers on `addr`, or the answer is not the agent's JSON.
pub fn fetch_pods(addr: SocketAddr) -> anyhow::Result<Value> {
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
pub fn render_table(pods: &Value) -> String {
    let mut rows = vec![[
        "POD".to_owned(),
        "PHASE".to_owned(),
        "VOLUMES".to_owned(),
        "OBJECTS".to_owned(),
        "LAST ERROR".to_owned(),
    ]];
    for pod in pods["pods"].as_array().into_iter().flatten() {
        let volumes: Vec<&Value> = pod["volumes"].as_array().into_iter().flatten().collect();
        let mounted = volumes.iter().filter(|v| v["state"] == "Mounted").count();
        let failed = volumes
            .iter()
            .filter(|v| v["lastError"].as_str().is_some_and(|e| !e.is_empty()))
            .count();
        let mut objects: Vec<String> = volumes
            .iter()
            .flat_map(|v| v["objects"].as_array().into_iter().flatten())
            .map(|o| {
                format!(
                    "{}/{}@{}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["name"].as_str().unwrap_or("?"),
                    o["resourceVersion"].as_str().unwrap_or("-")
                )
            })
            .collect();
        objects.sort();
        objects.dedup();
        let error = pod["lastError"]
            .as_str()
            .filter(|e| !e.is_empty())
            .or_else(|| volumes.iter().find_map(|v| v["lastError"].as_str()))
            .unwrap_or("")
            .replace('\n', " ");
        let mut vols = format!("{mounted}/{}", volumes.len());
        if failed > 0 {
            vols.push_str(&format!(" ({failed} failed)"));
        }
        rows.push([
            format!(
                "{}/{}",
                pod["namespace"].as_str().unwrap_or(""),
                pod["name"].as_str().unwrap_or("")
            ),
            pod["phase"].as_str().unwrap_or("").to_owned(),
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
    out
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
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk(b"4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\n\r\n").as_deref(),
            Some(&b"Wikipedia"[..])
        );
        assert_eq!(dechunk(b"zz\r\n"), None);
    }
}

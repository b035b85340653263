//! The `nodelet-apiserver` binary (TLS, auth, manifests) driven by the real kubectl. Skipped,
//! with a printed note, when kubectl is not installed.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::PATIENCE;

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs kubectl with the kubeconfig; returns (success, stdout + stderr).
fn kubectl(kc: &Path, cache: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("run kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Kills the server if the test fails before it is stopped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn kubectl_gets_creates_replaces_patches_and_deletes_configmaps_on_the_binary() {
    if !kubectl_available() {
        println!("note: kubectl not found on PATH; skipping the kubectl end-to-end test");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("mkdir");
    let app = manifests.join("app.yaml");
    std::fs::write(
        &app,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: shop}\ndata: {mode: one}\n",
    )
    .expect("write");
    let kc = dir.path().join("kubeconfig");
    let cache = dir.path().join("cache");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet-apiserver"))
        .args(["--listen", "127.0.0.1:0", "--tls", "--auth", "--manifests"])
        .arg(&manifests)
        .arg("--kubeconfig-out")
        .arg(&kc)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn nodelet-apiserver");
    let stdout = child.stdout.take().expect("stdout");
    let server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(PATIENCE).expect("the serving line");
    assert!(line.starts_with("serving https://127.0.0.1:"), "{line}");

    // Seeded from the manifest directory.
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &["get", "configmaps", "-n", "shop", "-o", "name"],
    );
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "configmap/app");

    let made = dir.path().join("made.yaml");
    let doc = |v: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: made}}\ndata: {{a: \"{v}\"}}\n")
    };
    std::fs::write(&made, doc("1")).expect("write");
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &["create", "-f", made.to_str().expect("utf-8")],
    );
    assert!(ok && out.contains("configmap/made created"), "{out}");
    std::fs::write(&made, doc("2")).expect("write");
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &["replace", "-f", made.to_str().expect("utf-8")],
    );
    assert!(ok && out.contains("configmap/made replaced"), "{out}");
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &["patch", "configmap", "made", "-p", r#"{"data":{"b":"3"}}"#],
    );
    assert!(ok && out.contains("configmap/made patched"), "{out}");
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &["get", "configmap", "made", "-o", "jsonpath={.data}"],
    );
    assert!(ok, "{out}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).expect("json"),
        serde_json::json!({"a": "2", "b": "3"})
    );
    let (ok, out) = kubectl(&kc, &cache, &["delete", "configmap", "made"]);
    assert!(ok && out.contains("configmap \"made\" deleted"), "{out}");
    let (ok, out) = kubectl(&kc, &cache, &["get", "configmap", "made"]);
    assert!(
        !ok && out.contains("configmaps \"made\" not found"),
        "{out}"
    );

    // An edit of the manifest shows up through the API.
    std::fs::write(
        &app,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: shop}\ndata: {mode: two}\n",
    )
    .expect("write");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (_, out) = kubectl(
            &kc,
            &cache,
            &[
                "get",
                "cm",
                "app",
                "-n",
                "shop",
                "-o",
                "jsonpath={.data.mode}",
            ],
        );
        if out.trim() == "two" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the edit never showed: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // SIGTERM stops it cleanly.
    let mut server = server;
    let pid = server.0.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = server.0.wait().expect("wait");
    assert!(status.success(), "exit status {status:?}");
}

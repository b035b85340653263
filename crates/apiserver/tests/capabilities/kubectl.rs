//! The `nodelet-apiserver` binary (TLS, auth, manifests) driven by the real kubectl: the one
//! `NODELET_KUBECTL` names, else `kubectl` on PATH. A missing kubectl fails these tests with
//! what to install (`.ci/run` installs one on a machine that lacks it).

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::PATIENCE;

/// The kubectl to run: `NODELET_KUBECTL`, else `kubectl` on PATH.
fn kubectl_bin() -> String {
    std::env::var("NODELET_KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Fails the test, saying what to install, when kubectl cannot run.
pub(crate) fn require_kubectl() {
    let bin = kubectl_bin();
    let ran = Command::new(&bin)
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        ran.is_ok_and(|s| s.success()),
        "these tests drive the real kubectl, and `{bin} version --client` did not run: install \
         kubectl (Debian: `apt-get install kubernetes-client`; `.ci/run` installs one) or set \
         NODELET_KUBECTL to its path"
    );
}

/// Runs kubectl with the kubeconfig; returns (success, stdout + stderr).
pub(crate) fn kubectl(kc: &Path, cache: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(kubectl_bin())
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
    require_kubectl();
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
    // The manifest's, and the CA a cluster publishes in every namespace.
    assert_eq!(out.trim(), "configmap/app\nconfigmap/kube-root-ca.crt");

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

/// Starts the binary (default flags: HTTPS, a cluster's service accounts and admission) with
/// `--auth` on an empty manifest directory; returns it and its admin kubeconfig.
fn start_binary(dir: &Path) -> (Server, std::path::PathBuf) {
    let manifests = dir.join("manifests");
    std::fs::create_dir(&manifests).expect("mkdir");
    let kc = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet-apiserver"))
        .args(["--listen", "127.0.0.1:0", "--auth", "--manifests"])
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
    (server, kc)
}

/// The commands a new user types must work: each of these failed once (no credentials over
/// http, 415 for protobuf bodies, no `all` category, no token volume).
#[test]
fn kubectl_creates_namespaces_configmaps_and_secrets_and_describes_pods_with_events() {
    require_kubectl();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, kc) = start_binary(dir.path());
    let cache = dir.path().join("cache");
    let run = |args: &[&str]| {
        let (ok, out) = kubectl(&kc, &cache, args);
        assert!(ok, "kubectl {}: {out}", args.join(" "));
        out
    };
    // The kubeconfig holds the CA and a token, and only its owner may read it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&kc).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let text = std::fs::read_to_string(&kc).expect("read kubeconfig");
    assert!(
        text.contains("certificate-authority-data") && text.contains("token"),
        "{text}"
    );

    // Protobuf request bodies.
    assert!(run(&["create", "namespace", "foo"]).contains("namespace/foo created"));
    assert!(
        run(&[
            "-n",
            "foo",
            "create",
            "configmap",
            "lit",
            "--from-literal=a=b"
        ])
        .contains("configmap/lit created")
    );
    let file = dir.path().join("greeting.txt");
    std::fs::write(&file, "hello\n").expect("write");
    let from_file = format!("--from-file={}", file.display());
    assert!(
        run(&["-n", "foo", "create", "configmap", "fromfile", &from_file])
            .contains("configmap/fromfile created")
    );
    assert!(
        run(&[
            "-n",
            "foo",
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=p=q"
        ])
        .contains("secret/s1 created")
    );
    assert_eq!(
        run(&["-n", "foo", "get", "cm", "lit", "-o", "jsonpath={.data.a}"]),
        "b"
    );
    assert_eq!(
        run(&[
            "-n",
            "foo",
            "get",
            "cm",
            "fromfile",
            "-o",
            "jsonpath={.data.greeting\\.txt}"
        ]),
        "hello\n"
    );
    assert_eq!(
        run(&[
            "-n",
            "foo",
            "get",
            "secret",
            "s1",
            "-o",
            "jsonpath={.data.p}"
        ]),
        "cQ=="
    );
    // What controllers publish in every namespace.
    assert!(
        run(&["-n", "foo", "get", "sa", "default", "-o", "name"])
            .contains("serviceaccount/default")
    );
    assert!(
        run(&["-n", "foo", "get", "cm", "kube-root-ca.crt", "-o", "name"])
            .contains("configmap/kube-root-ca.crt")
    );

    // apply, then a pod with an event about it.
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: pd, namespace: foo}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    )
    .expect("write");
    assert!(run(&["apply", "-f", pod.to_str().expect("utf-8")]).contains("pod/pd created"));
    let uid = run(&[
        "-n",
        "foo",
        "get",
        "pod",
        "pd",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let event = dir.path().join("event.json");
    std::fs::write(
        &event,
        serde_json::json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "pd.1", "namespace": "foo"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "foo", "name": "pd", "uid": uid},
            "reason": "FailedMount", "message": "MountVolume.SetUp failed for volume \"x\"",
            "type": "Warning", "count": 1, "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2026-11-23T01:00:00Z", "lastTimestamp": "2026-11-23T01:00:00Z"})
        .to_string(),
    )
    .expect("write");
    assert!(run(&["create", "-f", event.to_str().expect("utf-8")]).contains("event/pd.1 created"));
    let described = run(&["-n", "foo", "describe", "pod", "pd"]);
    assert!(described.contains("kube-api-access-"), "{described}");
    assert!(
        described.contains("/var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-"),
        "{described}"
    );
    assert!(
        described.contains("FailedMount") && described.contains("MountVolume.SetUp failed"),
        "{described}"
    );
    let events = run(&["-n", "foo", "get", "events"]);
    assert!(
        events.contains("FailedMount") && events.contains("pod/pd"),
        "{events}"
    );
    let events = run(&[
        "-n",
        "foo",
        "get",
        "events",
        "-o",
        "jsonpath={.items[0].reason}",
    ]);
    assert_eq!(events, "FailedMount");
    // `all` is pods and services here (two kinds, so kubectl prefixes each name with its kind).
    let all = run(&["-n", "foo", "get", "all"]);
    assert!(
        all.lines()
            .any(|l| l.starts_with("pod/pd ") && l.contains("Pending")),
        "{all}"
    );
    let services = run(&["-n", "default", "get", "all"]);
    assert!(
        services
            .lines()
            .any(|l| l.starts_with("service/kubernetes ") && l.contains("10.96.0.1")),
        "{services}"
    );
    assert!(run(&["-n", "foo", "get", "po,cm,sa", "-o", "name"]).contains("pod/pd"));

    // replace and delete.
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lit, namespace: foo}\ndata: {a: c}\n",
    )
    .expect("write");
    assert!(
        run(&["replace", "-f", pod.to_str().expect("utf-8")]).contains("configmap/lit replaced")
    );
    assert_eq!(
        run(&["-n", "foo", "get", "cm", "lit", "-o", "jsonpath={.data.a}"]),
        "c"
    );
    assert!(run(&["delete", "namespace", "foo"]).contains("namespace \"foo\" deleted"));

    // explain needs the OpenAPI schemas this server does not publish: kubectl says so.
    let (ok, out) = kubectl(&kc, &cache, &["explain", "pods"]);
    assert!(!ok && out.contains("not found in OpenAPI schema"), "{out}");
}

/// The failure flags (no kubectl needed; `--node-authorizer-lag` too): bad values exit 64;
/// good ones start the server, and
/// `--no-watch-list` refuses a streaming list as a server without the WatchList feature does.
#[test]
fn the_failure_flags_are_checked_and_turn_the_failures_on() {
    let bin = env!("CARGO_BIN_EXE_nodelet-apiserver");
    for bad in [
        ["--goaway-chance", "1.5"],
        ["--goaway-chance", "often"],
        ["--max-requests-inflight", "-1"],
        ["--node-authorizer-lag", "soon"],
        ["--node-authorizer-lag", "5 days"],
    ] {
        let status = Command::new(bin)
            .args(bad)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run nodelet-apiserver");
        assert_eq!(status.code(), Some(64), "{bad:?}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--plain-http", "--no-watch-list"])
        .args(["--goaway-chance", "0.02", "--max-requests-inflight", "400"])
        .args(["--node-authorizer-lag", "10ms"])
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn nodelet-apiserver");
    let stdout = child.stdout.take().expect("stdout");
    let _server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(PATIENCE).expect("the serving line");
    let addr = line
        .trim()
        .strip_prefix("serving http://")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(
        stream,
        "GET /api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&\
         resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true HTTP/1.1\r\n\
         Host: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 422 "), "{answer}");
    assert!(
        answer.contains("unless the WatchList feature gate is enabled"),
        "{answer}"
    );
}

/// `kubectl auth can-i` (a SelfSubjectAccessReview) and `kubectl create -f` of a TokenReview
/// and a SubjectAccessReview: kubectl sends these kinds in protobuf and validates them on the
/// server.
#[test]
fn kubectl_asks_access_and_token_reviews() {
    require_kubectl();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, kc) = start_binary(dir.path());
    let cache = dir.path().join("cache");
    let (ok, out) = kubectl(&kc, &cache, &["auth", "can-i", "get", "pods"]);
    assert!(ok && out.trim() == "yes", "{out}");
    let sar = dir.path().join("sar.yaml");
    std::fs::write(
        &sar,
        "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: system:serviceaccount:default:default\n  groups: [system:serviceaccounts]\n  extra: {a: [b]}\n  resourceAttributes: {verb: get, resource: nodes, subresource: proxy, name: n1}\n",
    )
    .expect("write");
    let path = sar.to_str().expect("utf-8");
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &[
            "create",
            "-f",
            path,
            "-o",
            "jsonpath={.status.allowed} {.spec.extra.a}",
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(out, r#"false ["b"]"#);
    let tr = dir.path().join("tr.yaml");
    std::fs::write(
        &tr,
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec: {token: garbage}\n",
    )
    .expect("write");
    let path = tr.to_str().expect("utf-8");
    let (ok, out) = kubectl(
        &kc,
        &cache,
        &["create", "-f", path, "-o", "jsonpath={.status.error}"],
    );
    assert!(ok, "{out}");
    assert_eq!(out, "invalid bearer token");
}

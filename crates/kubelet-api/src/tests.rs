//! The kubelet API over real TLS on 127.0.0.1, reviewing with a `nodelet-apiserver` through the
//! real kube client: the API server's cluster CA signs the client certificates and is the
//! kubelet's client CA; a test CA (rcgen) signs the serving certificate and certificates the
//! kubelet must refuse; log files are written in the CRI format by hand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use futures::StreamExt as _;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use nodelet_apiserver::{ApiServer, Attributes, Authorizer, Decision, User};
use nodelet_core::runtime::{ContainerState, ContainerStatus, Termination};
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use parking_lot::Mutex;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{ExecTarget, Host, KubeletApiConfig, serve};

const NODE: &str = "node-1";
const UID: &str = "uid-1";

/// A CA of the test's own.
struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A client certificate chain and its key.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl Identity {
    fn from_pem(cert: &str, key: &str) -> Self {
        Self {
            chain: vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
            key: PrivatePkcs8KeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        }
    }
}

impl TestCa {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Self {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    fn client(&self, user: &str, groups: &[&str]) -> Identity {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.distinguished_name.push(DnType::CommonName, user);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Identity {
            chain: vec![cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        }
    }

    /// The serving certificate and key, PEM, for `NODE` and 127.0.0.1.
    fn server(&self) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![NODE.into(), "127.0.0.1".into()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// What the test cluster allows: `system:masters` everything, nodes to create token and
/// access reviews, `carol` only `nodes/proxy`, everyone else nothing. Records the attributes of
/// every access to `nodes` it judges (the kubelet's reviews).
#[derive(Default)]
struct Policy {
    reviewed: Mutex<Vec<Attributes>>,
}

impl Authorizer for Policy {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        if attrs.resource == "nodes" {
            self.reviewed.lock().push(attrs.clone());
        }
        let in_group = |group: &str| attrs.user.groups.iter().any(|g| g == group);
        let review = attrs.verb == "create"
            && matches!(
                attrs.resource.as_str(),
                "tokenreviews" | "subjectaccessreviews"
            );
        let carol = attrs.user.name == "carol" && attrs.subresource.as_deref() == Some("proxy");
        if in_group("system:masters") || (in_group("system:nodes") && review) || carol {
            Decision::Allow
        } else {
            Decision::Deny(String::new())
        }
    }
}

/// A `nodelet-apiserver` with bearer tokens and [`Policy`], and the node's client.
struct Cluster {
    server: ApiServer,
    policy: Arc<Policy>,
    node_client: kube::Client,
}

impl Cluster {
    async fn start() -> Self {
        let policy = Arc::new(Policy::default());
        let config = nodelet_apiserver::Config::default()
            .with_auth()
            .authorizer(policy.clone());
        let server = ApiServer::start(config).await.unwrap();
        let mut node_config = server.kube_config();
        node_config.auth_info =
            serde_json::from_value(json!({"token": server.token_for(&User::node(NODE))})).unwrap();
        Self {
            node_client: kube::Client::try_from(node_config).unwrap(),
            server,
            policy,
        }
    }

    /// A client certificate of the cluster CA (the kubelet's client CA).
    fn certificate(&self, user: &str, groups: &[&str]) -> Identity {
        let (cert, key) = self.server.issue_client_certificate(user, groups).unwrap();
        Identity::from_pem(&cert, &key)
    }

    fn token(&self, user: &str, groups: &[&str]) -> String {
        self.server.token_for(&User {
            name: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
    }

    /// The kubelet's reviews so far: (user, groups, verb, subresource, name).
    fn reviewed(&self) -> Vec<(String, Vec<String>, String, String, String)> {
        self.policy
            .reviewed
            .lock()
            .iter()
            .map(|a| {
                (
                    a.user.name.clone(),
                    a.user.groups.clone(),
                    a.verb.clone(),
                    a.subresource.clone().unwrap_or_default(),
                    a.name.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    fn created(&self, resource: &str) -> usize {
        self.server.handle().count("create", resource, None, None)
    }
}

/// A pod with containers `app` and `side`, its statuses and their changes, settable by tests.
struct Node {
    root: tempfile::TempDir,
    pods: Arc<Mutex<Vec<AdmittedPod>>>,
    statuses: Arc<Mutex<HashMap<PodUid, Vec<ContainerStatus>>>>,
    changes: broadcast::Sender<PodUid>,
}

impl Node {
    fn new() -> Self {
        let pod = Pod {
            metadata: kube::api::ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("web".into()),
                uid: Some(UID.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: ["app", "side"]
                    .map(|name| Container {
                        name: name.into(),
                        ..Container::default()
                    })
                    .to_vec(),
                volumes: Some(vec![
                    serde_json::from_value(
                        serde_json::json!({"name": "cfg", "configMap": {"name": "settings"}}),
                    )
                    .unwrap(),
                ]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        Self {
            root: tempfile::tempdir().unwrap(),
            pods: Arc::new(Mutex::new(vec![AdmittedPod::new(pod).unwrap()])),
            statuses: Arc::default(),
            changes: broadcast::channel(16).0,
        }
    }

    /// The node as the kubelet API's host: nothing to exec into.
    fn host(&self) -> Arc<dyn Host> {
        self.host_with_exec(None)
    }

    fn host_with_exec(&self, exec_target: Option<ExecTarget>) -> Arc<dyn Host> {
        Arc::new(TestHost {
            pods: self.pods.clone(),
            statuses: self.statuses.clone(),
            changes: self.changes.clone(),
            exec_target,
        })
    }

    /// A kubelet API configuration on a free loopback port for this node's root directory.
    fn config(&self) -> KubeletApiConfig {
        KubeletApiConfig::new(([127, 0, 0, 1], 0).into(), NODE, self.root.path())
    }

    fn uid() -> PodUid {
        PodUid::new(UID).unwrap()
    }

    /// Sets `app`'s status and announces it.
    fn set_app(&self, state: ContainerState, previous: bool, restart_count: u32) {
        let ended = Termination {
            exit_code: 1,
            signal: None,
            reason: "Error".into(),
            message: None,
            started_at: std::time::SystemTime::UNIX_EPOCH,
            finished_at: std::time::SystemTime::UNIX_EPOCH,
        };
        let status = ContainerStatus {
            name: "app".into(),
            state,
            last_state: previous.then_some(ended),
            restart_count,
            container_id: format!("nodelet://{restart_count}"),
        };
        self.statuses.lock().insert(Self::uid(), vec![status]);
        let _ = self.changes.send(Self::uid());
    }

    fn log_file(&self, restart_count: u32) -> std::path::PathBuf {
        let dir = PodDirs::new(self.root.path()).pod_logs("ns", "web", &Self::uid());
        nodelet_runtime::logs::container_log_path(&dir, "app", restart_count)
    }

    fn write_log(&self, restart_count: u32, records: &str) {
        let path = self.log_file(restart_count);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, records).unwrap();
    }

    fn append_log(&self, restart_count: u32, records: &str) {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.log_file(restart_count))
            .unwrap();
        file.write_all(records.as_bytes()).unwrap();
    }
}

/// [`Node`]'s pods, statuses and changes, and one container to exec into (or none).
struct TestHost {
    pods: Arc<Mutex<Vec<AdmittedPod>>>,
    statuses: Arc<Mutex<HashMap<PodUid, Vec<ContainerStatus>>>>,
    changes: broadcast::Sender<PodUid>,
    exec_target: Option<ExecTarget>,
}

impl Host for TestHost {
    fn pods(&self) -> Vec<AdmittedPod> {
        self.pods.lock().clone()
    }

    fn container_statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        self.statuses.lock().get(uid).cloned().unwrap_or_default()
    }

    fn status_changes(&self) -> broadcast::Receiver<PodUid> {
        self.changes.subscribe()
    }

    fn exec_target(&self, _uid: &PodUid, _container: &str) -> Option<ExecTarget> {
        self.exec_target.clone()
    }
}

fn running() -> ContainerState {
    ContainerState::Running {
        started_at: std::time::SystemTime::UNIX_EPOCH,
    }
}

/// A served kubelet API and what it was started with.
struct Served {
    addr: SocketAddr,
    ca: TestCa,
    node: Node,
    cluster: Cluster,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    _files: tempfile::TempDir,
}

impl Served {
    async fn start() -> Self {
        Self::start_with(|_, node| node.host()).await
    }

    /// Serving the pods of [`Node`] with the configuration and host `customize` makes.
    async fn start_with(
        customize: impl FnOnce(&mut KubeletApiConfig, &Node) -> Arc<dyn Host>,
    ) -> Self {
        let ca = TestCa::new("test-ca");
        let files = tempfile::tempdir().unwrap();
        let (cert, key) = ca.server();
        let write = |name: &str, text: &str| {
            let path = files.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let node = Node::new();
        let mut config = node.config();
        config.tls_cert_file = Some(write("kubelet.crt", &cert));
        config.tls_private_key_file = Some(write("kubelet.key", &key));
        let cluster = Cluster::start().await;
        config.client_ca_file = Some(write("ca.crt", &cluster.server.kubelet_client_ca_pem()));
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let host = customize(&mut config, &node);
        let addr = serve(
            config,
            cluster.node_client.clone(),
            host,
            shutdown.clone(),
            &tracker,
        )
        .await
        .unwrap();
        Self {
            addr,
            ca,
            node,
            cluster,
            shutdown,
            tracker,
            _files: files,
        }
    }

    fn admin(&self) -> Identity {
        self.cluster
            .certificate("kubernetes-admin", &["system:masters"])
    }

    /// `GET path` with `identity` and `token`; the response with its body unread.
    async fn get(
        &self,
        path: &str,
        identity: Option<&Identity>,
        token: Option<&str>,
    ) -> axum::http::Response<Body> {
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(self.ca.pem.as_bytes()).unwrap();
        roots.add(ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            Some(id) => builder
                .with_client_auth_cert(id.chain.clone(), PrivateKeyDer::Pkcs8(id.key.clone_key()))
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut request = Request::get(path).header("host", NODE);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = sender
            .send_request(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        response.map(Body::new)
    }

    /// `GET path`: the status and the whole body as text.
    async fn text(
        &self,
        path: &str,
        identity: Option<&Identity>,
        token: Option<&str>,
    ) -> (StatusCode, String) {
        let response = self.get(path, identity, token).await;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    async fn admin_text(&self, path: &str) -> (StatusCode, String) {
        self.text(path, Some(&self.admin()), None).await
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.cluster.server.shutdown().await;
    }
}

const SAMPLE: &str = "\
2024-01-01T00:00:01.000000000Z stdout F one
2024-01-01T00:00:02.000000000Z stderr F two
2024-01-01T00:00:03.000000000Z stdout P thr
2024-01-01T00:00:03.500000000Z stdout F ee
2024-01-01T00:00:04.000000000Z stdout F four
";

#[tokio::test]
async fn a_request_without_a_certificate_or_token_is_unauthorized() {
    let served = Served::start().await;
    for path in ["/healthz", "/pods", "/containerLogs/ns/web/app", "/nothing"] {
        assert_eq!(
            served.text(path, None, None).await,
            (StatusCode::UNAUTHORIZED, "Unauthorized".to_owned()),
            "{path}"
        );
    }
    assert!(served.cluster.reviewed().is_empty());
    served.stop().await;
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_unauthorized() {
    let served = Served::start().await;
    let stranger = TestCa::new("other-ca").client("kubernetes-admin", &["system:masters"]);
    assert_eq!(
        served.text("/healthz", Some(&stranger), None).await,
        (StatusCode::UNAUTHORIZED, "Unauthorized".to_owned())
    );
    // A valid token still authenticates the request, as in the kubelet.
    let token = served.cluster.token("admin", &["system:masters"]);
    assert_eq!(
        served.text("/healthz", Some(&stranger), Some(&token)).await,
        (StatusCode::OK, "ok".to_owned())
    );
    served.stop().await;
}

#[tokio::test]
async fn a_user_the_cluster_denies_gets_the_kubelets_forbidden_text() {
    let served = Served::start().await;
    let bob = served.cluster.certificate("bob", &["devs"]);
    assert_eq!(
        served.text("/pods", Some(&bob), None).await,
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                .to_owned()
        )
    );
    let token = served.cluster.token("dave", &[]);
    assert_eq!(
        served
            .text("/containerLogs/ns/web/app", None, Some(&token))
            .await,
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=dave, verb=get, resource=nodes, subresource(s)=[proxy])\n".to_owned()
        )
    );
    // The reviews name the user as authenticated, the verb, the subresource and the node.
    let groups = |g: &[&str]| g.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    let review = |user: &str, g: &[&str], subresource: &str| {
        (
            user.to_owned(),
            groups(g),
            "get".to_owned(),
            subresource.to_owned(),
            NODE.to_owned(),
        )
    };
    assert_eq!(
        served.cluster.reviewed(),
        [
            review("bob", &["devs", "system:authenticated"], "pods"),
            review("bob", &["devs", "system:authenticated"], "proxy"),
            review("dave", &["system:authenticated"], "proxy"),
        ]
    );
    let first = served.cluster.policy.reviewed.lock()[0].clone();
    assert_eq!(
        (first.resource.as_str(), first.api_version.as_str()),
        ("nodes", "v1")
    );
    served.stop().await;
}

#[tokio::test]
async fn the_second_subresource_is_tried_when_the_first_is_not_allowed() {
    let served = Served::start().await;
    let carol = served.cluster.certificate("carol", &[]);
    assert_eq!(
        served.text("/pods", Some(&carol), None).await.0,
        StatusCode::OK
    );
    let subresources: Vec<String> = served
        .cluster
        .reviewed()
        .into_iter()
        .map(|review| review.3)
        .collect();
    assert_eq!(subresources, ["pods", "proxy"]);
    served.stop().await;
}

#[tokio::test]
async fn an_admin_certificate_reads_healthz_and_pods() {
    let served = Served::start().await;
    assert_eq!(
        served.admin_text("/healthz").await,
        (StatusCode::OK, "ok".to_owned())
    );
    let response = served.get("/pods", Some(&served.admin()), None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    assert_eq!(list["items"][0]["metadata"]["uid"], UID);
    assert_eq!(
        list["items"][0]["spec"]["volumes"],
        serde_json::json!([{"name": "cfg", "configMap": {"name": "settings"}}]),
        "the whole pod, its volumes included"
    );
    assert_eq!(
        served.admin_text("/stats/summary").await,
        (StatusCode::NOT_FOUND, "404: Page Not Found".to_owned())
    );
    served.stop().await;
}

#[tokio::test]
async fn reviews_are_made_once_and_their_answers_kept() {
    let served = Served::start().await;
    let admin = served.cluster.token("admin", &["system:masters"]);
    let bob = served.cluster.certificate("bob", &[]);
    for _ in 0..3 {
        assert_eq!(
            served.text("/healthz", None, Some(&admin)).await,
            (StatusCode::OK, "ok".to_owned())
        );
        assert_eq!(
            served.text("/healthz", None, Some("not-a-token")).await,
            (StatusCode::UNAUTHORIZED, "Unauthorized".to_owned())
        );
        assert_eq!(
            served.text("/healthz", Some(&bob), None).await.0,
            StatusCode::FORBIDDEN
        );
    }
    // One review per token; per user and subresource one access review: the admin's `healthz`
    // was allowed, bob's `healthz` and `proxy` denied.
    assert_eq!(served.cluster.created("tokenreviews"), 2);
    assert_eq!(served.cluster.created("subjectaccessreviews"), 3);
    served.stop().await;
}

#[tokio::test]
async fn container_logs_honour_tail_lines_timestamps_and_limit_bytes() {
    let served = Served::start().await;
    served.node.set_app(running(), false, 0);
    served.node.write_log(0, SAMPLE);
    let logs = |query: &str| format!("/containerLogs/ns/web/app{query}");
    assert_eq!(
        served.admin_text(&logs("")).await,
        (StatusCode::OK, "one\ntwo\nthree\nfour\n".to_owned())
    );
    assert_eq!(
        served.admin_text(&logs("?tailLines=2")).await,
        (StatusCode::OK, "three\nfour\n".to_owned())
    );
    assert_eq!(
        served
            .admin_text(&logs("?tailLines=1&timestamps=true"))
            .await,
        (
            StatusCode::OK,
            "2024-01-01T00:00:04.000000000Z four\n".to_owned()
        )
    );
    assert_eq!(
        served.admin_text(&logs("?limitBytes=6")).await,
        (StatusCode::OK, "one\ntw".to_owned())
    );
    assert_eq!(
        served
            .admin_text(&logs("?sinceTime=2024-01-01T00:00:03Z"))
            .await,
        (StatusCode::OK, "three\nfour\n".to_owned())
    );
    served.stop().await;
}

#[tokio::test]
async fn previous_reads_the_instance_before_and_fails_as_the_kubelet_without_one() {
    let served = Served::start().await;
    served.node.set_app(running(), false, 0);
    served.node.write_log(0, SAMPLE);
    assert_eq!(
        served
            .admin_text("/containerLogs/ns/web/app?previous=true")
            .await,
        (
            StatusCode::BAD_REQUEST,
            r#"previous terminated container "app" in pod "web" not found"#.to_owned()
        )
    );
    served.node.set_app(running(), true, 1);
    served
        .node
        .write_log(1, "2024-01-01T00:01:00.000000000Z stdout F restarted\n");
    assert_eq!(
        served
            .admin_text("/containerLogs/ns/web/app?previous=true&tailLines=1")
            .await,
        (StatusCode::OK, "four\n".to_owned())
    );
    assert_eq!(
        served.admin_text("/containerLogs/ns/web/app").await,
        (StatusCode::OK, "restarted\n".to_owned())
    );
    served.stop().await;
}

#[tokio::test]
async fn unknown_pods_containers_and_bad_options_get_the_kubelets_answers() {
    let served = Served::start().await;
    let cases = [
        (
            "/containerLogs/ns/nope/app",
            StatusCode::NOT_FOUND,
            r#"pod "nope" does not exist"#,
        ),
        (
            "/containerLogs/other/web/app",
            StatusCode::NOT_FOUND,
            r#"pod "web" does not exist"#,
        ),
        (
            "/containerLogs/ns/web/db",
            StatusCode::NOT_FOUND,
            r#"container "db" not found in pod "web""#,
        ),
        (
            "/containerLogs/ns/web/side",
            StatusCode::BAD_REQUEST,
            r#"container "side" in pod "web" is not available"#,
        ),
        (
            "/containerLogs/ns/web/app?tailLines=many",
            StatusCode::BAD_REQUEST,
            r#"{"message": "Unable to decode query."}"#,
        ),
        (
            "/containerLogs/ns/web/app?limitBytes=0",
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"message": "Invalid request."}"#,
        ),
    ];
    for (path, status, text) in cases {
        assert_eq!(
            served.admin_text(path).await,
            (status, text.to_owned()),
            "{path}"
        );
    }
    // A status without its log file: 200, and the body says what failed, as the kubelet's.
    served.node.set_app(running(), false, 0);
    let (status, body) = served.admin_text("/containerLogs/ns/web/app").await;
    assert_eq!(status, StatusCode::OK);
    let path = served.node.log_file(0);
    assert!(
        body.starts_with(&format!(
            "failed to open log file {:?}: ",
            path.display().to_string()
        )),
        "{body}"
    );
    served.stop().await;
}

/// The next chunk of a streamed body, or `None` at its end.
async fn next_chunk(stream: &mut axum::body::BodyDataStream) -> Option<Bytes> {
    stream.next().await.map(|chunk| chunk.unwrap())
}

#[tokio::test]
async fn follow_streams_new_lines_and_ends_when_the_instance_ends() {
    let served = Served::start().await;
    served.node.set_app(running(), false, 0);
    served
        .node
        .write_log(0, "2024-01-01T00:00:01.000000000Z stdout F first\n");
    let response = served
        .get(
            "/containerLogs/ns/web/app?follow=true",
            Some(&served.admin()),
            None,
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    assert_eq!(next_chunk(&mut body).await.unwrap(), "first\n");

    served
        .node
        .append_log(0, "2024-01-01T00:00:02.000000000Z stdout F second\n");
    assert_eq!(next_chunk(&mut body).await.unwrap(), "second\n");

    // The instance ends after writing its last line: that line comes, then the end.
    served
        .node
        .append_log(0, "2024-01-01T00:00:03.000000000Z stdout F last\n");
    let ended = ContainerState::Terminated(Termination {
        exit_code: 0,
        signal: None,
        reason: "Completed".into(),
        message: None,
        started_at: std::time::SystemTime::UNIX_EPOCH,
        finished_at: std::time::SystemTime::UNIX_EPOCH,
    });
    served.node.set_app(ended, false, 0);
    let mut rest = Vec::new();
    while let Some(chunk) = next_chunk(&mut body).await {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"last\n");
    served.stop().await;
}

#[tokio::test]
async fn a_followed_log_ends_when_the_agent_stops() {
    let served = Served::start().await;
    served.node.set_app(running(), false, 0);
    served
        .node
        .write_log(0, "2024-01-01T00:00:01.000000000Z stdout F only\n");
    let response = served
        .get(
            "/containerLogs/ns/web/app?follow",
            Some(&served.admin()),
            None,
        )
        .await;
    let mut body = response.into_body().into_data_stream();
    assert_eq!(next_chunk(&mut body).await.unwrap(), "only\n");
    let Served {
        shutdown, tracker, ..
    } = served;
    shutdown.cancel();
    assert!(next_chunk(&mut body).await.is_none());
    tracker.close();
    tracker.wait().await;
}

#[tokio::test]
async fn the_bound_port_is_returned_for_port_zero_and_a_busy_port_is_an_error() {
    let served = Served::start().await;
    assert_ne!(served.addr.port(), 0);
    let mut config = served.node.config();
    config.addr = served.addr;
    config.node_ips = vec!["127.0.0.1".parse().unwrap()];
    let tracker = TaskTracker::new();
    let error = serve(
        config,
        served.cluster.node_client.clone(),
        served.node.host(),
        CancellationToken::new(),
        &tracker,
    )
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(&format!("binding the kubelet API address {}", served.addr)),
        "{error:#}"
    );
    served.stop().await;
}

#[test]
fn a_host_without_a_runtime_has_no_container_statuses_changes_or_exec_targets() {
    struct Pods;
    impl Host for Pods {
        fn pods(&self) -> Vec<AdmittedPod> {
            Vec::new()
        }
    }
    let uid = Node::uid();
    assert!(Pods.container_statuses(&uid).is_empty());
    assert!(Pods.exec_target(&uid, "app").is_none());
    assert!(matches!(
        Pods.status_changes().try_recv(),
        Err(broadcast::error::TryRecvError::Closed)
    ));
}

/// Takes any server certificate and keeps the chain it was shown (the handshake signature is
/// still checked).
#[derive(Debug, Default)]
struct KeepServerChain {
    chain: Mutex<Vec<CertificateDer<'static>>>,
}

impl rustls::client::danger::ServerCertVerifier for KeepServerChain {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.chain.lock() = chain;
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[tokio::test]
async fn without_certificate_files_the_server_presents_one_made_for_the_node_and_its_ips() {
    use x509_parser::prelude::{FromDer as _, GeneralName, X509Certificate};

    let cluster = Cluster::start().await;
    let node = Node::new();
    let mut config = node.config();
    config.node_ips = vec!["127.0.0.1".parse().unwrap(), "10.1.2.3".parse().unwrap()];
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let addr = serve(
        config,
        cluster.node_client.clone(),
        node.host(),
        shutdown.clone(),
        &tracker,
    )
    .await
    .unwrap();

    let verifier = Arc::new(KeepServerChain::default());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(ServerName::try_from(NODE).unwrap(), tcp)
        .await
        .unwrap();
    drop(tls);

    let chain = verifier.chain.lock().clone();
    assert_eq!(chain.len(), 2, "the certificate and its CA");
    let (_, leaf) = X509Certificate::from_der(&chain[0]).unwrap();
    let (_, ca) = X509Certificate::from_der(&chain[1]).unwrap();
    leaf.verify_signature(Some(ca.public_key())).unwrap();
    let sans = leaf.subject_alternative_name().unwrap().unwrap();
    assert_eq!(
        sans.value.general_names,
        [
            GeneralName::DNSName(NODE),
            GeneralName::IPAddress(&[127, 0, 0, 1]),
            GeneralName::IPAddress(&[10, 1, 2, 3]),
        ]
    );
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    cluster.server.shutdown().await;
}

#[tokio::test]
async fn exec_refuses_before_the_upgrade_as_the_kubelet_does() {
    let served = Served::start().await;
    let cases = [
        (
            "/exec/ns/web/app?command=ls",
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        ),
        (
            "/exec/ns/web/app?command=ls&stdout=true",
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        ),
        (
            "/exec/ns/web/app?stdout=1",
            StatusCode::BAD_REQUEST,
            "you must specify a command",
        ),
        (
            "/exec/ns/nope/app?command=ls&stdout=1",
            StatusCode::NOT_FOUND,
            "pod does not exist",
        ),
        // No runtime: no container has a running instance.
        (
            "/exec/ns/web/app?command=ls&stdout=1",
            StatusCode::INTERNAL_SERVER_ERROR,
            "container not found (\"app\")",
        ),
    ];
    for (path, status, text) in cases {
        assert_eq!(
            served.admin_text(path).await,
            (status, text.to_owned()),
            "{path}"
        );
    }
    let reviewed = served.cluster.reviewed();
    assert!(
        reviewed
            .iter()
            .any(|(user, _, verb, sub, name)| user == "kubernetes-admin"
                && verb == "get"
                && sub == "proxy"
                && name == NODE),
        "{reviewed:?}"
    );
    served.stop().await;
}

#[tokio::test]
async fn exec_of_a_running_container_without_a_websocket_upgrade_is_a_bad_request() {
    // A running container (the target is never used: no upgrade, no process started).
    let served = Served::start_with(|config, node| {
        config.exec_command = vec!["/nonexistent/nodelet".into(), "container-exec".into()];
        node.host_with_exec(Some(ExecTarget::new(1, "/nonexistent/launch.json".into())))
    })
    .await;
    let (status, text) = served
        .admin_text("/exec/ns/web/app?command=ls&stdout=1")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("WebSocket"), "{text}");
    served.stop().await;
}

//! The HTTP/2 transport against nodelet-apiserver over real TLS + h2, with the real kube client:
//! multiplexing, sharding below the server's stream limit, short requests beside full watch
//! connections, connection loss, authentication, and the HTTP/1.1 fallback. Connection counts
//! are the server's (`ServerHandle::open_connections`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use nodelet_apiserver::User;
use nodelet_object_manager::Strategy;
use nodelet_transport::{self as transport, Negotiated, Protocol, TransportConfig};

use super::*;

pub(crate) async fn tls_server(max_streams: u32) -> (ApiServer, ServerHandle) {
    let server = ApiServer::start(
        Config::default()
            .with_tls()
            .http2_max_streams_per_connection(max_streams),
    )
    .await
    .unwrap_or_else(|e| panic!("start apiserver: {e}"));
    let handle = server.handle();
    (server, handle)
}

pub(crate) async fn h2_client(
    kube_config: kube::Config,
    transport: TransportConfig,
) -> (kube::Client, transport::Transport) {
    let (client, handle) = transport::connect(kube_config, transport)
        .await
        .unwrap_or_else(|e| panic!("transport: {e}"));
    (
        client,
        handle.unwrap_or_else(|| panic!("no transport handle")),
    )
}

/// Creates `n` ConfigMaps `cm-<i>` and a manager over `client` watching them all through
/// one pod; returns once every object was read.
pub(crate) async fn watch_many(
    handle: &ServerHandle,
    client: kube::Client,
    n: usize,
) -> ConfigMapManager {
    let names: Vec<String> = (0..n).map(|i| format!("cm-{i}")).collect();
    for name in &names {
        create(handle, config_map(name, "v1", false));
    }
    let m = ConfigMapManager::new(client, config(Strategy::Watch))
        .unwrap_or_else(|e| panic!("manager: {e}"));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("many", &refs)).unwrap());
    for name in &names {
        assert_eq!(read(&m, name).await.as_deref(), Ok("v1"), "{name}");
    }
    wait_for(
        || handle.open_watches("configmaps", None, None) == n,
        "all watches open",
    )
    .await;
    m
}

/// Waits (bounded by PATIENCE) until `cond` holds.
pub(crate) async fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn fifty_watches_share_one_http2_connection_beside_the_one_for_short_requests() {
    let (server, handle) = tls_server(100).await;
    let (client, t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    assert_eq!(t.protocol(), Some(Negotiated::Http2));
    let m = watch_many(&handle, client, 50).await;
    let open = handle.open_connections();
    assert_eq!(open.http1, 0, "{open:?}");
    // One for watches, one for short requests (opened at start; watch-lists send no LIST, so
    // the server has not seen a request on it yet and counts its protocol as unknown).
    assert_eq!(open.http2, 1, "{open:?}");
    assert_eq!(open.total(), 2, "{open:?}");
    assert_eq!(t.connections().http2, 2);
    // The transport's own counters: the same two connections, one watch-list per object.
    let counters = t.counters();
    assert_eq!(counters.open_connections().http2, 2);
    assert_eq!(counters.open_connections().http1, 0);
    let requests = counters.requests();
    assert!(requests.watch >= 50, "{requests:?}");
    assert_eq!(requests.list, 0, "watch-lists need no LIST: {requests:?}");
    m.shutdown().await;
}

#[tokio::test]
async fn at_a_server_limit_of_8_streams_50_watches_spread_over_at_least_7_connections() {
    let (server, handle) = tls_server(8).await;
    let (client, t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    let m = watch_many(&handle, client.clone(), 50).await;
    let open = handle.open_connections();
    // 7 watches per connection (one stream of headroom): 8 watch connections + 1 for short
    // requests.
    assert_eq!(open.total(), 8 + 1, "{open:?}");
    assert_eq!(t.connections().http2, open.total());

    // Every watch connection is full (7 of 8 streams): short requests still go through, many
    // at once, and another watch gets a connection of its own instead of waiting.
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let gets = (0..20).map(|i| {
        let api = api.clone();
        async move { api.get(&format!("cm-{i}")).await }
    });
    let results = tokio::time::timeout(PATIENCE, futures::future::join_all(gets))
        .await
        .unwrap_or_else(|_| panic!("short requests blocked behind full watch connections"));
    assert!(results.iter().all(Result::is_ok));
    create(&handle, config_map("late", "v1", false));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("late", &["late"])).unwrap());
    assert_eq!(read(&m, "late").await.as_deref(), Ok("v1"));
    wait_for(
        || handle.open_watches("configmaps", None, None) == 51,
        "the 51st watch open",
    )
    .await;
    m.shutdown().await;
}

#[tokio::test]
async fn after_a_connection_loss_every_watch_resumes_and_no_update_is_missed() {
    let (server, handle) = tls_server(100).await;
    let (client, _t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    let m = watch_many(&handle, client, 20).await;
    let mut changes = m.subscribe();
    handle.stop_listener().await;
    for i in 0..20 {
        update(&handle, config_map(&format!("cm-{i}"), "v2", false));
    }
    handle
        .restart_listener()
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let mut pending: std::collections::BTreeSet<String> =
        (0..20).map(|i| format!("cm-{i}")).collect();
    let wait = async {
        while !pending.is_empty() {
            match changes.recv().await {
                Ok(key) => {
                    pending.remove(&key.name);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("notifications closed"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .unwrap_or_else(|_| panic!("updates missed after the connection loss"));
    for i in 0..20 {
        assert_eq!(read(&m, &format!("cm-{i}")).await.as_deref(), Ok("v2"));
    }
    wait_for(
        || handle.open_watches("configmaps", None, None) == 20,
        "every watch open again",
    )
    .await;
    assert_eq!(handle.open_connections().http1, 0);
    m.shutdown().await;
}

#[tokio::test]
async fn bearer_tokens_authenticate_over_http2_and_the_node_authorizer_still_applies() {
    let server = ApiServer::start(Config::default().with_tls().with_auth())
        .await
        .unwrap_or_else(|e| panic!("start apiserver: {e}"));
    let handle = server.handle();
    create(&handle, config_map("cm", "v1", false));
    let yaml = server.kubeconfig_yaml(&User::node("n1"));
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&yaml).unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("kube config: {e}"));
    let (client, t) = h2_client(config, TransportConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    // No pod of n1 references the ConfigMap: the Node authorizer forbids it, for system:node:n1.
    let err = api.get("cm").await.err().map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("forbidden")),
        "{err:?}"
    );
    assert_eq!(t.protocol(), Some(Negotiated::Http2));
    assert!(handle.count_by_user("system:node:n1") >= 1);
    assert_eq!(handle.open_connections().http2, 1);
}

#[tokio::test]
async fn a_plain_http_server_is_spoken_to_over_http1_one_connection_per_watch() {
    let (server, handle) = super::server().await;
    let (client, t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    assert_eq!(t.protocol(), Some(Negotiated::Http1));
    let m = watch_many(&handle, client, 5).await;
    let open = handle.open_connections();
    assert_eq!(open.http2, 0, "{open:?}");
    assert!(open.http1 >= 5, "{open:?}");
    assert_eq!(t.connections().http1, open.total());
    m.shutdown().await;
}

#[tokio::test]
async fn http1_can_be_forced_on_a_server_that_offers_http2() {
    let (server, handle) = tls_server(100).await;
    let (client, t) = h2_client(server.kube_config(), TransportConfig::new(Protocol::Http1)).await;
    let m = watch_many(&handle, client, 3).await;
    assert_eq!(t.protocol(), Some(Negotiated::Http1));
    let open = handle.open_connections();
    assert_eq!(open.http2, 0, "{open:?}");
    assert!(open.http1 >= 3, "{open:?}");
    m.shutdown().await;
}

#[tokio::test]
async fn connections_left_empty_are_closed_after_the_idle_time_out() {
    let (server, handle) = tls_server(100).await;
    let mut tc = TransportConfig::default();
    tc.idle_timeout = Duration::from_millis(300);
    let (client, t) = h2_client(server.kube_config(), tc).await;
    let m = watch_many(&handle, client, 10).await;
    assert_eq!(handle.open_connections().total(), 2);
    m.unregister_pod(
        nodelet_core::AdmittedPod::new(pod("many", &[]))
            .unwrap()
            .uid(),
    );
    wait_for(
        || handle.open_connections().total() == 0,
        "idle connections closed",
    )
    .await;
    assert_eq!(t.connections().http2, 0);
    m.shutdown().await;
}

/// A TLS server on 127.0.0.1 whose certificate names only `api.nodelet.test` and which
/// requires a client certificate signed by its CA; answers every request with a ConfigMap.
/// Returns its URL, the CA (DER), a client certificate and key (PEM), and what it saw:
/// (client certificate presented, HTTP version) per request.
struct CertServer {
    url: String,
    ca_der: Vec<u8>,
    client_pem: (String, String),
    seen: std::sync::Arc<std::sync::Mutex<Vec<(bool, http::Version)>>>,
}

async fn cert_server() -> CertServer {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap_or_else(|e| panic!("{e}"));
    let issuer = Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let server_cert = CertificateParams::new(vec!["api.nodelet.test".to_owned()])
        .and_then(|p| p.signed_by(&server_key, &issuer))
        .unwrap_or_else(|e| panic!("{e}"));
    let client_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let client_cert = CertificateParams::new(Vec::<String>::new())
        .and_then(|p| p.signed_by(&client_key, &issuer))
        .unwrap_or_else(|e| panic!("{e}"));

    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca_cert.der().clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_client_cert_verifier(verifier).with_single_cert(
                vec![server_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_by_server = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let Ok(stream) = acceptor.accept(tcp).await else {
                continue;
            };
            let has_cert = stream
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let seen = seen_by_server.clone();
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    if let Ok(mut s) = seen.lock() {
                        s.push((has_cert, req.version()));
                    }
                    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "x", "namespace": "default", "resourceVersion": "1"}})
                    .to_string();
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(body)),
                        ))
                    }
                });
            tokio::spawn(async move {
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let _ = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    CertServer {
        url: format!("https://{addr}"),
        ca_der: ca_cert.der().to_vec(),
        client_pem: (client_cert.pem(), client_key.serialize_pem()),
        seen,
    }
}

#[tokio::test]
async fn the_kubeconfig_client_certificate_and_tls_server_name_are_honoured_over_http2() {
    use base64::Engine as _;
    let server = cert_server().await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut config = kube::Config::new(server.url.parse().unwrap_or_default());
    config.root_cert = Some(vec![server.ca_der.clone()]);
    config.auth_info = serde_json::from_value(serde_json::json!({
        "client-certificate-data": b64(&server.client_pem.0),
        "client-key-data": b64(&server.client_pem.1),
    }))
    .unwrap_or_else(|e| panic!("auth info: {e}"));

    // The certificate names api.nodelet.test, not 127.0.0.1: verification fails without the
    // tls-server-name override...
    let (client, _) = transport::client(config.clone(), TransportConfig::default())
        .unwrap_or_else(|e| panic!("transport: {e}"));
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    assert!(api.get("x").await.is_err());
    // ...and succeeds with it, presenting the client certificate, over HTTP/2.
    config.tls_server_name = Some("api.nodelet.test".to_owned());
    let (client, t) = h2_client(config, TransportConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let cm = api.get("x").await.unwrap_or_else(|e| panic!("get: {e}"));
    assert_eq!(cm.metadata.name.as_deref(), Some("x"));
    assert_eq!(t.protocol(), Some(Negotiated::Http2));
    let seen = server.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen, vec![(true, http::Version::HTTP_2)]);
}

/// A GOAWAY must not surface as an error: under `--goaway-chance`, kube-apiserver's GOAWAY made
/// requests fail with
/// `ServiceError: HTTP request failed`; Go's client sends them again elsewhere, and so must we.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_after_every_response_fails_no_request_of_a_busy_client() {
    let (server, handle) = tls_server(100).await;
    create(&handle, config_map("cm", "v1", false));
    let (client, _t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    handle.set_goaway_chance(1.0);
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut failed = Vec::new();
    for _ in 0..20 {
        let wave = (0..25).map(|_| {
            let api = api.clone();
            async move { api.get("cm").await }
        });
        for result in futures::future::join_all(wave).await {
            if let Err(e) = result {
                failed.push(format!("{e:?}"));
            }
        }
    }
    assert!(handle.goaways_sent() >= 20, "{}", handle.goaways_sent());
    assert!(
        failed.is_empty(),
        "{} of 500 failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

/// A TCP relay to `upstream` that holds the first connection it accepts until `gate` is
/// notified (`accepted` is notified once it holds it); later connections pass at once.
async fn gated_relay(
    upstream: std::net::SocketAddr,
    accepted: std::sync::Arc<tokio::sync::Notify>,
    gate: std::sync::Arc<tokio::sync::Notify>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local addr: {e}"));
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let hold = std::mem::take(&mut first);
            let (accepted, gate) = (accepted.clone(), gate.clone());
            tokio::spawn(async move {
                if hold {
                    accepted.notify_one();
                    gate.notified().await;
                }
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    addr
}

// Regression (a podCertificate test that hung one run in forty under load): the signer's
// watch stream, inside a `select!`, had started its first request — opening the client's
// first connection — when the other branch sent a request of its own. The watch was not
// polled while that request waited for the connection the watch was opening: both waited for
// good, and every later request of the client with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_left_unpolled_while_it_opens_a_connection_holds_up_no_other_request() {
    let (server, handle) = tls_server(100).await;
    create(&handle, config_map("cm", "v1", false));
    let accepted = std::sync::Arc::new(tokio::sync::Notify::new());
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let relay = gated_relay(server.addr(), accepted.clone(), gate.clone()).await;
    let mut config = server.kube_config();
    config.cluster_url = format!("https://{relay}")
        .parse()
        .unwrap_or_else(|e| panic!("relay url: {e}"));
    // No warm-up connection: the first request opens the client's first connection.
    let (client, _t) = transport::client(config, TransportConfig::default())
        .unwrap_or_else(|e| panic!("transport: {e}"));
    let api: Api<ConfigMap> = Api::default_namespaced(client);

    // The first request runs until its connection is accepted (it is opening the connection),
    // then is left unpolled.
    let first = api.get("cm");
    tokio::pin!(first);
    tokio::select! {
        result = &mut first => panic!("answered through a closed gate: {result:?}"),
        () = accepted.notified() => {}
    }
    gate.notify_one();
    let second = tokio::time::timeout(PATIENCE, api.get("cm"))
        .await
        .unwrap_or_else(|_| panic!("a request waited for good on a connection nobody opened"));
    assert_eq!(
        second
            .map(|cm| cm.data.and_then(|d| d.get("k").cloned()))
            .ok()
            .flatten()
            .as_deref(),
        Some("v1")
    );
    // The first request, polled again, gets its answer too.
    let first = tokio::time::timeout(PATIENCE, first)
        .await
        .unwrap_or_else(|_| panic!("the first request never finished"));
    assert!(first.is_ok(), "{first:?}");
}

//! HTTP/2 flow control against nodelet-apiserver over TLS + h2: watches whose reader stopped
//! (the response body held, never polled) while 1 MiB events arrive for them never stop the
//! other watches of their connection; a reader that resumes gets every event whole; the
//! managers' notifications never wait for a subscriber; 1 MiB objects arrive whole.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, WatchEvent, WatchParams};
use nodelet_core::AdmittedPod;
use nodelet_object_manager::{SecretManager, Strategy};
use nodelet_transport::TransportConfig;

use super::transport::{h2_client, tls_server, wait_for};
use super::*;

/// The largest ConfigMap value (and Secret payload) the API server stores.
const MIB: usize = 1024 * 1024;

/// A value of `len` bytes, different in each `round`.
fn big(round: usize, len: usize) -> String {
    let fill = char::from(b'a' + (round % 26) as u8);
    let mut value = format!("round {round}:");
    let rest = len.saturating_sub(value.len());
    value.extend(std::iter::repeat_n(fill, rest));
    value
}

/// A watch of the one ConfigMap `name`, as the managers ask for it.
fn watch_one(name: &str) -> WatchParams {
    WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290)
}

type Events = BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>;

async fn open(api: &Api<ConfigMap>, name: &str) -> Events {
    api.watch(&watch_one(name), "0")
        .await
        .unwrap_or_else(|e| panic!("watch {name}: {e}"))
        .boxed()
}

/// Receives `(name, value)` pairs until every name in `pending` was seen with `want`;
/// `false` when PATIENCE ran out first (`pending` then names the ones missing).
async fn all_saw(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
    pending: &mut BTreeSet<String>,
    want: &str,
) -> bool {
    let wait = async {
        while !pending.is_empty() {
            match seen.recv().await {
                Some((name, value)) if value == want => {
                    pending.remove(&name);
                }
                Some(_) => {}
                None => panic!("every live watch ended"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait).await.is_ok()
}

/// Watches of one connection, `stalled` of them held unread while every round writes a 1 MiB
/// value to each of their objects and a new value (`live_value`) to each of the `live` ones,
/// which are read as events arrive and must see every round's value. Then the held ones are
/// read: each must deliver every value, whole and in order.
struct Stall {
    transport: TransportConfig,
    stalled: usize,
    live: usize,
    rounds: usize,
    live_value: fn(usize) -> String,
}

impl Stall {
    async fn run(self) {
        let Stall {
            stalled: n_stalled,
            live: n_live,
            rounds,
            live_value,
            ..
        } = self;
        let (server, handle) = tls_server(100).await;
        let (client, t) = h2_client(server.kube_config(), self.transport).await;
        for i in 0..n_stalled {
            create(&handle, config_map(&format!("stalled-{i}"), "v0", false));
        }
        for i in 0..n_live {
            create(&handle, config_map(&format!("live-{i}"), "v0", false));
        }
        let api: Api<ConfigMap> = Api::default_namespaced(client);
        // Held and not polled until the end: their reader stopped.
        let mut stalled = Vec::new();
        for i in 0..n_stalled {
            stalled.push(open(&api, &format!("stalled-{i}")).await);
        }
        // Read as events arrive: (name, value) of every ADDED and MODIFIED.
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..n_live {
            let mut events = open(&api, &format!("live-{i}")).await;
            let tx = seen_tx.clone();
            tokio::spawn(async move {
                while let Some(Ok(event)) = events.next().await {
                    if let WatchEvent::Added(cm) | WatchEvent::Modified(cm) = event {
                        let name = cm.metadata.name.clone().unwrap_or_default();
                        if tx.send((name, value(&cm))).is_err() {
                            return;
                        }
                    }
                }
            });
        }
        drop(seen_tx);
        wait_for(
            || handle.open_watches("configmaps", None, None) == n_stalled + n_live,
            "all watches open",
        )
        .await;
        // Every watch on one connection (the other one is for short requests).
        let open_connections = handle.open_connections();
        assert_eq!(open_connections.total(), 2, "{open_connections:?}");
        assert_eq!(t.connections().http2, 2);

        for round in 1..=rounds {
            for i in 0..n_stalled {
                let name = format!("stalled-{i}");
                update(&handle, config_map(&name, &big(round, MIB), false));
            }
            let want = live_value(round);
            for i in 0..n_live {
                update(&handle, config_map(&format!("live-{i}"), &want, false));
            }
            let mut pending: BTreeSet<String> = (0..n_live).map(|i| format!("live-{i}")).collect();
            let all = all_saw(&mut seen, &mut pending, &want).await;
            assert!(
                all,
                "round {round}: {pending:?} saw no update within {PATIENCE:?} while {n_stalled} \
                 watches on the same connection were not read (1 MiB events)"
            );
        }
        assert_eq!(handle.open_connections().total(), 2);

        // The readers resume: each gets its ADDED and then every round's value, whole, in order.
        for (i, mut events) in stalled.into_iter().enumerate() {
            let mut values = Vec::new();
            let read = async {
                while values.len() <= rounds {
                    match events.next().await {
                        Some(Ok(WatchEvent::Added(cm) | WatchEvent::Modified(cm))) => {
                            values.push(value(&cm));
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => panic!("stalled-{i}: {e}"),
                        None => return,
                    }
                }
            };
            let read_all = tokio::time::timeout(PATIENCE, read).await.is_ok();
            assert!(read_all, "stalled-{i}: events not delivered after resuming");
            assert_eq!(values.len(), rounds + 1, "stalled-{i}");
            assert_eq!(values[0], "v0");
            for (round, v) in values.iter().enumerate().skip(1) {
                assert!(
                    *v == big(round, MIB),
                    "stalled-{i}, round {round}: {} bytes, not the value written",
                    v.len()
                );
            }
        }
    }
}

/// The scenario: a few watches on one connection stop being read while their objects
/// get 1 MiB updates, again and again. Each unread watch holds at most its stream window of the
/// connection's window, and the connection window has room for every stream's window, so the
/// other watches on that connection keep receiving every change.
#[tokio::test]
async fn a_stalled_watch_does_not_stall_the_other_watches_on_its_connection() {
    Stall {
        transport: TransportConfig::default(),
        stalled: 4,
        live: 4,
        rounds: 6,
        live_value: |round| format!("r{round}"),
    }
    .run()
    .await;
}

/// The bound itself: a connection carrying as many watches as it may (8 here), all but one of
/// them unread; the connection window has room for exactly every stream's window, so the one
/// read still receives its own 1 MiB events, window by window.
#[tokio::test]
async fn with_all_other_watches_of_a_full_connection_stalled_the_last_still_gets_1_mib_events() {
    Stall {
        transport: TransportConfig::default().with_max_streams_per_connection(8),
        stalled: 7,
        live: 1,
        rounds: 3,
        live_value: |round| big(round + 100, MIB),
    }
    .run()
    .await;
}

/// The managers' side: reflectors read their watches as events arrive, and notifications go
/// out on a broadcast channel that never waits for a subscriber (one that falls behind gets
/// `Lagged` and resyncs), so a subscriber that stopped reading delays nothing, and 1 MiB
/// events of some objects do not hold back the small ones of others on the same connection.
#[tokio::test]
async fn a_subscriber_that_never_reads_delays_no_notification_while_big_objects_change() {
    const BIG: usize = 3;
    const SMALL: usize = 5;
    const ROUNDS: usize = 4;
    let (server, handle) = tls_server(100).await;
    let (client, t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    let mut names = Vec::new();
    for i in 0..BIG {
        names.push(format!("big-{i}"));
    }
    for i in 0..SMALL {
        names.push(format!("small-{i}"));
    }
    for name in &names {
        create(&handle, config_map(name, "v0", false));
    }
    let mut settings = config(Strategy::Watch);
    settings.notify_capacity = 16;
    let m = ConfigMapManager::new(client, settings).unwrap_or_else(|e| panic!("manager: {e}"));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let admitted = AdmittedPod::new(pod("all", &refs)).unwrap_or_else(|e| panic!("{e}"));
    m.register_pod(&admitted);
    for name in &names {
        assert_eq!(read(&m, name).await.as_deref(), Ok("v0"), "{name}");
    }
    wait_for(
        || handle.open_watches("configmaps", None, None) == names.len(),
        "all watches open",
    )
    .await;
    assert_eq!(t.connections().http2, 2);
    let _never_read = m.subscribe();
    let mut changes = m.subscribe();

    for round in 1..=ROUNDS {
        // Name → the value its notification must bring.
        let mut pending = BTreeMap::new();
        for i in 0..BIG {
            let (name, value) = (format!("big-{i}"), big(round, MIB));
            update(&handle, config_map(&name, &value, false));
            pending.insert(name, value);
        }
        for i in 0..SMALL {
            let (name, value) = (format!("small-{i}"), format!("r{round}"));
            update(&handle, config_map(&name, &value, false));
            pending.insert(name, value);
        }
        let wait = async {
            while !pending.is_empty() {
                match changes.recv().await {
                    Ok(key) => {
                        // A notification says "changed"; the value read may be a later one.
                        let got = read(&m, &key.name).await;
                        if pending
                            .get(&key.name)
                            .is_some_and(|want| got.as_ref() == Ok(want))
                        {
                            pending.remove(&key.name);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        panic!("the subscriber that reads fell behind")
                    }
                    Err(broadcast::error::RecvError::Closed) => panic!("notifications closed"),
                }
            }
        };
        let all = tokio::time::timeout(PATIENCE, wait).await.is_ok();
        let missing: Vec<&String> = pending.keys().collect();
        assert!(
            all,
            "round {round}: {missing:?} not notified within {PATIENCE:?}"
        );
    }
    m.shutdown().await;
}

/// The largest objects the API server takes, through the transport's stream window (far
/// smaller than one event): a 1 MiB ConfigMap value and a 1 MiB Secret payload (a watch event
/// of about 1.4 MiB once base64-encoded), created and then replaced.
#[tokio::test]
async fn a_1_mib_config_map_and_secret_arrive_whole_over_http2() {
    let (server, handle) = tls_server(100).await;
    let (client, _t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    let secret = |round: usize| {
        let payload: Vec<u8> = (0..MIB).map(|i| (i * 7 + round) as u8).collect();
        (
            SecretBuilder::new("default", "s")
                .data("k", &payload)
                .json(),
            payload,
        )
    };
    create(&handle, config_map("cm", &big(0, MIB), false));
    let (manifest, _) = secret(0);
    create(&handle, manifest);
    let configmaps = ConfigMapManager::new(client.clone(), config(Strategy::Watch))
        .unwrap_or_else(|e| panic!("manager: {e}"));
    let secrets = SecretManager::new(client, config(Strategy::Watch))
        .unwrap_or_else(|e| panic!("manager: {e}"));
    let pod = PodBuilder::new("default", "big")
        .uid("uid-big")
        .config_map_volume("v-cm", "cm")
        .secret_volume("v-s", "s")
        .build();
    let admitted = AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"));
    configmaps.register_pod(&admitted);
    secrets.register_pod(&admitted);
    let secret_payload = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(|b| b.0.clone())
            .unwrap_or_default()
    };

    let got = read(&configmaps, "cm")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(got == big(0, MIB), "created: {} bytes", got.len());
    let got = secrets
        .get("default", "s")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(secret_payload(&got) == secret(0).1, "created secret");

    let mut cm_changes = configmaps.subscribe();
    let mut secret_changes = secrets.subscribe();
    update(&handle, config_map("cm", &big(1, MIB), false));
    let (manifest, payload) = secret(1);
    update(&handle, manifest);
    changed(&mut cm_changes, "cm").await;
    notified(&mut secret_changes, ObjectRef::secret("default", "s")).await;
    let got = read(&configmaps, "cm")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(got == big(1, MIB), "updated: {} bytes", got.len());
    let got = secrets
        .get("default", "s")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(secret_payload(&got) == payload, "updated secret");
    configmaps.shutdown().await;
    secrets.shutdown().await;
}

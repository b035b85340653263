//! The agent's root directory on a full disk: a ConfigMap update that cannot be
//! written keeps the old content whole, is reported by a `FailedMount` event and `/pods`
//! (`No space left on device`), is logged at WARN once for the volume however often it is
//! retried, and is written with an INFO line once space is free. Needs root (it mounts a small
//! tmpfs as the root directory); CI runs as root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};
use tempfile::TempDir;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::support::{NODE, PATIENCE, World, poll_pause};

const POD: &str = "disk-full";
const VOLUME: &str = "cfg";
const ENOSPC: &str = "No space left on device";
/// The new content: it must reach the file once there is room, and never a log line.
const NEW_CONTENT: &str = "payload-v2-must-not-be-logged\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_root_directory_is_logged_once_per_volume_and_its_recovery_once() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (uid 0): it mounts a small tmpfs as the agent's root directory \
         and fills it; CI runs as root"
    );
    let logs = VolumeManagerLog::install();
    // Declared before the world: on a failure the agent goes first, then the tmpfs.
    let tmpfs = Tmpfs::mount("size=4m,mode=0755");
    let root = tmpfs.path().to_path_buf();
    let world = World::start_with(|c| c.root_dir = root.clone()).await;
    let h = world.server.handle();
    h.create(
        ConfigMapBuilder::new("default", "settings")
            .data("app.conf", "version=1\n")
            .data("limits.conf", "max=10\n")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pod = h
        .create(
            PodBuilder::new("default", POD)
                .node(NODE)
                .container(json!({"name": "c", "image": "x",
                    "volumeMounts": [{"name": VOLUME, "mountPath": "/etc/app"}]}))
                .config_map_volume(VOLUME, "settings")
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let volume_dir = crate::support::pod_dir(&root, &pod)
        .join(format!("volumes/kubernetes.io~configmap/{VOLUME}"));
    nodelet_e2e::wait_for_content(&volume_dir.join("app.conf"), b"version=1\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let before = tree(&volume_dir);
    assert!(
        before.values().any(|v| v == "version=1\n") && before.contains_key(Path::new("..data")),
        "{before:?}"
    );

    // Fill the disk, then change the ConfigMap: the remount cannot write its new data.
    let filler = fill(&root);
    h.update(
        ConfigMapBuilder::new("default", "settings")
            .data("app.conf", NEW_CONTENT)
            .data("limits.conf", "max=10\n")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // The failure is an event (and keeps failing: the first attempt and at least three
    // retries with the backoff, 0.5 s, 1 s, 2 s, ...) ...
    let events = wait_for_failed_mounts(&world.admin, 4).await;
    assert!(
        events.iter().all(|e| e.type_.as_deref() == Some("Warning")),
        "{events:?}"
    );
    // ... and `/pods` names it ...
    let pods = world.with_agent(|a| a.pods_json()).await;
    let last_error = volume_view(&pods)["lastError"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        last_error.contains(ENOSPC),
        "/pods does not name the full disk: {pods}"
    );
    // ... while the old content stays whole and readable.
    assert_eq!(tree(&volume_dir), before, "the old content changed");
    assert_eq!(
        std::fs::read_to_string(volume_dir.join("app.conf")).ok(),
        Some("version=1\n".to_owned())
    );

    // One WARN line for the volume, not one per retry; no recovery yet.
    let warnings = logs.for_volume(&volume_dir, tracing::Level::WARN);
    assert_eq!(
        warnings.len(),
        1,
        "expected exactly one WARN line for the volume: {warnings:#?}"
    );
    let warning = &warnings[0];
    assert_eq!(
        warning.message,
        "volume cannot be written: node-side failure, retrying"
    );
    assert_eq!(warning.field("pod.namespace"), "default");
    assert_eq!(warning.field("pod.name"), POD);
    assert_eq!(warning.field("volume"), VOLUME);
    assert_eq!(warning.field("fault"), "ENOSPC");
    assert!(warning.field("error").contains(ENOSPC), "{warning:?}");
    assert!(
        logs.for_volume(&volume_dir, tracing::Level::INFO)
            .is_empty(),
        "a recovery was logged while the disk is full"
    );

    // Free the space: the next retry (at the backoff, up to the number of failures so far)
    // writes the new content and logs the recovery once.
    drop(filler);
    wait_until("the new content after space was freed", || {
        std::fs::read_to_string(volume_dir.join("app.conf"))
            .ok()
            .as_deref()
            == Some(NEW_CONTENT)
    })
    .await;
    wait_until("the INFO recovery line", || {
        !logs
            .for_volume(&volume_dir, tracing::Level::INFO)
            .is_empty()
    })
    .await;
    let recoveries = logs.for_volume(&volume_dir, tracing::Level::INFO);
    assert_eq!(recoveries.len(), 1, "{recoveries:#?}");
    let recovery = &recoveries[0];
    assert_eq!(
        recovery.message,
        "volume written again after a node-side failure"
    );
    assert_eq!(recovery.field("fault"), "ENOSPC");
    assert!(
        recovery
            .field("failures")
            .parse::<u32>()
            .is_ok_and(|n| n >= 4),
        "{recovery:?}"
    );
    assert_eq!(
        logs.for_volume(&volume_dir, tracing::Level::WARN).len(),
        1,
        "a second WARN line for the volume"
    );
    let pods = world.with_agent(|a| a.pods_json()).await;
    assert!(volume_view(&pods)["lastError"].is_null(), "{pods}");
    // Never payload bytes in the log.
    let everything = logs.all();
    assert!(
        !format!("{everything:?}").contains(NEW_CONTENT.trim_end()),
        "the payload reached the log: {everything:#?}"
    );

    world.stop().await;
    drop(tmpfs);
}

/// A tmpfs mounted on a fresh temporary directory; unmounted when dropped, also when the test
/// fails (lazily: an agent still running must not keep it mounted).
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    fn mount(options: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(options),
        )
        .unwrap_or_else(|e| {
            panic!(
                "mount -t tmpfs -o {options} {}: {e} (needs root with CAP_SYS_ADMIN)",
                dir.path().display()
            )
        });
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Err(e) = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH) {
            eprintln!("umount {}: {e}", self.dir.path().display());
        }
    }
}

/// A file filling the file system of `dir` until `ENOSPC`; removed when dropped.
struct Filler {
    path: PathBuf,
}

fn fill(dir: &Path) -> Filler {
    use std::io::Write as _;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}"));
    let chunk = vec![0u8; 64 * 1024];
    loop {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    Filler { path }
}

impl Drop for Filler {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            eprintln!("remove {}: {e}", self.path.display());
        }
    }
}

/// What readers of the volume `dir` see: the visible names, `..data` and the data directory it
/// points to, with symlink targets and file contents, sorted. Other `..` entries (the data
/// directory of a write in progress, removed when it fails) are left out.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let current = std::fs::read_link(dir.join("..data")).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
            let name = entry.file_name();
            let hidden = name.to_string_lossy().starts_with("..");
            if d == dir && hidden && name != "..data" && Path::new(&name) != current {
                continue;
            }
            let what = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => std::fs::read_link(&path)
                    .map(|t| format!("-> {}", t.display()))
                    .unwrap_or_else(|e| e.to_string()),
                Ok(m) if m.is_dir() => {
                    stack.push(path);
                    "dir".to_owned()
                }
                Ok(_) => std::fs::read_to_string(&path).unwrap_or_else(|e| e.to_string()),
                Err(e) => e.to_string(),
            };
            out.insert(rel, what);
        }
    }
    out
}

/// The `/pods` entry of the test pod's volume.
fn volume_view(pods: &Value) -> &Value {
    pods["pods"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == POD))
        .map_or(&Value::Null, |p| &p["volumes"][0])
}

/// Waits until the `FailedMount` events of the test pod naming the full disk count `n`
/// attempts in all (repeats of one message bump one event's count).
async fn wait_for_failed_mounts(admin: &kube::Client, n: i32) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(admin.clone(), "default");
    let mut last = Vec::new();
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            last = api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|e| {
                    e.involved_object.name.as_deref() == Some(POD)
                        && e.reason.as_deref() == Some("FailedMount")
                        && e.message.as_deref().is_some_and(|m| {
                            m.starts_with(&format!(
                                "MountVolume.SetUp failed for volume \"{VOLUME}\" : "
                            )) && m.contains(ENOSPC)
                        })
                })
                .collect();
            if last.iter().map(|e| e.count.unwrap_or(1)).sum::<i32>() >= n {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    if waited.is_err() {
        let seen: Vec<_> = last.iter().map(|e| (&e.message, e.count)).collect();
        panic!("never {n} FailedMount attempts naming {ENOSPC:?}: {seen:?}");
    }
    last
}

/// Polls `done` until it holds. The bound is generous: after n failures the next retry waits
/// 2^(n-1) × 500 ms (VM-9), on a loaded machine possibly more than one [`PATIENCE`].
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(2 * PATIENCE, async {
        while !done() {
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never saw {what}"));
}

/// One log event of the volume manager.
#[derive(Debug, Clone)]
struct LogLine {
    level: tracing::Level,
    message: String,
    fields: BTreeMap<String, String>,
}

impl LogLine {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// The volume manager's log events (INFO and above) of every agent in this test binary,
/// recorded by a process-wide `tracing` subscriber: the agent's tasks run on the runtime's
/// worker threads, where a thread-local subscriber would not see them. Tests tell their lines
/// apart by path (each test has its own root directory).
#[derive(Clone)]
struct VolumeManagerLog {
    lines: Arc<Mutex<Vec<LogLine>>>,
}

impl VolumeManagerLog {
    fn install() -> VolumeManagerLog {
        static LOG: OnceLock<VolumeManagerLog> = OnceLock::new();
        LOG.get_or_init(|| {
            let log = VolumeManagerLog {
                lines: Arc::default(),
            };
            let filter = tracing_subscriber::filter::Targets::new()
                .with_target("nodelet_volume_manager", tracing::Level::INFO);
            let subscriber = tracing_subscriber::registry()
                .with(tracing_subscriber::Layer::with_filter(log.clone(), filter));
            tracing::subscriber::set_global_default(subscriber).unwrap_or_else(|e| {
                panic!("another test installed a global tracing subscriber: {e}")
            });
            log
        })
        .clone()
    }

    fn all(&self) -> Vec<LogLine> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The lines at exactly `level` about the volume in `dir`.
    fn for_volume(&self, dir: &Path, level: tracing::Level) -> Vec<LogLine> {
        let dir = dir.display().to_string();
        self.all()
            .into_iter()
            .filter(|l| l.level == level && l.field("path") == dir)
            .collect()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for VolumeManagerLog {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = LogLine {
            level: *event.metadata().level(),
            message: fields.0.remove("message").unwrap_or_default(),
            fields: fields.0,
        };
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(line);
        }
    }
}

/// An event's fields as text.
#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

//! Failures during a remount never delete or empty a live volume (upstream #113242): the old
//! content stays, the error becomes an event, the remount is retried with backoff (VM-9,
//! VM-10).

use std::fs;
use std::time::Duration;

use nodelet_core::events::reasons;
use nodelet_object_manager::Strategy;
use serde_json::json;

use crate::support::*;

fn quick_retries(config: &mut nodelet_volume_manager::Config) {
    config.initial_backoff = Duration::from_millis(50);
    config.max_backoff = Duration::from_millis(200);
    config.resync_interval = None;
}

// #113242 with an API outage: the Get strategy reads live, so the remount's fetch fails.
#[tokio::test]
async fn an_api_outage_during_a_remount_keeps_the_old_content() {
    let env = Env::start_with(Options {
        strategy: Strategy::Get,
        configure: quick_retries,
        ..Options::default()
    })
    .await;
    env.create(config_map("cm", json!({"data-1": "value-1"})));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, CM, "cfg");

    env.api.stop_listener().await;
    env.vm.update_pod(&admitted(&pod)); // a pod resync asks for a remount
    let event = env.event(|e| e.reason == reasons::FAILED_MOUNT).await;
    assert!(
        event
            .message
            .starts_with(r#"MountVolume.SetUp failed for volume "cfg" : "#),
        "{}",
        event.message
    );
    assert_eq!(files(&dir), text(&[("data-1", "value-1")]));
    within(env.vm.wait_for_attach_and_mount(&admitted(&pod)))
        .await
        .unwrap();

    env.update(config_map("cm", json!({"data-1": "value-2"})));
    env.api.restart_listener().await.unwrap();
    env.until("the retried remount writes value-2", || {
        files(&dir) == text(&[("data-1", "value-2")])
    })
    .await;
    let snapshot = env.vm.snapshot();
    assert_eq!(snapshot[0].volumes[0].last_error, None);
}

// #113242 with a failing write: a foreign file occupies a name the new payload needs; the
// write is refused, everything visible before stays, and the retry succeeds once it is gone.
#[tokio::test]
async fn a_failed_remount_write_never_empties_the_volume() {
    let env = Env::start_with(Options {
        configure: quick_retries,
        ..Options::default()
    })
    .await;
    env.create(config_map("cm", json!({"data-1": "value-1"})));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, CM, "cfg");
    fs::write(dir.join("data-2"), b"foreign").unwrap();

    env.update(config_map(
        "cm",
        json!({"data-1": "value-1b", "data-2": "value-2"}),
    ));
    let event = env.event(|e| e.reason == reasons::FAILED_MOUNT).await;
    assert!(event.message.contains("data-2"), "{}", event.message);
    assert_eq!(fs::read(dir.join("data-1")).unwrap(), b"value-1");
    assert!(dir.exists());

    fs::remove_file(dir.join("data-2")).unwrap();
    env.until("the retry succeeds", || {
        files(&dir) == text(&[("data-1", "value-1b"), ("data-2", "value-2")])
    })
    .await;
}

//! The image table's `files` under the process runtime (needs root, as `process_runtime`): a
//! file an image has at a fixed path the host lacks (busybox's `/bin/sysctl`) is there for the
//! container, by that path, read-only, and nothing of it appears on the host.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

use nodelet_runtime::{ImageEntry, ImageTable};
use serde_json::json;

use crate::process_runtime::{create, pod, start_on, wait_for_log, wait_for_phase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_images_own_file_is_found_at_its_absolute_path_read_only_and_not_on_the_host() {
    let files = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tool = files.path().join("tool");
    fs::write(&tool, "#!/bin/sh\necho \"tool ran as $0\"\n").unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    // `/bin` is a link to `usr/bin` on merged-/usr hosts: the file lands where it leads.
    let target = PathBuf::from("/bin/nodelet-test-image-tool");
    assert!(!target.exists(), "the host has no {}", target.display());
    let entry = ImageEntry {
        image: "example.com/tools:*".to_owned(),
        entrypoint: vec!["sh".to_owned(), "-c".to_owned()],
        args: Vec::new(),
        path: Vec::new(),
        user: None,
        group: None,
        working_dir: None,
        files: [(target.clone(), tool.clone())].into_iter().collect(),
    };
    let (world, _reaper) = start_on(nodelet_apiserver::Config::default(), true, |c, _| {
        c.images = ImageTable::new(vec![entry]);
    })
    .await;
    let script = "/bin/nodelet-test-image-tool; \
                  if echo x > /bin/nodelet-test-image-tool 2>/dev/null; \
                  then echo write=ok; else echo write=refused; fi";
    let created = create(
        &world,
        pod("tools")
            .spec(json!({"restartPolicy": "Never"}))
            .container(json!({"name": "c", "image": "example.com/tools:1", "args": [script]}))
            .json(),
    );
    wait_for_phase(&world, "tools", "Succeeded").await;
    let log = wait_for_log(&world.root_dir(), &created, &["tool ran", "write="]).await;
    assert!(
        log.contains("tool ran as /bin/nodelet-test-image-tool"),
        "{log}"
    );
    assert!(log.contains("write=refused"), "{log}");
    assert!(!target.exists(), "nothing of it on the host");
    assert_eq!(
        fs::read_to_string(&tool).unwrap_or_default(),
        "#!/bin/sh\necho \"tool ran as $0\"\n"
    );
}

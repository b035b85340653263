//! The container's init process end to end: each test starts the real `nodelet-container-init`
//! binary (as root, which these tests need) with a spec, runs `/bin/sh` in the container and
//! checks what the program saw and that the host kept nothing: no file, no mount.

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nodelet_runtime::sandbox::{self, START_FAILED};
use nodelet_runtime::spec::{LaunchSpec, MountSpec};
use tempfile::TempDir;

/// A hang guard only (a broken init would otherwise block the test forever), not a measure.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A container to start: its directory (spec, scratch, host-side volumes) and spec.
struct Fixture {
    dir: TempDir,
    tag: String,
    spec: LaunchSpec,
}

/// A started init process and what it wrote on the status socket before exec or exit.
struct Started {
    child: Child,
    status: Vec<u8>,
}

/// A finished container.
struct Finished {
    code: Option<i32>,
    status: String,
    stdout: String,
    stderr: String,
}

impl Fixture {
    /// A container running `/bin/sh -c script` as root in `/`; `TAG` in the script is replaced
    /// by the fixture's random tag and `DIR` by its host directory.
    fn shell(script: &str) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root (uid 0): the init process makes mount namespaces; CI runs as root"
        );
        let dir = tempfile::Builder::new()
            .prefix("nodelet-sandbox-")
            .tempdir_in(base_dir())
            .unwrap();
        let tag = format!("{:016x}", rand::random::<u64>());
        let scratch = dir.path().join("scratch");
        fs::create_dir(&scratch).unwrap();
        fs::set_permissions(&scratch, fs::Permissions::from_mode(0o700)).unwrap();
        let script = script
            .replace("TAG", &tag)
            .replace("DIR", &dir.path().display().to_string());
        let spec = LaunchSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script],
            uid: 0,
            gid: 0,
            groups: vec![],
            working_dir: "/".into(),
            hostname: format!("pod-{}", &tag[..8]),
            mounts: vec![],
            scratch,
            masked: vec![],
            status_socket: format!("nodelet-test-{tag}"),
        };
        Self { dir, tag, spec }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn mount(&mut self, source: PathBuf, target: &str, read_only: bool) {
        let target = PathBuf::from(target.replace("TAG", &self.tag));
        self.spec.mounts.push(MountSpec {
            source,
            target,
            read_only,
        });
    }

    /// Starts the init process and reads the status socket to its end (exec or failure).
    fn start(&self) -> Started {
        let name = SocketAddr::from_abstract_name(self.spec.status_socket.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&name).unwrap();
        listener.set_nonblocking(true).unwrap();
        let spec_path = self.path("spec.json");
        fs::write(&spec_path, serde_json::to_vec(&self.spec).unwrap()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet-container-init"))
            .arg(&spec_path)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("NODELET_TEST", "value with spaces")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stream = accept(&listener, &mut child);
        let mut status = Vec::new();
        if let Some(mut stream) = stream {
            stream.set_nonblocking(false).unwrap();
            stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
            stream.read_to_end(&mut status).unwrap();
        }
        Started { child, status }
    }

    fn run(&self) -> Finished {
        self.start().finish()
    }

    /// Asserts that no mount of this container shows in the host's mount table.
    fn assert_no_host_mounts(&self) {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let scratch = self.spec.scratch.display().to_string();
        for line in mountinfo.lines() {
            assert!(
                !line.contains(&scratch) && !line.contains(&self.tag),
                "a container mount is visible on the host: {line}"
            );
        }
    }
}

impl Started {
    fn finish(self) -> Finished {
        let output = self.child.wait_with_output().unwrap();
        Finished {
            code: output.status.code(),
            status: String::from_utf8(self.status).unwrap(),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }
}

impl Finished {
    /// The value of the `key=value` line the script printed.
    fn value(&self, key: &str) -> &str {
        let prefix = format!("{key}=");
        self.stdout
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {key}= in the output: {self:?}"))
    }

    fn assert_started_and_succeeded(&self) {
        assert_eq!(self.status, "", "the status socket gets no bytes on exec");
        assert_eq!(self.code, Some(0), "the container failed: {self:?}");
    }
}

impl std::fmt::Debug for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.status, self.stdout, self.stderr
        )
    }
}

/// The init process's connection, or `None` when it exited without connecting.
fn accept(listener: &UnixListener, child: &mut Child) -> Option<UnixStream> {
    let step = Duration::from_millis(5);
    for _ in 0..HANG_GUARD.as_millis() / step.as_millis() {
        match listener.accept() {
            Ok((stream, _)) => return Some(stream),
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(err) => panic!("accept on the status socket: {err}"),
        }
        if child.try_wait().unwrap().is_some() {
            // It may have connected just before exiting.
            return listener.accept().ok().map(|(stream, _)| stream);
        }
        std::thread::sleep(step);
    }
    panic!("the init process neither connected nor exited");
}

/// Where fixtures live: the target directory, but not under /tmp (the container's /tmp is its
/// own, so a masked directory or a working directory there would prove nothing).
fn base_dir() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    match target.starts_with("/tmp") {
        true => PathBuf::from("/var/tmp"),
        false => target.to_path_buf(),
    }
}

/// A kubelet-style volume directory: `..<version>/key`, `..data -> ..<version>`,
/// `key -> ..data/key`.
fn atomic_volume(dir: &Path, value: &str) {
    fs::create_dir_all(dir.join("..2026_01_01_v1")).unwrap();
    fs::write(dir.join("..2026_01_01_v1/key"), value).unwrap();
    symlink("..2026_01_01_v1", dir.join("..data")).unwrap();
    symlink("..data/key", dir.join("key")).unwrap();
}

/// The kubelet's atomic update: a new version directory, then `..data` renamed over.
fn swap_atomic_volume(dir: &Path, value: &str) {
    fs::create_dir(dir.join("..2026_01_01_v2")).unwrap();
    fs::write(dir.join("..2026_01_01_v2/key"), value).unwrap();
    symlink("..2026_01_01_v2", dir.join("..data_tmp")).unwrap();
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
}

#[test]
fn check_support_passes_as_root_with_overlay_and_tmpfs() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (uid 0); CI runs as root"
    );
    sandbox::check_support().unwrap();
}

#[test]
fn a_container_sees_its_mounts_and_its_writes_stay_out_of_the_host() {
    let mut fixture = Fixture::shell(
        r#"
        echo "config=$(cat /etc/config-TAG/key)"
        echo "hosts=$(cat /etc/hosts)"
        echo "ro=$(cat /data-TAG/ro/ro-file)"
        echo "ro-write=$(touch /data-TAG/ro/new 2>&1)"
        echo private > /tmp/nodelet-test-TAG && echo "tmp=$(cat /tmp/nodelet-test-TAG)"
        echo root > /etc/nodelet-test-TAG && echo "etc=$(cat /etc/nodelet-test-TAG)"
        echo "masked=$(ls -A DIR/agent | wc -l)"
        echo "hostname=$(uname -n)"
        echo "pwd=$(pwd)"
        echo "env=$NODELET_TEST"
        echo "id=$(id -u) $(id -G)"
        while read -r key value; do
            if [ "$key" = SigIgn: ]; then echo "sigign=$value"; fi
        done < /proc/self/status
        "#,
    );
    let config = fixture.path("agent/pods/p1/volumes/config");
    atomic_volume(&config, "v1");
    let ro = fixture.path("agent/pods/p1/volumes/ro");
    fs::create_dir_all(&ro).unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(ro.join("ro-file"), "ro").unwrap();
    let hosts = fixture.path("agent/pods/p1/etc-hosts");
    fs::write(&hosts, "127.0.0.1 pod").unwrap();
    fs::create_dir_all(fixture.path("agent/pods/p2/volumes/secret")).unwrap();
    fs::write(fixture.path("agent/pods/p2/volumes/secret/token"), "s").unwrap();
    fixture.mount(config, "/etc/config-TAG", false);
    fixture.mount(ro, "/data-TAG/ro", true);
    fixture.mount(hosts, "/etc/hosts", false);
    fixture.spec.masked = vec![fixture.path("agent"), fixture.path("no-such-dir")];
    fixture.spec.working_dir = format!("/work-{}/sub", fixture.tag).into();
    let tag = fixture.tag.clone();
    let host_etc_hosts = fs::read("/etc/hosts").ok();
    fixture.assert_no_host_mounts();

    let finished = fixture.run();

    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("config"), "v1");
    assert_eq!(finished.value("hosts"), "127.0.0.1 pod");
    assert_eq!(finished.value("ro"), "ro");
    assert!(
        finished.value("ro-write").contains("Read-only file system"),
        "{finished:?}"
    );
    assert_eq!(finished.value("tmp"), "private");
    assert_eq!(finished.value("etc"), "root");
    assert_eq!(finished.value("masked"), "0");
    assert_eq!(finished.value("hostname"), fixture.spec.hostname);
    assert_eq!(finished.value("pwd"), format!("/work-{tag}/sub"));
    assert_eq!(finished.value("env"), "value with spaces");
    assert_eq!(finished.value("id"), "0 0");
    let sigign = u64::from_str_radix(finished.value("sigign"), 16).unwrap();
    assert_eq!(
        sigign & (1 << (13 - 1)),
        0,
        "SIGPIPE is ignored in the program"
    );

    for leaked in [
        format!("/tmp/nodelet-test-{tag}"),
        format!("/etc/nodelet-test-{tag}"),
        format!("/etc/config-{tag}"),
        format!("/data-{tag}"),
        format!("/work-{tag}"),
    ] {
        assert!(!Path::new(&leaked).exists(), "{leaked} leaked to the host");
    }
    assert_eq!(fs::read("/etc/hosts").ok(), host_etc_hosts);
    assert_eq!(fs::read_dir(&fixture.spec.scratch).unwrap().count(), 0);
    fixture.assert_no_host_mounts();
}

#[test]
fn a_container_runs_as_the_spec_user_in_its_working_directory() {
    let mut fixture = Fixture::shell(
        r#"
        echo "id=$(id -u) $(id -g) $(id -G)"
        echo "pwd=$(pwd)"
        echo "owner=$(stat -c %u:%g .)"
        "#,
    );
    fixture.spec.uid = 1234;
    fixture.spec.gid = 2345;
    fixture.spec.groups = vec![3456, 4567];
    fixture.spec.working_dir = format!("/tmp/wd-{}", fixture.tag).into();

    let finished = fixture.run();

    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("id"), "1234 2345 2345 3456 4567");
    assert_eq!(finished.value("pwd"), format!("/tmp/wd-{}", fixture.tag));
    assert_eq!(finished.value("owner"), "1234:2345");
}

#[test]
fn a_working_directory_the_user_cannot_enter_fails_naming_it() {
    let mut fixture = Fixture::shell("true");
    fixture.spec.uid = 1234;
    fixture.spec.gid = 2345;
    // The fixture's directory is 0700 root: uid 1234 can neither create nor enter it.
    let working_dir = fixture.path("wd");
    fixture.spec.working_dir = working_dir.clone();

    let finished = fixture.run();

    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    let expected = format!(
        "cannot change to the working directory {}: ",
        working_dir.display()
    );
    assert!(finished.status.starts_with(&expected), "{finished:?}");
    assert!(!working_dir.exists());
}

#[test]
fn an_atomic_update_of_a_volume_shows_inside_the_running_container() {
    let mut fixture = Fixture::shell(
        r#"
        echo "first=$(cat /vol-TAG/key)"
        i=0
        while [ "$i" -lt 2000 ]; do
            if [ "$(cat /vol-TAG/key)" = v2 ]; then echo "seen=v2"; exit 0; fi
            i=$((i + 1))
            sleep 0.05
        done
        echo "seen=never"
        "#,
    );
    let volume = fixture.path("volume");
    atomic_volume(&volume, "v1");
    fixture.mount(volume.clone(), "/vol-TAG", true);
    let mut started = fixture.start();
    assert_eq!(
        started.status, b"",
        "the status socket gets no bytes on exec"
    );
    let mut stdout = BufReader::new(started.child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first.trim_end(), "first=v1");
    fixture.assert_no_host_mounts();

    swap_atomic_volume(&volume, "v2");

    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let finished = started.finish();
    assert_eq!(rest.trim_end(), "seen=v2", "{finished:?}");
    assert_eq!(finished.code, Some(0), "{finished:?}");
    fixture.assert_no_host_mounts();
}

#[test]
fn a_program_not_in_path_fails_with_the_runtimes_error_text() {
    let mut fixture = Fixture::shell("");
    fixture.spec.program = format!("nodelet-no-such-program-{}", fixture.tag);

    let finished = fixture.run();

    let expected = format!(
        "exec: \"nodelet-no-such-program-{}\": executable file not found in $PATH\n",
        fixture.tag
    );
    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    assert_eq!(finished.status, expected);
    assert!(finished.stderr.contains(&expected), "{finished:?}");
    fixture.assert_no_host_mounts();
}

#[test]
fn a_missing_program_path_fails_naming_it() {
    let mut fixture = Fixture::shell("");
    let program = format!("/nodelet-no-such-dir-{}/program", fixture.tag);
    fixture.spec.program = program.clone();

    let finished = fixture.run();

    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    assert_eq!(
        finished.status,
        format!("exec: \"{program}\": stat {program}: no such file or directory\n")
    );
}

#[test]
fn a_program_without_execute_permission_fails_naming_it() {
    let mut fixture = Fixture::shell("");
    fixture.spec.program = "/etc/passwd".into();

    let finished = fixture.run();

    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    assert_eq!(
        finished.status,
        "exec: \"/etc/passwd\": permission denied\n"
    );
}

#[test]
fn a_missing_mount_source_fails_naming_the_source_and_target() {
    let mut fixture = Fixture::shell("true");
    let source = fixture.path("no-such-volume");
    fixture.mount(source.clone(), "/data-TAG", false);

    let finished = fixture.run();

    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    assert!(
        finished.status.starts_with(&format!(
            "mount source {} for /data-{}: ",
            source.display(),
            fixture.tag
        )),
        "{finished:?}"
    );
    assert!(!Path::new(&format!("/data-{}", fixture.tag)).exists());
    fixture.assert_no_host_mounts();
}

#[test]
fn a_mount_target_of_the_other_type_fails_naming_it() {
    let mut fixture = Fixture::shell("true");
    let source = fixture.path("file");
    fs::write(&source, "x").unwrap();
    fixture.mount(source, "/etc", false);

    let finished = fixture.run();

    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    assert!(
        finished
            .status
            .starts_with("mount target /etc and its source "),
        "{finished:?}"
    );
}

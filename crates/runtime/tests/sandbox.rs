//! The container's init process end to end: each test starts the real `nodelet-container-init`
//! binary with a spec, runs `/bin/sh` in the container and checks what the program saw and that
//! the host kept nothing: no file, no mount. The tests need root (uid 0): the init process runs
//! as root, or as the unprivileged uid [`AGENT`] in a user namespace, which these tests also
//! need the kernel to allow.

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nodelet_runtime::sandbox::{self, START_FAILED};
use nodelet_runtime::spec::{LaunchSpec, MountSpec};
use tempfile::TempDir;

/// A hang guard only (a broken init would otherwise block the test forever), not a measure.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The uid and gid of an agent that is not root (`nobody`), for the user namespace tests.
const AGENT: u32 = 65534;

/// A container to start: its directory (spec, scratch, host-side volumes), spec, and the
/// agent's uid and gid when not root.
struct Fixture {
    dir: TempDir,
    tag: String,
    spec: LaunchSpec,
    agent: Option<u32>,
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
            privileged: false,
            capabilities: None,
            no_new_privs: false,
            read_only_root: false,
            seccomp_runtime_default: false,
            ipc_namespace: None,
        };
        Self {
            dir,
            tag,
            spec,
            agent: None,
        }
    }

    /// Like [`Fixture::shell`], but started by an agent running as [`AGENT`], which owns the
    /// scratch directory and may read the fixture's directory.
    fn unprivileged(script: &str) -> Self {
        assert_user_namespaces_for_ordinary_users();
        let mut fixture = Self::shell(script);
        fixture.agent = Some(AGENT);
        fixture.spec.uid = AGENT;
        fixture.spec.gid = AGENT;
        let dir = fixture.dir.path();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        chown_to_agent(&fixture.spec.scratch);
        fixture
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
        let mut command = Command::new(env!("CARGO_BIN_EXE_nodelet-container-init"));
        if let Some(agent) = self.agent {
            // std drops the supplementary groups too when a root parent sets the uid.
            command.uid(agent).gid(agent);
        }
        let mut child = command
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

/// Fails, saying so, unless the kernel lets an ordinary user make user namespaces.
fn assert_user_namespaces_for_ordinary_users() {
    let read = |path: &str| fs::read_to_string(path).map(|v| v.trim().to_owned());
    let needs = "this test needs user namespaces open to ordinary users (CI's kernel allows them)";
    let max = read("/proc/sys/user/max_user_namespaces");
    assert!(
        max.as_ref().is_ok_and(|v| v != "0"),
        "{needs}: /proc/sys/user/max_user_namespaces is {max:?}"
    );
    for (path, refusing) in [
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
        ),
    ] {
        let value = read(path).ok();
        assert_ne!(
            value.as_deref(),
            Some(refusing),
            "{needs}: {path} is {refusing}"
        );
    }
}

fn chown_to_agent(path: &Path) {
    let agent = Some(nix::unistd::Uid::from_raw(AGENT));
    nix::unistd::chown(path, agent, Some(nix::unistd::Gid::from_raw(AGENT))).unwrap();
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

#[test]
fn an_unprivileged_agent_runs_the_container_in_a_user_namespace_as_the_spec_user() {
    let mut fixture = Fixture::unprivileged(
        r#"
        echo "id=$(id -u) $(id -g) $(id -G)"
        echo "config=$(cat /etc/config-TAG/key)"
        echo "ro=$(cat /data-TAG/ro/ro-file)"
        echo "ro-write=$(touch /data-TAG/ro/new 2>&1)"
        echo rw > /data-TAG/rw/from-container && echo "rw=ok"
        echo "odd=$(cat 'DIR/odd,dir:x/file')"
        echo "owners=$(stat -c %u DIR/home/own) $(stat -c %u /etc/passwd)"
        echo "secret=$(cat DIR/home/secret 2>&1)"
        echo changed > DIR/home/own && echo "own=$(cat DIR/home/own)"
        echo new > DIR/home/new-TAG && echo "home-new=$(cat DIR/home/new-TAG)"
        echo "passwd-write=$(echo x 2>&1 >> /etc/passwd)"
        echo "copied-write=$(echo x 2>&1 >> DIR/agents-file)"
        echo private > /tmp/nodelet-test-TAG && echo "tmp=$(cat /tmp/nodelet-test-TAG)"
        echo root > /nodelet-test-TAG && echo "top=$(cat /nodelet-test-TAG)"
        echo etc > /etc/nodelet-test-TAG && echo "etc=$(cat /etc/nodelet-test-TAG)"
        echo "masked=$(ls -A DIR/agent | wc -l)"
        echo "hostname=$(uname -n)"
        echo "pwd=$(pwd)"
        "#,
    );
    fixture.spec.uid = 1000;
    fixture.spec.gid = 1000;
    let config = fixture.path("agent/pods/p1/volumes/config");
    atomic_volume(&config, "v1");
    let ro = fixture.path("agent/pods/p1/volumes/ro");
    fs::create_dir_all(&ro).unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(ro.join("ro-file"), "ro").unwrap();
    let rw = fixture.path("agent/pods/p1/volumes/rw");
    fs::create_dir_all(&rw).unwrap();
    chown_to_agent(&rw);
    fixture.mount(config, "/etc/config-TAG", false);
    fixture.mount(ro, "/data-TAG/ro", true);
    fixture.mount(rw.clone(), "/data-TAG/rw", false);
    // Overlaid without root: escaped in the overlay's options.
    let odd = fixture.path("odd,dir:x");
    fs::create_dir(&odd).unwrap();
    fs::write(odd.join("file"), "odd").unwrap();
    // The agent's own directory, with a file of its own and one only root may read.
    let home = fixture.path("home");
    fs::create_dir(&home).unwrap();
    fs::write(home.join("own"), "own").unwrap();
    chown_to_agent(&home);
    chown_to_agent(&home.join("own"));
    fs::write(home.join("secret"), "secret").unwrap();
    fs::set_permissions(home.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    // In a copied directory (the masked one is below it): bound read-only.
    fs::write(fixture.path("agents-file"), "agent").unwrap();
    chown_to_agent(&fixture.path("agents-file"));
    fixture.spec.masked = vec![fixture.path("agent")];
    fixture.spec.working_dir = format!("/work-{}/sub", fixture.tag).into();
    let tag = fixture.tag.clone();
    let host_passwd = fs::read("/etc/passwd").unwrap();

    let finished = fixture.run();

    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("id"), "1000 1000 1000");
    assert_eq!(finished.value("config"), "v1");
    assert_eq!(finished.value("ro"), "ro");
    assert!(
        finished.value("ro-write").contains("Read-only file system"),
        "{finished:?}"
    );
    assert_eq!(finished.value("rw"), "ok");
    assert_eq!(finished.value("odd"), "odd");
    // The agent's files show as the spec user's, root's as the overflow id.
    assert_eq!(finished.value("owners"), "1000 65534");
    assert!(
        finished.value("secret").contains("Permission denied"),
        "{finished:?}"
    );
    assert_eq!(finished.value("own"), "changed");
    assert_eq!(finished.value("home-new"), "new");
    assert!(
        finished.value("passwd-write").contains("Permission denied"),
        "{finished:?}"
    );
    assert!(
        finished
            .value("copied-write")
            .contains("Read-only file system"),
        "{finished:?}"
    );
    assert_eq!(finished.value("tmp"), "private");
    assert_eq!(finished.value("top"), "root");
    assert_eq!(finished.value("etc"), "etc");
    assert_eq!(finished.value("masked"), "0");
    assert_eq!(finished.value("hostname"), fixture.spec.hostname);
    assert_eq!(finished.value("pwd"), format!("/work-{tag}/sub"));

    // A read-write volume is the host's, written as the agent's user.
    let written = rw.join("from-container");
    assert_eq!(fs::read_to_string(&written).unwrap(), "rw\n");
    assert_eq!(fs::metadata(&written).unwrap().uid(), AGENT);
    // Writes to the root stayed in memory.
    assert_eq!(fs::read_to_string(home.join("own")).unwrap(), "own");
    for leaked in [
        home.join(format!("new-{tag}")),
        PathBuf::from(format!("/nodelet-test-{tag}")),
        PathBuf::from(format!("/etc/nodelet-test-{tag}")),
        PathBuf::from(format!("/tmp/nodelet-test-{tag}")),
        PathBuf::from(format!("/etc/config-{tag}")),
        PathBuf::from(format!("/data-{tag}")),
        PathBuf::from(format!("/work-{tag}")),
    ] {
        assert!(!leaked.exists(), "{} leaked to the host", leaked.display());
    }
    assert_eq!(fs::read("/etc/passwd").unwrap(), host_passwd);
    assert_eq!(fs::read(fixture.path("agents-file")).unwrap(), b"agent");
    assert_eq!(fs::read_dir(&fixture.spec.scratch).unwrap().count(), 0);
    fixture.assert_no_host_mounts();
}

#[test]
fn an_unprivileged_agents_root_container_is_root_in_its_namespace_only() {
    let mut fixture = Fixture::unprivileged(
        r#"
        echo "id=$(id -u) $(id -g)"
        echo "usr-write=$(touch /usr/bin/nodelet-test-TAG 2>&1)"
        echo "secret=$(cat DIR/secret 2>&1)"
        "#,
    );
    fixture.spec.uid = 0;
    fixture.spec.gid = 0;
    fs::write(fixture.path("secret"), "secret").unwrap();
    fs::set_permissions(fixture.path("secret"), fs::Permissions::from_mode(0o600)).unwrap();

    let finished = fixture.run();

    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("id"), "0 0");
    assert!(
        finished.value("usr-write").contains("Permission denied"),
        "{finished:?}"
    );
    assert!(
        finished.value("secret").contains("Permission denied"),
        "{finished:?}"
    );
    assert!(!Path::new(&format!("/usr/bin/nodelet-test-{}", fixture.tag)).exists());
    fixture.assert_no_host_mounts();
}

#[test]
fn an_unprivileged_agent_cannot_give_supplementary_groups() {
    let mut fixture = Fixture::unprivileged("true");
    fixture.spec.groups = vec![3456, 4567];

    let finished = fixture.run();

    assert_eq!(finished.code, Some(START_FAILED), "{finished:?}");
    assert!(
        finished.status.starts_with(
            "a non-root agent cannot give the container supplementary groups [3456, 4567] \
             (supplementalGroups, fsGroup)"
        ),
        "{finished:?}"
    );
}

/// The host's device nodes a container gets.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// What the `/dev` tests' container does there; `chmod=` is the mode of `/dev/full` after a
/// `chmod 600`, or the error. `/dev/stdout` and `/dev/fd/1` are tried on a pipe the shell
/// makes: reopening the test's own pipes is denied to a user other than their owner, root.
const DEV_SCRIPT: &str = r#"
    touch /dev/nodelet-test-TAG && echo "created=$(ls /dev/nodelet-test-TAG)"
    echo x > /dev/null && echo "null=ok"
    echo "urandom=$(head -c 4 /dev/urandom | wc -c)"
    echo "zero=$(head -c 3 /dev/zero | tr '\0' z)"
    if echo x 2>/dev/null > /dev/full; then echo "full=written"; else echo "full=refused"; fi
    echo "numbers=$(stat -c %t:%T /dev/null /dev/zero /dev/full /dev/random /dev/urandom \
        /dev/tty | tr '\n' ' ')"
    echo "stdout=$(echo hi > /dev/stdout)"
    echo "fd1=$(echo hi > /dev/fd/1)"
    echo shm > /dev/shm/nodelet-test-TAG && echo "shm=$(cat /dev/shm/nodelet-test-TAG)"
    echo "types=$(stat -f -c %T /dev /dev/shm /dev/pts | tr '\n' ' ')"
    echo "pts-dev=$(stat -c %d /dev/pts)"
    echo "ptmx=$(readlink /dev/ptmx) $(stat -c %a /dev/pts/ptmx)"
    echo "links=$(readlink /dev/fd /dev/stdin /dev/stdout /dev/stderr | tr '\n' ' ')"
    echo "chmod=$(chmod 600 /dev/full 2>&1 && stat -c %a /dev/full)"
    echo "termination-before=$(cat /dev/termination-log-TAG)"
    echo done > /dev/termination-log-TAG && echo "termination=ok"
    echo "entries=$(ls /dev | tr '\n' ' ')"
    "#;

/// Binds a host file, `termination-log` in the fixture's directory, on
/// `/dev/termination-log-TAG` in the container; returns its host path.
fn mount_termination_log(fixture: &mut Fixture) -> PathBuf {
    let source = fixture.path("termination-log");
    fs::write(&source, "before").unwrap();
    if fixture.agent.is_some() {
        chown_to_agent(&source);
    }
    fixture.mount(source.clone(), "/dev/termination-log-TAG", false);
    source
}

/// Runs [`DEV_SCRIPT`]'s container and checks what holds with and without root: the
/// container's `/dev` is a tmpfs of its own with the usual devices, links, `pts` and `shm`, a
/// spec mount below it works, and the host's `/dev` kept nothing. Returns what the container
/// printed, and `/dev/full`'s mode on the host as it was after the run (then restored).
fn run_in_private_dev(fixture: &Fixture, termination_log: &Path) -> (Finished, u32) {
    let tag = &fixture.tag;
    let host_full = Path::new("/dev/full");
    let full_mode = fs::metadata(host_full).unwrap().permissions().mode() & 0o7777;
    let host_pts_dev = fs::metadata("/dev/pts").unwrap().dev();

    let finished = fixture.run();

    let full_mode_after = fs::metadata(host_full).unwrap().permissions().mode() & 0o7777;
    if full_mode_after != full_mode {
        // Put the host right before failing on it.
        fs::set_permissions(host_full, fs::Permissions::from_mode(full_mode)).unwrap();
    }
    finished.assert_started_and_succeeded();
    assert_eq!(
        finished.value("created"),
        format!("/dev/nodelet-test-{tag}")
    );
    assert_eq!(finished.value("null"), "ok");
    assert_eq!(finished.value("urandom"), "4");
    assert_eq!(finished.value("zero"), "zzz");
    assert_eq!(finished.value("full"), "refused");
    let host_devices: Vec<&str> = DEVICES
        .into_iter()
        .filter(|d| Path::new("/dev").join(d).exists())
        .collect();
    let numbers: String = host_devices
        .iter()
        .map(|device| {
            let rdev = fs::metadata(Path::new("/dev").join(device)).unwrap().rdev();
            let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
            format!("{major:x}:{minor:x} ")
        })
        .collect();
    assert_eq!(
        finished.value("numbers"),
        numbers,
        "the host's device numbers"
    );
    assert_eq!(finished.value("stdout"), "hi");
    assert_eq!(finished.value("fd1"), "hi");
    assert_eq!(finished.value("shm"), "shm");
    assert_eq!(finished.value("types"), "tmpfs tmpfs devpts ");
    let pts_dev: u64 = finished.value("pts-dev").parse().unwrap();
    assert_ne!(pts_dev, host_pts_dev, "/dev/pts is a new devpts instance");
    assert_eq!(finished.value("ptmx"), "pts/ptmx 666");
    assert_eq!(
        finished.value("links"),
        "/proc/self/fd /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2 "
    );
    assert_eq!(finished.value("termination-before"), "before");
    assert_eq!(finished.value("termination"), "ok");
    let links = [
        "fd", "stdin", "stdout", "stderr", "ptmx", "core", "pts", "shm",
    ];
    let created = [
        format!("nodelet-test-{tag}"),
        format!("termination-log-{tag}"),
    ];
    let mut expected: Vec<String> = host_devices
        .into_iter()
        .chain(links)
        .map(String::from)
        .collect();
    expected.extend(created);
    expected.sort();
    let mut entries: Vec<&str> = finished.value("entries").split_whitespace().collect();
    entries.sort_unstable();
    assert_eq!(entries, expected, "nothing else of the host's /dev shows");

    assert_eq!(fs::read_to_string(termination_log).unwrap(), "done\n");
    for leaked in [
        format!("/dev/nodelet-test-{tag}"),
        format!("/dev/shm/nodelet-test-{tag}"),
        format!("/dev/termination-log-{tag}"),
    ] {
        assert!(!Path::new(&leaked).exists(), "{leaked} leaked to the host");
    }
    assert_eq!(fs::read_dir(&fixture.spec.scratch).unwrap().count(), 0);
    fixture.assert_no_host_mounts();
    (finished, full_mode_after)
}

#[test]
fn a_root_container_has_a_dev_of_its_own_and_creates_nothing_in_the_hosts() {
    let mut fixture = Fixture::shell(DEV_SCRIPT);
    let termination_log = mount_termination_log(&mut fixture);
    let host_full = fs::metadata("/dev/full").unwrap().permissions().mode() & 0o7777;

    let (finished, host_full_after) = run_in_private_dev(&fixture, &termination_log);

    // Its device nodes are its own: a chmod changes them, not the host's.
    assert_eq!(finished.value("chmod"), "600");
    assert_eq!(
        host_full_after, host_full,
        "the host's /dev/full was changed"
    );
}

#[test]
fn an_unprivileged_agents_container_has_a_dev_of_its_own_with_the_hosts_devices_bound() {
    let mut fixture = Fixture::unprivileged(DEV_SCRIPT);
    let termination_log = mount_termination_log(&mut fixture);
    let host_full = fs::metadata("/dev/full").unwrap().permissions().mode() & 0o7777;

    let (finished, host_full_after) = run_in_private_dev(&fixture, &termination_log);

    // The host's nodes, bound: their owner (root) is not mapped, so a chmod is refused.
    assert!(
        finished.value("chmod").contains("Operation not permitted"),
        "{finished:?}"
    );
    assert_eq!(
        host_full_after, host_full,
        "the host's /dev/full was changed"
    );
}

// PW-42: with `read_only_root` a write to the root (and to `/tmp`) fails; a write to a
// mounted volume works.
#[test]
fn a_read_only_root_refuses_writes_but_its_volumes_take_them() {
    let mut fixture = Fixture::shell(
        "touch /checkfile 2>/dev/null; echo root=$?; touch /tmp/x 2>/dev/null; echo tmp=$?; \
         echo ok > /vol/written; echo vol=$?",
    );
    let volume = fixture.path("volume");
    fs::create_dir(&volume).unwrap();
    fixture.mount(volume.clone(), "/vol", false);
    fixture.spec.read_only_root = true;
    let finished = fixture.run();
    finished.assert_started_and_succeeded();
    assert_ne!(finished.value("root"), "0", "{finished:?}");
    assert_ne!(finished.value("tmp"), "0", "{finished:?}");
    assert_eq!(finished.value("vol"), "0", "{finished:?}");
    assert_eq!(fs::read_to_string(volume.join("written")).unwrap(), "ok\n");
    fixture.assert_no_host_mounts();
}

// PW-43 / PW-44: `no_new_privs` shows in the process's status, and a root container keeps
// exactly containerd's default capabilities (Docker's well-known mask); `/proc/sys` is
// read-only.
#[test]
fn a_container_runs_with_no_new_privs_and_the_default_capabilities() {
    let mut fixture = Fixture::shell(
        "echo nnp=$(awk '/^NoNewPrivs:/{print $2}' /proc/self/status); \
         echo eff=$(awk '/^CapEff:/{print $2}' /proc/self/status); \
         echo bnd=$(awk '/^CapBnd:/{print $2}' /proc/self/status); \
         echo sys=$(awk '$5==\"/proc/sys\"{print substr($6,1,2)}' /proc/self/mountinfo)",
    );
    fixture.spec.no_new_privs = true;
    let mut default: Vec<String> = nodelet_runtime::DEFAULT_CAPABILITIES
        .iter()
        .map(|&c| c.into())
        .collect();
    default.sort();
    fixture.spec.capabilities = Some(default);
    let finished = fixture.run();
    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("nnp"), "1", "{finished:?}");
    assert_eq!(finished.value("eff"), "00000000a80425fb", "{finished:?}");
    assert_eq!(finished.value("bnd"), "00000000a80425fb", "{finished:?}");
    assert_eq!(finished.value("sys"), "ro", "{finished:?}");
}

// PW-44: a root container keeps exactly the spec's capabilities and its own `/dev`; a
// container of another user ends with no capability at all.
#[test]
fn root_keeps_only_the_specs_capabilities_and_a_user_has_none() {
    let mut fixture = Fixture::shell(
        "echo eff=$(awk '/^CapEff:/{print $2}' /proc/self/status); \
         echo prm=$(awk '/^CapPrm:/{print $2}' /proc/self/status)",
    );
    fixture.spec.capabilities = Some(vec!["CAP_CHOWN".into()]);
    fixture.spec.uid = 1000;
    fixture.spec.gid = 1000;
    let finished = fixture.run();
    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("eff"), "0000000000000000", "{finished:?}");
    assert_eq!(finished.value("prm"), "0000000000000000", "{finished:?}");

    let mut fixture = Fixture::shell(
        "echo eff=$(awk '/^CapEff:/{print $2}' /proc/self/status); \
         echo dev=$(test -e /dev/loop-control && echo host || echo own)",
    );
    fixture.spec.capabilities = Some(vec!["CAP_CHOWN".into(), "CAP_KILL".into()]);
    let finished = fixture.run();
    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("eff"), "0000000000000021", "{finished:?}");
    assert_eq!(finished.value("dev"), "own", "{finished:?}");
}

// PW-46: `seccompProfile: RuntimeDefault` runs the program under a seccomp filter (mode 2);
// without it there is none.
#[test]
fn the_runtime_default_seccomp_filter_is_installed_only_when_asked() {
    let script = "echo seccomp=$(awk '/^Seccomp:/{print $2}' /proc/self/status)";
    let mut fixture = Fixture::shell(script);
    fixture.spec.seccomp_runtime_default = true;
    fixture.spec.capabilities = Some(vec!["CAP_CHOWN".into()]);
    let finished = fixture.run();
    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("seccomp"), "2", "{finished:?}");
    let finished = Fixture::shell(script).run();
    finished.assert_started_and_succeeded();
    assert_eq!(finished.value("seccomp"), "0", "{finished:?}");
}

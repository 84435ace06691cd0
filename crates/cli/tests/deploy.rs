//! `deploy/`: the systemd unit and the Kubernetes DaemonSet that run
//! `profdev agent` with the least privilege it needs. Parsed, they name
//! the same capabilities (those deploy/README.md explains) and the same
//! flags, run as a non-root user and drop everything else; and the real
//! agent, run as user nobody under setpriv with exactly the unit's
//! capabilities, profiles a root process running from a 0700 directory in
//! a mount namespace of its own (as a container's), its hot function and
//! the kernel's functions named in the profiles a collector on 127.0.0.1
//! receives.

mod common;

use common::{collector, privileged};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn deploy(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name)
}

/// The unit file: each section's keys, each with its values in order.
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse_unit(text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        let (k, v) = line.split_once('=').expect("KEY=VALUE");
        unit.entry(section.clone())
            .or_default()
            .entry(k.trim().to_string())
            .or_default()
            .push(v.trim().to_string());
    }
    unit
}

fn one<'a>(unit: &'a Unit, key: &str) -> &'a str {
    let v = &unit["Service"][key];
    assert_eq!(v.len(), 1, "{key}");
    &v[0]
}

/// The capabilities of the unit: `AmbientCapabilities=`, checked equal to
/// `CapabilityBoundingSet=`.
fn unit_caps(unit: &Unit) -> BTreeSet<String> {
    let set =
        |k| -> BTreeSet<String> { one(unit, k).split_whitespace().map(String::from).collect() };
    let ambient = set("AmbientCapabilities");
    assert_eq!(ambient, set("CapabilityBoundingSet"));
    ambient
}

fn load_unit() -> Unit {
    parse_unit(&std::fs::read_to_string(deploy("profdev-agent.service")).unwrap())
}

/// The `--` flags of an argument list, in order.
fn flags<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    args.iter()
        .map(AsRef::as_ref)
        .filter(|a| a.starts_with("--"))
        .map(String::from)
        .collect()
}

/// The value following `flag` in `args`.
fn value_of<'a, S: AsRef<str>>(args: &'a [S], flag: &str) -> &'a str {
    let i = args.iter().position(|a| a.as_ref() == flag).unwrap();
    args[i + 1].as_ref()
}

#[test]
fn the_unit_and_the_daemonset_grant_the_same_least_privilege() {
    let unit = load_unit();
    let caps = unit_caps(&unit);
    let want: BTreeSet<String> = [
        "CAP_PERFMON",
        "CAP_SYSLOG",
        "CAP_DAC_READ_SEARCH",
        "CAP_CHECKPOINT_RESTORE",
        "CAP_SYS_PTRACE",
    ]
    .map(String::from)
    .into();
    assert_eq!(caps, want);
    assert_eq!(one(&unit, "DynamicUser"), "yes");
    assert!(!unit["Service"].contains_key("User"));
    assert_eq!(one(&unit, "NoNewPrivileges"), "yes");
    assert_eq!(one(&unit, "ProtectSystem"), "strict");
    assert_eq!(one(&unit, "StateDirectory"), "profdev-agent");
    assert_eq!(one(&unit, "StateDirectoryMode"), "0700");
    // It would take CAP_SYSLOG away.
    assert!(!unit["Service"].contains_key("ProtectKernelLogs"));
    assert_eq!(
        one(&unit, "LoadCredential"),
        "token:/etc/profdev/agent.token"
    );
    let exec: Vec<&str> = one(&unit, "ExecStart").split_whitespace().collect();
    assert_eq!(&exec[..2], ["/usr/bin/profdev", "agent"]);
    assert_eq!(value_of(&exec, "--spool"), "%S/profdev-agent");
    assert_eq!(
        value_of(&exec, "--token-file"),
        "${CREDENTIALS_DIRECTORY}/token"
    );

    let yaml: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(deploy("daemonset.yaml")).unwrap())
            .unwrap();
    assert_eq!(yaml["kind"].as_str(), Some("DaemonSet"));
    let pod = &yaml["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let agent = pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some("agent"))
        .unwrap();
    let sc = &agent["securityContext"];
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    let uid = sc["runAsUser"].as_u64().unwrap();
    assert!(uid != 0 && Some(uid) == pod["securityContext"]["runAsUser"].as_u64());
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    let strings = |v: &serde_norway::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    let added: BTreeSet<String> = strings(&sc["capabilities"]["add"])
        .into_iter()
        .map(|c| format!("CAP_{c}"))
        .collect();
    assert_eq!(added, caps);
    assert_eq!(
        agent["resources"]["limits"]["memory"].as_str(),
        Some("128Mi")
    );
    // The same command and flags as the unit's.
    let args = strings(&agent["args"]);
    assert_eq!(args[0], "agent");
    let mut unit_flags = flags(&exec);
    let mut pod_flags = flags(&args);
    // Only the pod adds the node's name as a label.
    pod_flags.dedup();
    unit_flags.dedup();
    assert_eq!(unit_flags, pod_flags);
    assert_eq!(value_of(&exec, "--interval"), value_of(&args, "--interval"));
    assert_eq!(value_of(&exec, "--otlp"), value_of(&args, "--otlp"));
    // The spool is the hostPath volume; the token file is the Secret's.
    let mounts = agent["volumeMounts"].as_sequence().unwrap();
    let volumes = pod["volumes"].as_sequence().unwrap();
    let volume_at = |path: &str| {
        let m = mounts
            .iter()
            .find(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("no volume holds {path}"));
        volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap()
            .clone()
    };
    let state = volume_at(value_of(&args, "--spool"));
    assert_eq!(
        state["hostPath"]["path"].as_str(),
        Some(value_of(&args, "--spool"))
    );
    assert!(volume_at(value_of(&args, "--token-file"))["secret"]["secretName"].is_string());
    // The image's file capabilities (the comment's setcap line) and the
    // README's table name the same set.
    let text = std::fs::read_to_string(deploy("daemonset.yaml")).unwrap();
    let setcap = text
        .lines()
        .find_map(|l| l.trim_start_matches('#').trim().strip_prefix("setcap "))
        .unwrap();
    let filecaps: BTreeSet<String> = setcap
        .split_once('=')
        .unwrap()
        .0
        .split(',')
        .map(|c| c.to_ascii_uppercase())
        .collect();
    assert_eq!(filecaps, caps);
    let readme = std::fs::read_to_string(deploy("README.md")).unwrap();
    let table: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `CAP_"))
        .map(|l| format!("CAP_{}", l.split('`').next().unwrap()))
        .collect();
    assert_eq!(table, caps);
    // Every flag is one `profdev agent` takes.
    let help = common::profdev()
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for f in &unit_flags {
        assert!(help.contains(&format!("{f} ")), "{f} is not in {help}");
    }
}

/// The hot program: `hot_loop` spins for the seconds of its argument.
const HOT_C: &str = r#"
#include <stdlib.h>
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline)) void hot_loop(double secs)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long x = 1;
    do {
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        sink = x;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
}
int main(int argc, char **argv) { hot_loop(argc > 1 ? atof(argv[1]) : 1); return 0; }
"#;

/// Capability numbers (linux/capability.h).
fn cap_number(name: &str) -> u32 {
    match name {
        "CAP_DAC_READ_SEARCH" => 2,
        "CAP_SYS_PTRACE" => 19,
        "CAP_SYSLOG" => 34,
        "CAP_PERFMON" => 38,
        "CAP_BPF" => 39,
        "CAP_CHECKPOINT_RESTORE" => 40,
        _ => panic!("add {name}'s number"),
    }
}

/// Can this test run the agent as nobody with capabilities, and a
/// program in a mount namespace of its own?
fn can_run() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("running the agent as nobody with capabilities needs root".into());
    }
    let ok = |cmd: &mut Command, what: &str| match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("{what}: {}", String::from_utf8_lossy(&o.stderr))),
        Err(e) => Err(format!("{what}: {e}")),
    };
    ok(
        Command::new("setpriv").args([
            "--reuid=65534",
            "--inh-caps=+perfmon,+checkpoint_restore",
            "--ambient-caps=+perfmon,+checkpoint_restore",
            "true",
        ]),
        "setpriv with CAP_PERFMON and CAP_CHECKPOINT_RESTORE (util-linux, Linux 5.9 or later)",
    )?;
    ok(Command::new("unshare").args(["-m", "true"]), "unshare -m")?;
    ok(Command::new("gcc").arg("--version"), "gcc")
}

/// Kills its process on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_agent_runs_as_nobody_with_exactly_the_units_capabilities() {
    if !privileged(
        "profdev agent as nobody with the unit's capabilities",
        can_run(),
    ) {
        return;
    }
    let caps = unit_caps(&load_unit());
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    // root's program, in a directory only root can enter, run from a
    // tmpfs mounted in its own mount namespace: the path the kernel
    // reports names an empty directory here.
    let private = root.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("hot.c"), HOT_C).unwrap();
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(private.join("hot"))
        .arg(private.join("hot.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    std::fs::create_dir(private.join("ns")).unwrap();
    let script =
        "mount -t tmpfs none \"$1/ns\" && cp \"$1/hot\" \"$1/ns/hot\" && exec \"$1/ns/hot\" 600";
    let hot = Killed(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(&private)
            .spawn()
            .unwrap(),
    );
    // Time in the kernel, for its function names.
    let dd = Killed(
        Command::new("dd")
            .args(["if=/dev/zero", "of=/dev/null", "bs=512"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The agent's files: the binary, its state directory and token, as
    // systemd would give them to its user.
    let bin = root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe = common::profdev_copy(&bin);
    let state = root.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let token = root.join("token");
    std::fs::write(&token, "deploy-t0ken\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&token, Some(65534), Some(65534)).unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = collector(listener);
    let names: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect();
    let list = format!("-all,{}", names.join(","));
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--no-new-privs",
    ])
    .arg(format!("--inh-caps={list}"))
    .arg(format!("--ambient-caps={list}"))
    .arg(format!("--bounding-set={list}"))
    .arg("--")
    .arg(&exe)
    .args(["agent", "-v", "-F", "49", "--interval", "1", "--spool"])
    .arg(&state)
    .arg("--token-file")
    .arg(&token)
    .args(["--otlp-protocol", "http", "--otlp", &url])
    .stderr(Stdio::piped());
    let mut agent = common::with_default_signals(&mut cmd).spawn().unwrap();
    let pid = agent.id();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let err = agent.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                lines.lock().unwrap().push(l.unwrap());
            }
        })
    };
    // Once setpriv has exec'd the agent: user nobody, exactly the unit's
    // capabilities, effective and bounding.
    let mask: u64 = caps.iter().map(|c| 1u64 << cap_number(c)).sum();
    let status = || std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    profdev_testkit::wait_until("the agent's exec", Duration::from_secs(60), || {
        status().contains("Name:\tprofdev")
    });
    let status = status();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(field("Uid:"), "65534\t65534\t65534\t65534");
    for k in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(k), format!("{mask:016x}"), "{k} in {status}");
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    // The hot function of root's program in its own namespace, and the
    // kernel's functions, named in what the collector receives.
    let named = |what: &str| {
        got.lock()
            .unwrap()
            .iter()
            .any(|(_, body)| body.windows(what.len()).any(|w| w == what.as_bytes()))
    };
    profdev_testkit::wait_until(
        "hot_loop and vfs_read named",
        Duration::from_secs(180),
        || named("hot_loop") && named("vfs_read"),
    );
    drop((hot, dd));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    // Generous: the last cut waits for the names of every object sampled
    // system wide (on a machine busy building, rustc's libraries).
    let st = profdev_testkit::wait_exit("profdev agent", &mut agent, Duration::from_secs(300));
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    assert!(st.success(), "{lines:?}");
    assert!(
        lines.iter().all(|l| !l.contains("deploy-t0ken")),
        "{lines:?}"
    );
    let paths: Vec<String> = got.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert!(
        paths.iter().all(|p| p == "/v1development/profiles"),
        "{paths:?}"
    );
}

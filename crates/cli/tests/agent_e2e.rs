//! `profdev agent` end to end: bad options and a missing destination are
//! refused with a sentence; plain http to another machine
//! is refused, inside a network namespace with no route (`unshare -n`), so
//! that a bug sends nothing anywhere; run with `--interval 1` against a
//! collector on 127.0.0.1, SIGTERM ends it with every profile cut
//! delivered and counted; with `--spool DIR`, what an agent could not
//! send (its collector refusing) is sent by the next one, first; a
//! token never shows (command line, stderr, health file) and `profdev
//! stat --agent` prints the health file; without a destination the local
//! store is filled and read back by `report`/`export --since`. (What the requests hold is checked in
//! `crates/agent/tests/otlp.rs`, decoded with opentelemetry-proto.)

mod common;

use common::{can_sample_system, collector, privileged, profdev, with_default_signals};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let o = profdev().arg("agent").args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_options_and_a_missing_destination_are_refused() {
    let (code, err) = stderr_of(&[
        "--otlp",
        "https://localhost",
        "--tls-ca",
        "/nonexistent/ca.pem",
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "profdev agent: --tls-ca /nonexistent/ca.pem: cannot read it: No such file or directory (os error 2)\n"
    );
    // Without a destination the agent keeps a local store in its state
    // directory (run below), which must be one.
    let (code, err) = stderr_of(&["--state-dir", "/dev/null"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "profdev agent: --state-dir: cannot write in /dev/null: it is not a directory\n"
    );
    let d = tempfile::tempdir().unwrap();
    let basic = d.path().join("basic");
    std::fs::write(&basic, "user:hunter2\n").unwrap();
    let b = basic.to_str().unwrap();
    let (code, err) = stderr_of(&[
        "--pyroscope",
        "http://192.0.2.1",
        "--insecure",
        "--basic-auth-file",
        b,
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "profdev agent: http://192.0.2.1:4040: refusing to send the --basic-auth-file credential over plain http to another machine, even with --insecure; use https\n"
    );
}

#[test]
fn plain_http_to_another_machine_is_refused_in_a_namespace_with_no_route() {
    let unshare = std::process::Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .map_err(|e| e.to_string())
        .and_then(|s| {
            s.success()
                .then_some(())
                .ok_or_else(|| "unshare -n needs root (CAP_SYS_ADMIN)".to_string())
        });
    if !privileged("profdev agent's plain-http refusal", unshare) {
        return;
    }
    let o = std::process::Command::new("unshare")
        .arg("-n")
        .arg(env!("CARGO_BIN_EXE_profdev"))
        .args([
            "agent",
            "--otlp-protocol",
            "http",
            "--otlp",
            "http://192.0.2.1:4318",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "profdev agent: http://192.0.2.1:4318: refusing to send profiles over plain http to another machine; use https, or --insecure to accept it\n"
    );
}

/// `profdev agent -v --interval 1 ARGS` until it has printed `intervals`
/// interval lines, then SIGTERM: its standard error lines, and the total
/// of profiles it cut.
fn run_agent(args: &[&str], intervals: usize) -> (Vec<String>, usize) {
    run_agent_and(args, intervals, |_| {})
}

/// [`run_agent`], `during` called with the agent's pid before the SIGTERM.
fn run_agent_and(
    args: &[&str],
    intervals: usize,
    during: impl FnOnce(u32),
) -> (Vec<String>, usize) {
    let mut cmd = profdev();
    cmd.args(["agent", "-v", "-F", "49", "--interval", "1"])
        .args(args)
        .stderr(Stdio::piped());
    // Never the machine's state directory.
    let state = common::tempdir();
    if !args.contains(&"--state-dir") {
        cmd.arg("--state-dir").arg(state.path());
    }
    let mut child = with_default_signals(&mut cmd).spawn().unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                lines.lock().unwrap().push(l.unwrap());
            }
        })
    };
    profdev_testkit::wait_until("the intervals", Duration::from_secs(60), || {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(": interval "))
            .count()
            >= intervals
    });
    during(child.id());
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = profdev_testkit::wait_exit("profdev agent", &mut child, Duration::from_secs(60));
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    assert!(status.success(), "{lines:?}");
    let total = lines
        .iter()
        .find_map(|l| l.strip_prefix("profdev agent: ")?.split_once(" profiles, "))
        .map(|(n, _)| n.parse::<usize>().unwrap())
        .unwrap_or_else(|| panic!("no total in {lines:?}"));
    (lines, total)
}

#[test]
fn sigterm_ends_the_agent_with_every_profile_delivered() {
    if !privileged("profdev agent system wide", can_sample_system()) {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = collector(listener);
    let (lines, total) = run_agent(
        &[
            "--otlp-protocol",
            "http",
            "--otlp",
            &url,
            "--label",
            "service_name=e2e",
        ],
        2,
    );
    assert!(total >= 3, "{lines:?}");
    let paths: Vec<String> = got.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert_eq!(paths.len(), total, "{lines:?}");
    assert!(
        paths.iter().all(|p| p == "/v1development/profiles"),
        "{paths:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(
        last,
        &format!(
            "profdev agent: otlp-http {url}: {total} sent, 0 failed, 0 dropped, 0 undelivered"
        )
    );
}

/// The first agent's collector refuses connections: its profiles stay in
/// `--spool DIR` (0600 files). The second agent, its collector up, sends
/// them, then its own, and leaves the spool empty.
#[test]
fn a_restarted_agent_drains_its_spool() {
    if !privileged("profdev agent system wide", can_sample_system()) {
        return;
    }
    let d = common::tempdir();
    let spool = d.path().join("spool");
    // A loopback address of this test's own: the port it frees there
    // cannot be taken by another test's collector (on 127.0.0.1).
    let port = TcpListener::bind("127.0.0.8:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{port}");
    let args = [
        "--otlp-protocol",
        "http",
        "--otlp",
        &url,
        "--spool",
        spool.to_str().unwrap(),
    ];
    let (lines, first) = run_agent(&args, 2);
    let last = lines.last().unwrap();
    assert!(
        last.contains(": 0 sent, ") && last.contains(&format!(", {first} undelivered")),
        "{lines:?}"
    );
    let dir = std::fs::read_dir(&spool)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(files.len(), first, "{files:?}");
    use std::os::unix::fs::PermissionsExt;
    for f in &files {
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let got = collector(TcpListener::bind(port).unwrap());
    let (lines, second) = run_agent(&args, 1);
    assert_eq!(got.lock().unwrap().len(), first + second, "{lines:?}");
    assert_eq!(
        lines.last().unwrap(),
        &format!(
            "profdev agent: otlp-http {url}: {} sent, 0 failed, 0 dropped, 0 undelivered",
            first + second
        )
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// A token file's token appears nowhere but in the requests: not in the
/// agent's command line, its -v lines and standard error, its health file;
/// and `profdev stat --agent` prints the health file, whose counts are the
/// agent's own (its last lines), a destination refusing connections shown
/// with its failures and last error.
#[test]
fn the_token_is_never_shown_and_stat_agent_prints_the_health() {
    if !privileged("profdev agent system wide", can_sample_system()) {
        return;
    }
    const TOKEN: &str = "tok-7f3a9c-DISTINCTIVE-e2e";
    let d = common::tempdir();
    let state = d.path().join("state");
    let token = d.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("http://{}", listener.local_addr().unwrap());
    let got = collector(listener);
    // A loopback address of this test's own, its port closed.
    let down = TcpListener::bind("127.0.0.10:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let down = format!("http://{down}");
    let args = [
        "--otlp-protocol",
        "http",
        "--otlp",
        &up,
        "--pyroscope",
        &down,
        "--token-file",
        token.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let mut seen = Vec::new();
    let (lines, total) = run_agent_and(&args, 2, |pid| {
        seen.push(std::fs::read(format!("/proc/{pid}/cmdline")).unwrap());
        seen.push(std::fs::read(state.join("health")).unwrap());
    });
    seen.push(std::fs::read(state.join("health")).unwrap());
    seen.push(lines.join("\n").into_bytes());
    for s in &seen {
        let s = String::from_utf8_lossy(s);
        assert!(!s.contains(TOKEN) && !s.contains("7f3a9c"), "{s}");
    }
    assert!(String::from_utf8_lossy(&seen[0]).contains("--token-file"));
    assert_eq!(got.lock().unwrap().len(), total, "{lines:?}");
    let o = profdev()
        .args(["stat", "--agent"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains(TOKEN));
    let row = |key: &str| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
            .find(|r| r[0] == key)
            .unwrap_or_else(|| panic!("no {key} in {out}"))
    };
    assert_eq!(
        row("key"),
        ["key", "agent", "agent.otlp-http", "agent.pyroscope"]
    );
    assert_eq!(row("state")[1], "ended");
    assert_eq!(row("profiles")[1], total.to_string());
    // The last lines: the otlp destination's counts, then pyroscope's.
    let pyro = lines.last().unwrap();
    let failed: String = pyro
        .split(" sent, ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .into();
    assert!(
        pyro.starts_with(&format!("profdev agent: pyroscope {down}: 0 sent, ")),
        "{pyro}"
    );
    assert_eq!(row("sent")[2..], [total.to_string(), "0".into()]);
    assert_eq!(row("failures")[2..], ["0".to_string(), failed.clone()]);
    assert_ne!(failed, "0");
    let last_error = out.lines().find(|l| l.starts_with("last_error")).unwrap();
    let error = pyro
        .split(" (last error: ")
        .nth(1)
        .unwrap()
        .strip_suffix(')')
        .unwrap();
    assert!(
        last_error.trim_end().ends_with(error),
        "{last_error} / {pyro}"
    );
}

/// With no destination the agent keeps its profiles in STATE/store
/// (0600 files in a 0700 directory), and `profdev report --since` and
/// `export folded --since` read them all: the agent's samples.
#[test]
fn without_a_destination_the_store_is_read_by_report_since() {
    if !privileged("profdev agent system wide", can_sample_system()) {
        return;
    }
    let d = common::tempdir();
    let state = d.path().join("state");
    let (lines, total) = run_agent(&["--state-dir", state.to_str().unwrap()], 2);
    let store = state.join("store");
    let files: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(files.len(), total, "{lines:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&store), 0o700);
    assert!(files.iter().all(|f| mode(f) == 0o600));
    let samples: usize = lines
        .iter()
        .find_map(|l| l.strip_prefix("profdev agent: ")?.split_once(" profiles, "))
        .map(|(_, rest)| rest.split(' ').next().unwrap().parse().unwrap())
        .unwrap();
    let o = profdev()
        .args(["report", "--since", "10m", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with(&format!("# {samples} samples\n")), "{out}");
    let o = profdev()
        .args(["export", "folded", "--since", "10m", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let folded: usize = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<usize>().unwrap())
        .sum();
    assert_eq!(folded, samples);
}

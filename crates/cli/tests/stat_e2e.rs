//! Health files end to end: `stat/kprof` of a real mount follows `start`,
//! a workload, `stop` and `startclr`, exactly (its `samples` equal
//! kpdata's total ticks whenever sampling is off); user nobody is refused
//! `stat/*` as the devices themselves; `profdev stat --json` is JSON with
//! every key for every device.
//!
//! Needs root and /dev/fuse (and system-wide sampling); skips saying why
//! without them, and fails instead when PROFDEV_REQUIRE_PRIVILEGED=1.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every key a health file has, in order.
const KEYS: [&str; 14] = [
    "state",
    "rate_asked",
    "rate_achieved",
    "samples",
    "lost",
    "throttled",
    "unwind_ok",
    "unwind_failed_no_stack",
    "unwind_failed_truncated",
    "unwind_failed_unresolved",
    "symbol_misses",
    "sessions",
    "memory_bytes",
    "uptime_ms",
];

const DEVICES: [&str; 4] = ["kprof", "prf", "gmon", "prof"];

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/mounts").unwrap();
    table
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(dir))
}

/// A mount on a fresh directory other users can reach; on drop, detached
/// and its server killed.
struct Scene {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    pid: Option<i32>,
}

impl Scene {
    fn mount() -> Scene {
        let tmp = tempdir();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tmp.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let out = run(profdev().arg("mount").arg("-b").arg(&dir));
        let err = stderr_of(&out);
        assert!(out.status.success(), "{err}");
        let rest = &err[err.find("(pid ").expect("a pid") + 5..];
        let pid = rest[..rest.find(',').unwrap()].parse().unwrap();
        assert!(mounted(&dir));
        Scene {
            _tmp: tmp,
            dir,
            pid: Some(pid),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn ctl(&self, msg: &str) {
        std::fs::write(self.path("kpctl"), format!("{msg}\n")).unwrap();
    }

    /// The `name value` lines of stat/NAME.
    fn stat(&self, name: &str) -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(self.path("stat").join(name)).unwrap();
        let map: BTreeMap<String, String> = text
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap_or_else(|| panic!("{l:?}"));
                (k.to_string(), v.to_string())
            })
            .collect();
        let keys: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(keys, KEYS, "{name}");
        map
    }

    fn number(&self, name: &str, key: &str) -> u64 {
        self.stat(name)[key].parse().unwrap()
    }

    /// kpdata's word 0: the total ticks.
    fn kpdata_total(&self) -> u64 {
        let bytes = std::fs::read(self.path("kpdata")).unwrap();
        u64::from(u32::from_be_bytes(bytes[..4].try_into().unwrap()))
    }

    fn unmount(&mut self) {
        let out = run(profdev().arg("unmount").arg(&self.dir));
        assert!(out.status.success(), "{}", stderr_of(&out));
        self.pid = None;
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            // SAFETY: kill has no memory preconditions; the pid is the
            // server this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if mounted(&self.dir) {
            let c = CString::new(self.dir.as_os_str().as_bytes()).unwrap();
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[test]
fn stat_kprof_follows_start_stop_and_startclr() {
    let what = "stat_kprof_follows_start_stop_and_startclr";
    if !privileged(what, can_mount()) || !privileged(what, can_sample_system()) {
        return;
    }
    let mut s = Scene::mount();
    let before = s.stat("kprof");
    assert_eq!(before["state"], "off");
    assert_eq!(before["samples"], "0");
    assert_eq!(before["sessions"], "0");
    assert_eq!(before["rate_asked"], "1000");
    assert_ne!(before["memory_bytes"], "0", "kpdata's words");

    s.ctl("start");
    assert_eq!(s.stat("kprof")["state"], "on");
    // This thread's own CPU time is sampled (system wide): the count rises
    // while it burns, and every read sees no fewer samples than the last.
    let mut seen = vec![s.number("kprof", "samples")];
    wait_until(
        "stat/kprof's samples to rise three times",
        Duration::from_secs(60),
        || {
            profdev_testkit::burn_cpu(Duration::from_millis(30));
            let n = s.number("kprof", "samples");
            assert!(
                n >= *seen.last().unwrap(),
                "samples went down: {seen:?} then {n}"
            );
            if n > *seen.last().unwrap() {
                seen.push(n);
            }
            seen.len() > 3
        },
    );
    s.ctl("stop");
    let stopped = s.stat("kprof");
    assert_eq!(stopped["state"], "off");
    assert_eq!(stopped["sessions"], "1");
    let samples: u64 = stopped["samples"].parse().unwrap();
    assert!(samples >= *seen.last().unwrap());
    assert_eq!(
        samples,
        s.kpdata_total(),
        "exact: every sample is a tick of kpdata"
    );
    assert!(stopped["uptime_ms"].parse::<u64>().unwrap() > 0);
    // Off: nothing moves.
    assert_eq!(s.stat("kprof")["samples"], stopped["samples"]);
    assert_eq!(s.stat("kprof")["uptime_ms"], stopped["uptime_ms"]);

    // startclr restarts the counts with kpdata, at the same sample.
    s.ctl("startclr");
    assert_eq!(s.stat("kprof")["state"], "on");
    s.ctl("stop");
    let cleared = s.number("kprof", "samples");
    assert_eq!(
        cleared,
        s.kpdata_total(),
        "the health restarted with kpdata"
    );
    assert_eq!(
        s.number("kprof", "sessions"),
        1,
        "one session since startclr"
    );
    // The other devices were not touched.
    for dev in ["prf", "gmon", "prof"] {
        let h = s.stat(dev);
        assert_eq!(
            (h["state"].as_str(), h["samples"].as_str()),
            ("off", "0"),
            "{dev}"
        );
    }
    s.unmount();
}

#[test]
fn stat_files_are_refused_to_nobody_like_the_devices() {
    let what = "stat_files_are_refused_to_nobody_like_the_devices";
    if !privileged(what, can_mount()) || !profdev_testkit::tools(what, &["setpriv"]) {
        return;
    }
    let mut s = Scene::mount();
    for f in ["kpdata", "stat/kprof", "stat/prf", "stat/gmon", "stat/prof"] {
        let out = as_nobody("cat \"$1\"", &[&s.path(f)]);
        assert!(!out.status.success(), "nobody read {f}");
        assert!(
            stderr_of(&out).contains("Permission denied"),
            "{f}: {}",
            stderr_of(&out)
        );
    }
    let out = as_nobody("ls \"$1\"", &[&s.path("stat")]);
    assert!(!out.status.success(), "nobody listed stat/");
    // Root, the mounting user, reads them all; their modes follow the
    // devices' data.
    for (f, mode) in [
        ("kprof", 0o400),
        ("prf", 0o400),
        ("gmon", 0o400),
        ("prof", 0o444),
    ] {
        let p = s.path("stat").join(f);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            mode,
            "{f}"
        );
        assert!(std::fs::read_to_string(&p).unwrap().starts_with("state "));
    }
    s.unmount();
}

#[test]
fn profdev_stat_prints_every_key_of_every_device() {
    let what = "profdev_stat_prints_every_key_of_every_device";
    if !privileged(what, can_mount()) {
        return;
    }
    let mut s = Scene::mount();
    let out = run(profdev().args(["stat", "--json"]).arg(&s.dir));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let Json::Object(devices) = Json::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}")) else {
        panic!("not an object: {text}");
    };
    let names: Vec<&str> = devices.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, DEVICES);
    for (name, v) in &devices {
        let Json::Object(pairs) = v else {
            panic!("{name}: not an object")
        };
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, KEYS, "{name}");
        for (k, v) in pairs {
            match (k.as_str(), v) {
                ("state", Json::String(s)) => assert_eq!(s, "off"),
                (_, Json::Number(n)) if k != "state" => {
                    assert!(*n >= 0.0 && n.fract() == 0.0, "{name}.{k}: {n}")
                }
                _ => panic!("{name}.{k}: {v:?}"),
            }
        }
    }
    // The table: a row per key, a column per device.
    let out = run(profdev().arg("stat").env("PROFDEV_MOUNT", &s.dir));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["key", "kprof", "prf", "gmon", "prof"]);
    let keys: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    assert_eq!(keys, KEYS);
    s.unmount();

    // Nothing mounted: one sentence, no server started.
    let out = run(profdev().arg("stat").arg(&s.dir));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        format!(
            "profdev stat: no device server is mounted at {0} (start one with: profdev mount -b {0})\n",
            s.dir.display()
        )
    );
    assert!(!mounted(&s.dir));
}

/// Just enough JSON to check `profdev stat --json`: objects (in order),
/// strings, numbers.
#[derive(Debug)]
enum Json {
    Object(Vec<(String, Json)>),
    String(String),
    Number(f64),
}

impl Json {
    fn parse(s: &str) -> Result<Json, String> {
        let mut p = Parser {
            b: s.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return Err(format!("trailing bytes at {}", p.i));
        }
        Ok(v)
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", c as char, self.i))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.b.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut pairs = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Object(pairs));
                }
                loop {
                    self.ws();
                    let Json::String(k) = self.value()? else {
                        return Err(format!("a key that is not a string at {}", self.i));
                    };
                    self.eat(b':')?;
                    pairs.push((k, self.value()?));
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Object(pairs));
                        }
                        _ => return Err(format!("expected , or }} at {}", self.i)),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut s = String::new();
                loop {
                    match self.b.get(self.i) {
                        None => return Err("unterminated string".into()),
                        Some(b'"') => {
                            self.i += 1;
                            return Ok(Json::String(s));
                        }
                        Some(b'\\') => {
                            let e = *self.b.get(self.i + 1).ok_or("bad escape")?;
                            self.i += 2;
                            match e {
                                b'"' | b'\\' | b'/' => s.push(e as char),
                                b'n' => s.push('\n'),
                                b'u' => {
                                    let hex = std::str::from_utf8(&self.b[self.i..self.i + 4])
                                        .map_err(|e| e.to_string())?;
                                    let c =
                                        u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                                    s.push(char::from_u32(c).ok_or("bad \\u")?);
                                    self.i += 4;
                                }
                                _ => return Err(format!("unknown escape at {}", self.i)),
                            }
                        }
                        Some(&c) if c < 0x20 => return Err("control byte in a string".into()),
                        Some(_) => {
                            let rest = std::str::from_utf8(&self.b[self.i..])
                                .map_err(|e| e.to_string())?;
                            let c = rest.chars().next().unwrap();
                            s.push(c);
                            self.i += c.len_utf8();
                        }
                    }
                }
            }
            Some(c) if c.is_ascii_digit() || *c == b'-' => {
                let start = self.i;
                self.i += 1;
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_digit() || b".eE+-".contains(c))
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.b[start..self.i]).unwrap();
                if text.len() > 1 && text.starts_with('0') {
                    return Err(format!("a leading zero at {start}"));
                }
                text.parse()
                    .map(Json::Number)
                    .map_err(|e| format!("{e} at {start}"))
            }
            _ => Err(format!("unexpected byte at {}", self.i)),
        }
    }
}

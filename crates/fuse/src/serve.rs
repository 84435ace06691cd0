//! Serving a mount until it ends: the options of `profdev mount` beyond
//! its directory ([`Serving`]), the mount point made ready ([`prepare`]),
//! the stop signals blocked before any thread starts
//! ([`block_stop_signals`]) and the loop that serves until the mount is
//! taken away or a signal asks to stop ([`serve`]). The command
//! (`crates/cli/src/mount.rs`) parses, starts the server and prints.

use crate::{MountError, MountOptions, Mounted};
use nix::sys::signal::{SigSet, Signal};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a server that was told to stop keeps serving files still held
/// open before it exits.
pub const GRACE: Duration = Duration::from_secs(1);

/// How to serve: what `profdev mount`'s options say beyond DIR.
#[derive(Clone, Debug, Default)]
pub struct Serving {
    /// Mount on a non-empty directory.
    pub nonempty: bool,
    /// Users allowed besides root and the mounting user.
    pub users: Vec<u32>,
    /// Groups whose members are allowed.
    pub groups: Vec<u32>,
}

impl Serving {
    /// The options again, for the background server's command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.nonempty {
            v.push("--nonempty".to_string());
        }
        for u in &self.users {
            v.push(format!("--allow-user={u}"));
        }
        for g in &self.groups {
            v.push(format!("--allow-group={g}"));
        }
        v
    }

    /// Who may use the mount: its owner (this process's user), and the
    /// users and groups allowed.
    pub fn rules(&self) -> profdev_dev::AccessRules {
        let owner = nix::unistd::geteuid().as_raw();
        let mut rules = profdev_dev::AccessRules::owner_only(owner);
        for &u in &self.users {
            rules = rules.allow_user(u);
        }
        for &g in &self.groups {
            rules = rules.allow_group(g);
        }
        rules
    }

    /// The options of the mount itself.
    pub fn options(&self) -> MountOptions {
        MountOptions {
            nonempty: self.nonempty,
            ..MountOptions::default()
        }
    }
}

/// A uid, given as a number or a user name (`--allow-user`).
pub fn user_id(s: &str) -> Result<u32, String> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    match nix::unistd::User::from_name(s) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        _ => Err(format!(
            "--allow-user {s:?}: no such user; give a uid or a name from /etc/passwd"
        )),
    }
}

/// A gid, given as a number or a group name (`--allow-group`).
pub fn group_id(s: &str) -> Result<u32, String> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    match nix::unistd::Group::from_name(s) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(format!(
            "--allow-group {s:?}: no such group; give a gid or a name from /etc/group"
        )),
    }
}

/// Clear a dead mount at `dir` (`log` says so), then check it can take a
/// mount: it exists (created with `mode` if missing, through no other
/// user's link), is a directory, has nothing mounted, is empty unless
/// `serving.nonempty`; and that this process may mount. Returns it
/// resolved.
pub fn prepare(
    dir: &Path,
    serving: &Serving,
    mode: u32,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, MountError> {
    if crate::clear_dead(dir)? {
        log(&format!(
            "cleared a dead mount at {} (its server had died)",
            dir.display()
        ));
    }
    if std::fs::symlink_metadata(dir).is_err() {
        // Create nothing that could not be mounted on, and nothing at the
        // end of another user's link.
        crate::check_can_mount(dir)?;
        crate::check_ancestors(dir)?;
        profdev_safefile::create_dir(dir, mode).map_err(|e| MountError::Io {
            context: "cannot create the mount point".into(),
            source: io::Error::other(e.to_string()),
        })?;
    }
    let abs = crate::check_mount_point(dir, false)?;
    if !serving.nonempty {
        crate::check_empty(&abs)?;
    }
    crate::check_can_mount(dir)?;
    Ok(abs)
}

/// Block the signals that stop the server, in this thread and every thread
/// it starts, so that only [`serve`]'s sigwait sees them. Called before any
/// thread is started.
pub fn block_stop_signals() -> io::Result<SigSet> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block()
        .map_err(|e| io::Error::other(format!("cannot block signals: {e}")))?;
    Ok(set)
}

/// Serve until unmounted from outside or told to stop by one of `signals`;
/// then detach the mount (lazily: files held open get [`GRACE`]) and
/// return. `log` gets the line that says why it ended.
pub fn serve(
    mounted: Mounted,
    signals: SigSet,
    log: &mut dyn FnMut(&str),
) -> Result<(), MountError> {
    let dir = mounted.dir().to_path_buf();
    let context = |what: &str| {
        let what = what.to_string();
        move |source| MountError::Io {
            context: what,
            source,
        }
    };
    let running = mounted
        .spawn()
        .map_err(context("cannot start the file server"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("profdev-signals".into())
        .spawn(move || {
            while let Ok(sig) = signals.wait() {
                if tx.send(sig).is_err() {
                    break;
                }
            }
        })
        .map_err(context("cannot start the signal thread"))?;
    loop {
        if let Some(result) = running.wait(Duration::from_millis(100)) {
            result.map_err(context(&format!(
                "the file server at {} failed",
                dir.display()
            )))?;
            log(&format!("{} was unmounted; server exiting", dir.display()));
            return Ok(());
        }
        if let Ok(sig) = rx.try_recv() {
            let done = running.unmount(GRACE)?;
            log(&format!(
                "{}: unmounted {}{}",
                sig.as_str(),
                dir.display(),
                if done {
                    ""
                } else {
                    " (files still open there will fail)"
                }
            ));
            return Ok(());
        }
    }
}

/// A server started in the background.
#[derive(Clone, Debug)]
pub struct Started {
    /// The mount point, resolved.
    pub dir: PathBuf,
    /// The files it serves, as its readiness line named them.
    pub files: String,
    pub pid: u32,
    /// Its log, `DIR.log`.
    pub log: PathBuf,
}

/// Start `exe mount --serve-in-background [OPTIONS] DIR` (`dir` already
/// [`prepare`]d), its standard error appended to `DIR.log` (created with
/// `log_mode`, appended to only if it is a regular file of ours, never
/// through a link), and wait for it to report the mount ready (`ready
/// FILES`) or its error (`error: SENTENCE`) on the pipe that is its
/// standard output.
pub fn start_background(
    exe: &Path,
    dir: &Path,
    serving: &Serving,
    log_mode: u32,
) -> Result<Started, String> {
    use std::io::BufRead;
    use std::process::Stdio;
    let log = crate::log_path(dir);
    let log_file = profdev_safefile::open_append(&log, log_mode)
        .map_err(|e| format!("cannot open the log: {e}"))?
        .into_file();
    let mut child = std::process::Command::new(exe)
        .arg("mount")
        .arg("--serve-in-background")
        .args(serving.to_args())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .current_dir("/")
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    let read = io::BufReader::new(stdout).read_line(&mut line);
    if let Some(files) = line.strip_prefix("ready ") {
        return Ok(Started {
            dir: dir.to_path_buf(),
            files: files.trim_end().to_string(),
            pid: child.id(),
            log,
        });
    }
    if let Some(e) = line.strip_prefix("error: ") {
        let _ = child.wait();
        return Err(e.trim_end().to_string());
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let why = read.err().map_or_else(String::new, |e| format!(" ({e})"));
    Err(format!(
        "the device server exited ({status}) before its mount was ready{why}; see {}",
        log.display()
    ))
}

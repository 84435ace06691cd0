//! `profdev mount [-b] [DIR]`: serve the devices as files.
//!
//! # Synopsis
//!
//! ```text
//! profdev mount [-b] [--nonempty] [--allow-user UID|NAME]... [--allow-group GID|NAME]... [DIR]
//!                                 DIR defaults to $PROFDEV_MOUNT, else /run/profdev
//! profdev unmount [DIR]
//!
//! DIR/kpctl     0600  kprof(3) control: start | stop | startclr
//! DIR/kpdata    0600  kprof(3) histogram, big-endian words
//! ```
//!
//! # Description
//!
//! **The mount directory.** Every command that uses the devices (`mount`,
//! `unmount`, `stat`, `kgmon`, `prof`, the prf commands) takes DIR from
//! `$PROFDEV_MOUNT` when not given one, else `/run/profdev`
//! (`profdev_fuse::mount_dir`), so `PROFDEV_MOUNT=DIR profdev mount -b`,
//! `profdev stat` and `profdev unmount` all act on DIR. A missing DIR is
//! created, 0755 less the umask, with its missing parents, without
//! following a symbolic link another user could have planted
//! (`profdev_safefile::create_dir`).
//!
//! `profdev mount` mounts every device of the device table on DIR through
//! FUSE (as root: it calls mount(2) itself; no fusermount) and serves it,
//! in the foreground with a log on standard error (failed control writes,
//! quoted). With `-b` it returns once the mount is ready and leaves the
//! server running in the background, its log in `DIR.log` beside DIR.
//! `DIR.log` is created 0600 and appended to only when it is a regular file
//! of the mounting user with one link, opened without following a symbolic
//! link (`profdev_safefile`); anything else is refused with a sentence.
//!
//! The files belong to the user who mounted. Who may use them is a rule
//! the server checks on every request, by the requester's uid: root, the
//! mounting user, and the users and group members named with
//! `--allow-user` and `--allow-group` (numbers or names, repeatable);
//! everyone else gets EACCES on every open, read, write and ioctl, and
//! cannot list a device's directory (kernel addresses defeat KASLR, and
//! prof's modules are other users' programs). The 0600 modes stay as a
//! second wall; a mount that names others shows the owner's bits to group
//! and others so that the kernel lets them reach the rule. A control
//! message that names a process must also pass the kernel's ptrace-attach
//! rule for the requester (EPERM otherwise).
//!
//! DIR must be empty (a mount would hide its files), as libfuse 2's
//! fusermount required, unless `--nonempty` is given. Reads and writes reach the
//! devices unchanged, so `cat`, `cp`, `dd bs=4` and `od` all read kpdata,
//! `stat` shows its true length, and a bad control message fails with
//! EINVAL.
//!
//! SIGINT, SIGTERM and SIGHUP unmount (lazily, so a file held open does not
//! stop it) and end the server; so does `profdev unmount DIR`, after which
//! the server ends once the last open file is closed. If the server was
//! killed (SIGKILL), the next `profdev mount` or `profdev unmount` on DIR
//! clears the dead mount and says so.
//!
//! # Example
//!
//! ```text
//! # profdev mount -b
//! profdev: serving kpctl kpdata at /run/profdev in the background (pid 4242, log /run/profdev.log)
//! # echo start >/run/profdev/kpctl; make -j2; echo stop >/run/profdev/kpctl
//! # cp /run/profdev/kpdata /tmp/kpdata && profdev kprof /proc/kallsyms /tmp/kpdata
//! # profdev unmount
//! ```
//!
//! # Errors
//!
//! One sentence each, exit status 1: DIR cannot be created or is not a
//! directory; DIR is not empty (without
//! `--nonempty`); DIR is already a mount point; /dev/fuse does not exist;
//! mounting needs CAP_SYS_ADMIN; an `--allow-user` or `--allow-group` name
//! that does not exist.

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use nix::sys::signal::SigSet;
use profdev_dev::{devtab, DevContext, Engine};
use profdev_fuse::{block_stop_signals, group_id, user_id, MountState, Server, Serving};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Where the devices are mounted unless `$PROFDEV_MOUNT` says otherwise.
pub const DEFAULT_DIR: &str = profdev_fuse::DEFAULT_MOUNT_DIR;

/// Serve the profiling devices as files on DIR.
#[derive(Parser, Debug)]
#[command(name = "profdev mount", version)]
pub(crate) struct Args {
    /// Return once the mount is ready and serve in the background (log in
    /// DIR.log).
    #[arg(short = 'b')]
    background: bool,
    /// The background server itself, started by -b: report readiness on
    /// standard output.
    #[arg(long = "serve-in-background", hide = true)]
    daemon: bool,
    /// Mount even on a directory that has files in it (they are hidden
    /// while mounted).
    #[arg(long = "nonempty")]
    nonempty: bool,
    /// Also let this user (a uid or a name) use the mount; repeatable.
    #[arg(long = "allow-user", value_name = "UID|NAME")]
    allow_user: Vec<String>,
    /// Also let the members of this group (a gid or a name) use the
    /// mount; repeatable.
    #[arg(long = "allow-group", value_name = "GID|NAME")]
    allow_group: Vec<String>,
    /// The mount point (default $PROFDEV_MOUNT, else /run/profdev); created
    /// if missing.
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
}

fn serving(args: &Args) -> Result<Serving> {
    let users = args.allow_user.iter().map(|u| user_id(u));
    let groups = args.allow_group.iter().map(|g| group_id(g));
    Ok(Serving {
        nonempty: args.nonempty,
        users: users.collect::<Result<_, _>>().map_err(|e| anyhow!(e))?,
        groups: groups.collect::<Result<_, _>>().map_err(|e| anyhow!(e))?,
    })
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let args = match crate::cmdline::parse::<Args>("profdev mount", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let serving = match serving(&args) {
        Ok(s) => s,
        Err(e) => return crate::cmdline::finish("profdev mount", Err(e)),
    };
    let dir = args.dir.clone().unwrap_or_else(profdev_fuse::mount_dir);
    let result = if args.daemon {
        daemon(&dir, &serving)
    } else if args.background {
        let exe = std::env::current_exe().context("cannot find the profdev binary");
        exe.and_then(|exe| background(&exe, &dir, &serving))
            .map(|started| {
                eprintln!(
                    "profdev: serving {} at {} in the background (pid {}, log {})",
                    started.files,
                    started.dir.display(),
                    started.pid,
                    started.log.display()
                );
            })
    } else {
        foreground(&dir, &serving)
    };
    crate::cmdline::finish("profdev mount", result.map(|()| ExitCode::SUCCESS))
}

/// The mount directory of the profdev server the profiling commands use:
/// $PROFDEV_MOUNT, or /run/profdev. If no server is mounted there, start
/// one in the background (`profdev mount -b`) and say so on stderr, with
/// the command that stops it.
///
/// ```no_run
/// let dir = crate::mount::ensure_mounted()?;
/// std::fs::write(dir.join("kpctl"), "start\n")?;
/// ```
pub fn ensure_mounted() -> Result<PathBuf> {
    let dir = profdev_fuse::mount_dir();
    let exe = std::env::current_exe().context("cannot find the profdev binary")?;
    ensure_mounted_with(&exe, &dir)
}

/// [`ensure_mounted`] with the binary to start and the directory given.
pub fn ensure_mounted_with(exe: &Path, dir: &Path) -> Result<PathBuf> {
    if profdev_fuse::state(dir)? == (MountState::Profdev { alive: true }) {
        return Ok(profdev_fuse::resolve(dir));
    }
    let started = background(exe, dir, &Serving::default())?;
    eprintln!(
        "profdev: started a device server at {0} (stop it with: profdev unmount {0})",
        started.dir.display()
    );
    Ok(started.dir)
}

/// [`profdev_fuse::prepare`], its notes on stderr.
fn prepare(dir: &Path, serving: &Serving) -> Result<PathBuf> {
    let mut note = |l: &str| eprintln!("profdev: {l}");
    Ok(profdev_fuse::prepare(
        dir,
        serving,
        crate::output::DIR_MODE,
        &mut note,
    )?)
}

/// The device table over the running kernel, sampling with perf_event.
fn server(serving: &Serving) -> Result<Server> {
    let ksyms = profdev_symbolize::KernelSymbols::running()?;
    let objects = profdev_symbolize::Objects::new();
    let factory = profdev_sample::PerfFactory::new().with_mapping_hook(objects.mapping_hook());
    let ctx = DevContext {
        engine: Engine::new(Arc::new(factory)),
        kernel_text: ksyms.require_text("/proc/kallsyms")?,
        cpus: profdev_sample::online_cpus().context("cannot list the online CPUs")?,
        kernel_functions: ksyms.text_symbols().iter().map(|s| s.addr).collect(),
        prof_engines: profdev_attach::engines(),
        objects,
    };
    let log: profdev_fuse::Log = Arc::new(|line: &str| {
        // The log must never kill the server: a closed stderr is ignored.
        let _ = writeln!(std::io::stderr().lock(), "profdev: {line}");
    });
    Ok(Server::new(devtab(&ctx))?
        .with_log(log)
        .with_access(serving.rules()))
}

fn file_names(server: &Server) -> String {
    server
        .root_names()
        .into_iter()
        .map(|(n, _)| n)
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`profdev_fuse::serve`], its last line on stderr.
fn serve(mounted: profdev_fuse::Mounted, signals: SigSet) -> Result<()> {
    let mut note = |l: &str| {
        let _ = writeln!(std::io::stderr(), "profdev: {l}");
    };
    Ok(profdev_fuse::serve(mounted, signals, &mut note)?)
}

fn foreground(dir: &Path, serving: &Serving) -> Result<()> {
    crate::malloc::bound_for_server();
    let signals = block_stop_signals()?;
    prepare(dir, serving)?;
    let server = server(serving)?;
    crate::malloc::release_free();
    let files = file_names(&server);
    let mounted = profdev_fuse::mount(server, dir, serving.options())?;
    eprintln!(
        "profdev: serving {files} at {} (pid {}); stop with ^C or 'profdev unmount {}'",
        mounted.dir().display(),
        std::process::id(),
        dir.display()
    );
    serve(mounted, signals)
}

/// [`profdev_fuse::start_background`]: `exe mount --serve-in-background
/// DIR`, its log 0600 (kernel addresses in its messages).
fn background(exe: &Path, dir: &Path, serving: &Serving) -> Result<profdev_fuse::Started> {
    let abs = prepare(dir, serving)?;
    let log = crate::output::KERNEL_MODE;
    profdev_fuse::start_background(exe, &abs, serving, log).map_err(|e| anyhow!(e))
}

/// The background server: a session of its own, readiness or the error
/// reported on stdout, then [`serve`].
fn daemon(dir: &Path, serving: &Serving) -> Result<()> {
    crate::malloc::bound_for_server();
    let signals = block_stop_signals()?;
    // Leave the caller's session, so that its terminal's hangup does not
    // reach the server.
    let _ = nix::unistd::setsid();
    let mounted = server(serving).and_then(|server| {
        crate::malloc::release_free();
        let files = file_names(&server);
        Ok((profdev_fuse::mount(server, dir, serving.options())?, files))
    });
    let mut out = std::io::stdout();
    let (mounted, files) = match mounted {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(out, "error: {}", crate::cmdline::sentence(&e));
            return Err(e);
        }
    };
    eprintln!(
        "profdev: serving {files} at {} (pid {})",
        mounted.dir().display(),
        std::process::id()
    );
    writeln!(out, "ready {files}")?;
    out.flush()?;
    serve(mounted, signals)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ensure_mounted starts a server once, then finds it. Needs root and
    /// /dev/fuse; skips without them unless PROFDEV_REQUIRE_PRIVILEGED=1.
    #[test]
    fn ensure_mounted_starts_a_server_once() {
        if !profdev_testkit::privileged(
            "ensure_mounted_starts_a_server_once",
            profdev_testkit::can_mount(),
        ) {
            return;
        }
        // The unit-test binary is target/*/deps/profdev-HASH; cargo builds
        // the profdev binary beside deps/ before running any test.
        let exe = std::env::current_exe().unwrap();
        let exe = exe.parent().unwrap().parent().unwrap().join("profdev");
        assert!(exe.exists(), "{}", exe.display());
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = profdev_fuse::unmount(self.0);
            }
        }
        let _guard = Unmount(&dir);
        assert_eq!(ensure_mounted_with(&exe, &dir).unwrap(), dir);
        assert!(dir.join("kpdata").exists());
        assert_eq!(ensure_mounted_with(&exe, &dir).unwrap(), dir);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let here = format!(" {} ", dir.display());
        assert_eq!(mounts.lines().filter(|l| l.contains(&here)).count(), 1);
    }
}

//! Who may use a mount: the access rules, and the kernel's ptrace-attach
//! rule for control messages that name a process.
//!
//! # The rules
//!
//! Every request that reaches a device carries the credentials of the
//! process that made it ([`Cred`]: the FUSE request's uid, gid and pid).
//! The file server checks them against the mount's [`AccessRules`] before
//! a file is opened, read, written, truncated or sent an ioctl, and before a
//! device directory is listed:
//!
//! * root (uid 0) and the user who mounted are allowed;
//! * so are the users and the members of the groups the mount names
//!   (`profdev mount --allow-user UID|NAME --allow-group GID|NAME`);
//!   membership is the request's gid or one of the requesting process's
//!   supplementary groups (`Groups:` in /proc/PID/status);
//! * everyone else gets EACCES, whatever the file's mode says.
//!
//! The files' modes (0600 and the like, owned by the mounting user) stay
//! as a second wall: the kernel checks them first (`default_permissions`).
//! A mount that names users or groups shows the owner's bits to group and
//! others too, so that the kernel lets those users through to the rule.
//!
//! A control message that targets a process (the coverage and memory
//! modes' `startcp PID`, `startmp PID`) must in addition pass
//! [`ptrace_may_attach`] for the requester, so that the mount gives no
//! user more than `ptrace(2)` would. The decision is the kernel's where
//! the kernel can make it: the process's `/proc/PID/environ` is opened
//! from a thread holding the requester's ids and no capability
//! (`profdev_asuser::may_trace`: the requester's ids against the
//! process's real, effective and saved ids, its dumpability, the LSMs),
//! and beside it the rule is applied here ([`ptrace_rule`]: the
//! file-system ids too, and Yama's scope, which governs attaching and
//! which a thread of profdev, no ancestor of anything, cannot ask about).
//!
//! **Checked at the moment of action.** The check returns a [`Permit`]:
//! the process held by a pidfd from the check on. Root acts later (it
//! plans, then stops every thread); once every thread is stopped, and
//! before anything is loaded into the process, [`Permit::check_again`]
//! asks the same questions again of the held process: still the same
//! process (the pidfd, the start time), still the requester's ids, still
//! dumpable. A process that exec'd a set-id program in between is then
//! refused (EPERM) and let go untouched; nothing profdev loads ever runs
//! with more privilege than the requester. The same check precedes every
//! later stop (`stop`'s flush).
//!
//! ```
//! use profdev_dev::access::{AccessRules, Cred};
//! let rules = AccessRules::owner_only(1000).allow_user(1001);
//! let cred = |uid| Cred { uid, gid: 100, pid: 0 };
//! assert!(rules.allows(&cred(0)));      // root
//! assert!(rules.allows(&cred(1000)));   // the mounting user
//! assert!(rules.allows(&cred(1001)));   // named by --allow-user
//! assert!(!rules.allows(&cred(65534))); // anyone else
//! ```

use crate::error::DevError;
use profdev_asuser::{Held, User};
use std::path::PathBuf;

/// The credentials of the process behind one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    /// The (file-system) user id the kernel checks with.
    pub uid: u32,
    /// The (file-system) group id.
    pub gid: u32,
    /// The requesting process (thread group id as the kernel gives it); 0
    /// when unknown.
    pub pid: u32,
}

/// Who may use a mount beyond root and its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessRules {
    owner: u32,
    users: Vec<u32>,
    groups: Vec<u32>,
}

impl AccessRules {
    /// Root and `owner` only.
    pub fn owner_only(owner: u32) -> Self {
        AccessRules {
            owner,
            users: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// Also allow user `uid`.
    pub fn allow_user(mut self, uid: u32) -> Self {
        if !self.users.contains(&uid) {
            self.users.push(uid);
        }
        self
    }

    /// Also allow the members of group `gid`.
    pub fn allow_group(mut self, gid: u32) -> Self {
        if !self.groups.contains(&gid) {
            self.groups.push(gid);
        }
        self
    }

    /// The mounting user.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// True if the mount names users or groups beyond root and its owner.
    pub fn names_others(&self) -> bool {
        !self.users.is_empty() || !self.groups.is_empty()
    }

    /// May the process behind `cred` use the mount?
    pub fn allows(&self, cred: &Cred) -> bool {
        if cred.uid == 0 || cred.uid == self.owner || self.users.contains(&cred.uid) {
            return true;
        }
        if self.groups.is_empty() {
            return false;
        }
        if self.groups.contains(&cred.gid) {
            return true;
        }
        if cred.pid == 0 {
            return false;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", cred.pid));
        let groups = status
            .ok()
            .and_then(|s| field(&s, "Groups:").map(|g| numbers(&g)))
            .unwrap_or_default();
        groups.iter().any(|g| self.groups.contains(g))
    }
}

/// The credentials of a target process as the ptrace rule needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Real, effective, saved and file-system user ids.
    pub uids: [u32; 4],
    /// Real, effective, saved and file-system group ids.
    pub gids: [u32; 4],
    /// Whether the process is dumpable (`prctl(PR_GET_DUMPABLE)` is 1):
    /// a set-id program, or one that dropped it, is not.
    pub dumpable: bool,
    /// Thread group id.
    pub tgid: u32,
}

impl Target {
    /// Read process `pid`'s credentials from /proc. A process whose
    /// `/proc/PID/status` is not owned by its effective uid is not
    /// dumpable (the kernel's `task_dump_owner` hands such a process's
    /// /proc files to root; the directory `/proc/PID` itself may keep the
    /// user's, so it is not the one to look at).
    pub fn of(pid: u32) -> Result<Target, DevError> {
        use std::os::unix::fs::MetadataExt;
        let gone = || DevError::NoProcess(pid);
        let path = PathBuf::from(format!("/proc/{pid}/status"));
        let file = std::fs::File::open(&path).map_err(|_| gone())?;
        let owner = file.metadata().map_err(|_| gone())?.uid();
        let status = std::io::read_to_string(file).map_err(|_| gone())?;
        let mut target = parse_status(&status).ok_or_else(gone)?;
        target.dumpable = owner == target.uids[1];
        Ok(target)
    }
}

/// Uid, Gid and Tgid of a /proc/PID/status text (dumpable left true).
fn parse_status(status: &str) -> Option<Target> {
    let four = |name: &str| -> Option<[u32; 4]> {
        let v = numbers(&field(status, name)?);
        Some([*v.first()?, *v.get(1)?, *v.get(2)?, *v.get(3)?])
    };
    Some(Target {
        uids: four("Uid:")?,
        gids: four("Gid:")?,
        dumpable: true,
        tgid: *numbers(&field(status, "Tgid:")?).first()?,
    })
}

fn field(status: &str, name: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::to_string)
}

fn numbers(s: &str) -> Vec<u32> {
    s.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Yama's `kernel.yama.ptrace_scope`: 0 classic, 1 descendants only,
/// 2 root only, 3 no attach at all. Without Yama, 0.
fn yama_scope() -> u8 {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Is `pid` a descendant of `ancestor` (following parents in /proc, at most
/// 4096 steps)?
fn is_descendant(pid: u32, ancestor: u32) -> bool {
    let mut p = pid;
    for _ in 0..4096 {
        if p == ancestor {
            return true;
        }
        if p <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            return false;
        };
        // The ppid is the second field after the command's closing paren.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        match rest.split_whitespace().nth(1).and_then(|w| w.parse().ok()) {
            Some(pp) => p = pp,
            None => return false,
        }
    }
    false
}

/// The kernel's ptrace-attach rule (`__ptrace_may_access` with
/// `PTRACE_MODE_ATTACH_REALCREDS`, then Yama), decided for `who` against
/// `target`, given Yama's scope and whether the target descends from the
/// requester.
///
/// * the requester's own thread group passes (Yama aside, as in the kernel);
/// * otherwise its uid must equal the target's real, effective, saved and
///   file-system uids and its gid the four gids, or it must be root
///   (CAP_SYS_PTRACE);
/// * a target that is not dumpable needs root;
/// * Yama scope 1 lets a non-root requester attach to its descendants
///   only, scope 2 lets only root attach, scope 3 lets no one.
pub fn ptrace_rule(who: &Cred, target: &Target, yama: u8, descendant: bool) -> Result<(), String> {
    let root = who.uid == 0;
    if who.pid != 0 && who.pid == target.tgid {
        return Ok(());
    }
    let same_user =
        target.uids.iter().all(|&u| u == who.uid) && target.gids.iter().all(|&g| g == who.gid);
    if !same_user && !root {
        return Err(format!(
            "uid {} may not trace a process of uid {} (real, effective, saved and file-system uids and gids must all be the requester's)",
            who.uid, target.uids[1]
        ));
    }
    if !target.dumpable && !root {
        return Err(
            "the process is not dumpable (a set-id program, or prctl(PR_SET_DUMPABLE, 0))".into(),
        );
    }
    match yama {
        0 => Ok(()),
        1 if root || descendant => Ok(()),
        1 => Err(
            "kernel.yama.ptrace_scope is 1: only a descendant of the requester may be traced"
                .into(),
        ),
        2 if root => Ok(()),
        2 => Err("kernel.yama.ptrace_scope is 2: only root may trace".into()),
        _ => Err("kernel.yama.ptrace_scope is 3: no process may be traced".into()),
    }
}

/// May the process behind `who` attach to process `pid` with ptrace? The
/// check a control message that names a PID must pass: EPERM
/// ([`DevError::NotPermitted`]) if not, ESRCH ([`DevError::NoProcess`]) if
/// there is no such process. The [`Permit`] holds the process from here
/// on: check it again ([`Permit::check_again`]) once it is stopped, before
/// acting on it.
pub fn ptrace_may_attach(who: &Cred, pid: u32) -> Result<Permit, DevError> {
    let held = Held::new(pid).map_err(|_| DevError::NoProcess(pid))?;
    let permit = Permit { who: *who, held };
    permit.check_again()?;
    Ok(permit)
}

/// A requester's right to act on a process, and the process, held by a
/// pidfd from the check on ([`ptrace_may_attach`]).
#[derive(Debug)]
pub struct Permit {
    who: Cred,
    held: Held,
}

impl Permit {
    /// The process.
    pub fn pid(&self) -> u32 {
        self.held.pid()
    }

    /// Its start time.
    pub fn start(&self) -> u64 {
        self.held.start()
    }

    /// The requester.
    pub fn who(&self) -> &Cred {
        &self.who
    }

    /// Is the held process still the one checked, and running?
    pub fn alive(&self) -> bool {
        self.held.alive()
    }

    /// The whole check, again, on the held process: ESRCH if it is gone
    /// (or its pid is another process's now), EPERM if the requester may
    /// no longer trace it (it exec'd a set-id program, changed its ids,
    /// became non-dumpable). Call it while every thread is stopped, so
    /// that the answer holds while root acts.
    pub fn check_again(&self) -> Result<(), DevError> {
        let pid = self.pid();
        if !self.held.alive() {
            return Err(DevError::NoProcess(pid));
        }
        let target = Target::of(pid)?;
        let who = &self.who;
        let yama = yama_scope();
        let descendant = yama == 1 && who.pid != 0 && is_descendant(pid, who.pid);
        ptrace_rule(who, &target, yama, descendant)
            .map_err(|why| DevError::NotPermitted(format!("process {pid}: {why}")))?;
        if who.uid != 0 && who.pid != target.tgid {
            // The kernel's own answer, as the requester.
            let user = User::of_request(who.uid, who.gid, who.pid);
            match profdev_asuser::may_trace(&user, pid) {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(DevError::NotPermitted(format!(
                        "process {pid}: the kernel does not let uid {} trace it (its ids are \
                         not all the requester's, or it is not dumpable)",
                        who.uid
                    )))
                }
                Err(e) => return Err(DevError::NotPermitted(format!("process {pid}: {e}"))),
            }
        }
        if !self.held.alive() {
            return Err(DevError::NoProcess(pid));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(uid: u32, gid: u32) -> Cred {
        Cred { uid, gid, pid: 0 }
    }

    fn target(uids: [u32; 4], gids: [u32; 4], dumpable: bool) -> Target {
        Target {
            uids,
            gids,
            dumpable,
            tgid: 4242,
        }
    }

    #[test]
    fn rules_allow_root_owner_and_named_users_and_groups() {
        let rules = AccessRules::owner_only(1000);
        assert!(!rules.names_others());
        assert!(rules.allows(&cred(0, 0)));
        assert!(rules.allows(&cred(1000, 1000)));
        assert!(!rules.allows(&cred(65534, 65534)));
        let rules = rules.allow_user(65534).allow_group(50);
        assert!(rules.names_others());
        assert!(rules.allows(&cred(65534, 1)));
        assert!(rules.allows(&cred(7, 50)), "primary group");
        assert!(!rules.allows(&cred(7, 51)));
        // Supplementary groups come from the requesting process: this one.
        let me = std::process::id();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let mine = numbers(&field(&status, "Groups:").unwrap());
        if let Some(&g) = mine.first() {
            let r = AccessRules::owner_only(1000).allow_group(g);
            assert!(r.allows(&Cred {
                uid: 7,
                gid: 123_456,
                pid: me
            }));
        }
        let r = AccessRules::owner_only(1000).allow_group(987_654);
        assert!(!r.allows(&Cred {
            uid: 7,
            gid: 123_456,
            pid: me
        }));
    }

    #[test]
    fn ptrace_rule_is_the_kernels() {
        let user = cred(1000, 1000);
        let root = cred(0, 0);
        let own = target([1000; 4], [1000; 4], true);
        assert_eq!(ptrace_rule(&user, &own, 0, false), Ok(()));
        // Any of the three uids or gids differing: a set-id program.
        for t in [
            target([1000, 0, 1000, 1000], [1000; 4], true),
            target([1000, 1000, 0, 1000], [1000; 4], true),
            target([1000, 1000, 1000, 0], [1000; 4], true),
            target([0, 1000, 1000, 1000], [1000; 4], true),
            target([1000; 4], [1000, 1000, 5, 1000], true),
            target([1000; 4], [1000, 1000, 1000, 5], true),
            target([2000; 4], [2000; 4], true),
        ] {
            assert!(ptrace_rule(&user, &t, 0, false).is_err(), "{t:?}");
            assert_eq!(ptrace_rule(&root, &t, 0, false), Ok(()), "{t:?}");
        }
        // Not dumpable: root only.
        let nodump = target([1000; 4], [1000; 4], false);
        assert!(ptrace_rule(&user, &nodump, 0, false)
            .unwrap_err()
            .contains("not dumpable"));
        assert_eq!(ptrace_rule(&root, &nodump, 0, false), Ok(()));
        // Yama.
        assert!(ptrace_rule(&user, &own, 1, false).is_err());
        assert_eq!(ptrace_rule(&user, &own, 1, true), Ok(()));
        assert_eq!(ptrace_rule(&root, &own, 1, false), Ok(()));
        assert!(ptrace_rule(&user, &own, 2, true).is_err());
        assert_eq!(ptrace_rule(&root, &own, 2, false), Ok(()));
        assert!(ptrace_rule(&root, &own, 3, false).is_err());
        // One's own thread group always.
        let me = Cred {
            uid: 1000,
            gid: 1000,
            pid: 4242,
        };
        assert_eq!(ptrace_rule(&me, &nodump, 3, false), Ok(()));
    }

    #[test]
    fn live_processes() {
        let me = std::process::id();
        let t = Target::of(me).unwrap();
        assert_eq!(t.tgid, me);
        assert!(t.dumpable);
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!(t.uids, [uid; 4]);
        let own = Cred { uid, gid, pid: 0 };
        assert_eq!(
            ptrace_may_attach(&own, me)
                .map(drop)
                .map_err(|e| e.to_string()),
            Ok(())
        );
        // A user who is not us may not attach to us (unless we are that
        // user, which a test runner as uid 65534 would be).
        if uid != 65534 {
            let nobody = cred(65534, 65534);
            let e = ptrace_may_attach(&nobody, me).unwrap_err();
            assert!(matches!(e, DevError::NotPermitted(_)), "{e:?}");
        }
        // Pid 1 runs as root: only root passes.
        if uid != 0 {
            assert!(ptrace_may_attach(&own, 1).is_err());
        } else {
            assert_eq!(
                ptrace_may_attach(&cred(0, 0), 1)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Ok(())
            );
            assert!(matches!(
                ptrace_may_attach(&cred(65534, 65534), 1),
                Err(DevError::NotPermitted(_))
            ));
        }
        // No such process: ESRCH's variant.
        assert!(matches!(
            ptrace_may_attach(&own, u32::MAX - 1),
            Err(DevError::NoProcess(_))
        ));
    }

    #[test]
    fn a_process_of_another_user_passes_for_that_user_only() {
        use std::os::unix::process::CommandExt;
        let root = if profdev_testkit::is_root() {
            Ok(())
        } else {
            Err("needs root to start a process as nobody".to_string())
        };
        if !profdev_testkit::privileged("a_process_of_another_user", root) {
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let pid = child.id();
        let result = (|| {
            // Wait (bounded) until the child runs as nobody: after exec.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let t = Target::of(pid).map_err(|e| e.to_string())?;
                let cmd = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if t.uids == [65534; 4] && cmd.trim() == "sleep" {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err("the child never ran as nobody".to_string());
                }
                std::thread::yield_now();
            }
            let nobody = cred(65534, 65534);
            ptrace_may_attach(&nobody, pid).map_err(|e| e.to_string())?;
            match ptrace_may_attach(&cred(1000, 1000), pid) {
                Err(DevError::NotPermitted(_)) => Ok(()),
                other => Err(format!("uid 1000 got {other:?}")),
            }
        })();
        let _ = child.kill();
        let _ = child.wait();
        result.unwrap();
    }

    /// A process of nobody's that is not dumpable (its program is
    /// execute-only, so the kernel marks it so at exec) is refused to
    /// nobody, as `strace -p` would be, and allowed to root.
    #[test]
    fn a_process_that_is_not_dumpable_is_refused_to_its_own_user() {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let root = if profdev_testkit::is_root() {
            Ok(())
        } else {
            Err("needs root to start a process as nobody".to_string())
        };
        if !profdev_testkit::privileged("not_dumpable", root) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let prog = dir.path().join("sleep");
        profdev_testkit::copy_executable(std::path::Path::new("/bin/sleep"), &prog, 0o711);
        let mut child = std::process::Command::new(&prog)
            .arg("30")
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let pid = child.id();
        let result = (|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default()
                != "sleep\n"
            {
                if std::time::Instant::now() > deadline {
                    return Err("the child never ran".to_string());
                }
                std::thread::yield_now();
            }
            // /proc/PID itself may still be nobody's: not the test.
            let t = Target::of(pid).map_err(|e| e.to_string())?;
            if t.dumpable {
                return Err(format!("{t:?} is not dumpable"));
            }
            match ptrace_may_attach(&cred(65534, 65534), pid) {
                Err(DevError::NotPermitted(_)) => {}
                other => return Err(format!("nobody got {other:?}")),
            }
            ptrace_may_attach(&cred(0, 0), pid)
                .map(drop)
                .map_err(|e| e.to_string())
        })();
        let _ = child.kill();
        let _ = child.wait();
        result.unwrap();
    }
}

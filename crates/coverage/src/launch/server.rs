//! The server's life: its private directory and listening thread, what
//! a run is told (its environment, the attach entry's configuration),
//! and its trampoline areas.

use super::*;

impl Server {
    /// A fresh private directory holding the runtime, the socket, and
    /// `out/` for reports; the server answers until dropped or finished.
    /// Plans and encodings are kept in the default on-disk cache
    /// ([`crate::cache`]; a cache that cannot be opened is said in the
    /// notes, and the run plans without it).
    pub fn new(select: &[String]) -> std::io::Result<Server> {
        let mut notes = Vec::new();
        let cache = Cache::default_dir().and_then(|d| match Cache::open(&d) {
            Ok(c) => Some(c),
            Err(e) => {
                notes.push(format!("{e}; planning without the cache"));
                None
            }
        });
        let server = Server::with_cache(select, cache)?;
        server.lock().notes.extend(notes);
        Ok(server)
    }

    /// As [`Server::new`], with `cache` (None: none).
    pub fn with_cache(select: &[String], cache: Option<Cache>) -> std::io::Result<Server> {
        let tmp = std::env::temp_dir();
        sweep(&tmp);
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&tmp)?;
        // Locked before the runtime is written: a directory with a
        // runtime and no lock is an earlier run's.
        let lock = std::fs::File::open(dir.path())?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        profdev_safefile::write_file(dir.path().join(RUNTIME_NAME), RUNTIME, 0o500)
            .map_err(profdev_safefile::Error::into_os_error)?;
        profdev_safefile::create_dir(dir.path().join("out"), 0o700)
            .map_err(profdev_safefile::Error::into_os_error)?;
        let listener = UnixListener::bind(dir.path().join("sock"))?;
        let state = Arc::new(Mutex::new(State {
            select: select.to_vec(),
            cache: cache.map(Arc::new),
            ..State::default()
        }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                // Another user's connections: a bounded number at once,
                // each given up when its client stays silent.
                let their = st.lock().ok().is_some_and(|s| {
                    matches!(s.shared, Some(u) if foreign(u))
                        || peer_cred(&conn).is_some_and(|(_, u)| foreign(u))
                });
                let slot = if their {
                    if FOREIGN_CONNS.fetch_add(1, Ordering::AcqRel) >= MAX_FOREIGN_CONNS {
                        FOREIGN_CONNS.fetch_sub(1, Ordering::AcqRel);
                        continue;
                    }
                    let _ = conn.set_read_timeout(Some(CLIENT_SILENCE));
                    Some(Slot)
                } else {
                    None
                };
                let st = st.clone();
                std::thread::spawn(move || {
                    let _slot = slot;
                    let _ = serve(conn, &st);
                });
            }
        });
        Ok(Server {
            dir,
            _lock: lock,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// Record the targets of indirect calls and jumps
    /// ([`crate::encode::Options::call_targets`]; see
    /// [`Server::call_targets`]). Set it before the first process asks
    /// for a module: the encodings made before keep what they were made
    /// with. Off (the default), the trampolines only count. On, the
    /// on-disk cache's encodings (plain counting code) are neither used
    /// nor written; its plans are.
    pub fn set_call_targets(&self, on: bool) {
        let mut s = self.lock();
        s.options.call_targets = on;
        if on {
            s.mode = Mode::Counts;
        }
    }

    /// Record only whether each block ran ([`Mode::Hits`]: cprof's marks),
    /// or (the default) count ([`Mode::Counts`]). Set it before the first
    /// process asks for a module. In hit mode a block's count is 1 when
    /// it ran (in any thread or process), 0 when it did not, and no
    /// branch is reported ([`Mode::Edges`]: each branch's edges, 1 or 0); plans and encodings are cached apart from the
    /// counting ones ([`crate::cache::Key`]). Not with call targets,
    /// which need every count: those turn it off.
    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// The runtime's path.
    pub fn runtime(&self) -> PathBuf {
        self.dir.path().join(RUNTIME_NAME)
    }

    /// The socket's path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// The reports' directory.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Open the run to processes of user `uid` (group `gid`), as attach
    /// mode needs when the target is not profdev's user: the directory
    /// becomes 0711 (traversable, not listable), the runtime 0555, `out/`
    /// (0700) and the socket (0600) belong to `uid`. Only that user (and
    /// root) can then connect, and what a connection may ask is bounded by
    /// what its process maps (see the protocol's checks).
    pub fn share_with(&self, uid: u32, gid: u32) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        mode(self.dir.path(), 0o711)?;
        mode(&self.runtime(), 0o555)?;
        std::os::unix::fs::chown(self.reports_dir(), Some(uid), Some(gid))?;
        mode(&self.socket(), 0o600)?;
        std::os::unix::fs::chown(self.socket(), Some(uid), Some(gid))?;
        self.lock().shared = Some(uid);
        Ok(())
    }

    /// Plan ahead the selected modules process `pid` maps now (read
    /// through its `/proc/PID/map_files/`), so that an attach, which holds
    /// every thread of `pid` while the runtime asks for them, only
    /// encodes. Returns how many modules were planned; a module that
    /// cannot be read now is left for the runtime's request.
    pub fn preplan(&self, pid: u32) -> usize {
        let Ok(maps) = profdev_symbolize::maps::read(pid) else {
            return 0;
        };
        let mut seen = BTreeSet::new();
        let mut planned = 0;
        for m in &maps {
            let path = m.file_path();
            if !m.perms.exec() || !m.is_file() || !seen.insert(path.to_string()) {
                continue;
            }
            let path = Path::new(path);
            if !selected(&self.lock().select, path) {
                continue;
            }
            let range = m.map_files_name();
            let Ok(file) = std::fs::File::open(format!("/proc/{pid}/map_files/{range}")) else {
                continue;
            };
            let Ok(m) = file.metadata() else { continue };
            if self.lock().by_file.contains_key(&(m.dev(), m.ino())) {
                continue;
            }
            // For the process's user: its mappings are that user's choice.
            let Some(uid) = euid_of(pid) else { continue };
            if plan_into(&self.state, path, &file, (m.dev(), m.ino()), uid).is_some() {
                planned += 1;
            }
        }
        planned
    }

    /// One conversation of the runtime's protocol (the module doc) on
    /// behalf of process `pid`, which profdev traces and patches itself
    /// (a statically linked program: no runtime in it): the caller's end
    /// of a socket pair, served on a thread as if `pid` had connected
    /// (its maps and its user checked as for a runtime's connection).
    pub fn connect_for(&self, pid: u32) -> std::io::Result<UnixStream> {
        let (mine, theirs) = UnixStream::pair()?;
        let uid = euid_of(pid).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))?;
        let st = self.state.clone();
        std::thread::spawn(move || {
            let _ = serve_as(theirs, &st, Some((pid, uid)));
        });
        Ok(mine)
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `config` string of `profdev_cov_attach`.
    pub fn attach_config(&self) -> String {
        format!(
            "{}\n{}\n",
            self.socket().display(),
            self.reports_dir().display()
        )
    }

    /// The environment a covered command gets: `LD_PRELOAD` (the runtime
    /// first, then what `current` held), `PROFDEV_COV_SOCK`,
    /// `PROFDEV_COV_OUT`.
    pub fn env(&self, current: Option<OsString>) -> Vec<(String, OsString)> {
        let mut preload = self.runtime().into_os_string();
        if let Some(c) = current.filter(|c| !c.is_empty()) {
            preload.push(" ");
            preload.push(c);
        }
        vec![
            ("LD_PRELOAD".into(), preload),
            ("PROFDEV_COV_SOCK".into(), self.socket().into_os_string()),
            (
                "PROFDEV_COV_OUT".into(),
                self.reports_dir().into_os_string(),
            ),
        ]
    }

    /// Encodings made so far, and loads that were served a copy of one
    /// made for another load ([`crate::encode::Encoded::code_for`]).
    pub fn encodings(&self) -> (u64, u64) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (s.made, s.reused)
    }

    /// Loads served an encoding from the on-disk cache.
    pub fn encodings_from_cache(&self) -> u64 {
        self.lock().from_disk
    }

    /// Wait (at most `limit`) until every cache file being written is
    /// written: a run that ends leaves no temporary behind.
    pub fn wait_for_cache(&self, limit: std::time::Duration) {
        let storing = self.lock().storing.clone();
        let (m, cv) = &*storing;
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cv.wait_timeout_while(g, limit, |n| *n > 0);
    }
}

/// A trampoline area one load of a module ran from: samples taken in it
/// belong to the module's code (see [`Server::areas`]).
#[derive(Clone, Debug)]
pub struct Area {
    /// The module's file.
    pub path: PathBuf,
    /// The load's bias (run-time address less link-time address).
    pub bias: u64,
    /// The area's run-time addresses.
    pub start: u64,
    /// Past its last byte of code.
    pub end: u64,
    /// The patches of the load, in run-time addresses.
    pub patches: Vec<crate::encode::Patch>,
}

impl Server {
    /// Every trampoline area encoded so far, per load (processes that
    /// share a load, such as forked children, share an area).
    pub fn areas(&self) -> Vec<Area> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for e in &state.entries {
            for c in e.encoded.values() {
                out.push(Area {
                    path: e.path.clone(),
                    bias: c.bias,
                    start: c.area,
                    end: c.area + c.enc.code.len() as u64,
                    patches: c.enc.patches_for(c.made.0, c.made.1, c.bias, c.area),
                });
            }
        }
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.wait_for_cache(std::time::Duration::from_secs(30));
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let _ = UnixStream::connect(self.socket());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

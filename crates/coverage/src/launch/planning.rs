//! A module planned on first use (through the on-disk cache), within
//! the bounds of the user it is planned for.

use super::*;

/// The entry for the file at `path`, which the client `peer` says it
/// maps at `lo`..`hi` and is device `dev`, inode `ino` (checked by
/// [`open_mapped`]), planned on first use; None when it is not selected
/// or cannot be planned (with a note).
pub(super) fn lookup(
    state: &Mutex<State>,
    path: &Path,
    peer: Option<(u32, u32)>,
    (dev, ino): (u64, u64),
    range: (u64, u64),
) -> Option<usize> {
    let note = |s: String| {
        if let Ok(mut st) = state.lock() {
            st.note(s);
        }
    };
    if !selected(&state.lock().ok()?.select, path) {
        return None;
    }
    let file = match open_mapped(path, peer, (dev, ino), range) {
        Ok(f) => f,
        Err(why) => {
            note(format!("{}: {why}; not counted", path.display()));
            return None;
        }
    };
    if let Some(&id) = state.lock().ok()?.by_file.get(&(dev, ino)) {
        return Some(id);
    }
    plan_into(state, path, &file, (dev, ino), peer?.1)
}

/// Held while a module is read and planned for another user's process.
pub(super) static FOREIGN_PLANNING: Mutex<()> = Mutex::new(());

/// Plan the module `path`, open as `file` (device `dev`, inode `ino`),
/// for a process of user `uid`, and add its entry; None (with a note)
/// when it cannot be planned. Only what its ELF headers name is read
/// ([`crate::image`]); for another user's process (or a run open to
/// another user, [`Server::share_with`]) within
/// [`crate::image::Limits::for_file`] and [`FOREIGN_RUN_CODE`] per run,
/// and kept in that user's cache.
pub(super) fn plan_into(
    state: &Mutex<State>,
    path: &Path,
    file: &std::fs::File,
    (dev, ino): (u64, u64),
    uid: u32,
) -> Option<usize> {
    use crate::image::{Layout, Limits};
    let note = |s: String| {
        if let Ok(mut st) = state.lock() {
            st.note(s);
        }
    };
    let who = match state.lock().ok()?.shared {
        Some(u) if foreign(u) => Some(u),
        _ => Some(uid).filter(|&u| foreign(u)),
    };
    let limits = match (who, file.metadata()) {
        (None, _) => Limits::OWN,
        (Some(_), Ok(m)) => Limits::for_file(&m),
        (Some(_), Err(_)) => Limits::FOREIGN,
    };
    // Planning is slow: do it unlocked (two processes may plan the same
    // file at once; the first to finish wins). The file is read through
    // the descriptor opened by the caller, and only what its headers
    // name.
    let layout = match Layout::of(file, path, limits) {
        Ok(l) => l,
        Err(e) => {
            note(format!("{e}; not counted"));
            return None;
        }
    };
    if let Some(u) = who {
        // Reserved before anything is read: planners running at once
        // cannot overshoot the run's bound together.
        let mut s = state.lock().ok()?;
        if s.foreign_code.saturating_add(layout.code()) > FOREIGN_RUN_CODE {
            drop(s);
            note(format!(
                "{}: planning it would take the code planned for processes of user {u} past \
                 {} MiB in this run; not counted",
                path.display(),
                FOREIGN_RUN_CODE >> 20
            ));
            return None;
        }
        s.foreign_code += layout.code();
    }
    // One such plan at a time in this process (every server of a
    // device): its memory peak is one module's, however many processes
    // ask at once.
    let _one = who.map(|_| FOREIGN_PLANNING.lock().unwrap_or_else(|e| e.into_inner()));
    let cache = {
        let mut s = state.lock().ok()?;
        match who {
            None => s.cache.clone(),
            Some(u) => {
                let own = s.cache.clone();
                let mut failed = None;
                let c = s
                    .user_caches
                    .entry(u)
                    .or_insert_with(|| {
                        let c = own?.for_user(u).map_err(|e| failed = Some(e)).ok()?;
                        Some(Arc::new(c))
                    })
                    .clone();
                drop(s);
                if let Some(e) = failed {
                    note(format!(
                        "{e}; planning user {u}'s modules without the cache"
                    ));
                }
                c
            }
        }
    };
    let asked = state.lock().ok()?.mode;
    // A warm run takes the key remembered for the file's stamp and reads
    // nothing of the module ([`crate::cache::Stamp`]). Not for edges:
    // whether a module gets them depends on a debug file, found from its
    // bytes.
    let stamp = file.metadata().ok().map(|m| Stamp::of(&m));
    let known = match (&cache, &stamp) {
        (Some(c), Some(st)) if asked != Mode::Edges => match c.known(st, asked) {
            Ok(Some(k)) => match c.load_split(&k) {
                Ok(Some(e)) => Some((k, e, c.file(&k))),
                Ok(None) => None,
                Err(why) => {
                    note(format!("{why}; planned afresh"));
                    None
                }
            },
            Ok(None) => None,
            Err(why) => {
                note(format!("{why}; the module is read again"));
                None
            }
        },
        _ => None,
    };
    let (key, kept, bytes) = match known {
        Some((k, e, f)) => (Some(k), Some((e, f)), None),
        None => {
            let t = crate::cache::now();
            let bytes = match layout.read(file, path) {
                Ok(b) => b,
                Err(e) => {
                    note(format!("{e}; not counted"));
                    return None;
                }
            };
            let mode = match asked {
                // Branch edges are for lcov's and Cobertura's branch
                // lines, which a module without lines (no DWARF of its
                // own, no debug file installed) never gets: its hits
                // alone, so that no jump keeps a trampoline for an edge
                // nothing shows (cc1, stripped, ran 2.2x native with
                // them, against 1.4x for its hits).
                Mode::Edges
                    if !profdev_symbolize::elf::has_debug_info_in(
                        &bytes,
                        Path::new(profdev_symbolize::elf::DEBUG_DIR),
                    ) =>
                {
                    Mode::Hits
                }
                mode => mode,
            };
            let key = cache.as_ref().map(|_| Key::of(&bytes, mode));
            if let (Some(c), Some(k), Some(st)) = (&cache, &key, &stamp) {
                let same = file.metadata().ok().map(|m| Stamp::of(&m)) == Some(*st);
                if asked != Mode::Edges && same && st.settled_at(t) {
                    if let Err(why) = c.remember(st, asked, k) {
                        note(format!("{why}; the module will be read again next time"));
                    }
                }
            }
            let kept = match (&cache, &key) {
                (Some(c), Some(k)) => match c.load_split(k) {
                    Ok(e) => e.map(|e| (e, c.file(k))),
                    Err(why) => {
                        note(format!("{why}; planned afresh"));
                        None
                    }
                },
                _ => None,
            };
            (key, kept, Some((bytes, mode)))
        }
    };
    let (plan, disk, stored) = match (kept, &bytes) {
        (Some((mut e, file)), _) => {
            let stored = e.encoded.is_some();
            let disk = e.encoded.take().map(|(o, e)| (o, Arc::new(e)));
            // Its plan read on another thread: the load is served from
            // the header and the encoding.
            (PlanCell::reading(e, &file, who.is_some()), disk, stored)
        }
        (None, Some((bytes, mode))) => match Plan::of_bytes_in(bytes, path, *mode) {
            Ok(p) => (PlanCell::ready(Arc::new(p)), None, false),
            Err(e) => {
                note(format!("{e}; not counted"));
                return None;
            }
        },
        (None, None) => return None,
    };
    drop(bytes);
    let mut s = state.lock().ok()?;
    if let Some(&id) = s.by_file.get(&(dev, ino)) {
        return Some(id);
    }
    // The cache keeps plain counting code: a run that records call
    // targets neither takes its encoding nor stores its own (the plan,
    // the same either way, is taken).
    let (disk, stored) = if s.options == crate::encode::Options::default() {
        (disk, stored)
    } else {
        (None, true)
    };
    let id = s.entries.len();
    s.entries.push(Entry {
        path: path.to_path_buf(),
        file: file.try_clone().ok().map(crate::counts::OpenFile::new),
        plan,
        key,
        disk,
        stored,
        cache,
        loads: 0,
        first_load: None,
        lost: BTreeSet::new(),
        skipped: Vec::new(),
        encoded: HashMap::new(),
    });
    s.by_file.insert((dev, ino), id);
    Some(id)
}

//! One module's conversation with a runtime (the protocol in the module
//! doc): its plan, an encoding for the area it mapped, and its patches.

use super::*;

/// One module's conversation, with the process that connected.
pub(super) fn serve(conn: UnixStream, state: &Mutex<State>) -> Option<()> {
    let peer = peer_cred(&conn);
    serve_as(conn, state, peer)
}

/// One module's conversation with process `peer` (pid, effective uid).
pub(super) fn serve_as(
    conn: UnixStream,
    state: &Mutex<State>,
    peer: Option<(u32, u32)>,
) -> Option<()> {
    let mut r = BufReader::new(conn.try_clone().ok()?);
    let mut w = conn;
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let rest = line.trim_end_matches('\n').strip_prefix("MOD ")?;
    let mut it = rest.splitn(7, ' ');
    let _pid: u32 = it.next()?.parse().ok()?;
    let dev: u64 = it.next()?.parse().ok()?;
    let ino: u64 = it.next()?.parse().ok()?;
    let bias = hex(it.next()?)?;
    let lo = hex(it.next()?)?;
    let hi = hex(it.next()?)?;
    let path = PathBuf::from(it.next()?);
    let id = match lookup(state, &path, peer, (dev, ino), (lo, hi)) {
        Some(id) => id,
        None => {
            w.write_all(b"SKIP\n").ok()?;
            return Some(());
        }
    };
    let (plan, offer) = {
        let s = state.lock().ok()?;
        let e = &s.entries[id];
        let disk = e.disk.as_ref().map(|d| d.0);
        (e.plan.clone(), e.encoded.keys().next().copied().or(disk))
    };
    let opts = state.lock().ok()?.options;
    let note = |why: String| {
        if let Ok(mut s) = state.lock() {
            s.note(format!("{why}; not counted"));
        }
    };
    let size = plan.area_size(opts).map_err(note).ok()?;
    match offer {
        Some(o) => writeln!(w, "SIZE {size:x} {:x} {o:x}", plan.counters()).ok()?,
        None => writeln!(w, "SIZE {size:x} {:x}", plan.counters()).ok()?,
    }
    line.clear();
    r.read_line(&mut line).ok()?;
    let mut at = line.trim_end().strip_prefix("AT ")?.split(' ');
    let area = hex(at.next()?)?;
    let first = hex(at.next()?)?;
    // An encoding serves every load with the same offset (see
    // crate::encode's Reuse).
    let key = offset_of(bias, area);
    let (cached, disk) = {
        let mut s = state.lock().ok()?;
        let foreign_peer = match s.shared {
            Some(u) if foreign(u) => true,
            _ => peer.is_some_and(|(_, u)| foreign(u)),
        };
        let entry = &mut s.entries[id];
        if foreign_peer
            && !entry.encoded.contains_key(&key)
            && entry.encoded.len() >= FOREIGN_ENCODINGS
        {
            // Each encoding is kept for the run: another user's process
            // naming ever new areas would grow the server without bound.
            let n = format!(
                "{}: more than {FOREIGN_ENCODINGS} areas asked for by another user's processes; \
                 a load elsewhere is not counted",
                entry.path.display()
            );
            s.note(n);
            return None;
        }
        let entry = &mut s.entries[id];
        let mut cached = entry.encoded.get(&key).cloned();
        if cached.is_none() {
            // One made for another distance between area and module (the
            // area could not be mapped at the one offered: another
            // library is there), moved as it is sent rather than encoded
            // again; kept for this distance too (the same encoding).
            let other = entry
                .encoded
                .values()
                .find(|c| {
                    c.enc
                        .moves(key.wrapping_sub(offset_of(c.made.0, c.made.1)) as i64)
                })
                .cloned();
            if let Some(c) = other {
                let kept = Cached { bias, area, ..c };
                entry.encoded.insert(key, kept.clone());
                cached = Some(kept);
            }
        }
        let disk = match (&cached, &entry.disk) {
            (None, Some((off, e))) if *off == key || e.moves(key.wrapping_sub(*off) as i64) => {
                entry.disk.take()
            }
            _ => None,
        };
        (cached, disk)
    };
    let mut store = None;
    let (bias0, area0, enc) = match (cached, disk) {
        (Some(c), _) => {
            state.lock().ok()?.reused += 1;
            (c.made.0, c.made.1, c.enc)
        }
        (None, Some((off, e))) => {
            // The cache's encoding, kept as it is read (not copied): its
            // patches at bias 0, its area at the offset, what they are
            // moved from for this load (and any other at the offset; its
            // code moved as it is sent when its offset is another).
            let mut s = state.lock().ok()?;
            s.from_disk += 1;
            let entry = &mut s.entries[id];
            entry.lost.extend(e.failed_blocks.iter().copied());
            let kept = Cached {
                bias,
                area,
                enc: e.clone(),
                made: (0, off),
            };
            entry.encoded.insert(key, kept);
            (0, off, e)
        }
        (None, None) => {
            let made = plan.get().map_err(note).ok()?;
            let e = Arc::new(encode_with(&made, bias, area, first, opts));
            let mut s = state.lock().ok()?;
            s.made += 1;
            let storing = s.storing.clone();
            let entry = &mut s.entries[id];
            let cache = entry.cache.clone();
            entry.lost.extend(e.failed_blocks.iter().copied());
            let kept = Cached {
                bias,
                area,
                enc: e.clone(),
                made: (bias, area),
            };
            entry.encoded.insert(key, kept);
            if let (Some(cache), Some(k), false) = (cache, entry.key, entry.stored) {
                entry.stored = true;
                store = Some((cache, k, Storing::new(storing), made));
            }
            (bias, area, e)
        }
    };
    if let Ok(mut s) = state.lock() {
        let n = s.served;
        s.served += 1;
        let e = &mut s.entries[id];
        e.loads += 1;
        e.first_load.get_or_insert(n);
    }
    // The patches relative to the load: the same bytes for any
    // (crate::encode::wire).
    let Some(wire) = enc.wire(bias0, area0) else {
        note(format!(
            "{}: a patch lies past 4 GiB of its module or area",
            path.display()
        ));
        return None;
    };
    // Streamed, not gathered first: cc1's code is tens of megabytes.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, &w);
    writeln!(
        out,
        "TEXT {:x} {:x} {:x}",
        enc.code.len(),
        enc.patch_count(),
        id
    )
    .ok()?;
    let shift = key.wrapping_sub(offset_of(bias0, area0)) as i64;
    if first == enc.first_counter && shift == 0 {
        // (What code_for would copy.)
        out.write_all(&enc.code).ok()?;
    } else {
        out.write_all(&enc.code_at(first, shift)?).ok()?;
    }
    out.write_all(&wire).ok()?;
    out.flush().ok()?;
    drop(out);
    line.clear();
    r.read_line(&mut line).ok()?;
    let skipped = hex(line.trim_end().strip_prefix("DONE ")?)?;
    let mut links = Vec::new();
    for _ in 0..skipped.min(1 << 24) {
        line.clear();
        r.read_line(&mut line).ok()?;
        let a = hex(line.trim_end().strip_prefix("S ")?)?;
        links.push(a.wrapping_sub(bias));
    }
    if !links.is_empty() {
        // Their blocks are found when the counts are collected (the
        // plan may still be being read).
        let mut s = state.lock().ok()?;
        s.entries[id].skipped.extend(links);
    }
    drop((r, w));
    if let Some((cache, k, _storing, plan)) = store {
        // Kept for later runs, once the process has its code. The
        // patches at bias 0, the area at the offset: what a load at any
        // bias moves them from.
        let canonical = Encoded {
            patches: enc.patches_for(bias0, area0, 0, key),
            records: None,
            ..(*enc).clone()
        };
        if let Err(e) = cache.store(&k, &plan, Some((key, &canonical))) {
            if let Ok(mut s) = state.lock() {
                let n = format!("{e}; the plan is not kept for later runs");
                s.note(n);
            }
        }
    }
    Some(())
}

/// One cache file being written ([`Server::wait_for_cache`] waits for
/// none to be left): counted from when a store is decided until it ends,
/// whether it is written or the conversation ends first (a runtime that
/// gives up, a process that dies) and it is not.
pub(super) struct Storing(Arc<(Mutex<usize>, std::sync::Condvar)>);

impl Storing {
    fn new(count: Arc<(Mutex<usize>, std::sync::Condvar)>) -> Storing {
        *count.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Storing(count)
    }
}

impl Drop for Storing {
    fn drop(&mut self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        cv.notify_all();
    }
}

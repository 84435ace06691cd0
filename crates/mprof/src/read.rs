//! Reading what the library leaves: its text reports and its shared
//! tables, bounded ([`Limits`]), each process image counted once.

use crate::{Report, ReportModule, ReportSite, MAX_LIVE, MAX_MODULES, MAX_REPORT, MAX_SITES};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Read the reports in `dir`: every complete text report (`mprof.PID.K`)
/// and every shared table (`live.PID.K`) whose process did not finish its
/// text report (it ended by `_exit`, a signal, SIGKILL or an exec, or is
/// still running), each process image counted once. See
/// [`read_dir_reports`].
pub fn read_reports(dir: &Path) -> (Vec<Report>, Vec<String>) {
    read_dir_reports(dir, &Limits::LAUNCH)
}

/// How much [`read_dir_reports`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Only the latest text report of each pid (an attached process's
    /// reports on demand supersede each other), and a pid's shared table
    /// supersedes its text reports unless the table says it is done.
    pub latest_per_pid: bool,
    /// At most this many reports and tables (the rest are named in one
    /// error).
    pub max_reports: usize,
    /// At most this many bytes read in all (each text report is at most
    /// [`MAX_REPORT`] and each table at most [`MAX_LIVE`] besides).
    pub max_bytes: u64,
}

impl Limits {
    /// `mprof CMD`: a private directory only the user's own processes
    /// write; every process image's report, up to a million of them.
    pub const LAUNCH: Limits = Limits {
        latest_per_pid: false,
        max_reports: 1 << 20,
        max_bytes: u64::MAX,
    };
    /// An attached process's directory (`startmp PID`, `mprof -p`), which
    /// its user may fill: 256 reports, 64 MiB read in all.
    pub const ATTACHED: Limits = Limits {
        latest_per_pid: true,
        max_reports: 256,
        max_bytes: 64 << 20,
    };
}

/// The entries of a report directory looked at, at most.
pub(crate) const MAX_ENTRIES: usize = 1 << 20;

/// Read the reports and shared tables in `dir` within `limits`; errors
/// (one sentence each) for the unreadable, malformed or refused ones.
/// Files are opened without following links, must be regular files, and
/// are refused by their size before anything is allocated for them.
pub fn read_dir_reports(dir: &Path, limits: &Limits) -> (Vec<Report>, Vec<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(d) => d,
        Err(e) => return (vec![], vec![format!("cannot read {}: {e}", dir.display())]),
    };
    let mut texts: BTreeMap<(u32, u64), PathBuf> = BTreeMap::new();
    let mut lives: BTreeMap<(u32, u64), PathBuf> = BTreeMap::new();
    for e in entries.take(MAX_ENTRIES).filter_map(|e| e.ok()) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = numbered(&name, "mprof.") {
            texts.insert(id, e.path());
        } else if let Some(id) = numbered(&name, "live.") {
            lives.insert(id, e.path());
        }
    }
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    let mut budget = Budget {
        limits: *limits,
        reports: 0,
        bytes: 0,
        refused: 0,
    };
    let mut superseded: std::collections::BTreeSet<(u32, u64)> = Default::default();
    let mut text_of_table: Vec<((u32, u64), Report)> = Vec::new();
    for (&(pid, _), path) in &lives {
        if !budget.room(0) {
            break;
        }
        match read_live(path) {
            Ok(live) => {
                budget.charge(live.read);
                match live.state {
                    LiveState::Done => continue,
                    LiveState::Writing(k) => {
                        // The exit's text report, if complete, is this
                        // image's report; else the table is.
                        if let Some(p) = texts.get(&(pid, k as u64)) {
                            if let Ok(r) = read_text(p, &mut budget) {
                                superseded.insert((pid, k as u64));
                                text_of_table.push(((pid, k as u64), r));
                                continue;
                            }
                        }
                        superseded.insert((pid, k as u64));
                    }
                    LiveState::Counting => {}
                }
                if limits.latest_per_pid {
                    superseded.extend(texts.keys().filter(|&&(p, _)| p == pid).copied());
                }
                reports.push(live.report);
            }
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    reports.extend(text_of_table.into_iter().map(|(_, r)| r));
    let mut chosen: Vec<&PathBuf> = Vec::new();
    for (&(pid, k), path) in &texts {
        if superseded.contains(&(pid, k)) {
            continue;
        }
        if limits.latest_per_pid && texts.range((pid, k + 1)..(pid + 1, 0)).next().is_some() {
            continue; // a later one of the same pid
        }
        chosen.push(path);
    }
    for path in chosen {
        if !budget.room(0) {
            break;
        }
        match read_text(path, &mut budget) {
            Ok(r) => reports.push(r),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    if budget.refused > 0 {
        errors.push(format!(
            "{} holds more reports than are read in one session ({} reports, {} bytes): the \
             rest were ignored",
            dir.display(),
            limits.max_reports,
            limits.max_bytes
        ));
    }
    (reports, errors)
}

/// What a session has read so far.
struct Budget {
    limits: Limits,
    reports: usize,
    bytes: u64,
    refused: usize,
}

impl Budget {
    /// May one more report of `bytes` be read? (Counted as refused if not.)
    fn room(&mut self, bytes: u64) -> bool {
        if self.reports >= self.limits.max_reports
            || self.bytes.saturating_add(bytes) > self.limits.max_bytes
        {
            self.refused += 1;
            return false;
        }
        true
    }

    /// One more report of `bytes` was read.
    fn charge(&mut self, bytes: u64) {
        self.reports += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// `PREFIX PID . K` as (PID, K).
fn numbered(name: &str, prefix: &str) -> Option<(u32, u64)> {
    let (pid, k) = name.strip_prefix(prefix)?.split_once('.')?;
    if !pid.bytes().all(|b| b.is_ascii_digit()) || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((pid.parse().ok()?, k.parse().ok()?))
}

/// Open a file of a report directory: no link followed, no blocking on a
/// FIFO, a regular file; with its size.
fn open_report_file(path: &Path) -> Result<(std::fs::File, u64), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let m = f.metadata().map_err(|e| format!("cannot read it: {e}"))?;
    if !m.is_file() {
        return Err("not a regular file".into());
    }
    Ok((f, m.len()))
}

/// One text report (`mprof.PID.K`), opened without following a link, a
/// regular file, refused by its size (over [`MAX_REPORT`]) before it is
/// read.
pub fn read_report(path: &Path) -> Result<Report, String> {
    let mut budget = Budget {
        limits: Limits::LAUNCH,
        reports: 0,
        bytes: 0,
        refused: 0,
    };
    read_text(path, &mut budget)
}

/// A text report, refused by its size (over [`MAX_REPORT`], or over what
/// is left of the budget) before it is read.
fn read_text(path: &Path, budget: &mut Budget) -> Result<Report, String> {
    use std::io::Read;
    let (f, len) = open_report_file(path)?;
    if len > MAX_REPORT {
        return Err(format!(
            "{len} bytes is more than the library can write ({MAX_REPORT}): refused"
        ));
    }
    if !budget.room(len) {
        return Err("over the session's budget: not read".into());
    }
    budget.charge(len);
    let mut text = String::with_capacity(len as usize);
    f.take(MAX_REPORT + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > MAX_REPORT {
        return Err(format!(
            "more than the library can write ({MAX_REPORT} bytes): refused"
        ));
    }
    Report::parse(&text)
}

/// Where a shared table stands (`state` in its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveState {
    /// The process counts into it (or ended without its destructor).
    Counting,
    /// Its destructor was writing the text report `mprof.PID.K`.
    Writing(u32),
    /// The text report is complete: the table is not the report.
    Done,
}

/// A shared table read back ([`read_live`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// Its state.
    pub state: LiveState,
    /// The counts in it, as a report (no DHAT figures: those are in the
    /// text report only).
    pub report: Report,
    /// Bytes read.
    pub read: u64,
}

/// Read a shared table (`live.PID.K`, c/mprof.c's "the shared table"):
/// its header first (magic, layout, sizes), the file's size must be the
/// one the header names and at most [`MAX_LIVE`]; then only the modules
/// and the sites in use, and with whole stacks on the stacks and their
/// frames. Sites whose module was not yet known when the process ended
/// are left out.
pub fn read_live(path: &Path) -> Result<Live, String> {
    use std::os::unix::fs::FileExt;
    let (f, len) = open_report_file(path)?;
    let bad = |why: &str| format!("not a shared table of the mprof library ({why})");
    if len > MAX_LIVE {
        return Err(bad(&format!("{len} bytes, more than {MAX_LIVE}")));
    }
    let mut head = [0u8; 4096];
    let n = head.len().min(len as usize);
    f.read_exact_at(&mut head[..n], 0)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or([0; 8]));
    if n < 168 || &head[..16] != b"profdev-mlive 1\0" {
        return Err(bad("no header"));
    }
    let header_size = u32_at(16) as u64;
    let pid = u32_at(20);
    let total = u64_at(24);
    let (modules_off, used_off, sites_off) = (u64_at(32), u64_at(40), u64_at(48));
    let (max_modules, nsites) = (u32_at(56) as u64, u32_at(60) as u64);
    let (module_size, site_size) = (u32_at(64) as u64, u32_at(68) as u64);
    let m: Vec<u64> = (0..8).map(|i| u32_at(72 + 4 * i) as u64).collect();
    let (m_l_addr, m_path, m_path_size, m_dev, m_ino, m_cur, m_hw, m_resident) =
        (m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]);
    let s: Vec<u64> = (0..6).map(|i| u32_at(104 + 4 * i) as u64).collect();
    let (s_pc, s_module, s_pools, s_resident, s_own, counters_size) =
        (s[0], s[1], s[2], s[3], s[4], s[5]);
    let state = u32_at(128);
    let report_k = u32_at(132);
    let nmodules = u32_at(136) as u64;
    let nused = u32_at(140) as u64;
    let fits =
        |off: u64, size: u64, within: u64| off.checked_add(size).is_some_and(|e| e <= within);
    let layout_ok = (168..=4096).contains(&header_size)
        && total == len
        && (1..=MAX_MODULES as u64 + 1).contains(&max_modules)
        && (1..=MAX_SITES as u64).contains(&nsites)
        && module_size <= 4096
        && site_size <= 4096
        && counters_size >= 40
        && fits(modules_off, max_modules * module_size, total)
        && fits(used_off, nsites * 4, total)
        && fits(sites_off, nsites * site_size, total)
        && [m_l_addr, m_dev, m_ino, m_cur, m_hw]
            .iter()
            .all(|&o| fits(o, 8, module_size))
        && fits(m_path, m_path_size, module_size)
        && fits(m_resident, counters_size, module_size)
        && [s_pc, s_own].iter().all(|&o| fits(o, 8, site_size))
        && [s_module, s_pools, s_resident]
            .iter()
            .all(|&o| fits(o, 4, site_size))
        && fits(s_own, counters_size, site_size)
        && nmodules < max_modules
        && nused <= nsites;
    if !layout_ok {
        return Err(bad("its header does not describe it"));
    }
    let state = match state {
        0 => LiveState::Counting,
        1 => LiveState::Writing(report_k),
        2 => LiveState::Done,
        _ => return Err(bad("unknown state")),
    };
    let mut read = 4096u64;
    let mut report = Report {
        pid,
        untracked: u64_at(144),
        unknown_frees: u64_at(152),
        table_failures: u64_at(160),
        ..Default::default()
    };
    if state == LiveState::Done {
        return Ok(Live {
            state,
            report,
            read,
        });
    }
    let io = |e: std::io::Error| format!("cannot read it: {e}");
    // Lanes (c/mprof.c's "lanes"): a thread's delta and counts at a site,
    // added to the site's (and the delta to its module's); a header that
    // names none, or a layout that does not fit the site, has none.
    let (s_lanes, nlanes, lane_size) = if header_size >= 224 {
        (u32_at(212) as u64, u32_at(216) as u64, u32_at(220) as u64)
    } else {
        (0, 0, 0)
    };
    let nlanes = if lane_size >= 32 && fits(s_lanes, nlanes * lane_size, site_size) {
        nlanes
    } else {
        0
    };
    let mut module_lanes = vec![0i64; nmodules as usize];
    // Sampling: objects in units of 1/2^shift (c/mprof.c's "sampling").
    let shift = if header_size >= 212 { u32_at(208) } else { 0 };
    let objs = |v: u64| crate::sample::objects(v, shift);
    let le64 = |b: &[u8], o: u64| {
        let o = o as usize;
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
    };
    let le32 = |b: &[u8], o: u64| {
        let o = o as usize;
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
    };
    // The modules in use, and the slot of sites in no module (the last).
    let mut mods = vec![0u8; (nmodules * module_size) as usize];
    f.read_exact_at(&mut mods, modules_off).map_err(io)?;
    let mut none = vec![0u8; module_size as usize];
    f.read_exact_at(&mut none, modules_off + (max_modules - 1) * module_size)
        .map_err(io)?;
    read += mods.len() as u64 + none.len() as u64;
    let module_rec = |i: u64| &mods[(i * module_size) as usize..((i + 1) * module_size) as usize];
    for i in 0..nmodules {
        let r = module_rec(i);
        let path = &r[m_path as usize..(m_path + m_path_size) as usize];
        let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
        report.modules.push(ReportModule {
            bias: le64(r, m_l_addr),
            dev: le64(r, m_dev),
            ino: le64(r, m_ino),
            current: le64(r, m_cur) as i64,
            high_water: le64(r, m_hw) as i64,
            path: String::from_utf8_lossy(path).into_owned(),
        });
    }
    let mut used = vec![0u8; (nused * 4) as usize];
    f.read_exact_at(&mut used, used_off).map_err(io)?;
    read += used.len() as u64;
    let mut seen = std::collections::BTreeSet::new();
    let mut site = vec![0u8; site_size as usize];
    for j in used.chunks_exact(4) {
        let j = u32::from_le_bytes(j.try_into().unwrap_or([0; 4])) as u64;
        if j >= nsites || !seen.insert(j) {
            continue;
        }
        f.read_exact_at(&mut site, sites_off + j * site_size)
            .map_err(io)?;
        read += site_size;
        let module = le32(&site, s_module) as i32;
        let module = match module {
            -1 => None,
            m if m > 0 && (m as u64) <= nmodules => Some(m as usize - 1),
            _ => continue, // not known yet, or nonsense
        };
        let counters: &[u8] = if le32(&site, s_resident) != 0 {
            match module {
                Some(m) => &module_rec(m as u64)[m_resident as usize..],
                None => &none[m_resident as usize..],
            }
        } else {
            &site[s_own as usize..]
        };
        let (mut current, high_water) = (le64(counters, 0) as i64, le64(counters, 8) as i64);
        let (mut allocs, mut bytes, mut live) =
            (le64(counters, 16), le64(counters, 24), le64(counters, 32));
        for l in 0..nlanes {
            let at = s_lanes + l * lane_size;
            let delta = le64(&site, at) as u32 as i32 as i64;
            current += delta;
            if let Some(m) = module {
                module_lanes[m] += delta;
            }
            allocs = allocs.wrapping_add(le64(&site, at + 8));
            bytes = bytes.wrapping_add(le64(&site, at + 16));
            live = live.wrapping_add(le64(&site, at + 24));
        }
        let (allocs, live) = (objs(allocs), objs(live));
        if allocs == 0 {
            continue;
        }
        let pools = le32(&site, s_pools);
        report.sites.push(ReportSite {
            pc: le64(&site, s_pc),
            module,
            current,
            high_water,
            allocs,
            bytes,
            live,
            dhat: None,
            pools: if (1..8).contains(&pools) {
                pools as u8
            } else {
                1
            },
            temporary: 0,
            at_peak: None,
        });
    }
    for (m, delta) in report.modules.iter_mut().zip(module_lanes) {
        m.current += delta;
    }
    if header_size >= 208 {
        let lanes = if header_size >= 240 { nlanes } else { 0 };
        read += read_live_stacks(&f, &head, total, shift, lanes, &mut report).map_err(io)?;
    }
    Ok(Live {
        state,
        report,
        read,
    })
}

/// The stacks of a shared table (c/mprof.c's "stacks": a stack is 128
/// bytes, its key, depth, first frame and site, then its counters on the
/// next line; a frame 16, its pc and module), when its header names a
/// table of that layout within the file; with `nlanes`, each stack's
/// lanes (its threads' counts, added to its own: c/mprof.c's "lanes")
/// where the header names them; the bytes read.
fn read_live_stacks(
    f: &std::fs::File,
    head: &[u8],
    total: u64,
    shift: u32,
    nlanes: u64,
    report: &mut Report,
) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or([0; 8]));
    let (stacks_off, frames_off) = (u64_at(168), u64_at(176));
    // The frames in use (the table's size when that is nonsense).
    let (nstacks, nframes) = (u32_at(184) as u64, u32_at(188).min(u32_at(204)) as u64);
    let fits = |off: u64, size: u64| off.checked_add(size).is_some_and(|e| e <= total);
    if u32_at(200) <= 1 {
        return Ok(0); // stacks off: the overflow entry alone, never used
    }
    if u32_at(192) != 128
        || u32_at(196) != 16
        || nstacks > crate::MAX_STACKS as u64
        || nframes > 1 << 20
        || !fits(stacks_off, nstacks * 128)
        || !fits(frames_off, nframes * 16)
    {
        return Ok(0);
    }
    let mut stacks = vec![0u8; (nstacks * 128) as usize];
    f.read_exact_at(&mut stacks, stacks_off)?;
    let mut frames = vec![0u8; (nframes * 16) as usize];
    f.read_exact_at(&mut frames, frames_off)?;
    let le = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    // A stack's lanes: nalloc, bytes, nlive, cur (8 bytes each) first.
    let (lanes_off, lane_size) = (u64_at(232), u32_at(224) as u64);
    let nlanes = if (1..=64).contains(&nlanes)
        && (32..=4096).contains(&lane_size)
        && fits(lanes_off, nstacks * nlanes * lane_size)
    {
        nlanes
    } else {
        0
    };
    let mut lanes = vec![0u8; (nlanes * lane_size) as usize];
    let mut read = stacks.len() as u64 + frames.len() as u64;
    let nmodules = report.modules.len();
    for (j, st) in stacks.chunks_exact(128).enumerate() {
        let (depth, first) = (le(st, 8) >> 32, le(st, 16) & 0xffff_ffff);
        let ready = le(st, 8) & 0xffff_ffff != 0;
        let (mut allocs, mut bytes, mut live, mut current) =
            (le(st, 64), le(st, 72), le(st, 80), le(st, 88));
        let overflow = j == 0;
        if !overflow && ready && nlanes > 0 {
            f.read_exact_at(&mut lanes, lanes_off + j as u64 * nlanes * lane_size)?;
            read += lanes.len() as u64;
            for l in lanes.chunks_exact(lane_size as usize) {
                allocs = allocs.wrapping_add(le(l, 0));
                bytes = bytes.wrapping_add(le(l, 8));
                live = live.wrapping_add(le(l, 16));
                current = current.wrapping_add(le(l, 24));
            }
        }
        if allocs == 0
            || (!overflow
                && (!ready
                    || depth == 0
                    || depth > crate::MAX_DEPTH as u64
                    || first + depth > nframes))
        {
            continue;
        }
        let frames = if overflow {
            Vec::new()
        } else {
            (first..first + depth)
                .map(|i| {
                    let fr = &frames[(i * 16) as usize..(i * 16 + 16) as usize];
                    let m = le(fr, 8) as u32 as i32;
                    let m = usize::try_from(m).ok().filter(|&m| m < nmodules);
                    (m, le(fr, 0))
                })
                .collect()
        };
        report.stacks.push(crate::ReportStack {
            allocs: crate::sample::objects(allocs, shift),
            bytes,
            live: crate::sample::objects(live, shift),
            current: current as i64,
            frames,
            overflow,
            ..Default::default()
        });
    }
    Ok(read)
}

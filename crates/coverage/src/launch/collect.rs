//! The reports read back: the counts per module, the call targets, and
//! the notes on what was not counted.

use super::*;

impl Server {
    /// The indirect calls and jumps recorded (with
    /// [`Server::set_call_targets`]) in every report written so far,
    /// summed per (module, site, target), and the records lost (see the
    /// report format).
    pub fn call_targets(&self) -> (Vec<CallTarget>, u64) {
        let state = self.lock();
        let (names, _) = report_names(&self.reports_dir());
        let (mut traps, mut lost) = (0, 0);
        let mut sum: std::collections::BTreeMap<(usize, u64, Target), u64> = Default::default();
        for p in names {
            let mut raw = Vec::new();
            if read_report(&p, &state, &mut traps, &mut raw, &mut lost).is_err() {
                continue; // (collect's notes name it)
            }
            for (id, block, target, count) in raw {
                let Ok(plan) = state.entries[id].plan.get() else {
                    continue; // (collect's notes name it)
                };
                let Some(site) = plan.blocks.get(block).and_then(|b| b.insns.last()) else {
                    continue;
                };
                let c = sum.entry((id, site, target)).or_insert(0);
                *c = c.saturating_add(count);
            }
        }
        // (Sorted by site and target already: a stable sort by module.)
        let rank = listed(&state);
        let mut sum: Vec<_> = sum.into_iter().collect();
        sum.sort_by_key(|((id, _, _), _)| rank[*id]);
        let out = sum
            .into_iter()
            .map(|((id, site, target), count)| CallTarget {
                module: state.entries[id].path.clone(),
                site,
                target,
                count,
            })
            .collect();
        (out, lost)
    }

    /// The counts of every report written so far, per module planned,
    /// and notes (one sentence each) on what was not counted.
    pub fn collect(&self) -> (Vec<ModuleCoverage>, Vec<String>) {
        self.collect_with(false)
    }

    /// [`Server::collect`] once the run is over, the server with it.
    /// The counts take each plan's blocks where nothing else holds the
    /// plan: the blocks' memory becomes the counts' ([`Block`]s are
    /// smaller than [`crate::plan::PlannedBlock`]s), their instruction
    /// lists are moved, not shared again. cc1's 1,350,000 blocks had
    /// made 54 MB of fresh pages at the end of every run (the kernel's
    /// zeroing of them: 70 of the collection's 165 ms of CPU on the
    /// 2-vCPU VM) and as many reference counts taken and dropped.
    pub fn into_collected(self) -> (Vec<ModuleCoverage>, Vec<String>) {
        self.collect_with(true)
    }

    fn collect_with(&self, take: bool) -> (Vec<ModuleCoverage>, Vec<String>) {
        let mut counts: HashMap<usize, Vec<u64>> = HashMap::new();
        let mut notes = Vec::new();
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (names, more) = report_names(&self.reports_dir());
        if more {
            notes.push(format!(
                "{}: more than {MAX_REPORTS} reports; the others were not read",
                self.reports_dir().display()
            ));
        }
        let mut traps = 0;
        for p in names {
            match read_report(&p, &state, &mut traps, &mut Vec::new(), &mut 0) {
                Ok(r) => {
                    for (id, idx, c) in r {
                        let n = state.entries[id].plan.counters() as usize;
                        let v = counts.entry(id).or_insert_with(|| vec![0; n]);
                        v[idx] = v[idx].saturating_add(c);
                    }
                }
                Err(e) => notes.push(format!("{}: {e}", p.display())),
            }
        }
        let mut out = Vec::new();
        let rank = listed(&state);
        let mut ids: Vec<usize> = (0..state.entries.len()).collect();
        ids.sort_by_key(|&id| rank[id]);
        for id in ids {
            let e = &state.entries[id];
            let held = match e.plan.get() {
                Ok(p) => p,
                Err(why) => {
                    if e.loads > 0 {
                        notes.push(format!("{why}; its counts are not listed"));
                    }
                    continue;
                }
            };
            let plan = &*held;
            // Blocks lost: by an encoding failure, or a skipped patch in
            // them.
            let mut gone = e.lost.clone();
            for &link in &e.skipped {
                let i = plan.blocks.partition_point(|b| b.start <= link);
                if i > 0 {
                    gone.insert(i - 1);
                }
            }
            let zero = vec![0; plan.counters() as usize];
            let c = counts.get(&id).unwrap_or(&zero);
            let mut m = ModuleCoverage {
                path: e.path.clone(),
                file: e.file.clone(),
                build_id: plan.build_id.clone(),
                branches: Vec::with_capacity(plan.branches.len()),
                ..ModuleCoverage::default()
            };
            let mut trapped = 0;
            let hits = plan.mode.hits();
            // Per block, its count, and whether it is counted at all.
            let mut per = Vec::with_capacity(plan.blocks.len());
            let mut counted = Vec::with_capacity(plan.blocks.len());
            for (i, b) in plan.blocks.iter().enumerate() {
                // A block derived from its predecessor's fall-throughs,
                // or implied by another block, is lost with it.
                let lost = |k: usize| {
                    gone.contains(&k)
                        || (matches!(plan.blocks[k].how, How::Fell { .. })
                            && gone.contains(&(k - 1)))
                };
                // (Most runs lose none: then no block asks.)
                let lost_with =
                    |i| !gone.is_empty() && (lost(i) || plan.counted_by(i).into_iter().any(lost));
                if b.how == How::None || lost_with(i) {
                    m.uncounted += 1;
                    per.push(0);
                    counted.push(false);
                    continue;
                }
                if matches!(b.how, How::Int3 { .. }) {
                    trapped += 1;
                }
                let count = plan.count(i, c);
                // Hit mode: ran or not (each thread's array adds its 1).
                per.push(if hits { count.min(1) } else { count });
                counted.push(true);
                if let (Some(j), false) = (b.branch, hits) {
                    // A fall-through read from the next block is lost
                    // with it.
                    let from = plan.fell_from[j as usize];
                    if from.is_some_and(|k| gone.contains(&(k as usize))) {
                        continue;
                    }
                    let not_taken = plan.fell(j as usize, c);
                    m.branches.push(Branch {
                        addr: plan.branches[j as usize].0,
                        taken: count.saturating_sub(not_taken),
                        not_taken,
                    });
                }
            }
            if plan.mode == Mode::Edges {
                m.branches = edge_hits(plan, c, &gone);
            }
            m.branches.sort_by_key(|b| b.addr);
            if m.uncounted > 0 {
                notes.push(format!(
                    "{}: {} of {}{NOTE_UNCOUNTED}",
                    e.path.display(),
                    m.uncounted,
                    plan.blocks.len()
                ));
            }
            let copied = plan.copied_blocks();
            if copied > 0 {
                notes.push(format!(
                    "{}: {copied} blocks of V8's embedded builtins are not counted: \
                     V8 runs a copy of them made at run time, which a patch would break",
                    e.path.display()
                ));
            }
            if trapped > 0 {
                notes.push(format!("{}: {trapped}{NOTE_TRAPPED}", e.path.display()));
            }
            let block = |i: usize, start, end, insns| Block {
                start,
                end,
                insns,
                count: per[i],
            };
            m.blocks = match if take { e.plan.take(held) } else { Err(held) } {
                // In place (the same allocation: `Block` is the smaller).
                Ok(plan) => plan
                    .blocks
                    .into_iter()
                    .enumerate()
                    .filter(|&(i, _)| counted[i])
                    .map(|(i, b)| block(i, b.start, b.end, b.insns))
                    .collect(),
                Err(plan) => {
                    // Sized once: cc1 has 1,350,000 blocks.
                    let mut v = Vec::with_capacity(counted.iter().filter(|&&k| k).count());
                    crate::cache::huge_pages(&mut v);
                    v.extend(
                        plan.blocks
                            .iter()
                            .enumerate()
                            .filter(|&(i, _)| counted[i])
                            .map(|(i, b)| block(i, b.start, b.end, b.insns.clone())),
                    );
                    v
                }
            };
            out.push(m);
        }
        if traps > 0 {
            notes.push(format!("{traps}{NOTE_TRAPS}"));
        }
        notes.extend(state.notes.iter().cloned());
        (out, notes)
    }
}

/// Per entry, its place in the counts: modules in the order their first
/// loads were served (the loader's order in each process), then those
/// never loaded, as they were planned.
fn listed(state: &State) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..state.entries.len()).collect();
    ids.sort_by_key(|&id| (state.entries[id].first_load.unwrap_or(u64::MAX), id));
    let mut rank = vec![0; ids.len()];
    for (r, id) in ids.into_iter().enumerate() {
        rank[id] = r;
    }
    rank
}

/// The reports in `dir` (files named `cov.*`), sorted, at most
/// [`MAX_REPORTS`]; and whether there were more.
pub(super) fn report_names(dir: &Path) -> (Vec<PathBuf>, bool) {
    let mut names = Vec::new();
    let mut more = false;
    if let Ok(d) = std::fs::read_dir(dir) {
        for e in d.flatten() {
            if !e.file_name().as_encoded_bytes().starts_with(b"cov.") {
                continue;
            }
            if names.len() == MAX_REPORTS {
                more = true;
                break;
            }
            names.push(e.path());
        }
    }
    names.sort();
    (names, more)
}

/// The largest report the run's processes could write: the runtime
/// writes a header, per module load an `M` line and at most one line per
/// counter (`<index> <count>` in hex: 24 bytes at most with its counters
/// fewer than 2^23), `ilost` and `end`; a process makes at most 4096
/// loads and 2^23 counters. So at most every load the server served,
/// each with all its counters, within the runtime's own bounds. With
/// call targets ([`Server::set_call_targets`]) the `I` lines are bounded
/// by [`MAX_REPORT`] only.
pub(super) fn report_bound(state: &State) -> u64 {
    if state.options.call_targets {
        return MAX_REPORT;
    }
    const HEAD: u64 = 256;
    const M_LINE: u64 = 80;
    const LINE: u64 = 24;
    let served: u64 = state
        .entries
        .iter()
        .map(|e| {
            e.loads
                .min(RT_MAXMOD)
                .saturating_mul(M_LINE + LINE * e.plan.counters())
        })
        .fold(0, u64::saturating_add);
    HEAD + served.min(RT_MAXMOD * M_LINE + RT_CAP * LINE)
}

/// A report's counters (module id, counter index, count); its call
/// targets (module id, block index, target, count) go to `targets`, its
/// records lost are added to `lost`.
pub(super) fn read_report(
    path: &Path,
    state: &State,
    traps: &mut u64,
    targets: &mut Vec<(usize, usize, Target, u64)>,
    lost: &mut u64,
) -> Result<Vec<(usize, usize, u64)>, String> {
    // The directory may belong to the profiled process's user (attach
    // mode): no links, regular files only, bounded.
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a report".into());
    }
    // Bounded before anything is read or allocated.
    let bound = report_bound(state);
    if meta.len() > bound {
        return Err(format!(
            "not a report: {} bytes, more than the {bound} the run's modules could write",
            meta.len()
        ));
    }
    let mut text = String::new();
    f.take(bound)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    if lines.next() != Some("profdev-coverage 1") {
        return Err("not a coverage report (bad first line)".into());
    }
    let mut out = Vec::new();
    let mut cur: Option<(usize, usize)> = None;
    let mut ended = false;
    for l in lines {
        if l == "end" {
            ended = true;
            break;
        }
        if l.starts_with("pid ") {
            continue;
        }
        // One-shot probes taken (hit mode): each marks its block.
        if let Some(t) = l.strip_prefix("once ") {
            t.parse::<u64>().map_err(|_| format!("bad line {l:?}"))?;
            continue;
        }
        if let Some(t) = l.strip_prefix("traps ") {
            *traps += t.parse::<u64>().map_err(|_| format!("bad line {l:?}"))?;
            continue;
        }
        if let Some(t) = l.strip_prefix("ilost ") {
            *lost += t.parse::<u64>().map_err(|_| format!("bad line {l:?}"))?;
            continue;
        }
        if let Some(t) = l.strip_prefix("I ") {
            // I <id dec> <block> <count> <target> [<path>]
            let bad = || format!("bad line {l:?}");
            let mut w = t.splitn(5, ' ');
            let id: usize = w.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let block = hex(w.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let count = hex(w.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let addr = hex(w.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let e = state
                .entries
                .get(id)
                .ok_or(format!("unknown module {id}"))?;
            let blocks = e.plan.get()?.blocks.len();
            let block = usize::try_from(block)
                .ok()
                .filter(|b| *b < blocks)
                .ok_or(format!("block {block:x} out of range"))?;
            let target = match w.next() {
                Some(p) if p.starts_with('/') => Target::Module {
                    path: PathBuf::from(p),
                    addr,
                },
                Some(_) => return Err(bad()),
                None => Target::Outside(addr),
            };
            targets.push((id, block, target, count));
            continue;
        }
        let w: Vec<&str> = l.split(' ').collect();
        if w.first() == Some(&"M") && w.len() == 4 {
            let id: usize = w[1].parse().map_err(|_| format!("bad line {l:?}"))?;
            let n: usize = w[3].parse().map_err(|_| format!("bad line {l:?}"))?;
            let e = state
                .entries
                .get(id)
                .ok_or(format!("unknown module {id}"))?;
            if n != e.plan.counters() as usize {
                return Err(format!(
                    "module {id} has {n} counters, the plan {}",
                    e.plan.counters()
                ));
            }
            cur = Some((id, n));
            continue;
        }
        let (Some((id, n)), [i, c]) = (cur, w.as_slice()) else {
            return Err(format!("bad line {l:?}"));
        };
        let i = usize::from_str_radix(i, 16).map_err(|_| format!("bad line {l:?}"))?;
        let c = u64::from_str_radix(c, 16).map_err(|_| format!("bad line {l:?}"))?;
        if i >= n {
            return Err(format!("counter {i} out of range"));
        }
        out.push((id, i, c));
    }
    if !ended {
        return Err("the report is incomplete (its process died while writing it)".into());
    }
    Ok(out)
}

/// [`Mode::Edges`]: each branch whose jump's block, and the blocks its
/// edges are read from, were counted (none in `lost`, a block whose patch
/// failed): 1 or 0 per edge, both 0 when the jump never ran.
fn edge_hits(plan: &crate::plan::Plan, c: &[u64], lost: &BTreeSet<usize>) -> Vec<Branch> {
    let counted = |k: usize| {
        let lost = |k: usize| {
            lost.contains(&k)
                || (matches!(plan.blocks[k].how, How::Fell { .. }) && lost.contains(&(k - 1)))
        };
        plan.blocks[k].how != How::None && !lost(k) && !plan.counted_by(k).into_iter().any(lost)
    };
    let mut out = Vec::new();
    for (j, &(addr, _)) in plan.branches.iter().enumerate() {
        let Some(x) = plan
            .blocks
            .partition_point(|b| b.start <= addr)
            .checked_sub(1)
        else {
            continue;
        };
        let (t, f) = plan.edges.get(j).copied().unwrap_or_default();
        let sources = [Some(x as u32), t, f];
        if !sources.into_iter().flatten().all(|k| counted(k as usize)) {
            continue;
        }
        let (taken, not_taken) = if plan.count(x, c) > 0 {
            plan.edge_hits(j, c)
        } else {
            (0, 0)
        };
        out.push(Branch {
            addr,
            taken,
            not_taken,
        });
    }
    out
}

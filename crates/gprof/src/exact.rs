//! `--exact`: gmon.out's arcs from prof's coverage engine
//! (`profdev_coverage`), which counts every basic block of CMD's
//! executable; `profdev_coverage::arcs` turns the counts into call arcs
//! (direct calls, tail-call jumps, PLT and GOT calls, recorded indirect
//! targets). The histogram stays sampled: a sample taken in a trampoline
//! (the executable's code as the runtime runs it) is charged back to the
//! block the trampoline copies (`Trampolines`).

use crate::{plural, Program};
use anyhow::{bail, Context, Result};
use profdev_coverage::arcs;
use profdev_coverage::launch::{Area, Server};
use profdev_formats::gmon::{self, Format};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::Path;

/// The coverage engine counting CMD's executable: its runtime is preloaded
/// into CMD through the environment [`Counter::env`] gives.
pub struct Counter {
    server: Server,
}

impl Counter {
    /// Count `exe` (`shown` names it to the user) exactly, indirect calls'
    /// targets too. A statically linked executable is refused: the runtime
    /// is preloaded through the dynamic loader.
    pub fn new(exe: &Program, shown: &Path) -> Result<Counter> {
        if !exe.dynamically_linked() {
            bail!(
                "--exact counts calls by rewriting the executable through the dynamic loader, \
                 and {} is statically linked: run profdev gmon without --exact for sampled \
                 call counts",
                shown.display()
            );
        }
        let server = Server::new(&[exe.path.to_string_lossy().into_owned()])
            .context("cannot set up exact call counting")?;
        server.set_call_targets(true);
        Ok(Counter { server })
    }

    /// A counter when `exact` (see [`Counter::new`]), else `None`.
    pub fn for_run(exact: bool, exe: &Program, shown: &Path) -> Result<Option<Counter>> {
        exact.then(|| Counter::new(exe, shown)).transpose()
    }

    /// The variables to set in CMD's environment, given the current
    /// `LD_PRELOAD`.
    pub fn env(&self, ld_preload: Option<OsString>) -> Vec<(String, OsString)> {
        self.server.env(ld_preload)
    }

    /// Where the executable at `exe` ran from in its trampolines.
    pub(crate) fn trampolines(&self, exe: &Path) -> Trampolines {
        Trampolines::of(self.server.areas(), exe)
    }

    /// The executable's exact call arcs, as `format` can hold them.
    pub(crate) fn arcs(&self, exe: &Program, format: Format) -> Result<Exact> {
        let (modules, cov_notes) = self.server.collect();
        let mut notes: Vec<String> = cov_notes
            .into_iter()
            .map(|n| format!("exact counts: {n}"))
            .collect();
        let Some(m) = modules.iter().find(|m| m.path == exe.path) else {
            notes.push(format!(
                "--exact counted no call: {} was not reached through the loader (a static or \
                 setuid program is not; see the man page's Bugs), so gmon.out has no arcs",
                exe.path.display()
            ));
            return Ok(Exact {
                arcs: Vec::new(),
                notes,
            });
        };
        let (targets, lost) = self.server.call_targets();
        let a = arcs::module_arcs(m, &exe.elf, &targets)?;
        let (arcs, saturated) = gmon_arcs(&a.arcs, format);
        notes.extend(arc_notes(&a, arcs.len(), lost, &exe.path));
        notes.extend(saturated);
        Ok(Exact { arcs, notes })
    }
}

/// The exact arcs of a `--exact` run and what to say about them.
pub(crate) struct Exact {
    pub(crate) arcs: Vec<gmon::Arc>,
    pub(crate) notes: Vec<String>,
}

/// What the arcs counted (`written` of them in gmon.out) and left out, in
/// sentences; `lost` indirect-call records.
fn arc_notes(a: &arcs::Arcs, written: usize, lost: u64, exe: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    let calls: u64 = a.arcs.values().fold(0, |s, c| s.saturating_add(*c));
    notes.push(format!(
        "{calls} calls counted exactly in {}",
        plural(written as u64, "arc")
    ));
    if a.indirect_calls > 0 {
        notes.push(format!(
            "{} indirect calls at {} not attributed: their targets were not recorded{} (see the \
             man page's Bugs)",
            a.indirect_calls,
            plural(a.indirect_sites, "call site"),
            if lost > 0 {
                format!(" ({lost} records lost)")
            } else {
                String::new()
            }
        ));
    }
    if a.library_calls > 0 {
        notes.push(format!(
            "{} calls into shared libraries (through the PLT, the GOT or a pointer) not written: \
             gprof knows only {}'s functions",
            a.library_calls,
            exe.display()
        ));
    }
    if a.outside_calls > 0 {
        notes.push(format!(
            "{} indirect calls into code outside every module mapped from a file (the vDSO, JIT \
             code) not written",
            a.outside_calls
        ));
    }
    if a.unresolved > 0 {
        notes.push(format!(
            "{} calls dropped: their callee is in no function of {}'s symbol table",
            a.unresolved,
            exe.display()
        ));
    }
    notes
}

/// Exact arcs as gmon.out arcs, and the note saying how many were
/// saturated: the GNU layout's counts are 32 bits (4.4BSD LP64's are a
/// signed 64-bit long).
fn gmon_arcs(arcs: &BTreeMap<(u64, u64), u64>, format: Format) -> (Vec<gmon::Arc>, Option<String>) {
    let max = match format {
        Format::Gnu => u64::from(u32::MAX),
        _ => i64::MAX as u64,
    };
    let mut saturated = 0;
    let out = arcs
        .iter()
        .map(|(&(from_pc, self_pc), &count)| {
            if count > max {
                saturated += 1;
            }
            gmon::Arc {
                from_pc,
                self_pc,
                count: count.min(max),
            }
        })
        .collect();
    let note = (saturated > 0).then(|| {
        format!(
            "{} made more than {max} calls, written as {max}: GNU gmon.out's arc counts are \
             32-bit (--format bsd holds 64)",
            plural(saturated, "arc")
        )
    });
    (out, note)
}

/// Where the executable's code ran from under `--exact`: its trampoline
/// areas, each entry leading back to the block (link-time address) it
/// counts and copies.
pub(crate) struct Trampolines {
    areas: Vec<TrampolineArea>,
}

/// One load's trampoline area: its run-time start and end, and its entries
/// sorted, (run-time entry, link-time address of the block it counts).
type TrampolineArea = (u64, u64, Vec<(u64, u64)>);

impl Trampolines {
    fn of(all: Vec<Area>, exe: &Path) -> Self {
        use profdev_coverage::encode::{PATCH_JMP, PATCH_REL8};
        let mut areas = Vec::new();
        for a in all.into_iter().filter(|a| a.path == exe) {
            // A short block hops (rel8) to a jmp placed in another block's
            // dead bytes: the trampoline behind that jmp is the short
            // block's.
            let hops: HashMap<u64, u64> = a
                .patches
                .iter()
                .filter(|p| p.kind == PATCH_REL8)
                .map(|p| (p.entry, p.addr))
                .collect();
            let mut entries: Vec<(u64, u64)> = a
                .patches
                .iter()
                .filter(|p| p.entry >= a.start && p.entry < a.end)
                .map(|p| {
                    let at = match hops.get(&p.addr) {
                        Some(&block) if p.kind == PATCH_JMP => block,
                        _ => p.addr,
                    };
                    (p.entry, at.wrapping_sub(a.bias))
                })
                .collect();
            entries.sort_unstable();
            areas.push((a.start, a.end, entries));
        }
        Trampolines { areas }
    }

    /// The link-time address of the block whose trampoline holds `pc`.
    pub(crate) fn link_addr(&self, pc: u64) -> Option<u64> {
        let (_, _, entries) = self.areas.iter().find(|(s, e, _)| *s <= pc && pc < *e)?;
        let i = entries.partition_point(|(entry, _)| *entry <= pc);
        Some(entries.get(i.checked_sub(1)?)?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::gmon::GmonOut;

    #[test]
    fn exact_counts_saturate_in_the_gnu_layout() {
        let big = u64::from(u32::MAX) + 5;
        let arcs: BTreeMap<(u64, u64), u64> =
            [((0x1010, 0x2000), big), ((0x1020, 0x2000), 7)].into();
        let (gnu, saturated) = gmon_arcs(&arcs, Format::Gnu);
        assert_eq!(
            saturated.as_deref(),
            Some(
                "1 arc made more than 4294967295 calls, written as 4294967295: GNU gmon.out's \
                 arc counts are 32-bit (--format bsd holds 64)"
            )
        );
        assert_eq!(
            gnu,
            vec![
                gmon::Arc {
                    from_pc: 0x1010,
                    self_pc: 0x2000,
                    count: u64::from(u32::MAX)
                },
                gmon::Arc {
                    from_pc: 0x1020,
                    self_pc: 0x2000,
                    count: 7
                }
            ]
        );
        // Written and read back: the file holds the saturated count.
        let out = GmonOut {
            arcs: gnu,
            ..GmonOut::default()
        };
        let bytes = gmon::write(&out, Format::Gnu, gmon::Target::X86_64).unwrap();
        let back = gmon::parse(&bytes, gmon::Target::X86_64).unwrap().gmon;
        assert_eq!(back.arcs[0].count, u64::from(u32::MAX));
        // 4.4BSD's LP64 counts are 64-bit: nothing saturates.
        let (bsd, saturated) = gmon_arcs(&arcs, Format::Bsd);
        assert_eq!((bsd[0].count, saturated), (big, None));
    }

    #[test]
    fn arc_notes_name_what_is_left_out() {
        let a = arcs::Arcs {
            arcs: [((0x10, 0x20), 5), ((0x30, 0x20), u64::MAX)].into(),
            indirect_calls: 3,
            indirect_sites: 1,
            library_calls: 4,
            outside_calls: 0,
            unresolved: 2,
        };
        let notes = arc_notes(&a, 2, 6, Path::new("/x/prog"));
        assert_eq!(
            notes,
            vec![
                format!("{} calls counted exactly in 2 arcs", u64::MAX),
                "3 indirect calls at 1 call site not attributed: their targets were not \
                 recorded (6 records lost) (see the man page's Bugs)"
                    .to_string(),
                "4 calls into shared libraries (through the PLT, the GOT or a pointer) not \
                 written: gprof knows only /x/prog's functions"
                    .to_string(),
                "2 calls dropped: their callee is in no function of /x/prog's symbol table"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn trampoline_pcs_go_back_to_their_blocks() {
        use profdev_coverage::encode::{Patch, PATCH_CALL5, PATCH_JMP, PATCH_REL8};
        let bias = 0x5555_0000_0000;
        let area = Area {
            path: "/x/prog".into(),
            bias,
            start: 0x7000_0000,
            end: 0x7000_1000,
            patches: vec![
                // Block 0x1100: a jump to its trampoline at +0x0.
                Patch {
                    addr: bias + 0x1100,
                    entry: 0x7000_0000,
                    kind: PATCH_JMP,
                    len: 5,
                },
                // Block 0x1200 (short): hops to a jmp at 0x1108, in block
                // 0x1100's dead bytes, which leads to +0x80.
                Patch {
                    addr: bias + 0x1108,
                    entry: 0x7000_0080,
                    kind: PATCH_JMP,
                    len: 5,
                },
                Patch {
                    addr: bias + 0x1200,
                    entry: bias + 0x1108,
                    kind: PATCH_REL8,
                    len: 2,
                },
                // A call site at 0x1300, counted by a stub at +0x100.
                Patch {
                    addr: bias + 0x1300,
                    entry: 0x7000_0100,
                    kind: PATCH_CALL5,
                    len: 5,
                },
            ],
        };
        let mut other = area.clone();
        other.path = "/x/lib.so".into();
        other.start = 0x7100_0000;
        other.end = 0x7100_1000;
        let t = Trampolines::of(vec![area, other], Path::new("/x/prog"));
        assert_eq!(t.link_addr(0x7000_0000), Some(0x1100));
        assert_eq!(t.link_addr(0x7000_007f), Some(0x1100));
        assert_eq!(t.link_addr(0x7000_0080), Some(0x1200));
        assert_eq!(t.link_addr(0x7000_0120), Some(0x1300));
        assert_eq!(t.link_addr(0x6fff_ffff), None);
        assert_eq!(t.link_addr(0x7000_1000), None);
        // Another module's area is not the executable's.
        assert_eq!(t.link_addr(0x7100_0000), None);
    }
}

//! A process's report as the library writes it, and its parser
//! ([`Report::parse`]).

use crate::{MAX_MODULES, MAX_SITES};

/// A module as the library saw it: a link map's object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportModule {
    /// Its load bias (`l_addr`): a site's link-time pc is `pc - bias`.
    pub bias: u64,
    /// Device and inode of its file when the library first saw it.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Bytes charged to its sites and not freed, at exit.
    pub current: i64,
    /// The most its sites ever held at once.
    pub high_water: i64,
    /// Its path.
    pub path: String,
}

/// One allocating site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportSite {
    /// Its return address in the process.
    pub pc: u64,
    /// Its module (an index into `modules`), if any.
    pub module: Option<usize>,
    /// Bytes allocated there and not freed, at exit.
    pub current: i64,
    /// The most bytes it held at once.
    pub high_water: i64,
    /// Blocks allocated there.
    pub allocs: u64,
    /// Bytes allocated there in all.
    pub bytes: u64,
    /// Blocks allocated there and never freed.
    pub live: u64,
    /// With `PROFDEV_MPROF_DHAT=1`: lifetimes and the peak's picture.
    pub dhat: Option<DhatSite>,
    /// The pools charged here, bits 1 (pool 1), 2 (pool 2), 4 (pool 3).
    pub pools: u8,
    /// Its temporary blocks: freed by their thread before its next
    /// allocation (heaptrack's definition).
    pub temporary: u64,
    /// With `PROFDEV_MPROF_PEAK=1`: its bytes and blocks live at the
    /// process's global peak (None: nothing).
    pub at_peak: Option<(i64, u64)>,
}

/// What a site's report adds for DHAT (times in microseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DhatSite {
    /// The sum of its blocks' lifetimes (a block still live at the end
    /// counts until the end).
    pub total_lifetime: u64,
    /// Blocks live when its bytes were at their high water.
    pub max_blocks: u64,
    /// Its bytes at the process's global peak (t-gmax).
    pub gmax_bytes: u64,
    /// Its blocks at t-gmax.
    pub gmax_blocks: u64,
}

/// One allocation stack (with whole stacks on: `PROFDEV_MPROF_STACKS=1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportStack {
    /// Blocks allocated with this stack.
    pub allocs: u64,
    /// Bytes allocated with it.
    pub bytes: u64,
    /// Its blocks not freed at the end.
    pub live: u64,
    /// Its bytes not freed at the end.
    pub current: i64,
    /// Its frames, the site first then its callers: each a module (an
    /// index into `modules`, None when in none) and a return address.
    pub frames: Vec<(Option<usize>, u64)>,
    /// The overflow entry: stacks met when the library's table was full
    /// (no frames).
    pub overflow: bool,
    /// Its temporary blocks (see [`ReportSite::temporary`]).
    pub temporary: u64,
    /// With `PROFDEV_MPROF_PEAK=1`: its bytes and blocks live at the
    /// global peak.
    pub at_peak: Option<(i64, u64)>,
}

/// One process image's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Its process id.
    pub pid: u32,
    /// Modules, by the index sites name.
    pub modules: Vec<ReportModule>,
    /// Sites with at least one allocation.
    pub sites: Vec<ReportSite>,
    /// Allocations not charged (the site table was full, or made inside
    /// the library itself).
    pub untracked: u64,
    /// Frees of blocks not in the table (allocated before the library was
    /// loaded or in a parent before fork).
    pub unknown_frees: u64,
    /// Blocks not entered in the table (no memory for it).
    pub table_failures: u64,
    /// With `PROFDEV_MPROF_DHAT=1`: the run's end and its global peak's
    /// time (t-gmax), in microseconds since the library started.
    pub dhat: Option<(u64, u64)>,
    /// With whole stacks on: the allocation stacks.
    pub stacks: Vec<ReportStack>,
    /// With `PROFDEV_MPROF_PEAK=1`: the process's global high water, the
    /// bytes live at its peak.
    pub peak: Option<u64>,
}

impl Report {
    /// Parse a report:
    ///
    /// ```text
    /// profdev-mprof 1
    /// pid PID
    /// module INDEX 0xBIAS DEV INO CURRENT HIGHWATER PATH
    /// peak BYTES                                                (only with PROFDEV_MPROF_PEAK=1: the global high water)
    /// dhat END_US GMAX_US                                       (only with PROFDEV_MPROF_DHAT=1)
    /// site 0xPC MODULE CURRENT HIGHWATER ALLOCS BYTES LIVE [LIFETIMES_US MAXBLOCKS GMAXBYTES GMAXBLOCKS]
    ///                                                          (MODULE -1: none)
    /// pools MASK                  (the site above's pools when not pool 1 alone: 1, 2, 4 = pools 1, 2, 3;
    ///                              ALLOCS then counts mappings too, LIVE mappings never unmapped)
    /// stack ALLOCS BYTES LIVE CURRENT MODULE:0xPC...   (whole stacks: the site first; MODULE -1: none)
    /// stack ALLOCS BYTES LIVE CURRENT overflow         (stacks met when the table was full)
    /// temp BLOCKS                 (after a site or stack: its temporary blocks, when any)
    /// atpeak BYTES BLOCKS         (after a site or stack, with PROFDEV_MPROF_PEAK=1: live at the peak)
    /// untracked ALLOCS UNKNOWN_FREES TABLE_FAILURES
    /// end
    /// ```
    ///
    /// A file without its `end` line (a process killed before its
    /// destructor finished) is an error.
    pub fn parse(text: &str) -> Result<Report, String> {
        let mut lines = text.lines();
        if lines.next() != Some("profdev-mprof 1") {
            return Err("not an mprof report (no \"profdev-mprof 1\" header)".into());
        }
        let mut r = Report::default();
        let mut ended = false;
        // Whether `temp` and `atpeak` lines follow a stack (else a site).
        let mut after_stack = false;
        for (n, line) in lines.enumerate() {
            let bad = || format!("line {}: cannot parse {line:?}", n + 2);
            let num = |s: Option<&str>| -> Result<u64, String> {
                let s = s.ok_or_else(bad)?;
                match s.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => s.parse(),
                }
                .map_err(|_| bad())
            };
            let int = |s: Option<&str>| -> Result<i64, String> {
                s.ok_or_else(bad)?.parse().map_err(|_| bad())
            };
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "pid" => r.pid = rest.parse().map_err(|_| bad())?,
                "peak" => r.peak = Some(num(Some(rest))?),
                "temp" | "atpeak" => {
                    let mut f = rest.split(' ');
                    let (temp, at) = match word {
                        "temp" => (Some(num(f.next())?), None),
                        _ => (None, Some((int(f.next())?, num(f.next())?))),
                    };
                    let (t, a) = match (after_stack, r.sites.last_mut(), r.stacks.last_mut()) {
                        (true, _, Some(st)) => (&mut st.temporary, &mut st.at_peak),
                        (false, Some(s), _) => (&mut s.temporary, &mut s.at_peak),
                        _ => return Err(bad()),
                    };
                    if let Some(temp) = temp {
                        *t = temp;
                    }
                    if at.is_some() {
                        *a = at;
                    }
                }
                "dhat" => {
                    let mut f = rest.split(' ');
                    r.dhat = Some((num(f.next())?, num(f.next())?));
                }
                "module" => {
                    if r.modules.len() >= MAX_MODULES {
                        return Err(format!("more than {MAX_MODULES} modules: refused"));
                    }
                    let mut f = rest.splitn(7, ' ');
                    let index = num(f.next())?;
                    if index != r.modules.len() as u64 {
                        return Err(bad());
                    }
                    r.modules.push(ReportModule {
                        bias: num(f.next())?,
                        dev: num(f.next())?,
                        ino: num(f.next())?,
                        current: int(f.next())?,
                        high_water: int(f.next())?,
                        path: f.next().unwrap_or("").to_string(),
                    });
                }
                "site" => {
                    if r.sites.len() >= MAX_SITES {
                        return Err(format!("more than {MAX_SITES} sites: refused"));
                    }
                    let mut f = rest.split(' ');
                    let pc = num(f.next())?;
                    let module = int(f.next())?;
                    let module = if module < 0 {
                        None
                    } else if (module as usize) < r.modules.len() {
                        Some(module as usize)
                    } else {
                        return Err(bad());
                    };
                    let (current, high_water) = (int(f.next())?, int(f.next())?);
                    let (allocs, bytes, live) = (num(f.next())?, num(f.next())?, num(f.next())?);
                    let dhat = match f.next() {
                        None => None,
                        first => Some(DhatSite {
                            total_lifetime: num(first)?,
                            max_blocks: int(f.next())?.max(0) as u64,
                            gmax_bytes: int(f.next())?.max(0) as u64,
                            gmax_blocks: int(f.next())?.max(0) as u64,
                        }),
                    };
                    r.sites.push(ReportSite {
                        pc,
                        module,
                        current,
                        high_water,
                        allocs,
                        bytes,
                        live,
                        dhat,
                        pools: 1,
                        temporary: 0,
                        at_peak: None,
                    });
                    after_stack = false;
                }
                "pools" => {
                    let mask = num(Some(rest))?;
                    match r.sites.last_mut() {
                        Some(s) if mask > 0 && mask < 8 => s.pools = mask as u8,
                        _ => return Err(bad()),
                    }
                }
                "stack" => {
                    if r.stacks.len() > crate::MAX_STACKS {
                        return Err(format!("more than {} stacks: refused", crate::MAX_STACKS));
                    }
                    let mut f = rest.split(' ');
                    let mut st = ReportStack {
                        allocs: num(f.next())?,
                        bytes: num(f.next())?,
                        live: num(f.next())?,
                        current: int(f.next())?,
                        ..Default::default()
                    };
                    for w in f {
                        if w == "overflow" && st.frames.is_empty() {
                            st.overflow = true;
                            continue;
                        }
                        let (m, pc) = w.split_once(':').ok_or_else(bad)?;
                        let m = int(Some(m))?;
                        let m = match usize::try_from(m) {
                            Ok(m) if m < r.modules.len() => Some(m),
                            Err(_) if m == -1 => None,
                            _ => return Err(bad()),
                        };
                        if st.overflow || st.frames.len() >= crate::MAX_DEPTH {
                            return Err(bad());
                        }
                        st.frames.push((m, num(Some(pc))?));
                    }
                    r.stacks.push(st);
                    after_stack = true;
                }
                "untracked" => {
                    let mut f = rest.split(' ');
                    r.untracked = num(f.next())?;
                    r.unknown_frees = num(f.next())?;
                    r.table_failures = num(f.next())?;
                }
                "end" => {
                    ended = true;
                    break;
                }
                _ => return Err(bad()),
            }
        }
        if !ended {
            return Err(
                "the report is incomplete (the process ended before writing it all)".into(),
            );
        }
        Ok(r)
    }
}

//! profdev mprof's accounting library and the reader of its reports.
//!
//! **The library** (`c/mprof.c`, built by `build.rs` into
//! `libprofdev_mprof.so` and embedded here as [`LIBRARY`]) interposes the
//! malloc family through `LD_PRELOAD`: malloc, calloc, realloc (a free of
//! the old block and an allocation at the realloc's site, moved or not),
//! reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc
//! and free. C++'s `operator new`/`delete` and Rust's global allocator end
//! in malloc and free, so they are counted there; the *site* is then found
//! past them (below). Each block's requested size is charged to its site;
//! a free subtracts it from the site that allocated the block; high-water
//! marks per site and per module rise on allocation only.
//!
//! * **Pools 2 and 3** ([`POOLS_ENV`]): `mmap`, `mmap64`, `munmap`,
//!   `mremap`, `brk` and `sbrk` are interposed too; an anonymous mapping
//!   or the break's growth is pool 2, a file mapping pool 3, each charged
//!   to its call's site (whole pages; the break in bytes) and credited by
//!   `munmap` (partly, for part of a mapping) or the break's shrinking.
//!   glibc's malloc calls its internal `__mmap`/`__sbrk`, which bypass the
//!   PLT: only the program's own calls are seen, nothing twice. The
//!   regions are a table under one mutex held across the system call.
//! * **Site**: the allocation call's return address, or, when that lies in
//!   a known wrapper, the first return address outside every wrapper
//!   (found with `_Unwind_Backtrace`, taken only for those calls). The
//!   wrappers are recognized by symbol, read once per module from its
//!   `.symtab` and `.dynsym`: C++'s operator new family (`_Znw*`, `_Zna*`),
//!   Rust's `__rust_alloc`/`__rust_realloc`/`__rdl_*`/`__rg_*`, its whole
//!   `alloc` crate (`alloc::raw_vec::*`, `finish_grow`, `Vec`, `String`,
//!   `Box`) and std's System allocator, `strdup`, `strndup`, `wcsdup`,
//!   `asprintf`, `getline`, `getdelim`, `open_memstream`, `xmalloc`,
//!   `xcalloc`, `xrealloc`, `xstrdup`, `xmemdup`, `xzalloc`, glib's
//!   `g_malloc`, `g_malloc0`, `g_realloc`, `g_try_*`, `g_*_n`, `g_strdup`,
//!   `g_strndup`, `g_memdup*`, `g_slice_alloc*`; more with
//!   `PROFDEV_MPROF_WRAPPERS=sym1,sym2` (`mprof --wrapper SYMBOL`).
//! * **Bookkeeping beside the blocks**: a map keyed by block address (a
//!   page map: one 8-byte entry per 16-byte granule where blocks are, no
//!   lock: a block's entry is written by its allocating thread and cleared
//!   by its freeing one); a block the library did not allocate (before it
//!   was loaded, or inside itself) is not in the map and its free
//!   subtracts nothing. A site's and its module's bytes change together
//!   under the module's spin lock (none while the process has one
//!   thread): no update is lost between threads, and high water, per site
//!   and per module, is exact in an order that agrees with the program's
//!   own (why not per-thread deltas: the head of `c/mprof.c`).
//! * **fork**: the child starts from zero (empty tables and counters), so
//!   adding up the reports of all processes counts each allocation once;
//!   frees of blocks the child inherited are not counted. **exec**:
//!   `LD_PRELOAD` stays in the environment, the new image loads the library
//!   afresh and writes its own report.
//! * **Report**: at exit (a destructor), one text file per process image,
//!   `mprof.PID.N`, created `O_CREAT|O_EXCL|O_NOFOLLOW` mode 0600 in the
//!   directory `PROFDEV_MPROF_DIR` names (a private 0700 directory profdev
//!   made, see [`Session`]). Format: [`Report::parse`].
//! * **Attach** (`c/attach.c`, same shared object): loaded into a running
//!   process by `startmp… PID` or `mprof -p PID` (through profdev-inject),
//!   its `profdev_mprof_attach(config)` takes the settings the environment
//!   gives under `LD_PRELOAD` as `NAME=VALUE` lines (`PROFDEV_MPROF_DIR`,
//!   `PROFDEV_MPROF_WRAPPERS`, `PROFDEV_MPROF_POOLS`...; `mprof.c` reads
//!   them through `mprof_getenv`), starts the accounting, and redirects
//!   the malloc family of every loaded module to this library by
//!   rewriting their GOT entries (JUMP_SLOT and GLOB_DAT), and dlopen's,
//!   so that modules loaded later are redirected too. It returns the
//!   number of entries redirected.
//!
//! **Why C, built at build time and embedded.** The interposer runs inside
//! malloc, before and after any Rust runtime, in processes of any language:
//! it must not allocate, must not unwind through a panic, and must use
//! initial-exec TLS. A Rust cdylib would bring std's runtime into every
//! profiled process, and cargo cannot build one crate's cdylib as an input
//! of another crate's binary on stable (artifact dependencies are
//! unstable). So `build.rs` compiles the C file with the system C compiler
//! (`$CC` or `cc`), the bytes are embedded in the profdev binary, and
//! [`Session::new`] writes them to a private temporary directory at run
//! time: `cargo install --path crates/cli` gives a working `profdev mprof`
//! on any machine with a C compiler. The real allocator is reached through
//! glibc's exported `__libc_malloc` family (no `dlsym`, which allocates):
//! the library needs glibc.

#![forbid(unsafe_code)]

pub mod dhat;
pub mod pprof;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the pools the library counts, as
/// `startmp`'s digits (`1` the malloc family, `2` anonymous mappings and
/// the break made by the program, `3` file mappings): `123` counts all.
/// Unset, pool 1 alone.
pub const POOLS_ENV: &str = "PROFDEV_MPROF_POOLS";

/// The accounting library, a shared object for `LD_PRELOAD`.
pub const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libprofdev_mprof.so"));

/// A report larger than this is refused (a process can have at most 65536
/// sites of about 80 bytes each, and 1024 modules).
const MAX_REPORT: u64 = 16 << 20;

/// One run's private directory: the library, and the reports it writes.
pub struct Session {
    dir: tempfile::TempDir,
}

impl Session {
    /// A fresh private directory (0700, a unique name under `$TMPDIR` or
    /// /tmp) holding the library (written through profdev-safefile:
    /// `O_EXCL|O_NOFOLLOW`, then renamed) and an empty `out/` for reports.
    pub fn new() -> std::io::Result<Session> {
        let dir = tempfile::Builder::new()
            .prefix("profdev-mprof.")
            .tempdir()?;
        profdev_safefile::write_file(dir.path().join("libprofdev_mprof.so"), LIBRARY, 0o500)
            .map_err(profdev_safefile::Error::into_os_error)?;
        profdev_safefile::create_dir(dir.path().join("out"), 0o700)
            .map_err(profdev_safefile::Error::into_os_error)?;
        Ok(Session { dir })
    }

    /// The library's path.
    pub fn library(&self) -> PathBuf {
        self.dir.path().join("libprofdev_mprof.so")
    }

    /// The directory the reports go to.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The environment a profiled command gets: `LD_PRELOAD` (the library
    /// first, then whatever `current` held), `PROFDEV_MPROF_DIR`, and
    /// `PROFDEV_MPROF_WRAPPERS` when `wrappers` is not empty, and
    /// `PROFDEV_MPROF_DHAT=1` with `dhat` (lifetimes and the peak's picture
    /// are then kept, under one global lock).
    pub fn env(
        &self,
        current: Option<OsString>,
        wrappers: &[String],
        dhat: bool,
    ) -> Vec<(String, OsString)> {
        let mut preload = self.library().into_os_string();
        if let Some(c) = current.filter(|c| !c.is_empty()) {
            preload.push(" ");
            preload.push(c);
        }
        let mut env = vec![
            ("LD_PRELOAD".to_string(), preload),
            (
                "PROFDEV_MPROF_DIR".to_string(),
                self.reports_dir().into_os_string(),
            ),
        ];
        if dhat {
            env.push(("PROFDEV_MPROF_DHAT".to_string(), "1".into()));
        }
        if !wrappers.is_empty() {
            env.push((
                "PROFDEV_MPROF_WRAPPERS".to_string(),
                wrappers.join(",").into(),
            ));
        }
        env
    }

    /// Every complete report written so far, in name order; unreadable or
    /// malformed ones are returned as errors (one sentence each).
    pub fn reports(&self) -> (Vec<Report>, Vec<String>) {
        read_reports(&self.reports_dir())
    }
}

/// Read the reports in `dir`.
pub fn read_reports(dir: &Path) -> (Vec<Report>, Vec<String>) {
    let mut names: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(d) => d.filter_map(|e| Some(e.ok()?.path())).collect(),
        Err(e) => return (vec![], vec![format!("cannot read {}: {e}", dir.display())]),
    };
    names.sort();
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    for p in names {
        match std::fs::metadata(&p) {
            Ok(m) if m.len() > MAX_REPORT => {
                errors.push(format!("{} is larger than {MAX_REPORT} bytes", p.display()));
                continue;
            }
            Err(e) => {
                errors.push(format!("cannot read {}: {e}", p.display()));
                continue;
            }
            _ => {}
        }
        match std::fs::read_to_string(&p) {
            Ok(t) => match Report::parse(&t) {
                Ok(r) => reports.push(r),
                Err(e) => errors.push(format!("{}: {e}", p.display())),
            },
            Err(e) => errors.push(format!("cannot read {}: {e}", p.display())),
        }
    }
    (reports, errors)
}

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
}

impl Report {
    /// Parse a report:
    ///
    /// ```text
    /// profdev-mprof 1
    /// pid PID
    /// module INDEX 0xBIAS DEV INO CURRENT HIGHWATER PATH
    /// dhat END_US GMAX_US                                       (only with PROFDEV_MPROF_DHAT=1)
    /// site 0xPC MODULE CURRENT HIGHWATER ALLOCS BYTES LIVE [LIFETIMES_US MAXBLOCKS GMAXBYTES GMAXBLOCKS]
    ///                                                          (MODULE -1: none)
    /// pools MASK                  (the site above's pools when not pool 1 alone: 1, 2, 4 = pools 1, 2, 3;
    ///                              ALLOCS then counts mappings too, LIVE mappings never unmapped)
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
                "dhat" => {
                    let mut f = rest.split(' ');
                    r.dhat = Some((num(f.next())?, num(f.next())?));
                }
                "module" => {
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
                    });
                }
                "pools" => {
                    let mask = num(Some(rest))?;
                    match r.sites.last_mut() {
                        Some(s) if mask > 0 && mask < 8 => s.pools = mask as u8,
                        _ => return Err(bad()),
                    }
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

/// A module of the merged profile: the same file (path, device, inode)
/// across processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Its path.
    pub path: String,
    /// Device and inode of the file that was mapped.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Current bytes, summed over processes.
    pub current: u64,
    /// High water, summed over processes.
    pub high_water: u64,
    /// Sites by link-time return address.
    pub sites: BTreeMap<u64, Site>,
}

/// A site of the merged profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Site {
    /// Current bytes at exit.
    pub current: u64,
    /// High water.
    pub high_water: u64,
    /// Blocks allocated.
    pub allocs: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Blocks never freed.
    pub live: u64,
    /// DHAT's figures, summed over processes.
    pub dhat: DhatSite,
    /// The pools charged here (bits 1, 2, 4 = pools 1, 2, 3).
    pub pools: u8,
}

/// The reports merged by module file and link-time pc, modules in the order
/// first seen. Counters of the same site in several processes are added
/// (a high water is then the sum of each process's own).
pub fn merge(reports: &[Report]) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for r in reports {
        let idx: Vec<usize> = r
            .modules
            .iter()
            .map(|m| {
                let key = (&m.path, m.dev, m.ino);
                let i = out
                    .iter()
                    .position(|o| (&o.path, o.dev, o.ino) == key)
                    .unwrap_or_else(|| {
                        out.push(Module {
                            path: m.path.clone(),
                            dev: m.dev,
                            ino: m.ino,
                            ..Default::default()
                        });
                        out.len() - 1
                    });
                out[i].current += m.current.max(0) as u64;
                out[i].high_water += m.high_water.max(0) as u64;
                i
            })
            .collect();
        for s in &r.sites {
            let Some(m) = s.module else { continue };
            let link = s.pc.wrapping_sub(r.modules[m].bias);
            let site = out[idx[m]].sites.entry(link).or_default();
            site.current += s.current.max(0) as u64;
            site.high_water += s.high_water.max(0) as u64;
            site.allocs += s.allocs;
            site.bytes += s.bytes;
            site.live += s.live;
            site.pools |= s.pools;
            if let Some(d) = s.dhat {
                site.dhat.total_lifetime += d.total_lifetime;
                site.dhat.max_blocks += d.max_blocks;
                site.dhat.gmax_bytes += d.gmax_bytes;
                site.dhat.gmax_blocks += d.gmax_blocks;
            }
        }
    }
    out
}

/// A module's counters in the prof device's memory-mode histogram layout
/// (spec §2.3): `0` current, `1` high water, `2*(p+1)` and `2*(p+1)+1`
/// current and high water at return address p; non-zero values only, in
/// ascending index order.
pub fn histogram_pairs(m: &Module) -> Vec<(u64, u64)> {
    let mut pairs = vec![(0, m.current), (1, m.high_water)];
    for (&p, s) in &m.sites {
        pairs.push((2 * (p + 1), s.current));
        pairs.push((2 * (p + 1) + 1, s.high_water));
    }
    pairs.retain(|&(_, v)| v != 0);
    pairs.sort_unstable();
    pairs
}

/// Decode memory-mode pairs (spec §2.4, TV-P4): the module's (current,
/// high water) and per return address p its (current, high water).
pub fn decode_pairs(pairs: &[(u64, u64)]) -> ((u64, u64), BTreeMap<u64, (u64, u64)>) {
    let mut module = (0, 0);
    let mut sites: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for &(i, v) in pairs {
        match i {
            0 => module.0 = v,
            1 => module.1 = v,
            _ => {
                let q = i - 2;
                let e = sites.entry(q / 2).or_default();
                if q & 1 == 0 {
                    e.0 = v;
                } else {
                    e.1 = v;
                }
            }
        }
    }
    (module, sites)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tv_p4_decoding() {
        // `0 4096` module current, `1 8192` module high water, `7 64`:
        // p = 5, t = 1 (high water), pc = 2.
        let ((cur, hw), sites) = decode_pairs(&[(0, 4096), (1, 8192), (7, 64)]);
        assert_eq!((cur, hw), (4096, 8192));
        assert_eq!(sites.into_iter().collect::<Vec<_>>(), [(2, (0, 64))]);
    }

    #[test]
    fn histogram_round_trip() {
        let mut m = Module {
            current: 10,
            high_water: 30,
            ..Default::default()
        };
        m.sites.insert(
            0x1139,
            Site {
                current: 10,
                high_water: 20,
                ..Default::default()
            },
        );
        m.sites.insert(
            0x2000,
            Site {
                current: 0,
                high_water: 10,
                ..Default::default()
            },
        );
        let pairs = histogram_pairs(&m);
        assert_eq!(
            pairs,
            [
                (0, 10),
                (1, 30),
                (2 * 0x113a, 10),
                (2 * 0x113a + 1, 20),
                (2 * 0x2001 + 1, 10)
            ]
        );
        let (module, sites) = decode_pairs(&pairs);
        assert_eq!(module, (10, 30));
        assert_eq!(sites[&0x1139], (10, 20));
        assert_eq!(sites[&0x2000], (0, 10));
    }

    #[test]
    fn parse_and_merge() {
        let a = "profdev-mprof 1\npid 7\n\
                 module 0 0x1000 1 2 100 300 /bin/x y\n\
                 site 0x1139 0 100 200 3 300 1\nsite 0x9 -1 5 5 1 5 1\n\
                 untracked 1 2 0\nend\n";
        let r = Report::parse(a).unwrap();
        assert_eq!(r.modules[0].path, "/bin/x y");
        assert_eq!(r.sites[1].module, None);
        assert_eq!((r.untracked, r.unknown_frees), (1, 2));
        let b = a.replace("0x1000", "0x5000").replace("0x1139", "0x5139");
        let m = merge(&[r, Report::parse(&b).unwrap()]);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].current, m[0].high_water), (200, 600));
        assert_eq!(m[0].sites[&0x139].high_water, 400);
        assert_eq!(m[0].sites[&0x139].live, 2);
        assert!(Report::parse("profdev-mprof 1\npid 1\n")
            .unwrap_err()
            .contains("incomplete"));
        assert!(Report::parse("x").is_err());
        let d = Report::parse(
            "profdev-mprof 1\npid 7\ndhat 900 400\nmodule 0 0x0 1 2 0 0 /x\n\
             site 0x10 0 5 5 1 5 1 800 1 5 1\nend\n",
        )
        .unwrap();
        assert_eq!(d.dhat, Some((900, 400)));
        assert_eq!(
            d.sites[0].dhat,
            Some(DhatSite {
                total_lifetime: 800,
                max_blocks: 1,
                gmax_bytes: 5,
                gmax_blocks: 1
            })
        );
        assert!(Report::parse("profdev-mprof 1\nsite 0x1 3 0 0 0 0 0\nend\n").is_err());
        let p = Report::parse(
            "profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /x\nsite 0x10 0 8192 8192 1 8192 1\npools 2\n\
             site 0x20 0 5 5 1 5 1\nend\n",
        )
        .unwrap();
        assert_eq!((p.sites[0].pools, p.sites[1].pools), (2, 1));
        assert_eq!(merge(&[p])[0].sites[&0x10].pools, 2);
        assert!(Report::parse("profdev-mprof 1\npools 2\nend\n").is_err());
        assert!(Report::parse(
            "profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /x\nsite 0x10 0 1 1 1 1 1\npools 9\nend\n"
        )
        .is_err());
    }
}

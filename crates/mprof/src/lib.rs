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
//!   (found by the unwind tables, [`unwind`], a cached rule a frame,
//!   where they cover the wrappers' frames: without stacks they are built
//!   on request, [`unwind::serve`]; else with `_Unwind_Backtrace`, which
//!   reads `.eh_frame` at every call; taken only for those calls). The
//!   wrappers are recognized by symbol, read once per module from its
//!   `.symtab` and `.dynsym`: C++'s operator new family (`_Znw*`, `_Zna*`),
//!   Rust's `__rust_alloc`/`__rust_realloc`/`__rdl_*`/`__rg_*`, its whole
//!   `alloc` crate (`alloc::raw_vec::*`, `finish_grow`, `Vec`, `String`,
//!   `Box`) and std's System allocator, `strdup`, `strndup`, `wcsdup`,
//!   `asprintf`, `getline`, `getdelim`, `open_memstream`, `xmalloc`,
//!   `xcalloc`, `xrealloc`, `xstrdup`, `xmemdup`, `xzalloc`, glib's
//!   `g_malloc`, `g_malloc0`, `g_realloc`, `g_try_*`, `g_*_n`, `g_strdup`,
//!   `g_strndup`, `g_memdup*`, `g_slice_alloc*`; more with
//!   `PROFDEV_MPROF_WRAPPERS=sym1,sym2` (`mprof --wrapper SYMBOL`). System
//!   code is walked past the same way: the functions profdev found
//!   declared in system headers, in the file [`system::SYSTEM_ENV`] names
//!   (`c/wrappers.c`; the rule: [`system`]).
//! * **Temporary blocks** ([`TEMPORARY_ENV`]`=1`, `mprof --temporary`): a
//!   block freed by the thread that allocated it before that thread's next
//!   allocation (a thread-local "last block", compared at each free) is
//!   counted per site and stack.
//! * **The peak** ([`PEAK_ENV`]`=1`, `mprof --peak`): under one global
//!   lock (DHAT's), what each site and stack held at the process's global
//!   high water, kept by a copy on write (the head of `c/mprof.c`'s "the
//!   peak").
//! * **Whole stacks** ([`STACKS_ENV`]`=1`, `mprof --folded`/`--pprof`):
//!   each allocation of pool 1 is also charged to its call stack: its
//!   site (found as above, wrappers skipped) followed by the callers found
//!   by walking frame pointers from the site's frame (for a wrapper's
//!   site, the frame the tables or `_Unwind_Backtrace` found), at most [`MAX_DEPTH`]
//!   frames. Each frame pointer is checked before it is read: 8-aligned,
//!   strictly above the one before, and below the thread's stack top
//!   (`__libc_stack_end` for the main thread, the thread descriptor glibc
//!   puts at the top of every other thread's stack: found once per thread,
//!   without malloc or `/proc`); a call made on another stack (a signal's
//!   alternate stack, a coroutine's) has its site alone. No lock is taken
//!   and nothing allocated on the way. With unwind tables ([`unwind`],
//!   named by [`unwind::UNWIND_ENV`]; `c/unwind.c`) each frame is unwound
//!   by its table's rule where one covers it (the site frame's stack
//!   pointer is the exported function's frame plus 16, or the CFA
//!   libgcc gives for a wrapper's site), by its frame pointer elsewhere;
//!   without, the walk ends at the first caller built without frame
//!   pointers (the stack is shorter there, not wrong by a read). Stacks merge per unique
//!   stack in a table of the shared mapping ([`MAX_STACKS`] slots, three
//!   quarters used; a stack met when it is full, or after `1,N`'s N, is
//!   charged to one overflow entry the report names), each with blocks
//!   and bytes allocated and live; a block keeps its stack's index beside
//!   its entry (one more word), and its free credits that stack. A
//!   stack's counters change under its site's module lock with the
//!   site's (its first frame is the site: one module). New stacks (and
//!   their frames' modules, through `dladdr`) are made on the slow path.
//!   The stacks are in the text report and in the table (for a process
//!   that ended without its report): [`ReportStack`], [`merge_stacks`].
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
//! * **The shared table**: the modules, sites and counters live in a
//!   `MAP_SHARED` mapping of a file of the process image's own,
//!   `live.PID.K`, created `O_CREAT|O_EXCL|O_NOFOLLOW` mode 0600 in the
//!   directory `PROFDEV_MPROF_DIR` names (a private 0700 directory profdev
//!   made, see [`Session`]): the counts outlive a process that ends by
//!   `_exit`, a signal, SIGKILL (the OOM killer) or an exec, and profdev
//!   reads them once it is gone ([`read_live`]: a one-page header that
//!   names the layout, every offset and the file's size, then only the
//!   modules and the sites in use). A forked child gets a new table (its
//!   modules kept, its sites empty) mapped in place of the parent's.
//! * **Report**: at a normal exit (a destructor), one text file per
//!   process image, `mprof.PID.N`, created the same way; the table's
//!   header says `WRITING N` meanwhile and `DONE` after, and the table is
//!   then removed ([`read_dir_reports`] takes the text report when it is
//!   complete, else the table, never both). Format: [`Report::parse`].
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
//! **The leak scan** ([`scan`], `mprof -p PID --scan`) needs no library
//! in the process: a pure walk of glibc's heap and a conservative mark
//! over a memory reader, fed by `profdev_attach::scan_process` while the
//! process is stopped.
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

pub mod fuzzing;
mod merge;
mod read;
mod report;
pub mod sample;
pub mod scan;
mod session;
mod stacks;
pub mod system;
pub mod unwind;

pub use merge::{decode_pairs, histogram_pairs, merge, Module, Site};
pub use read::{read_dir_reports, read_live, read_report, read_reports, Limits, Live, LiveState};
pub use report::{DhatSite, Report, ReportModule, ReportSite, ReportStack};
pub use session::{hold, sweep, Session, ATTACH_PREFIX, LAUNCH_PREFIX, SWEEP_GRACE};
pub use stacks::{merge_stacks, Stack};

/// The environment variable naming the pools the library counts, as
/// `startmp`'s digits (`1` the malloc family, `2` anonymous mappings and
/// the break made by the program, `3` file mappings): `123` counts all.
/// Unset, pool 1 alone.
pub const POOLS_ENV: &str = "PROFDEV_MPROF_POOLS";

/// The accounting library, a shared object for `LD_PRELOAD`.
pub const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libprofdev_mprof.so"));

/// The library's limits (c/mprof.c): modules, and sites, per process.
pub const MAX_MODULES: usize = 1024;
/// See [`MAX_MODULES`].
pub const MAX_SITES: usize = 1 << 16;

/// The library's limits on whole stacks: stacks per process (its
/// table's slots; at most three quarters are used), frames per stack.
pub const MAX_STACKS: usize = 1 << 14;
/// See [`MAX_STACKS`].
pub const MAX_DEPTH: usize = 64;

/// The environment variable that keeps, for `--peak`, what each site and
/// stack held at the process's global peak (`1`), under one global lock.
pub const PEAK_ENV: &str = "PROFDEV_MPROF_PEAK";

/// The environment variable that counts temporary blocks, for
/// `--temporary` (`1`).
pub const TEMPORARY_ENV: &str = "PROFDEV_MPROF_TEMPORARY";

/// The environment variable that turns whole stacks on (`1`; `1,N`
/// keeps at most N stacks, the rest charged to the overflow entry).
pub const STACKS_ENV: &str = "PROFDEV_MPROF_STACKS";

/// The longest report the library can write, from its longest lines: the
/// head (`profdev-mprof 1`, `pid`, `dhat`), a `module` line (index,
/// bias, device, inode, two signed counts and a 511-byte path), a `site`
/// line with DHAT's four numbers and its `pools` line, the `stack` lines
/// (each of 64 frames), each site's and stack's `temp` and `atpeak`,
/// the `peak` line, and the tail. A larger file is refused before
/// anything is read (about 50 MB).
pub const MAX_REPORT: u64 = (16 + 15 + 47 + 26)
    + MAX_MODULES as u64 * (7 + 4 + 3 + 16 + 4 * 21 + 1 + 511 + 1)
    + MAX_SITES as u64 * ((7 + 16 + 1 + 4 + 5 * 21 + 4 * 21 + 1) + 8 + TEMP_PEAK_LINES)
    + MAX_STACKS as u64 * (6 + 4 * 21 + MAX_DEPTH as u64 * (1 + 5 + 1 + 18) + 1 + TEMP_PEAK_LINES)
    + (73 + 4);

/// A site's or stack's `temp` and `atpeak` lines, at their longest.
const TEMP_PEAK_LINES: u64 = (5 + 20 + 1) + (7 + 2 * 21 + 1);

/// The shared table's size is checked against the header it starts with,
/// and refused above this (the library's is 63 MiB).
pub const MAX_LIVE: u64 = 64 << 20;

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

    /// A shared table as the library lays one out (offsets in the
    /// header: a small layout of its own), one module `/m`, its sites
    /// (pc, current, high water, allocations), the state and its K.
    fn fake_live(pid: u32, state: u32, k: u32, sites: &[(u64, i64, i64, u64)]) -> Vec<u8> {
        let (module_size, site_size, max_modules, nsites) = (128u64, 64u64, 2u64, 4u64);
        let modules_off = 4096u64;
        let used_off = modules_off + max_modules * module_size;
        let sites_off = used_off + nsites * 4;
        let total = sites_off + nsites * site_size;
        let mut b = vec![0u8; total as usize];
        let put32 = |b: &mut Vec<u8>, o: u64, v: u32| {
            b[o as usize..o as usize + 4].copy_from_slice(&v.to_le_bytes())
        };
        let put64 = |b: &mut Vec<u8>, o: u64, v: u64| {
            b[o as usize..o as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        b[..16].copy_from_slice(b"profdev-mlive 1\0");
        put32(&mut b, 16, 168);
        put32(&mut b, 20, pid);
        for (o, v) in [
            (24, total),
            (32, modules_off),
            (40, used_off),
            (48, sites_off),
        ] {
            put64(&mut b, o, v);
        }
        let layout = [
            max_modules,
            nsites,
            module_size,
            site_size,
            0,  // l_addr
            8,  // path
            32, // path size
            40, // dev
            48, // ino
            56, // cur
            64, // hw
            72, // resident counters
            0,  // site pc
            8,  // module
            12, // pools
            16, // resident
            24, // own counters
            40, // counters size
            state as u64,
            k as u64,
            1, // modules
            sites.len() as u64,
        ];
        for (i, v) in layout.iter().enumerate() {
            put32(&mut b, 56 + 4 * i as u64, *v as u32);
        }
        b[modules_off as usize + 8..modules_off as usize + 10].copy_from_slice(b"/m");
        for (j, &(pc, cur, hw, n)) in sites.iter().enumerate() {
            put32(&mut b, used_off + 4 * j as u64, j as u32);
            let at = sites_off + j as u64 * site_size;
            put64(&mut b, at, pc);
            put32(&mut b, at + 8, 1); // module 0
            put32(&mut b, at + 12, 1); // pool 1
            for (i, v) in [cur as u64, hw as u64, n, hw as u64, n].iter().enumerate() {
                put64(&mut b, at + 24 + 8 * i as u64, *v);
            }
        }
        b
    }

    const TEXT: &str =
        "profdev-mprof 1\npid 7\nmodule 0 0x0 1 2 5 5 /m\nsite 0x20 0 5 5 1 5 1\nend\n";

    #[test]
    fn tables_and_reports_each_image_once() {
        let d = tempfile::tempdir().unwrap();
        let w = |name: &str, b: &[u8]| std::fs::write(d.path().join(name), b).unwrap();
        let pcs = |r: &[Report]| -> Vec<u64> {
            let mut v: Vec<u64> = r
                .iter()
                .flat_map(|r| r.sites.iter().map(|s| s.pc))
                .collect();
            v.sort();
            v
        };
        // Counting (ended by _exit or a signal): the table is the report.
        w("live.7.0", &fake_live(7, 0, 0, &[(0x10, 100, 300, 3)]));
        let (r, e) = read_reports(d.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].modules[0].path, "/m");
        let s = &r[0].sites[0];
        assert_eq!(
            (s.pc, s.current, s.high_water, s.allocs, s.module),
            (0x10, 100, 300, 3, Some(0))
        );
        // Writing report 0, which is complete: the text report, once.
        w("live.7.0", &fake_live(7, 1, 0, &[(0x10, 100, 300, 3)]));
        w("mprof.7.0", TEXT.as_bytes());
        let (r, e) = read_reports(d.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(pcs(&r), [0x20]);
        // ...incomplete (killed while writing it): the table, no error.
        w("mprof.7.0", &TEXT.as_bytes()[..40]);
        let (r, e) = read_reports(d.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(pcs(&r), [0x10]);
        // Done: the text report alone.
        w("live.7.0", &fake_live(7, 2, 0, &[(0x10, 100, 300, 3)]));
        w("mprof.7.0", TEXT.as_bytes());
        assert_eq!(pcs(&read_reports(d.path()).0), [0x20]);
        // A table whose size is not its header's: refused.
        let mut long = fake_live(8, 0, 0, &[(0x30, 1, 1, 1)]);
        long.push(0);
        w("live.8.0", &long);
        let (r, e) = read_reports(d.path());
        assert_eq!(pcs(&r), [0x20]);
        assert!(e[0].contains("its header does not describe it"), "{e:?}");
        std::fs::remove_file(d.path().join("live.8.0")).unwrap();
        // Attached: a running process's table supersedes its reports on
        // demand; of the reports, the latest of each pid.
        w("live.7.0", &fake_live(7, 0, 0, &[(0x10, 100, 300, 3)]));
        w("mprof.9.0", TEXT.replace("0x20", "0x90").as_bytes());
        w("mprof.9.1", TEXT.replace("0x20", "0x91").as_bytes());
        let (r, e) = read_dir_reports(d.path(), &Limits::ATTACHED);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(pcs(&r), [0x10, 0x91]);
    }

    #[test]
    fn reports_are_bounded_before_they_are_read() {
        let d = tempfile::tempdir().unwrap();
        // Larger than the library can write: refused by its size.
        let f = std::fs::File::create(d.path().join("mprof.1.0")).unwrap();
        f.set_len(128 << 20).unwrap();
        let (r, e) = read_reports(d.path());
        // Refused by the size its metadata gives, before anything is read
        // (what a read cut at MAX_REPORT refuses says no size).
        let by_size = format!("{} bytes is more than the library can write", 128u64 << 20);
        assert!(r.is_empty() && e[0].contains(&by_size), "{e:?}");
        std::fs::remove_file(d.path().join("mprof.1.0")).unwrap();
        // More sites than the library keeps: refused.
        let mut text = String::from("profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /m\n");
        for pc in 0..=MAX_SITES {
            text.push_str(&format!("site {pc:#x} 0 1 1 1 1 1\n"));
        }
        text.push_str("end\n");
        assert!(Report::parse(&text).unwrap_err().contains("sites"));
        // A session's budget: reports past it are named, not read.
        for i in 0..3 {
            std::fs::write(d.path().join(format!("mprof.{i}.0")), TEXT).unwrap();
        }
        let few = Limits {
            max_reports: 2,
            ..Limits::ATTACHED
        };
        let (r, e) = read_dir_reports(d.path(), &few);
        assert_eq!(r.len(), 2);
        assert!(e[0].contains("more reports than are read"), "{e:?}");
    }

    #[test]
    fn temporary_and_peak_lines_follow_their_site_or_stack() {
        let t = "profdev-mprof 1\npid 7\npeak 160\nmodule 0 0x0 1 2 0 0 /x\n\
                 site 0x10 0 0 100 3 300 0\ntemp 2\natpeak 100 1\n\
                 site 0x20 0 60 60 1 60 1\natpeak 60 1\n\
                 stack 3 300 0 0 0:0x10\ntemp 2\natpeak 100 1\nend\n";
        let r = Report::parse(t).unwrap();
        assert_eq!(r.peak, Some(160));
        assert_eq!(
            (r.sites[0].temporary, r.sites[0].at_peak),
            (2, Some((100, 1)))
        );
        assert_eq!(
            (r.sites[1].temporary, r.sites[1].at_peak),
            (0, Some((60, 1)))
        );
        assert_eq!(
            (r.stacks[0].temporary, r.stacks[0].at_peak),
            (2, Some((100, 1)))
        );
        let m = merge(&[r.clone(), r.clone()]);
        assert_eq!(
            (m[0].sites[&0x10].temporary, m[0].sites[&0x10].at_peak),
            (4, (200, 2))
        );
        let s = merge_stacks(&[r.clone(), r]);
        assert_eq!((s[0].temporary, s[0].at_peak), (4, (200, 2)));
        assert!(Report::parse("profdev-mprof 1\ntemp 1\nend\n").is_err());
        assert!(Report::parse(
            "profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /x\n\
                               site 0x10 0 0 1 1 1 0\natpeak 1\nend\n"
        )
        .is_err());
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
